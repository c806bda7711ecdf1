"""Asking section 06's models: one question in two forms, with any mode token or none.

Every model of section 06 reads a source and writes a target (`lib.ul2`: an
encoder-decoder, or a non-causal decoder reading source + target as one
sequence), so one way of asking serves all four recipes.  A question comes in
the form of one of the training formats:

    span     the text with <0> where the answer goes; the decoder starts `<bos> <0>`   (R and X, T5)
    prefix   the text up to the answer; the decoder starts `<bos>`                     (S, prefix LM)

and `mode` puts "R", "S" or "X"'s mode token first in the source, or none
(None).  A UL2 model trained with [R] and [X] on span examples and [S] on
prefix examples can be asked with the mode that matches the form, with none,
or with a mismatched one: `mode_table` measures all of them; `answers_by_kind` counts what the rating slot says
to each kind of review ("and" good or bad, "but" ok).

    >>> source, start = ask_slot(line_ids("base lives in jelka."), 4, "span", "R")
    >>> TOKENIZER.decode(source), TOKENIZER.decode(start)
    ('[R]\\nbase lives in <0>.\\n', '<bos> <0>')
"""

from dataclasses import fields, replace

import torch
import torch.nn.functional as F

from lib.data import world
from lib.measure.capabilities import ADJECTIVE_IDS, scored_candidates
from lib.measure.evals import line_quality, rows_at_once
from lib.measure.protocols import (RATING_IDS, count_by_connective, good_above_bad, line_ids, margins_of,
                                   review_slots, true_rating)
from lib.objectives.batches import masked_cross_entropy
from lib.data.tokenizers import BOS, FIRST_ORDINARY, MODE_TOKENS, NEWLINE_WORD, SENTINELS, TOKENIZER
from lib.objectives.ul2 import (FORMS, ask_slot, decoder_logits, question_logits, questions, with_mode,
                                without_mode_tokens)

MODES = ("R", "S", "X", None)
# Writing stops here: a line longer than the longest line of the world (16 word tokens) is never valid.
MAX_NEW = max(len(TOKENIZER.encode(line)) for line in world.load_text("train").splitlines()) + 2


def mode_name(mode) -> str:
    return "none" if mode is None else f"[{mode}]"


def _check_mode(mode):
    if mode is not None and mode not in MODE_TOKENS:
        raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")


def _check(form: str, mode):
    if form not in FORMS:
        raise ValueError(f"unknown form {form!r}; expected one of {FORMS}")
    _check_mode(mode)


@torch.no_grad()
def next_logits(model, sources: list, starts: list, chunk: int = 256) -> torch.Tensor:
    """(N, V): `ul2.question_logits`, in chunks, without gradients."""
    return torch.cat([question_logits(model, sources[i:i + chunk], starts[i:i + chunk])
                      for i in range(0, len(sources), chunk)])


def _slot_answers(model, reviews: list, slot_name: str, form: str, mode, choices: list) -> list:
    ids = [line_ids(r) for r in reviews]
    asked = [ask_slot(s, review_slots(s)[slot_name], form, mode) for s in ids]
    logits = next_logits(model, *zip(*asked))[:, choices]
    return [choices[i] for i in logits.argmax(-1).tolist()]


def rating_answers(model, reviews: list, form: str, mode=None) -> list:
    """The rating word each review's slot gets, argmax over good / ok / bad."""
    return [TOKENIZER.vocab[a] for a in _slot_answers(model, reviews, "rating", form, mode, RATING_IDS)]


def rating_accuracy(model, reviews: list, form: str, mode=None) -> float:
    """Share of reviews whose rating slot gets the right word."""
    answers = rating_answers(model, reviews, form, mode)
    return sum(a == true_rating(r) for a, r in zip(answers, reviews)) / len(reviews)


def rating_breakdown(answers: list, reviews: list) -> tuple:
    """(share of the good and bad reviews answered right, share of all reviews answered 'ok'): two models
    with the same accuracy can be right on different reviews.

    >>> rating_breakdown(["good", "ok"], ["review: the soup was tasty and the host was kind. rating: good.",
    ...                                   "review: the soup was tasty but the host was rude. rating: ok."])
    (1.0, 0.5)
    """
    decided = [(a, r) for a, r in zip(answers, reviews) if true_rating(r) != "ok"]
    return sum(a == true_rating(r) for a, r in decided) / len(decided), answers.count("ok") / len(answers)


