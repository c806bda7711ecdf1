"""The mini internet: a tiny, deterministic, synthetic corpus with known truth.

Every document is one lowercase line of one of five kinds:

    fact      zukun lives in quila.
    question  q: where does zukun live? a: quila.
    addition  95+42=137.
    review    review: the soup was tasty and the host was kind. rating: good.
    story     story: kari took the bus from varno to quila to visit zukun.

Because the generator knows the world (who lives where, which adjectives are
positive), `check_line` can tell whether a line a model writes is well-formed
and whether it is true.  `python -m lib.data.world` writes data/train.txt and
data/val.txt; running it twice gives byte-identical files.

Review rule: the food adjective and the service adjective each have a
polarity; the connective is "and" when they agree and "but" when not; the
rating is good (both positive), bad (both negative) or ok (mixed).
"""

import math
import random
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

SEED = 0
DATA_DIR = Path(__file__).resolve().parents[2] / "data"

PUNCTUATION = ".?:+=,"
ALPHABET = "\n " + "abcdefghijklmnopqrstuvwxyz" + "0123456789" + PUNCTUATION  # 44 symbols

CITIES = ["quila", "varno", "orbek", "zanti", "melo", "pashu",
          "dorwin", "fexa", "lumo", "ryvek", "sorn", "jelka"]
FOODS = ["soup", "bread", "fish", "cake", "rice", "pie", "stew", "salad"]
FOOD_ADJECTIVES = {  # adjective -> positive?
    "tasty": True, "fresh": True, "crisp": True, "rich": True,
    "sweet": True, "juicy": True, "tender": True, "savory": True,
    "bland": False, "stale": False, "soggy": False, "salty": False,
    "cold": False, "burnt": False, "greasy": False, "dry": False,
}
SERVICE_NOUNS = ["host", "waiter", "staff", "cook"]
SERVICE_ADJECTIVES = {
    "kind": True, "quick": True, "polite": True, "friendly": True, "helpful": True, "cheerful": True,
    "rude": False, "slow": False, "grumpy": False, "lazy": False, "careless": False, "noisy": False,
}
RATINGS = ["good", "ok", "bad"]
NUM_NAMES = 48
NUMBER_RANGE = (10, 99)          # operands of additions
NUM_HELD_OUT_SUMS = 6            # sums that appear only in validation
COUNTS = {"fact": 8, "question": 4, "addition": 3000, "review": 2100, "story": 1300}
VALIDATION_SHARE = 0.1

KINDS = ("fact", "question", "addition", "review", "story")


def review_rating(food_positive: bool, service_positive: bool) -> str:
    """The rating a review must carry.

    >>> review_rating(True, False)
    'ok'
    """
    if food_positive and service_positive:
        return "good"
    if not food_positive and not service_positive:
        return "bad"
    return "ok"


def make_review(food, food_adjective, service, service_adjective):
    """The one true review for these four words.

    >>> make_review("soup", "tasty", "host", "rude")
    'review: the soup was tasty but the host was rude. rating: ok.'
    """
    good_food, good_service = FOOD_ADJECTIVES[food_adjective], SERVICE_ADJECTIVES[service_adjective]
    connective = "and" if good_food == good_service else "but"
    rating = review_rating(good_food, good_service)
    return (f"review: the {food} was {food_adjective} {connective} the {service} was "
            f"{service_adjective}. rating: {rating}.")


def disagreeing_reviews(n: int, seed: int = 0) -> list:
    """n "and" reviews whose two adjectives disagree (no true review does: its connective would be "but"), the
    food adjective good in every other one, each cut before its rating: [(text ending "rating: ", food is good)].
    Which adjective a model's rating follows then shows.

    >>> disagreeing_reviews(1)
    [('review: the stew was tender and the host was grumpy. rating: ', True)]
    """
    rng = random.Random(seed)
    pick = lambda words, good: rng.choice([w for w, g in words.items() if g == good])
    made = [make_review(rng.choice(FOODS), pick(FOOD_ADJECTIVES, i % 2 == 0), rng.choice(SERVICE_NOUNS),
                        pick(SERVICE_ADJECTIVES, i % 2 == 1)) for i in range(n)]          # each a "but" review
    return [(review.replace(" but ", " and ").split("rating: ")[0] + "rating: ", i % 2 == 0)
            for i, review in enumerate(made)]


