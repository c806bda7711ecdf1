"""Section 05's measurements of an ELECTRA: what its discriminator is taught and what it learned.

    batch, p, generator_logits = replaced_batch(model, ids, config)   # the evaluation's fixed selection, read
    replacement_diagnosis(model, ids, config)   # generator accuracy, classes of replacements, recall per class
    scorer_accuracy(model, reviews)             # the discriminator as a zero-shot rating scorer
    probe_results(encoder, openings)            # section 04's linear probes, every readout and k
    table_probe_results(encoder)                # the token-embedding table: polarity and word class
    table_service_polarity(encoder)             # the table on the service adjectives' polarity (not logged)
    polarity_mass(mlm, reviews)                 # does a masked LM put the food adjective's polarity right?
    swap_detection(model, reviews)              # does the discriminator tell a polarity swap from a synonym?
    review_losses(model, bert, ids, config, i)  # one review's generator, discriminator and BERT losses
    seed_mean(logs, "electra", "recall_obvious", 2500)   # a logged value at a step, mean over the seeds

A replacement is "preserving" (the line stays true), "changing" (well-formed
but false) or "obvious" (ill-formed), by the world's rule (`world.check_line`).
"""

import math
from functools import lru_cache

import torch
import torch.nn.functional as F

from lib.data import world
from lib.data.tokenizers import MASK, TOKENIZER
from lib.measure import precision, probes, protocols
from lib.measure.evals import row_at
from lib.nn.electra import Electra
from lib.objectives.batches import electra_batch, mlm_batch

PROBE_KS, PROBE_READOUTS = (32, 128), ("mean", "last")
CLASSES = ("preserving", "changing", "obvious")
EVAL_REVIEWS = 200      # the new reviews every evaluation of a §05 run reads


def evaluation_masking(ids, config: dict) -> tuple:
    """(the evaluation's masked batch, its random-number generator, to draw the replacements next): always the
    same 15 % of positions (its own fixed seed), masked as `config` says."""
    g = torch.Generator().manual_seed(protocols.EVAL_SEED)
    return mlm_batch(ids, g, config["mlm_rate"], config["mask_share"], config["random_share"]), g


def selection(ids, config: dict):
    """The positions the evaluation selects (`evaluation_masking`)."""
    return evaluation_masking(ids, config)[0].loss_mask


@torch.no_grad()
def masked_lm_accuracy(model, ids, config: dict) -> float:
    """A BERT's share of the evaluation's selected positions (`selection`) whose original word it ranks first,
    every one shown as <mask>: what a generator's `generator_accuracy` reads (`replaced_batch`)."""
    masked, _ = evaluation_masking(ids, config | {"mask_share": 1.0, "random_share": 0.0})
    logits = model(masked.inputs, masked.attention_mask)[masked.loss_mask]
    return (logits.argmax(-1) == masked.targets[masked.loss_mask]).double().mean().item()


def replacement_classes(batch, row: int, originals) -> dict:
    """{position: `replacement_class`} of every replaced position of one review of an ELECTRA batch (`originals`:
    its true ids)."""
    ids = tuple(originals[row].tolist())
    return {c: replacement_class(ids, c, int(batch.inputs[row, c])) for c in batch.replaced[row].nonzero()[:, 0].tolist()}


@lru_cache(maxsize=None)
def replacement_class(ids: tuple, position: int, token: int) -> str:
    """What replacing ids[position] by `token` does to a true review, by the world's rule (`check_line`):
    "preserving" (the line is still true), "changing" (well-formed but false) or "obvious" (ill-formed).

    >>> ids = tuple(protocols.line_ids("review: the soup was tasty and the host was kind. rating: good."))
    >>> [replacement_class(ids, 6, TOKENIZER[w]) for w in ("fresh", "bland", "host")]
    ['preserving', 'changing', 'obvious']
    """
    changed = list(ids)
    changed[position] = token
    well_formed, true = world.check_line(TOKENIZER.decode(changed).strip("\n"))
    return "obvious" if not well_formed else "preserving" if true else "changing"


