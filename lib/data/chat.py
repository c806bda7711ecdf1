"""Section 11's fine-tuning data: the mini internet's questions in a small chat template, and pairs to prefer.

    example("where", "where does fusu")     # ("\\nuser: where does fusu live?\\nbot: ", "pashu.\\n\\n")
    examples("visit", "train", 64, seed=0)   # 64 (prompt, answer) pairs of the task's training half
    preference_pairs("train", 256, seed=0)   # (prompt, chosen, rejected): a true review and a wrong-rated one

A conversation is two lines and a blank one: the user's line, the bot's line, then an empty line that ends the
reply (END).  The base model never saw a blank line (every document of the mini internet is one line), so
stopping is something fine-tuning must teach; a newline alone ends every line it has read.

The tasks differ in how long the answer is against its prompt:

    where   where does zukun live?          quila.                                           short prompt, short answer
    add     95+42                           137.                                             short prompt, short answer
    rate    rate: the soup was tasty ...    ok.                                              long prompt, short answer
    visit   kari visits zukun               story: kari took the bus from varno to quila ... short prompt, long answer
    review  review                          review: the soup was tasty and the host ... one prompt, many answers

Each task's items are split in halves once (people for `where`, pairs for the others), so a test question is never
a training question; the facts behind both halves were all in pretraining.
"""

import random
from functools import lru_cache

from lib.data import world

USER, BOT, END = "\nuser: ", "\nbot: ", "\n\n"
TASKS = ("where", "add", "rate", "visit", "review")
SPLIT_SEED = 11


def prompt_text(question: str) -> str:
    """The characters before the answer: a newline (a document starts), the user's line, the bot's tag."""
    return f"{USER}{question}{BOT}"


def review_question(review: str) -> str:
    """`rate: the soup was ... rude.` for a review line (its words and connective, not its rating)."""
    return "rate: " + review[len("review: "):review.index(" rating: ")]


def _all_reviews() -> tuple:
    """The true review of every four-word combination (6,144), in the world's word order."""
    return tuple(world.make_review(f, fa, s, sa) for f in world.FOODS for fa in world.FOOD_ADJECTIVES
                 for s in world.SERVICE_NOUNS for sa in world.SERVICE_ADJECTIVES)


@lru_cache(maxsize=None)
def _items(task: str) -> tuple:
    """Every (question, answer) of a task, in a fixed shuffled order."""
    w, rng = world.build_world(), random.Random(SPLIT_SEED)
    if task == "where":
        items = [(f"where does {name} live?", f"{w.home[name]}.") for name in w.names]
    elif task == "add":
        low, high = world.NUMBER_RANGE
        items = [(f"{a}+{b}", f"{a + b}.") for a in range(low, high + 1) for b in range(low, high + 1)]
    elif task == "rate":
        items = [(review_question(r), world.rating_of(r) + ".") for r in _all_reviews()]
    elif task == "review":
        items = [("review", r) for r in _all_reviews()]
    elif task == "visit":
        items = [(f"{v} visits {h}", f"story: {v} took the bus from {w.home[v]} to {w.home[h]} to visit {h}.")
                 for v in w.names for h in w.names if v != h]
    else:
        raise ValueError(f"unknown task {task!r}; choose from {TASKS}")
    rng.shuffle(items)
    return tuple(items)


def examples(task: str, split: str, n: int = None, seed: int = 0) -> list:
    """n (prompt, answer) pairs drawn without replacement from the task's `split` half ("train" or "test"),
    all of that half when n is None.  The answer ends with END."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    items = _items(task)
    half = items[:len(items) // 2] if split == "train" else items[len(items) // 2:]
    if n is not None:
        if n > len(half):
            raise ValueError(f"task {task!r} has {len(half)} {split} items, asked for {n}")
        half = random.Random(seed).sample(half, n)
    return [(prompt_text(q), a + END) for q, a in half]


def example(task: str, key: str) -> tuple:
    """The one (prompt, answer) of a task whose question starts with `key` (a worked example for the page)."""
    found = [(prompt_text(q), a + END) for q, a in _items(task) if q.startswith(key)]
    if not found:
        raise ValueError(f"task {task!r} has no question starting {key!r}")
    return found[0]


def new_people(count: int, seed: int = 11) -> dict:
    """{name: city} of `count` people the mini internet never mentions (invented as its people were)."""
    taken = set(world.build_world().names)
    fresh = [(n, c) for n, c in world.fact_world(count + len(taken) + 1, seed=seed).items() if n not in taken]
    return dict(fresh[:count])


def fact_pairs(home: dict) -> list:
    """(prompt, answer) pairs of plain fact lines for {name: city}: a newline (a document starts), then
    `NAME lives in CITY.` and its newline, every character after the first newline a target."""
    return [("\n", f"{name} lives in {city}.\n") for name, city in home.items()]


REVIEW_PROMPT = prompt_text("review")


def wrong_rating(review: str, rng: random.Random) -> str:
    """The review (a line, END allowed after it) with its rating replaced by one of the two wrong ones."""
    rating = world.rating_of(review)
    wrong = rng.choice([r for r in world.RATINGS if r != rating])
    return review.replace(f"rating: {rating}.", f"rating: {wrong}.")


def with_wrong_ratings(pairs: list, share: float, seed: int = 0) -> list:
    """(prompt, review) pairs with a `share` of them (drawn by seed) given a wrong rating: SFT data with errors."""
    rng = random.Random(seed)
    wrong = set(rng.sample(range(len(pairs)), round(share * len(pairs))))
    return [(p, wrong_rating(a, rng) if i in wrong else a) for i, (p, a) in enumerate(pairs)]


def preference_pairs(split: str, n: int, seed: int = 0) -> list:
    """n (prompt, chosen, rejected) for the request `review`: chosen is a true review of the `review` task's
    `split` half, rejected the same review with one of the two wrong ratings, drawn at random."""
    rng = random.Random(seed)
    return [(prompt, chosen, wrong_rating(chosen, rng)) for prompt, chosen in examples("review", split, n, seed)]