def rating_of(review: str) -> str:
    """The rating word of a review line (anything after its closing full stop is ignored).

    >>> rating_of("review: the soup was tasty but the host was rude. rating: ok.\\n\\n")
    'ok'
    """
    start = review.index("rating: ") + len("rating: ")
    end = review.find(".", start)
    return review[start:] if end < 0 else review[start:end]


def random_review(rng: random.Random) -> str:
    """A review with a food, food adjective, service noun and service adjective drawn uniformly, in that order."""
    return make_review(rng.choice(FOODS), rng.choice(list(FOOD_ADJECTIVES)),
                       rng.choice(SERVICE_NOUNS), rng.choice(list(SERVICE_ADJECTIVES)))


def _invent_names(rng: random.Random, count: int, taken: set) -> list:
    """Pronounceable names from consonant-vowel patterns, always including `base`."""
    consonants, vowels = "bdfghjklmnprstvwxyz", "aeiou"
    patterns = ["cvcv", "cvcvc", "cvccv", "vcvc"]
    names = ["base"]
    while len(names) < count:
        name = "".join(rng.choice(consonants if p == "c" else vowels) for p in rng.choice(patterns))
        if name not in names and name not in taken:
            names.append(name)
    return names


@dataclass(frozen=True)
class World:
    names: tuple           # people, in generation order; names[0] == "base"
    home: dict             # name -> city
    held_out_sums: tuple   # additions with these sums appear only in validation
    train: tuple           # training lines (no trailing newline)
    val: tuple             # validation lines

    def text(self, split: str) -> str:
        """The split as one string, one document per line, each ending in a newline."""
        lines = {"train": self.train, "val": self.val}[split]
        return "".join(line + "\n" for line in lines)


@lru_cache(maxsize=None)
def build_world(seed: int = SEED) -> World:
    rng = random.Random(seed)
    names = _invent_names(rng, NUM_NAMES, taken=set(CITIES) | set(FOODS) | set(FOOD_ADJECTIVES) | set(SERVICE_ADJECTIVES))
    home = {name: rng.choice(CITIES) for name in names}
    held_out = tuple(sorted(rng.sample(range(2 * NUMBER_RANGE[0], 2 * NUMBER_RANGE[1] + 1), NUM_HELD_OUT_SUMS)))

    docs = []  # (kind, line)
    for name in names:
        docs += [("fact", f"{name} lives in {home[name]}.")] * COUNTS["fact"]
        docs += [("question", f"q: where does {name} live? a: {home[name]}.")] * COUNTS["question"]
    for _ in range(COUNTS["addition"]):
        a, b = rng.randint(*NUMBER_RANGE), rng.randint(*NUMBER_RANGE)
        docs.append(("addition", f"{a}+{b}={a + b}."))
    for _ in range(COUNTS["review"]):
        docs.append(("review", random_review(rng)))
    for _ in range(COUNTS["story"]):
        visitor, host = rng.sample(names, 2)
        if rng.random() < 0.5:
            line = f"story: {visitor} took the bus from {home[visitor]} to {home[host]} to visit {host}."
        else:
            line = (f"story: {visitor} made {rng.choice(FOODS)} for {host}, "
                    f"and {host} said it was {rng.choice(list(FOOD_ADJECTIVES))}.")
        docs.append(("story", line))
    rng.shuffle(docs)

    train, val = [], []
    for kind, line in docs:
        held = kind == "addition" and int(line[line.index("=") + 1:-1]) in held_out
        (val if held or rng.random() < VALIDATION_SHARE else train).append(line)
    return World(tuple(names), home, held_out, tuple(train), tuple(val))


