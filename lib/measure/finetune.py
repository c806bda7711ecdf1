"""Fine-tuning: how the papers judge a pretraining objective, at the scale of the mini internet.

    task = rating_task(split=0)                      # labelled pool, validation and test reviews
    tuned = finetune(model, "bidirectional", task.labelled[:48], lr=1e-3, seed=0)    # a copy; model untouched
    score(tuned, "bidirectional", task.test)         # {"and": share right on "and" reviews, "but": ..., "all": ...}

BERT, T5, ELECTRA and UL2 report what a pretrained network does after it is
fine-tuned on labelled examples of a task (GLUE, SuperGLUE).  Here a copy of
the network is fine-tuned, all of its weights, through its own rating slot
(`protocols.slot_logits`: GPT and the prefix LM predict the next token, BERT
fills `<mask>`, T5's decoder writes the span of sentinel `<0>`, a character-level
decoder predicts the rating's first letter, kind `protocols.CHARACTERS`; the loss
is the cross-entropy over good / ok / bad), with the book's optimiser and schedule
(`train.loop`) for a fixed number of full-batch steps.

The task is built so that the labels alone cannot solve it (`rating_task`): the
labelled reviews use half of the food adjectives and half of the service
adjectives of each polarity, the test reviews only the other halves.  A
review's connective says whether its two adjectives agree ("but" reviews are
always ok, which the labels teach), so the score that needs pretraining is the
one on "and" reviews: good or bad, decided by the polarity of adjectives the
fine-tuning never showed.  An untrained network of the same shape, fine-tuned
the same way, is the floor.
"""

import copy
import math
import time
import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from lib.data import world
from lib.data.seeding import seed_everything
from lib.measure.protocols import (CHAR_RATING_IDS, CHARACTERS, RATING_IDS, UNMASKED, char_line_ids,
                                   char_rating_slot, good_above_bad, line_ids, rating_margins, review_slots,
                                   slot_logits, true_rating)
from lib.nn.models import SlotClassifier
from lib.train.loop import OPTIMIZATION, make_optimizer, optimizer_step

VERSION = 2            # bump when what a fine-tune computes changes: the cached results are then stale
                       # (2: the labelled pool interleaves the three ratings)
STEPS = 150            # full-batch steps of every fine-tune
LEARNING_RATES = (1e-4, 3e-4, 1e-3, 3e-3)   # swept per backbone on the validation reviews


@dataclass(frozen=True)
class RatingTask:
    """One label split: which adjectives the labelled reviews use, the labelled pool (in the order the first
    N are taken), and validation and test reviews that use only the other adjectives."""
    split: int
    labelled_adjectives: tuple
    labelled: tuple         # good, ok, bad, good, ok, bad, ...: any first n hold the ratings equally (within 1)
    validation: tuple
    test: tuple