@torch.no_grad()
def replaced_batch(model: Electra, ids, config: dict):
    """(ElectraBatch, p(replaced) (B, T), the generator's logits (K, V) at the K selected positions): the
    evaluation's fixed selection, filled by the generator (a fixed sampling seed), read by the discriminator."""
    masked, g = evaluation_masking(ids, config)
    generator_logits = model.generator_logits(masked.inputs, masked.attention_mask, masked.loss_mask)
    batch = electra_batch(masked, generator_logits, g)
    return batch, torch.sigmoid(model.replaced_logits(batch.inputs, batch.attention_mask)), generator_logits


def replaced_classes(batch, originals) -> list:
    """The `replacement_class` of every replaced position of the batch, in row-major order (that of
    `batch.replaced.nonzero()`)."""
    rows, columns = batch.replaced.nonzero(as_tuple=True)
    return [replacement_class(tuple(originals[r].tolist()), c, int(batch.inputs[r, c]))
            for r, c in zip(rows.tolist(), columns.tolist())]


def replacement_diagnosis(model: Electra, ids, config: dict) -> dict:
    """What the discriminator is taught and what it learned, on the evaluation batch: the generator's
    accuracy at the selected positions, the share of them it replaced, the replacements' classes
    (`replacement_class`), the discriminator's loss (on the positions it trains on), its recall per class
    and false alarms on originals (it says "replaced" when p > 0.5), and the share of all positions whose label is a meaning-changing replacement."""
    batch, p, generator_logits = replaced_batch(model, ids, config)
    flagged = p > 0.5
    where = batch.selected if config["selected_only"] else batch.loss_mask
    rows, columns = batch.replaced.nonzero(as_tuple=True)
    classes = replaced_classes(batch, ids)
    result = {"generator_accuracy": (generator_logits.argmax(-1) == batch.originals[batch.selected]).float().mean().item(),
              "discriminator_loss": F.binary_cross_entropy(p[where], batch.replaced[where].to(p.dtype)).item(),
              "replaced_share": (batch.replaced & batch.selected).sum().item() / batch.selected.sum().item(),
              "false_alarm": flagged[~batch.replaced].float().mean().item(),
              "changing_per_position": classes.count("changing") / batch.replaced.numel()}
    for name in CLASSES:
        members = [i for i, c in enumerate(classes) if c == name]
        result[f"count_{name}"] = len(members)
        result[f"share_{name}"] = len(members) / len(classes) if classes else math.nan
        result[f"recall_{name}"] = (flagged[rows[members], columns[members]].float().mean().item()
                                    if members else math.nan)
    return result


def obvious_ranking(model: Electra, ids, config: dict) -> tuple:
    """A second readout of what `replacement_diagnosis` counts at p > 0.5: (the AUC of p(replaced) at the obvious
    replacements against the meaning-preserving ones, ties half; the number of obvious ones), (nan, n) when either
    class is empty.  Both are replacements the generator made at selected positions, so a discriminator that only
    learned which positions tend to be replaced scores 0.5; one that tells a word the rules reject from a fitting one
    scores above it."""
    batch, p, _ = replaced_batch(model, ids, config)
    scores = p[batch.replaced].tolist()                    # row-major, the order of `replaced_classes`
    classes = replaced_classes(batch, ids)
    obvious, preserving = ([x for x, c in zip(scores, classes) if c == name] for name in ("obvious", "preserving"))
    return (protocols.ranking_auc(obvious, preserving) if obvious and preserving else math.nan), len(obvious)


def polarity_label_share(ids, config: dict) -> float:
    """BERT's labels that need polarity, per position of the evaluation batch: its selected positions that hold a
    food or service adjective, and/but or a rating (what ELECTRA's meaning-changing replacements are compared with)."""
    words = [*world.FOOD_ADJECTIVES, *world.SERVICE_ADJECTIVES, "and", "but", *world.RATINGS]
    needs = torch.isin(ids, torch.tensor([TOKENIZER[w] for w in words]))
    return (selection(ids, config) & needs).double().mean().item()