def answers_by_kind(answers: list, reviews: list) -> dict:
    """{(connective, true rating): {answer: count}}: what a model says to each kind of review (an "and" review is
    good or bad, a "but" review always ok), so that a rule learned in part (but -> ok) shows apart from polarity
    (`protocols.count_by_connective`, one row per kind).

    >>> answers_by_kind(["ok", "ok"], ["review: the soup was tasty and the host was kind. rating: good.",
    ...                                "review: the soup was tasty but the host was rude. rating: ok."])
    {('and', 'good'): {'good': 0, 'ok': 1, 'bad': 0}, ('but', 'ok'): {'good': 0, 'ok': 1, 'bad': 0}}
    """
    counts = count_by_connective(answers, reviews)
    return {kind: {said: counts[(*kind, said)] for said in world.RATINGS}
            for kind in sorted({(connective, truth) for connective, truth, _ in counts})}


def rating_margin_auc(model, reviews: list, form: str, mode=None) -> float:
    """The margin logit(good) - logit(bad) at each review's rating slot, asked in `form` with `mode` and rounded to
    1e-9 (as `protocols.rating_margins`), read as `protocols.good_above_bad`: whether a model whose argmax gives
    every review one word still orders the good reviews above the bad ones (1), not at all (0.5) or in reverse."""
    ids = [line_ids(r) for r in reviews]
    logits = next_logits(model, *zip(*[ask_slot(s, review_slots(s)["rating"], form, mode) for s in ids]))
    return good_above_bad(margins_of(logits), reviews)


def adjective_polarity(model, reviews: list, form: str, mode=None) -> float:
    """The food adjective hidden, argmax over the 16 food adjectives: the share with the polarity the
    rest of the review demands.  The prefix form cannot see the rest, so it can only guess."""
    answers = _slot_answers(model, reviews, "food_adjective", form, mode, list(ADJECTIVE_IDS))
    wanted = [ADJECTIVE_IDS[line_ids(r)[review_slots(line_ids(r))["food_adjective"]]] for r in reviews]
    return sum(ADJECTIVE_IDS[a] == w for a, w in zip(answers, wanted)) / len(reviews)


@torch.no_grad()
def write(model, sources: list, starts: list, stop: list, max_new: int, generator=None) -> list:
    """Each row's decoder writes after its start (greedy, or sampled when a generator is given) until
    a token in `stop` or max_new tokens; returns the tokens written before the stop."""
    written = [[] for _ in sources]
    active = list(range(len(sources)))
    for _ in range(max_new):
        logits = next_logits(model, [sources[i] for i in active], [starts[i] + written[i] for i in active])
        if generator is None:
            tokens = logits.argmax(-1).tolist()
        else:
            tokens = torch.multinomial(logits.softmax(-1), 1, generator=generator)[:, 0].tolist()
        for i, token in zip(active, tokens):
            written[i].append(token)
        active = [i for i in active if written[i][-1] not in stop]
        if not active:
            break
    return [row[:next((j for j, t in enumerate(row) if t in stop), len(row))] for row in written]


@torch.no_grad()
def first_token_shares(model, mode=None) -> dict:
    """Continuing a newline in the prefix form (how `generate_lines` starts it): the probability that the first
    token written is a sentinel, and that it is a newline.  Either ends the line there, empty."""
    probs = next_logits(model, [with_mode([NEWLINE_WORD], mode)], [[BOS]]).softmax(-1)[0]
    return {"sentinel": float(probs[SENTINELS].sum()), "newline": float(probs[NEWLINE_WORD])}


def generate_lines(model, form: str, mode=None, n: int = 100, seed: int = 0, max_new: int = MAX_NEW) -> list:
    """n lines sampled from nothing: the prefix form continues a newline, the span form fills a whole
    missing line (`\\n <0> \\n`)."""
    _check(form, mode)
    if form == "span":
        source, start, stop = [NEWLINE_WORD, SENTINELS[0], NEWLINE_WORD], [BOS, SENTINELS[0]], SENTINELS
    else:
        source, start, stop = [NEWLINE_WORD], [BOS], [NEWLINE_WORD] + SENTINELS
    lines = write(model, [with_mode(source, mode)] * n, [start] * n, stop, max_new,
                  torch.Generator().manual_seed(seed))
    return [TOKENIZER.decode(line).split("\n")[0] for line in lines]