_PATTERNS = {
    "fact": re.compile(r"([a-z]+) lives in ([a-z]+)\."),
    "question": re.compile(r"q: where does ([a-z]+) live\? a: ([a-z]+)\."),
    "addition": re.compile(r"([1-9][0-9]*)\+([1-9][0-9]*)=(0|[1-9][0-9]*)\."),
    "review": re.compile(r"review: the ([a-z]+) was ([a-z]+) (and|but) the ([a-z]+) was ([a-z]+)\. "
                         r"rating: ([a-z]+)\."),
    "bus": re.compile(r"story: ([a-z]+) took the bus from ([a-z]+) to ([a-z]+) to visit ([a-z]+)\."),
    "meal": re.compile(r"story: ([a-z]+) made ([a-z]+) for ([a-z]+), and ([a-z]+) said it was ([a-z]+)\."),
}


def classify(line: str):
    """The kind of a well-formed line and its regex match, or (None, None).

    Well-formed means: it matches a template and every slot holds a word of
    the right class (a known person, city, food, adjective, ...)."""
    world = build_world()
    people, cities = set(world.names), set(CITIES)
    for kind, pattern in _PATTERNS.items():
        m = pattern.fullmatch(line)
        if not m:
            continue
        g = m.groups()
        ok = {
            "fact": lambda: g[0] in people and g[1] in cities,
            "question": lambda: g[0] in people and g[1] in cities,
            "addition": lambda: all(NUMBER_RANGE[0] <= int(x) <= NUMBER_RANGE[1] for x in g[:2]),
            "review": lambda: (g[0] in FOODS and g[1] in FOOD_ADJECTIVES and g[3] in SERVICE_NOUNS
                               and g[4] in SERVICE_ADJECTIVES and g[5] in RATINGS),
            "bus": lambda: g[0] in people and g[3] in people and g[0] != g[3] and {g[1], g[2]} <= cities,
            "meal": lambda: (g[0] in people and g[2] in people and g[0] != g[2] and g[1] in FOODS
                             and g[3] == g[2] and g[4] in FOOD_ADJECTIVES),
        }[kind]()
        return (kind, m) if ok else (None, None)
    return None, None


def check_line(line: str) -> tuple:
    """(well_formed, true) for one line of text, without its newline.

    >>> check_line("base lives in " + build_world().home["base"] + ".")
    (True, True)
    >>> check_line("review: the soup was tasty and the host was rude. rating: good.")
    (True, False)
    >>> check_line("review: the soup was")
    (False, False)
    >>> check_line("5+3=8.")         # true, but the world only ever writes two-digit operands
    (False, False)
    """
    kind, m = classify(line)
    if kind is None:
        return False, False
    g, home = m.groups(), build_world().home
    true = {
        "fact": lambda: home[g[0]] == g[1],
        "question": lambda: home[g[0]] == g[1],
        "addition": lambda: int(g[0]) + int(g[1]) == int(g[2]),
        "review": lambda: make_review(g[0], g[1], g[3], g[4]) == line,
        "bus": lambda: home[g[0]] == g[1] and home[g[3]] == g[2],
        "meal": lambda: True,
    }[kind]()
    return True, true


NUMBER = "<number>"     # a slot of _templates(): a whole number written without leading zeros


@lru_cache(maxsize=None)
def _templates() -> tuple:
    """The six line templates of `_PATTERNS` as parts: a literal string, a set of words, or NUMBER."""
    people, cities, operands = frozenset(build_world().names), frozenset(CITIES), frozenset(
        str(n) for n in range(NUMBER_RANGE[0], NUMBER_RANGE[1] + 1))
    foods, food_adj = frozenset(FOODS), frozenset(FOOD_ADJECTIVES)
    return (
        (people, " lives in ", cities, "."),
        ("q: where does ", people, " live? a: ", cities, "."),
        (operands, "+", operands, "=", NUMBER, "."),
        ("review: the ", foods, " was ", food_adj, " ", frozenset(("and", "but")), " the ",
         frozenset(SERVICE_NOUNS), " was ", frozenset(SERVICE_ADJECTIVES), ". rating: ", frozenset(RATINGS), "."),
        ("story: ", people, " took the bus from ", cities, " to ", cities, " to visit ", people, "."),
        ("story: ", people, " made ", foods, " for ", people, ", and ", people, " said it was ", food_adj, "."),
    )