@torch.no_grad()
def scorer_predictions(model: Electra, reviews: list) -> list:
    """The discriminator as a zero-shot scorer: each of good / ok / bad is put in the rating slot and the
    rating whose line looks most untouched (the highest sum over positions of log p(original)) is chosen."""
    lines = [protocols.line_ids(r) for r in reviews]
    slot = protocols.review_slots(lines[0])["rating"]
    candidates = torch.tensor([ids[:slot] + [rating] + ids[slot + 1:] for ids in lines for rating in protocols.RATING_IDS])
    mask = torch.ones(candidates.shape[1], candidates.shape[1], dtype=torch.bool).expand(len(candidates), -1, -1)
    log_original = F.logsigmoid(-model.replaced_logits(candidates, mask)).sum(-1).view(len(lines), -1)
    return [world.RATINGS[i] for i in log_original.argmax(-1).tolist()]


def scorer_accuracy(model: Electra, reviews: list) -> float:
    """Share of reviews whose rating `scorer_predictions` gets right."""
    return sum(p == protocols.true_rating(r) for p, r in zip(scorer_predictions(model, reviews), reviews)) / len(reviews)


def scorer_accuracy_by_connective(model: Electra, reviews: list) -> dict:
    """{"and": `scorer_predictions`' accuracy on the reviews joined by "and" (good or bad: needs polarity),
    "but": on those joined by "but" (always ok)}."""
    predictions = scorer_predictions(model, reviews)
    return {kind: sum(p == protocols.true_rating(r) for p, r in zip(predictions, reviews) if f" {kind} " in r)
            / sum(f" {kind} " in r for r in reviews) for kind in ("and", "but")}


def connective_only_accuracy(reviews: list) -> float:
    """The expected rating accuracy of a scorer that knows only that "but" means ok: every "but" review right,
    good or bad guessed (half right) for every "and" review.

    >>> connective_only_accuracy(["the soup was tasty but the host was rude.", "the soup was tasty and ..."])
    0.75
    """
    return sum((" but " in r) + 0.5 * (" and " in r) for r in reviews) / len(reviews)


def probe_results(encoder, openings: list) -> dict:
    """§04's probe (mean test accuracy over 100 label draws, held-out adjectives) for each readout and k."""
    results = {}
    for readout in PROBE_READOUTS:
        features = probes.representations(encoder, "bidirectional", readout, openings)
        results |= {f"probe_{readout}_k{k}": probes.probe_accuracy(features, k) for k in PROBE_KS}
    return results


def table_probe_results(encoder) -> dict:
    """The token-embedding table probed with held-out words (`probes.table_scores`, mean of 100 draws): the
    food adjectives' polarity and the word class (food vs service adjective)."""
    return {f"table_{name}": _table_mean(encoder, labels) for name, labels in
            (("polarity", world.FOOD_ADJECTIVES), ("word_class", probes.WORD_CLASS))}


def _table_mean(encoder, labels: dict) -> float:
    scores = probes.table_scores(encoder, labels)
    return sum(scores) / len(scores)


@torch.no_grad()
def examples(model: Electra, context: dict, config: dict) -> list:
    """The reviews the slider shows, as the discriminator saw them at this step: the input ids, which
    positions were selected and replaced, and p(replaced) (rounded to 3 decimals)."""
    batch, p, _ = replaced_batch(model, context["ids"], config)
    return [{"inputs": batch.inputs[i].tolist(), "selected": batch.selected[i].tolist(),
             "replaced": batch.replaced[i].tolist(), "p_replaced": [round(x, 3) for x in p[i].tolist()]}
            for i in context["shown"]]


def seed_values(logs: dict, variant: str, key: str, step: int) -> list:
    """[the logged `key` at `step`, one per seed, seeds in increasing order] of a variant; logs = {(variant, seed): log}.

    >>> seed_values({("a", 1): [{"step": 5, "x": 2.0}], ("a", 0): [{"step": 5, "x": 1.0}]}, "a", "x", 5)
    [1.0, 2.0]
    """
    return [row_at(logs[(v, s)], step)[key] for v, s in sorted(logs) if v == variant]