def _halves(adjectives: dict, rng: random.Random) -> tuple:
    """Half of the positive and half of the negative adjectives (labelled), and the rest (held out)."""
    labelled = []
    for polarity in (True, False):
        words = sorted(w for w, p in adjectives.items() if p == polarity)
        labelled += rng.sample(words, len(words) // 2)
    return tuple(sorted(labelled)), tuple(sorted(set(adjectives) - set(labelled)))


def rating_task(split: int, validation: int = 200, test: int = 400, pool: int = 256) -> RatingTask:
    """The held-out-adjective rating task of label split `split` (a seed): 4 + 4 of the 16 food adjectives and
    3 + 3 of the 12 service adjectives label the pool; validation and test reviews use only the others, are
    distinct, and are not lines of the training split.  The labelled pool takes the three ratings in turn, so
    that a fine-tune on its first n reviews sees every rating (drawn at random, 8 reviews could miss one, and a
    network cannot learn to say a word it is never shown).

    >>> task = rating_task(0)
    >>> any(a in r.split() for r in task.test for a in task.labelled_adjectives)
    False
    """
    rng = random.Random(f"rating_task/{split}")
    food, held_food = _halves(world.FOOD_ADJECTIVES, rng)
    service, held_service = _halves(world.SERVICE_ADJECTIVES, rng)
    train_lines = set(world.build_world().train)

    def draw(n, foods, services, taken):
        out = []
        while len(out) < n:
            line = world.make_review(rng.choice(world.FOODS), rng.choice(foods), rng.choice(world.SERVICE_NOUNS),
                                     rng.choice(services))
            if line not in taken and line not in out:
                out.append(line)
        return out

    by_rating = {rating: [] for rating in world.RATINGS}
    for line in draw(pool * 3, food, service, set()):      # about a quarter good, a half ok, a quarter bad
        by_rating[true_rating(line)].append(line)
    labelled = [by_rating[rating][i] for i in range(pool // 3 + 1) for rating in world.RATINGS][:pool]
    held_out = draw(validation + test, held_food, held_service, train_lines)
    return RatingTask(split, food + service, tuple(labelled), tuple(held_out[:validation]),
                      tuple(held_out[validation:]))


def fitted_threshold(scores: list, positive: list) -> float:
    """The threshold t that classifies the most (score, label) pairs right, a pair's label being positive when
    its score > t: the candidates are every midpoint between neighbouring distinct scores and one beyond each
    end; among equally good ones, the middle one.

    >>> fitted_threshold([0.1, 0.2, 0.9, 1.0], [False, False, True, True])
    0.55
    """
    distinct = sorted(set(scores))
    candidates = [distinct[0] - 1] + [(a + b) / 2 for a, b in zip(distinct, distinct[1:])] + [distinct[-1] + 1]
    right = [sum((score > t) == label for score, label in zip(scores, positive)) for t in candidates]
    best = [t for t, r in zip(candidates, right) if r == max(right)]
    return best[len(best) // 2]


def margin_readout(model, kind: str, tasks, n: int) -> list:
    """Per task (label split), two readings of its "and" test reviews from the network as it is, by the zero-shot
    margin logit(good) - logit(bad) at the shared rating slot (`protocols.rating_margins`): "threshold", the
    share read right as good above one threshold, fitted (`fitted_threshold`) on the "and" reviews among the
    first n labelled ones, the labels the fine-tune gets; and "auc", how well the margin ranks the test's good
    reviews above its bad ones, no threshold at all (`protocols.good_above_bad`).  No weight moves: they ask
    whether polarity can be read off the network, where the fine-tune asks what training on the labels makes
    of it; a threshold reading below the AUC means the margins of unseen adjectives sit elsewhere than those
    of the labelled ones."""
    pools = [[r for r in task.labelled[:n] if " and " in r] for task in tasks]
    tests = [[r for r in task.test if " and " in r] for task in tasks]
    reviews = list(dict.fromkeys(r for group in pools + tests for r in group))
    margin = dict(zip(reviews, rating_margins(model, kind, reviews)))
    readings = []
    for pool, test in zip(pools, tests):
        threshold = fitted_threshold([margin[r] for r in pool], [true_rating(r) == "good" for r in pool])
        good = [true_rating(r) == "good" for r in test]
        readings.append({"threshold": sum((margin[r] > threshold) == g for r, g in zip(test, good)) / len(test),
                         "auc": good_above_bad([margin[r] for r in test], test)})
    return readings


def _rating_examples(reviews, kind: str) -> tuple:
    """(ids, rating slots, labels) of reviews as a model of this kind reads them: word tokens, or characters."""
    labels = torch.tensor([world.RATINGS.index(true_rating(r)) for r in reviews])
    if kind == CHARACTERS:
        ids = [char_line_ids(r) for r in reviews]
        return ids, [char_rating_slot(s) for s in ids], labels
    ids = [line_ids(r) for r in reviews]
    return ids, [review_slots(s)["rating"] for s in ids], labels


def _columns(model, kind: str) -> list:
    """Where a model's slot logits hold good / ok / bad: its own words (a character-level model: their first
    letters), or a classifier head's three outputs."""
    if isinstance(model, SlotClassifier):
        return list(range(len(world.RATINGS)))
    return CHAR_RATING_IDS if kind == CHARACTERS else RATING_IDS


def finetune(model, kind: str, reviews, lr: float, seed: int, steps: int = STEPS, head: bool = False):
    """A copy of `model` fine-tuned, every weight, on the labelled `reviews` through its rating slot (argmax
    over good / ok / bad is its answer): `steps` full-batch AdamW steps, the book's warm-up (a tenth of the
    steps) and cosine decay to zero, gradient clipping at 1.  `model` is not changed.

    head=True (a bidirectional network without an output over words: ELECTRA's discriminator) reads the slot
    through a new linear layer on the last hidden state instead (`nn.models.SlotClassifier`, drawn from `seed`)."""
    if not reviews:
        raise ValueError("fine-tuning needs at least one labelled review")
    if head and kind not in ("bidirectional", UNMASKED):
        raise ValueError(f"a classifier head reads the slot of a bidirectional network, not a {kind!r} one")
    seed_everything(seed)   # the head's initialisation; nothing in a step is random
    tuned = copy.deepcopy(model)
    dtype = next(tuned.parameters()).dtype           # the head in the network's dtype (float64 to measure)
    tuned = (SlotClassifier(tuned, len(world.RATINGS)).to(dtype) if head else tuned).train()
    config = dict(OPTIMIZATION, lr=lr, min_lr=0.0, warmup=max(1, steps // 10), steps=steps)
    optimizer = make_optimizer(tuned, config)
    ids, slots, labels = _rating_examples(reviews, kind)
    for step in range(steps):
        logits = slot_logits(tuned, kind, ids, slots, grad=True)[:, _columns(tuned, kind)]
        optimizer_step(tuned, optimizer, F.cross_entropy(logits, labels), step, config)
    return tuned.eval()


def score(model, kind: str, reviews) -> dict:
    """Share of reviews whose rating slot gets the right word, on "and" reviews (good or bad: the polarity of
    the adjectives decides), on "but" reviews (always ok) and on all."""
    ids, slots, labels = _rating_examples(reviews, kind)
    predicted = slot_logits(model, kind, ids, slots)[:, _columns(model, kind)].argmax(-1)
    right = (predicted == labels).tolist()
    connective = ["and" if " and " in r else "but" for r in reviews]
    out = {}
    for group in ("and", "but"):
        hits = [ok for ok, c in zip(right, connective) if c == group]
        out[group] = sum(hits) / len(hits) if hits else float("nan")
    out["all"] = sum(right) / len(right)
    return out


def answer_bits(model, kind: str, reviews) -> float:
    """Mean bits the network pays for the right rating at its slot, the softmax taken over good / ok / bad only
    (`score`'s columns): a zero-shot reading that keeps moving after `score` reaches 1.0."""
    ids, slots, labels = _rating_examples(reviews, kind)
    logp = slot_logits(model, kind, ids, slots)[:, _columns(model, kind)].log_softmax(-1)
    return -logp[torch.arange(len(reviews)), labels].mean().item() / math.log(2)


def sweep(model, kind: str, ns, splits, learning_rates=LEARNING_RATES, steps: int = STEPS, progress=None,
          head: bool = False, score_labels: bool = False) -> list:
    """Fine-tune a copy of `model` on the first n labelled reviews of each label split, at each learning rate
    (through a new head where head=True, see `finetune`); one row per fine-tune: {"n", "split", "lr",
    "validation": score, "test": score, "seconds"}, and with score_labels its score on the n reviews it was
    fine-tuned on ("labelled": did it fit its labels?).  progress(done, total) is called after each fine-tune."""
    rows, total = [], len(ns) * len(splits) * len(learning_rates)
    for split in splits:
        task = rating_task(split)
        for n in ns:
            for lr in learning_rates:
                start = time.perf_counter()
                tuned = finetune(model, kind, task.labelled[:n], lr, seed=split, steps=steps, head=head)
                rows.append({"n": n, "split": split, "lr": lr, "validation": score(tuned, kind, task.validation),
                             "test": score(tuned, kind, task.test), "seconds": time.perf_counter() - start}
                            | ({"labelled": score(tuned, kind, task.labelled[:n])} if score_labels else {}))
                if progress:
                    progress(len(rows), total)
    return rows


def chosen(rows: list, n: int) -> list:
    """The rows of the learning rate with the best mean validation score on "and" reviews over the label splits
    at `n` labelled reviews (ties: the smaller rate): one row per split, their test scores the yardstick."""
    at_n = [r for r in rows if r["n"] == n]
    if not at_n:
        raise ValueError(f"no fine-tune with n = {n} (the rows have n in {sorted({r['n'] for r in rows})})")
    rates = sorted({r["lr"] for r in at_n})
    mean = {lr: sum(r["validation"]["and"] for r in at_n if r["lr"] == lr)
            / sum(1 for r in at_n if r["lr"] == lr) for lr in rates}
    best = max(rates, key=lambda lr: (mean[lr], -lr))
    return sorted((r for r in at_n if r["lr"] == best), key=lambda r: r["split"])