def _continuations(text: str, parts: tuple) -> set:
    """The characters that can follow `text` inside a line of these parts ("" for: the parts are complete)."""
    if not parts:
        return {""} if text == "" else set()
    part, rest = parts[0], parts[1:]
    if part == NUMBER:
        digits = re.match(r"[0-9]*", text).group()
        if digits.startswith("0") and digits != "0":
            return set()
        if digits == text:                            # the text ends inside the number (or before it)
            more = set() if digits == "0" else set("0123456789")     # nothing follows a leading zero
            return more | (_continuations("", rest) if digits else set())
        return _continuations(text[len(digits):], rest)
    found = set()
    for word in ([part] if isinstance(part, str) else part):
        if text.startswith(word):
            found |= _continuations(text[len(word):], rest)
        elif word.startswith(text):
            found.add(word[len(text)])
    return found


@lru_cache(maxsize=1 << 17)     # a line is read one prefix at a time, and lines share their first characters
def next_characters(prefix: str) -> frozenset:
    """The characters that keep `prefix` (the start of a line) inside the world's templates and word classes;
    a newline is among them when the prefix completes a template.  The stories' rules across slots (the two
    people differ; the guest is the one who speaks) are left to `check_line`: a line that breaks one of them
    stays inside the templates here, at every character, whether it was read or written.

    >>> sorted(next_characters("review: the soup was t"))
    ['a', 'e']
    >>> "\\n" in next_characters("28+55=83."), "\\n" in next_characters("28+55=83")
    (True, False)
    """
    found = set().union(*(_continuations(prefix, t) for t in _templates()))
    if "" in found:                                    # the prefix is a whole line of some template
        found = (found - {""}) | {"\n"}
    return frozenset(found)


def template_of(text: str) -> str:
    """The kind of line that a line's first characters choose ("review:", "q:", "story:", a digit, else a fact),
    whether or not the rest is well-formed."""
    for start, kind in (("review:", "review"), ("q:", "question"), ("story:", "story")):
        if text.startswith(start):
            return kind
    return "addition" if text[:1].isdigit() else "fact"


def first_exit(line: str):
    """The index of the first character of `line` (followed by its newline) that no line of the world's templates
    could have there (`next_characters`), or None when the line fits a template: where a written line left them.
    A line that fits may still break a story's rule across slots (`check_line` decides well-formedness)."""
    text = line + "\n"
    for i, char in enumerate(text):
        if char not in next_characters(text[:i]):
            return i
    return None


@lru_cache(maxsize=1 << 17)
def kind_of(line: str) -> str:
    """The document kind of a corpus line (stories of both templates are 'story')."""
    kind, _ = classify(line)
    return "story" if kind in ("bus", "meal") else kind


def line_entropy_bits() -> dict:
    """Entropy in bits of one line of each kind, given its kind, under the generator.

    Only the free choices count: the name of a fact (its city follows), two
    operands (their sum follows), four review words (connective and rating
    follow), and for stories one bit for the template plus its free slots."""
    n, f, fa, s, sa = NUM_NAMES, len(FOODS), len(FOOD_ADJECTIVES), len(SERVICE_NOUNS), len(SERVICE_ADJECTIVES)
    operands = NUMBER_RANGE[1] - NUMBER_RANGE[0] + 1
    return {
        "fact": math.log2(n),
        "question": math.log2(n),
        "addition": 2 * math.log2(operands),
        "review": math.log2(f * fa * s * sa),
        "story": 1 + 0.5 * math.log2(n * (n - 1)) + 0.5 * math.log2(n * (n - 1) * f * fa),
    }


def _kind_bits() -> dict:
    """-log2 P(kind): what choosing the kind of a line costs (facts and questions are written once per person)."""
    docs = {kind: COUNTS[kind] * (NUM_NAMES if kind in ("fact", "question") else 1) for kind in KINDS}
    return {kind: -math.log2(docs[kind] / sum(docs.values())) for kind in KINDS}