def seed_mean(logs: dict, variant: str, key: str, step: int) -> float:
    """The mean of `seed_values`, nan left out (a recall is undefined when its class is empty); nan when all are.

    >>> seed_mean({("a", 0): [{"step": 5, "x": 1.0}], ("a", 1): [{"step": 5, "x": float("nan")}]}, "a", "x", 5)
    1.0
    """
    values = [x for x in seed_values(logs, variant, key, step) if x == x]
    return sum(values) / len(values) if values else math.nan


def table_service_polarity(encoder) -> float:
    """The token-embedding table probed for the service adjectives' polarity (`probes.table_scores` on the 12
    service adjectives, mean of 100 draws): the training logs probe the food adjectives only, and the rating of an
    "and" review is settled by either adjective (the service one stands 4 tokens before it)."""
    return _table_mean(encoder, world.SERVICE_ADJECTIVES)


def untrained_scores(build, inits) -> dict:
    """{"probe_mean_k32", "table_polarity", "table_word_class", "table_service_polarity": [one score per untrained
    network]}: `build()` seeded with each of `inits` (`precision.untrained`: float64), the networks a trained
    encoder's probes are read against."""
    scores = {"probe_mean_k32": [], "table_polarity": [], "table_word_class": [], "table_service_polarity": []}
    openings = probes.clause_sequences()
    for model in precision.untrained(build, inits):
        features = probes.representations(model, "bidirectional", "mean", openings)
        row = {"probe_mean_k32": probes.probe_accuracy(features, 32), **table_probe_results(model),
               "table_service_polarity": table_service_polarity(model)}
        for key in scores:
            scores[key].append(row[key])
    return scores


def _slot_batch(reviews: list, slot: str):
    """(ids (B, T), the bidirectional mask, the position of `slot` (`protocols.review_slots`) (B, T) bool) of
    `reviews`."""
    ids = torch.tensor([protocols.line_ids(r) for r in reviews])
    where = torch.zeros_like(ids, dtype=torch.bool)
    where[:, protocols.review_slots(ids[0].tolist())[slot]] = True     # every review: the same slot
    return ids, torch.ones(ids.shape[1], ids.shape[1], dtype=torch.bool).expand(len(reviews), -1, -1), where


FOOD_IDS = torch.tensor([TOKENIZER[a] for a in world.FOOD_ADJECTIVES])
FOOD_POLARITY = torch.tensor([bool(p) for p in world.FOOD_ADJECTIVES.values()])


@torch.no_grad()
def polarity_mass(mlm, reviews: list) -> float:
    """With each review's food adjective masked, the share of the probability a masked LM gives the 16 food
    adjectives that goes to those of the right polarity (the rest of the review decides it), mean over reviews:
    1 knows polarity, 0.5 does not.  mlm(inputs, attention_mask, where) -> (K, V) logits at `where`."""
    ids, mask, where = _slot_batch(reviews, "food_adjective")
    inputs = ids.masked_fill(where, MASK)
    p = mlm(inputs, mask, where).softmax(-1)[:, FOOD_IDS]                          # (B, 16)
    right = FOOD_POLARITY[None, :] == FOOD_POLARITY[(ids[where][:, None] == FOOD_IDS).float().argmax(-1)][:, None]
    return ((p * right).sum(-1) / p.sum(-1)).mean().item()


@torch.no_grad()
def generator_rating_auc(model: Electra, reviews: list) -> float:
    """The generator asked for the rating: with each review's rating masked, how well its logit(good) -
    logit(bad) ranks the good "and" reviews above the bad ones (0.5: no polarity; a unigram generator's logits
    do not depend on the review).  The argmax can say ok to every review and still rank them."""
    ids, mask, where = _slot_batch(reviews, "rating")
    logits = model.generator_logits(ids.masked_fill(where, MASK), mask, where)         # (B, V)
    good, bad = (TOKENIZER[r] for r in ("good", "bad"))
    return protocols.good_above_bad((logits[:, good] - logits[:, bad]).tolist(), reviews)


