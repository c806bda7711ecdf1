"""Section 05's measurements of an ELECTRA: what its discriminator is taught and what it learned.

    batch, p, generator_logits = replaced_batch(model, ids, config)   # the evaluation's fixed selection, read
    replacement_diagnosis(model, ids, config)   # generator accuracy, classes of replacements, recall per class
    scorer_accuracy(model, reviews)             # the discriminator as a zero-shot rating scorer
    probe_results(encoder, openings)            # section 04's linear probes, every readout and k
    seed_mean(logs, "electra", "recall_obvious", 2500)   # a logged value at a step, mean over the seeds

A replacement is "preserving" (the line stays true), "changing" (well-formed
but false) or "obvious" (ill-formed), by the world's rule (`world.check_line`).
"""

import math
from functools import lru_cache

import torch
import torch.nn.functional as F

from lib.data import world
from lib.data.tokenizers import TOKENIZER
from lib.measure import probes, protocols
from lib.measure.evals import row_at
from lib.nn.electra import Electra
from lib.objectives.batches import electra_batch, mlm_batch
from lib.objectives.electra import hard_negatives

PROBE_KS, PROBE_READOUTS = (32, 128), ("mean", "last")
CLASSES = ("preserving", "changing", "obvious")


def selection(ids, config: dict):
    """The masked batch of the evaluation: always the same 15 % of positions (its own fixed seed)."""
    return mlm_batch(ids, torch.Generator().manual_seed(protocols.EVAL_SEED), config["mlm_rate"],
                     config["mask_share"], config["random_share"]).loss_mask


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
    """(ElectraBatch, p(replaced) (B, T), the generator's logits (B, T, V)): the evaluation's fixed
    selection, filled by the generator (a fixed sampling seed; hard negatives where the variant uses
    them), read by the discriminator."""
    g = torch.Generator().manual_seed(protocols.EVAL_SEED)
    masked = mlm_batch(ids, g, config["mlm_rate"], config["mask_share"], config["random_share"])
    generator_logits = model.generator_logits(masked.inputs, masked.attention_mask)
    batch = electra_batch(masked, generator_logits, g)
    if config["hard_negatives"]:
        batch = hard_negatives(batch, g, config["hard_rate"])
    return batch, torch.sigmoid(model.replaced_logits(batch.inputs, batch.attention_mask)), generator_logits


def replacement_diagnosis(model: Electra, ids, config: dict) -> dict:
    """What the discriminator is taught and what it learned, on the evaluation batch: the generator's
    accuracy at the selected positions, the share of them it replaced, the replacements' classes
    (`replacement_class`), the discriminator's loss (on the positions it trains on), its recall per class
    and false alarms on originals (it says "replaced" when p > 0.5), and the share of all positions whose label is a meaning-changing replacement."""
    batch, p, generator_logits = replaced_batch(model, ids, config)
    flagged = p > 0.5
    where = batch.selected if config["selected_only"] else batch.loss_mask
    rows, columns = batch.replaced.nonzero(as_tuple=True)
    classes = [replacement_class(tuple(ids[r].tolist()), c, int(batch.inputs[r, c]))
               for r, c in zip(rows.tolist(), columns.tolist())]
    result = {"generator_accuracy": (generator_logits.argmax(-1) == batch.originals)[batch.selected].float().mean().item(),
              "discriminator_loss": F.binary_cross_entropy(p[where], batch.replaced[where].float()).item(),
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
