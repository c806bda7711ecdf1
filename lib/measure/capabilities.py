"""What each model can do besides the rating: the capability table of section 04.

- `adjective_fill`: hide the food adjective, take the argmax in one step (the slot protocol of
  `lib.protocols`): is it a food adjective, and of the polarity the rest of the review demands?  And
  the same polarity question with the argmax among the 16 food adjectives only.
- `candidate_scoring`: put each of the 16 food adjectives in, score every whole line, keep the best.
- `generate_lines`: sample lines from nothing; `lib.evals.line_quality` says how many are valid and true.
- `objective_accuracy`: argmax accuracy on the model's own training objective, on held-out reviews.
- `training_format`: the rating and adjective questions asked in the format the model's own objective
  trained it on (`lib.protocols.training_format_logits`), to tell "does not know" from "was never
  asked this way".
- `capability_row`: all of these for one model, a row of section 04's table.

    >>> [(TOKENIZER.vocab[i], positive) for i, positive in list(ADJECTIVE_IDS.items())[7:9]]
    [('savory', True), ('bland', False)]
"""

from collections import Counter

import torch

from lib.data import world
from lib.nn.masks import check_kind, for_kind, hide_padding
from lib.objectives.batches import StackBatch, batch_logits, pad, random_windows, review_stream
from lib.measure.evals import line_quality
from lib.measure.protocols import (line_ids, rating_accuracy, review_slots, slot_logits, training_format_accuracy,
                                   training_format_logits, write_spans)
from lib.data.tokenizers import MASK, NEWLINE_WORD, SENTINELS, TOKENIZER

ADJECTIVE_IDS = {TOKENIZER[a]: positive for a, positive in world.FOOD_ADJECTIVES.items()}


def _adjective_fills(reviews: list, ask) -> dict:
    """The food adjective of each review filled in one step, ask(ids, slots) -> logits (N, V): the share of
    fills (argmax over the whole vocabulary) that are food adjectives, that also have the polarity the rest of
    the review demands, the same polarity share with the argmax taken among the 16 food adjectives only (a
    model that fills some other word still says which adjective it prefers), and the fills of both kinds."""
    ids = [line_ids(r) for r in reviews]
    slots = [review_slots(s)["food_adjective"] for s in ids]
    logits = ask(ids, slots)
    fills = logits.argmax(-1).tolist()
    candidates = list(ADJECTIVE_IDS)
    among = [candidates[i] for i in logits[:, candidates].argmax(-1).tolist()]
    wanted = [ADJECTIVE_IDS[s[i]] for s, i in zip(ids, slots)]
    return {"food_adjective": sum(f in ADJECTIVE_IDS for f in fills) / len(fills),
            "right_polarity": sum(ADJECTIVE_IDS.get(f) == w for f, w in zip(fills, wanted)) / len(fills),
            "right_polarity_among_adjectives": sum(ADJECTIVE_IDS[f] == w for f, w in zip(among, wanted)) / len(fills),
            "fills": Counter(TOKENIZER.vocab[f] for f in fills),
            "fills_among_adjectives": Counter(TOKENIZER.vocab[f] for f in among)}


def adjective_fill(model, kind: str, reviews: list) -> dict:
    """Fill the food adjective in one step (argmax over the whole vocabulary) by the shared slot protocol:
    the share of fills that are food adjectives, that also have the polarity the rest of the review
    demands, and the most common fills."""
    return _adjective_fills(reviews, lambda ids, slots: slot_logits(model, kind, ids, slots))


@torch.no_grad()
def line_log_likelihoods(model, kind: str, sequences: list) -> torch.Tensor:
    """Log-likelihood (nats) of every token after the opening newline, closing newline included.

    Exact for causal and prefix (a one-token prefix: the prefix LM then reads causally); a
    pseudo-log-likelihood for bidirectional and encoder-decoder: each token is hidden in turn
    (<mask>, or a one-token span <0>) and predicted from all the others (Salazar et al. 2020)."""
    check_kind(kind)
    if kind in ("causal", "prefix"):
        ids, is_pad = pad(sequences)
        logits = model(ids[:, :-1], hide_padding(for_kind("causal", ids.shape[1] - 1), is_pad[:, :-1]))
        logp = logits.log_softmax(-1).gather(-1, ids[:, 1:, None])[..., 0]
        return (logp * ~is_pad[:, 1:]).sum(-1)
    owners, queries, slots = [], [], []
    for n, seq in enumerate(sequences):
        for i in range(1, len(seq)):
            owners.append(n)
            queries.append(seq)
            slots.append(i)
    logp = slot_logits(model, kind, queries, slots).log_softmax(-1)
    picked = logp[torch.arange(len(queries)), torch.tensor([q[s] for q, s in zip(queries, slots)])]
    return torch.zeros(len(sequences), dtype=picked.dtype).index_add_(0, torch.tensor(owners), picked)


def scored_candidates(reviews: list, score) -> float:
    """Put each of the 16 food adjectives into the review and keep the candidate line that score(lines)
    (the `line_ids` of every candidate -> (N,) log-likelihoods) rates best: the share of reviews whose
    best candidate has the polarity the rest of the review demands."""
    candidates = list(ADJECTIVE_IDS)
    sequences, wanted = [], []
    for review in reviews:
        ids = line_ids(review)
        slot = review_slots(ids)["food_adjective"]
        wanted.append(ADJECTIVE_IDS[ids[slot]])
        sequences += [ids[:slot] + [c] + ids[slot + 1:] for c in candidates]
    scores = score(sequences).view(len(reviews), len(candidates))
    best = [candidates[i] for i in scores.argmax(-1).tolist()]
    return sum(ADJECTIVE_IDS[b] == w for b, w in zip(best, wanted)) / len(reviews)