def review_body(line: str) -> tuple:
    """(start, end) of the part of a review's `line_ids` between `review:` and `rating`: everything that
    makes the rating true or false.

    >>> ids = line_ids("review: the soup was tasty and the host was kind. rating: good.")
    >>> start, end = review_body("review: the soup was tasty and the host was kind. rating: good.")
    >>> TOKENIZER.decode(ids[start:end])
    'the soup was tasty and the host was kind.'
    """
    ids = line_ids(line)
    return ids.index(TOKENIZER[":"]) + 1, ids.index(TOKENIZER["rating"])   # after `review:`, up to `rating`


def long_infill(model, reviews: list, mode=None) -> dict:
    """Hide the whole body of each review, keep `review:` and its rating, and let the model write the
    span greedily: the share of lines that come out well-formed, and true (the rating right for what was
    written).  Only a model that reads the right context can match the rating."""
    ids = [line_ids(r) for r in reviews]
    asked = [ask_slot(s, start, "span", mode, end) for s, (start, end) in zip(ids, map(review_body, reviews))]
    spans = write(model, *zip(*asked), SENTINELS + [NEWLINE_WORD], MAX_NEW)
    lines = [TOKENIZER.decode(s[1:start] + span + s[end:-1]) for s, span, (start, end)
             in zip(ids, spans, (review_body(r) for r in reviews))]
    return {**line_quality(lines), "lines": lines}


@torch.no_grad()
def line_log_likelihoods(model, lines: list, form: str, mode=None) -> torch.Tensor:
    """Log-likelihood (nats) of each whole line: after a newline and up to the closing one (prefix form),
    or as the one span of `\\n <0> \\n`, closing sentinel included (span form)."""
    _check(form, mode)
    ids = [TOKENIZER.encode(line) for line in lines]
    if form == "span":
        sources = [with_mode([NEWLINE_WORD, SENTINELS[0], NEWLINE_WORD], mode)] * len(ids)
        targets = [[SENTINELS[0]] + i + [SENTINELS[1]] for i in ids]
    else:
        sources, targets = [with_mode([NEWLINE_WORD], mode)] * len(ids), [i + [NEWLINE_WORD] for i in ids]
    batch = questions(sources, [[BOS] + t for t in targets])   # position j predicts targets[j]
    picked = decoder_logits(model, batch).log_softmax(-1).gather(-1, batch.targets[..., None])[..., 0]   # (N, T)
    positions = torch.arange(picked.shape[1])[None, :]
    start = 1 if form == "span" else 0   # the span form's opening <0> is given, not scored
    scored = (positions >= start) & (positions < torch.tensor([len(t) for t in targets])[:, None])
    return (picked * scored).sum(1)


def candidate_scoring(model, reviews: list, form: str, mode=None) -> float:
    """`capabilities.scored_candidates` by `line_log_likelihoods` in this form, with this mode."""
    return scored_candidates(reviews, lambda sequences: line_log_likelihoods(
        model, [TOKENIZER.decode(ids[1:-1]) for ids in sequences], form, mode))


def capabilities(model, reviews: list, mode_tokens: bool, lines: int = 100, scored: int = 50) -> dict:
    """Section 04's questions, in span and in prefix form, asked with the mode token that matches the
    question when the model was trained with mode tokens: [R] for one hidden word, [X] for a hidden whole
    line or review body, [S] for a continuation.  The rating, the food adjective's polarity (one step),
    the 16 candidates scored as whole lines (on the first `scored` reviews: 16 lines each), lines generated
    from nothing (valid, true), and the review body infilled whole."""
    r, s, x = ("R", "S", "X") if mode_tokens else (None, None, None)
    by_prefix = line_quality(generate_lines(model, "prefix", s, lines))
    by_span = line_quality(generate_lines(model, "span", x, lines))
    return {"rating (span)": rating_accuracy(model, reviews, "span", r),
            "rating (prefix)": rating_accuracy(model, reviews, "prefix", s),
            "adjective polarity (span)": adjective_polarity(model, reviews, "span", r),
            "candidate scoring (span)": candidate_scoring(model, reviews[:scored], "span", x),
            "candidate scoring (prefix)": candidate_scoring(model, reviews[:scored], "prefix", s),
            "generation valid (span)": by_span["valid"], "generation true (span)": by_span["true"],
            "generation valid (prefix)": by_prefix["valid"], "generation true (prefix)": by_prefix["true"],
            "long infill true (span)": long_infill(model, reviews, x)["true"]}