@torch.no_grad()
def discriminator_rating_auc(model: Electra, reviews: list) -> float:
    """The discriminator asked for the rating: each review read with good and with bad in its rating slot, scored
    by the log-probability that no token of the line was replaced; how well score(good) - score(bad) ranks the
    good "and" reviews above the bad ones (0.5: its verdicts do not depend on whether the rating fits)."""
    ids, mask, where = _slot_batch(reviews, "rating")
    scores = [F.logsigmoid(-model.replaced_logits(ids.masked_fill(where, TOKENIZER[word]), mask)).sum(-1)
              for word in ("good", "bad")]
    return protocols.good_above_bad((scores[0] - scores[1]).tolist(), reviews)


@torch.no_grad()
def swap_detection(model: Electra, reviews: list) -> dict:
    """The discriminator's p(replaced) at the food adjective of each review after it is swapped for each of the
    other 15 food adjectives: 7 of the same polarity (the review stays true), 8 of the other (it turns false).
    {"same", "other": mean p(replaced); "auc": within a review, the share of (same, other) pairs in which the
    false one gets the higher p (ties half), averaged over the reviews, the reviews of positive and of negative
    originals weighted equally (so a word's own bias cancels)}: 0.5 when it cannot tell a polarity swap from a synonym."""
    ids, mask, where = _slot_batch(reviews, "food_adjective")
    index = (ids[where][:, None] == FOOD_IDS).float().argmax(-1)                    # (B,): which food adjective
    p = torch.empty(len(reviews), len(FOOD_IDS), dtype=torch.float64)
    for j, word in enumerate(FOOD_IDS.tolist()):
        p[:, j] = torch.sigmoid(model.replaced_logits(ids.masked_fill(where, word), mask))[where].double()
    same = FOOD_POLARITY[None, :] == FOOD_POLARITY[index][:, None]                  # (B, 16)
    same[torch.arange(len(reviews)), index] = False                                 # the original is no swap
    other = FOOD_POLARITY[None, :] != FOOD_POLARITY[index][:, None]
    pairs = p[:, None, :] > p[:, :, None]                                           # [b, i, j]: p_j > p_i
    ties = p[:, None, :] == p[:, :, None]
    weight = (same[:, :, None] & other[:, None, :]).double()                        # i same, j other
    auc = ((pairs.double() + 0.5 * ties.double()) * weight).sum((1, 2)) / weight.sum((1, 2))
    positive = FOOD_POLARITY[index]
    return {"same": p[same].mean().item(), "other": p[other].mean().item(),
            "auc": (auc[positive].mean().item() + auc[~positive].mean().item()) / 2}


def label_prior_entropy(row: dict, positions: int, selected_only: bool) -> float:
    """The binary cross-entropy (nats) of the best constant answer for one logged evaluation `row`: the share of
    scored positions replaced (all `positions` of the evaluation, or the selected ones for ELECTRA-15 %).  A
    discriminator whose loss is above it does worse than one that flags nothing."""
    replaced = sum(row[f"count_{c}"] for c in CLASSES)
    p = replaced / (replaced / row["replaced_share"] if selected_only else positions)
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


@torch.no_grad()
def review_losses(model: Electra, bert, ids, config: dict, row: int) -> dict:
    """One review of the evaluation batch (`replaced_batch`): the generator's loss at its selected positions,
    the discriminator's mean binary cross-entropy over its positions, their sum with config["lambda"], and BERT's
    loss when it reads the same positions as <mask> (its training loss would be this, averaged over a batch)."""
    batch, p, generator_logits = replaced_batch(model, ids, config)
    mine = batch.selected.nonzero()[:, 0] == row                                   # the row's selected positions
    generator = F.cross_entropy(generator_logits[mine], batch.originals[row][batch.selected[row]]).item()
    real = batch.loss_mask[row]
    discriminator = F.binary_cross_entropy(p[row][real], batch.replaced[row][real].to(p.dtype)).item()
    inputs = batch.originals[row:row + 1].masked_fill(batch.selected[row:row + 1], MASK)
    logits = bert(inputs, batch.attention_mask[row:row + 1])[0][batch.selected[row]]
    return {"generator": generator, "discriminator": discriminator, "lambda": config["lambda"],
            "electra": generator + config["lambda"] * discriminator,
            "bert": F.cross_entropy(logits, batch.originals[row][batch.selected[row]]).item(),
            "positions": int(real.sum()), "selected": int(batch.selected[row].sum())}