def candidate_scoring(model, kind: str, reviews: list) -> float:
    """`scored_candidates` by the model's `line_log_likelihoods`."""
    return scored_candidates(reviews, lambda sequences: line_log_likelihoods(model, kind, sequences))


@torch.no_grad()
def generate_lines(model, kind: str, n: int, seed: int = 0, temperature: float = 1.0,
                   masks_right: bool = False) -> list:
    """n lines sampled from nothing (after a newline), each up to the model's context.

    causal / prefix: left to right (a one-token prefix, so the prefix LM reads causally).
    bidirectional: iterated <mask>: append a <mask>, sample it, append the next (BERT has no
    "next token"); with `masks_right` the rest of the window is <mask> too: the window is full length, as every
    training window is, though a right side all of <mask> never occurs in training.  encoder-decoder: the source is a
    line that is one whole missing span (`\\n <0> \\n`) and the decoder samples the span until a sentinel."""
    check_kind(kind)
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    g = torch.Generator().manual_seed(seed)
    T = model.config.context
    def sample(logits):
        return torch.multinomial((logits / temperature).softmax(-1), 1, generator=g)

    if kind == "encoder-decoder":   # the decoder starts from `<bos> <0>`: two of the T positions
        spans = write_spans(model, [[NEWLINE_WORD, SENTINELS[0], NEWLINE_WORD]] * n, sample, T - 2)
        return [TOKENIZER.decode(span).split("\n")[0] for span in spans]
    ids = torch.full((n, 1), NEWLINE_WORD)
    while ids.shape[1] < T:
        # only the rows without a newline yet are computed; the others' draws (from zero logits) are cut off
        # below, and every row still draws, so the sampled lines are those of computing every row
        active = (~(ids[:, 1:] == NEWLINE_WORD).any(1)).nonzero()[:, 0]
        if kind == "bidirectional":
            query = torch.cat([ids[active], torch.full((len(active), T - ids.shape[1] if masks_right else 1), MASK)], 1)
            last = model(query, for_kind(kind, query.shape[1]))[:, ids.shape[1]]
        else:   # a prefix LM with a one-token prefix reads causally
            last = model(ids[active], for_kind("causal", ids.shape[1]))[:, -1]
        logits = last.new_zeros(n, last.shape[-1]).index_copy_(0, active, last)
        ids = torch.cat([ids, sample(logits)], 1)
        if (ids[:, 1:] == NEWLINE_WORD).any(1).all():
            break
    return [TOKENIZER.decode(row[1:]).split("\n")[0] for row in ids.tolist()]


@torch.no_grad()
def objective_accuracy(model, make_batch, window: int, batches: int = 20, batch_size: int = 32,
                       seed: int = 0, split: str = "val") -> dict:
    """Argmax accuracy on a model's own training objective, over batches of held-out reviews.

    make_batch(windows, generator) is the objective's batch function; for encoder-decoder batches
    the accuracy is also split into sentinel targets and content (the hidden words)."""
    g, stream = torch.Generator().manual_seed(seed), review_stream(split)
    right, total = Counter(), Counter()
    for _ in range(batches):
        batch = make_batch(random_windows(stream, window, batch_size, g), g)
        correct = (batch_logits(model, batch).argmax(-1) == batch.targets) & batch.loss_mask
        right["accuracy"] += int(correct.sum())
        total["accuracy"] += int(batch.loss_mask.sum())
        if not isinstance(batch, StackBatch):
            for name, where in (("sentinels", batch.is_sentinel), ("content", ~batch.is_sentinel)):
                right[name] += int((correct & where).sum())
                total[name] += int((batch.loss_mask & where).sum())
    return {name: right[name] / total[name] for name in total}


def training_format(model, objective: dict, reviews: list) -> dict:
    """The rating and the one-step adjective fill asked in the format of the model's own objective (a recipe
    config; see `lib.protocols.training_format_logits`)."""
    fill = _adjective_fills(reviews, lambda ids, slots: training_format_logits(model, objective, ids, slots))
    return {"rating": training_format_accuracy(model, objective, reviews),
            "fill: food adjective": fill["food_adjective"], "fill: right polarity": fill["right_polarity"]}


def capability_row(model, kind: str, objective: dict, make_batch, reviews: list, generation: bool = True,
                   candidates: bool = True) -> tuple:
    """(row, details): section 04's capability table's numbers for one model on `reviews` (a dict: rating and
    adjective fill by the shared protocol and in the training format, candidate scoring, generated lines valid
    and true, accuracy on its own objective), and what lies behind them ({"fill", "lines", "own"}).  objective
    is the run's recipe config, make_batch its batch function; generation and candidate scoring (the slow
    columns) can be left out."""
    fill = adjective_fill(model, kind, reviews)
    trained_format = training_format(model, objective, reviews)
    own = objective_accuracy(model, make_batch, objective["window"])
    row = {"rating: shared": rating_accuracy(model, kind, reviews),
           "rating: training format": trained_format["rating"],
           "fill polarity: shared": fill["right_polarity"],
           "fill polarity: training format": trained_format["fill: right polarity"],
           "fill polarity: 16 adjectives": fill["right_polarity_among_adjectives"]}
    if candidates:
        row["16 candidates, whole line"] = candidate_scoring(model, kind, reviews)
    lines = generate_lines(model, kind, len(reviews), seed=0) if generation else []
    if generation:
        quality = line_quality(lines)
        row.update({"generate: valid": quality["valid"], "generate: true": quality["true"]})
    row["own objective"] = own["accuracy"]
    return row, {"fill": fill, "lines": lines, "own": own}