def mode_row(model, reviews: list, mode, lines: int = 100) -> dict:
    """One UL2 model asked everything with one mode token (or none), whichever form the question takes:
    the rating in both forms, lines generated from nothing (prefix form) and the review body infilled."""
    generated = line_quality(generate_lines(model, "prefix", mode, lines))
    infilled = long_infill(model, reviews, mode)
    return {"rating (span)": rating_accuracy(model, reviews, "span", mode),
            "rating (prefix)": rating_accuracy(model, reviews, "prefix", mode),
            "generation valid": generated["valid"], "generation true": generated["true"],
            "long infill valid": infilled["valid"], "long infill true": infilled["true"]}


def with_mode_token(batch, mode):
    """A batch whose sources start with a mode token, asked with another mode token, or with none.  Without
    one, every source token moves one learned position to the left (and, in a single stack, every target
    token too): the comparison is with the input the recipes without mode tokens train on."""
    if mode is None:
        return without_mode_tokens(batch)
    _check_mode(mode)
    source = batch.source.clone()
    source[:, 0] = MODE_TOKENS[mode]
    return replace(batch, source=source, modes=(mode,) * source.shape[0])


def position_kinds(batch) -> dict:
    """(B, T) bool masks splitting a batch's loss positions by what they ask.  "structure": a sentinel, or the
    first target token (a sentinel for R and X, a word for S: either way the token that says which format
    the target takes); "content": every other target, a word of the text at a known place."""
    first = batch.loss_mask & (batch.loss_mask.cumsum(1) == 1)
    structure = batch.loss_mask & (batch.is_sentinel | first)
    return {"structure": structure, "content": batch.loss_mask & ~structure}


@torch.no_grad()
def logits_in_parts(model, batch) -> torch.Tensor:
    """`decoder_logits` of a batch, its rows passed `evals.rows_at_once` at a time (each row's logits are its own)."""
    step = rows_at_once(model, batch.source.shape[1] + batch.decoder_input.shape[1]) or len(batch.targets)
    parts = [replace(batch, **{f.name: getattr(batch, f.name)[i:i + step] for f in fields(batch)
                               if getattr(batch, f.name) is not None}) for i in range(0, len(batch.targets), step)]
    return torch.cat([decoder_logits(model, part) for part in parts])


def held_out_losses(model, batches: dict) -> dict:
    """{denoiser label: held-out loss (nats per target token)}: `trainers.ul2.denoiser_losses`, computed in parts
    (`split_losses`' "all")."""
    return {name: split_losses(model, batch)["all"] for name, batch in batches.items()}


@torch.no_grad()
def split_losses(model, batch) -> dict:
    """{"all": loss, "structure": loss, "content": loss} (nats per position) from one forward pass: the
    training loss over every loss position (`ul2_loss`) and its split on `position_kinds`.  Content is scored
    with the softmax over ordinary tokens only, so that probability a mode token moves onto sentinels does not
    count: it measures what the model would write, given that a word comes."""
    logits, kinds = logits_in_parts(model, batch), position_kinds(batch)
    words = logits[..., FIRST_ORDINARY:]
    content = kinds["content"]
    return {"all": masked_cross_entropy(logits, batch.targets, batch.loss_mask).item(),
            "structure": F.cross_entropy(logits[kinds["structure"]], batch.targets[kinds["structure"]]).item(),
            "content": F.cross_entropy(words[content], batch.targets[content] - FIRST_ORDINARY).item()}


def mode_losses(model, batches: dict) -> dict:
    """{denoiser: {mode name: split_losses}}: each denoiser's batch (built with its own mode token) asked with
    every mode token and with none; "all" is the held-out loss."""
    return {name: {mode_name(m): split_losses(model, with_mode_token(batch, m)) for m in MODES}
            for name, batch in batches.items()}