def line_price_bits(line: str) -> float:
    """Bits the generator itself pays for this line: -log2 of the probability that it writes it.  The kind,
    then the free choices (`line_entropy_bits`; a story pays for its own template's slots: a bus story has no
    food and adjective); what the choices decide (a city, a sum, a rating) costs nothing.

    >>> round(line_price_bits("poya lives in sorn."), 2)    # which kind of line 4.18 + which of 48 people 5.58
    9.77
    """
    kind = kind_of(line)
    if kind is None:
        raise ValueError(f"not a line of the mini internet: {line!r}")
    if kind != "story":
        return _kind_bits()[kind] + line_entropy_bits()[kind]
    people = math.log2(NUM_NAMES * (NUM_NAMES - 1))
    meal = math.log2(len(FOODS) * len(FOOD_ADJECTIVES)) if classify(line)[0] == "meal" else 0.0
    return _kind_bits()["story"] + 1 + people + meal


def entropy_floor() -> dict:
    """Bits per character that a model knowing the generator exactly would pay on average over the
    generator's own lines (its entropy), by kind and overall: a lower bound for the expected cost of lines
    drawn from the generator, not for any particular set of lines (`evals.generator_price` prices those).

    A line costs -log2 P(kind) to start plus its entropy given the kind; it
    is spread over its characters and the newline that ends it."""
    w = build_world()
    docs = {kind: COUNTS[kind] * (NUM_NAMES if kind in ("fact", "question") else 1) for kind in KINDS}
    chars = {kind: [] for kind in KINDS}
    for line in w.train + w.val:
        chars[kind_of(line)].append(len(line) + 1)
    mean_chars = {kind: sum(c) / len(c) for kind, c in chars.items()}
    bits = {kind: h + _kind_bits()[kind] for kind, h in line_entropy_bits().items()}
    floor = {kind: bits[kind] / mean_chars[kind] for kind in KINDS}
    floor["all"] = (sum(docs[k] * bits[k] for k in KINDS) / sum(docs[k] * mean_chars[k] for k in KINDS))
    return floor


@lru_cache(maxsize=None)
def fact_world(people: int, seed: int = SEED + 1) -> dict:
    """{name: city} of a world of facts only, far larger than the mini internet's 48 people if asked: names
    invented and homes drawn as `build_world` does (another seed, so that it is another world).

    >>> home = fact_world(1000); len(home), len(set(home)), set(home.values()) == set(CITIES)
    (1000, 1000, True)
    """
    rng = random.Random(seed)
    names = _invent_names(rng, people, taken=set(CITIES))
    return {name: rng.choice(CITIES) for name in names}


def fact_text(home: dict, shuffles: int = 8, seed: int = SEED) -> str:
    """Every fact of `home` as a line (`name lives in city.`), `shuffles` times, each time in another order: the
    whole training text of a facts-only world, one line per fact per shuffle."""
    rng, lines = random.Random(seed), [f"{name} lives in {city}." for name, city in home.items()]
    text = []
    for _ in range(shuffles):
        rng.shuffle(lines)
        text += lines
    return "".join(line + "\n" for line in text)


def write_data(directory: Path = DATA_DIR, seed: int = SEED) -> list:
    """Write train.txt and val.txt; return the paths written."""
    world = build_world(seed)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for split in ("train", "val"):
        path = directory / f"{split}.txt"
        path.write_bytes(world.text(split).encode("ascii"))
        paths.append(path)
    return paths


def load_text(split: str) -> str:
    """The committed text of a split ('train' or 'val')."""
    if split not in ("train", "val"):
        raise ValueError(f"unknown split {split!r}: expected 'train' or 'val'")
    return (DATA_DIR / f"{split}.txt").read_text(encoding="ascii")


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else DATA_DIR
    for path in write_data(out):
        print(f"wrote {path} ({path.stat().st_size:,} bytes)")
