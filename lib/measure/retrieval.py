"""Retrieval for section 07: a datastore of the world's fact lines, two retrievers, and a reader that answers from
what they find.

    store = datastore()                                   # {name: "zukun lives in quila."}
    lexical = TfIdfRetriever(store)                       # words weighted by rarity
    dense = DualEncoder()                                 # lib.nn.dual_encoder: trained on question/fact pairs
    hits = lexical.search(question("zukun"), k=1)         # [(name, score), ...], best first
    answer = read(reader, [store[n] for n, _ in hits], "zukun")   # " quila."
    got = read_top1(reader, store, names, lexical.search)          # {name: answer}, every question at once
    answer_accuracy(got, world.build_world().home)                 # share answered with the city given

A question and its fact share exactly one word, the name.  The question's
other words (`where`, `does`, ...) are in no line of the store and `lives`,
`in` are in every line: TF-IDF weighs all of them 0 (a word the store does
not have counts 0), so it retrieves by the name alone.  The dual encoder
(DPR's recipe with one shared encoder instead of two: embed the question,
embed every passage, take the largest dot product) must learn the same from
pairs: a mean of hashed character trigrams, trained with the in-batch
softmax (`contrastive_loss`) on the pairs of TRAIN_NAMES and tested on
HELD_OUT_NAMES, people it never saw.  Because both sides share the encoder, a
trigram of an unseen name maps to the same vector in question and fact.

The dual encoder's pairs are drawn by `name_sampler`: the training people
uniformly, or (with a decay) some far more often than others, to measure how
retrieval depends on how often a name was seen (`pair_counts`).

The reader is a char model given the retrieved line before the question
(`reader_prompt`); `read` returns its greedy answer; `reader_accuracies` and
`two_passages` are section 07's tables of what it reads.
"""

import math
import random
from collections import Counter

from lib.data import world
from lib.measure.answers import answers, fact_completion
from lib.nn.dual_encoder import trigrams

def _names() -> tuple:
    return world.build_world().names


HELD_OUT_NAMES = _names()[-12:]            # never in the dual encoder's pairs, never asked in the reader's fine-tuning
TRAIN_NAMES = _names()[:-12]


def fact(name: str, city: str) -> str:
    """The datastore's line for a person.

    >>> fact("zukun", "quila")
    'zukun lives in quila.'
    """
    return f"{name} lives in {city}."


def question(name: str) -> str:
    """The world's question about a person, up to the answer.

    >>> question("zukun")
    'q: where does zukun live? a:'
    """
    return f"q: where does {name} live? a:"


def datastore(moves: dict = None) -> dict:
    """{name: fact line} for every person of the world; `moves` ({name: new city}) edits the store, not the model."""
    moves = moves or {}
    unknown = set(moves) - set(_names()) | {city for city in moves.values() if city not in world.CITIES}
    if unknown:
        raise ValueError(f"unknown people or cities in moves: {sorted(unknown)}")
    home = {**world.build_world().home, **moves}
    return {name: fact(name, home[name]) for name in _names()}


def words(text: str) -> list:
    """The words of a text, punctuation dropped.

    >>> words("q: where does zukun live? a:")
    ['q', 'where', 'does', 'zukun', 'live', 'a']
    """
    return [w for w in "".join(ch if ch.isalnum() else " " for ch in text).split()]


class TfIdfRetriever:
    """Cosine similarity of tf-idf vectors; idf = log(N / document frequency): a word in every line weighs 0, and
    so does a query word no line has."""

    def __init__(self, store: dict):
        self.keys = list(store)
        counts = [Counter(words(line)) for line in store.values()]
        frequency = Counter(w for c in counts for w in c)
        self.idf = {w: math.log(len(counts) / n) for w, n in frequency.items()}
        self.vectors = [self._vector(c) for c in counts]

    def _vector(self, counts: Counter) -> dict:
        v = {w: n * self.idf.get(w, 0.0) for w, n in counts.items()}
        norm = math.sqrt(sum(x * x for x in v.values())) or 1.0
        return {w: x / norm for w, x in v.items()}

    def search(self, query: str, k: int = 1) -> list:
        q = self._vector(Counter(words(query)))
        scores = [sum(q.get(w, 0.0) * x for w, x in v.items()) for v in self.vectors]
        best = sorted(range(len(scores)), key=lambda i: -scores[i])[:k]
        return [(self.keys[i], scores[i]) for i in best]


def retrieval_accuracy(search, names, store: dict) -> float:
    """Share of `names` whose question retrieves (top-1) that person's own line of `store`."""
    return sum(search(question(name))[0][0] == name for name in names) / len(names)


def reader_prompt(passages: list, name: str) -> str:
    """The retrieved lines, one per line, then the question: what the reader reads.

    >>> reader_prompt(["zukun lives in quila.", "ebot lives in jelka."], "zukun")
    '\\nzukun lives in quila.\\nebot lives in jelka.\\nq: where does zukun live? a:'
    """
    return "".join(f"\n{p}" for p in passages) + "\n" + question(name)


def read(model, passages: list, name: str) -> str:
    """The model's greedy answer to `name`'s question after these passages (" city." when it answers well)."""
    return answers(model, [reader_prompt(passages, name)])[0]


def read_top1(model, store: dict, names, search) -> dict:
    """{name: the model's greedy answer} with the line of `store` that `search` (question -> [(name, score), ...],
    best first) ranks first put before each name's question; all questions answered in one batched call."""
    prompts = [reader_prompt([store[search(question(name))[0][0]]], name) for name in names]
    return dict(zip(names, answers(model, prompts)))


def answer_accuracy(got: dict, cities: dict) -> float:
    """Share of the people of `got` ({name: answer}) answered " city." with their city in `cities`.

    >>> answer_accuracy({"zukun": " quila.", "ebot": " melo."}, {"zukun": "quila", "ebot": "jelka"})
    0.5
    """
    return sum(got[name] == f" {cities[name]}." for name in got) / len(got)


def counterfactual_example(name: str, rng: random.Random) -> tuple:
    """(passages, the city to answer): `name`'s line with a random city."""
    city = rng.choice(world.CITIES)
    return [fact(name, city)], city


def copy_rate(model, names, seed: int = 1) -> float:
    """Share of `names` the reader answers with the city of their (made-up) passage."""
    rng = random.Random(seed)
    examples = [(name, *counterfactual_example(name, rng)) for name in names]
    got = answers(model, [reader_prompt(passages, name) for name, passages, _ in examples])
    return sum(answer == f" {city}." for answer, (_, _, city) in zip(got, examples)) / len(names)


def name_weights(decay: float = None, seed: int = 0) -> dict:
    """{training person: weight of being drawn into a batch}: all 1 without a decay; with one, decay ** rank, the
    ranks an order of TRAIN_NAMES shuffled by seed (so that popularity is not tied to a name).

    >>> w = name_weights(0.5, seed=3); sorted(w.values())[-2:], len(w)
    ([0.5, 1.0], 36)
    """
    if decay is None:
        return {name: 1.0 for name in TRAIN_NAMES}
    order = list(TRAIN_NAMES)
    random.Random(seed).shuffle(order)
    return {name: decay ** rank for rank, name in enumerate(order)}


def name_sampler(config: dict):
    """A function giving the names of one batch of the dual encoder's pairs: config["batch_size"] distinct training
    people, uniformly (random.sample) or, with config["name_decay"], weighted by `name_weights` (without
    replacement: the people with the largest rand ** (1 / weight), Efraimidis and Spirakis's draw)."""
    rng, size = random.Random(config["seed"]), config["batch_size"]
    if config.get("name_decay") is None:
        return lambda: rng.sample(TRAIN_NAMES, size)
    weights = name_weights(config["name_decay"], config["seed"])
    return lambda: sorted(TRAIN_NAMES, key=lambda n: -rng.random() ** (1 / weights[n]))[:size]


def pair_counts(config: dict) -> Counter:
    """How many of the dual encoder's training pairs were each person's (the sampler replayed, config["steps"]
    batches); people never drawn are absent."""
    draw = name_sampler(config)
    return Counter(name for _ in range(config["steps"]) for name in draw())


def name_trigrams_seen(name: str, texts, buckets: int) -> int:
    """How many of the trigram buckets of `name` (between spaces, as the question and the fact both write it) are
    buckets of a trigram of `texts` too: the part of the name an encoder trained on `texts` has trained.

    >>> name_trigrams_seen("zuko", ["q: where does zuka live? a:"], 4096)      # " zu", "zuk" shared; "uko", "ko " not
    2
    """
    seen = {t for text in texts for t in trigrams(text, buckets)}
    return sum(t in seen for t in trigrams(name, buckets))


def moved_homes(shift: int = 1) -> dict:
    """{name: the city `shift` places after their home in world.CITIES}: everyone moved."""
    home = world.build_world().home
    return {n: world.CITIES[(world.CITIES.index(c) + shift) % len(world.CITIES)] for n, c in home.items()}


def reader_accuracies(model, dense_search) -> dict:
    """Share of all people a model answers right: with no passage ("closed book"), after the line tf-idf finds,
    after the line `dense_search` finds, and after the line tf-idf finds in a store where everyone moved
    (`moved_homes`): answered with the new city ("moved: new") or the old one ("moved: old")."""
    home, store = world.build_world().home, datastore()
    people, moved = list(home), moved_homes()
    moved_store = datastore(moved)
    edited = read_top1(model, moved_store, people, TfIdfRetriever(moved_store).search)
    return {"closed book": answer_accuracy(fact_completion(model)["answers"], home),
            "tf-idf's line": answer_accuracy(read_top1(model, store, people, TfIdfRetriever(store).search), home),
            "dual encoder's line": answer_accuracy(read_top1(model, store, people, dense_search), home),
            "moved: new": answer_accuracy(edited, moved), "moved: old": answer_accuracy(edited, home)}


def two_passages(model) -> dict:
    """Lines before each person's question: their own and the next person's (`world`'s order, the last person's
    next is the first), in both orders, and the next person's line alone (a control: does the model check the
    name?): {order: (share answered with their own city, share answered with the other line's city, share
    answered with neither)}; the first two overlap where the two people live in the same city."""
    home, store = world.build_world().home, datastore()
    people = list(home)
    other = dict(zip(people, people[1:] + people[:1]))
    orders = {"own line first": lambda n: [store[n], store[other[n]]],
              "own line second": lambda n: [store[other[n]], store[n]],
              "other line only": lambda n: [store[other[n]]]}
    out = {}
    for order, passages in orders.items():
        got = dict(zip(people, answers(model, [reader_prompt(passages(n), n) for n in people])))
        neither = sum(got[n] not in (f" {home[n]}.", f" {home[other[n]]}.") for n in people) / len(people)
        out[order] = (answer_accuracy(got, home), answer_accuracy(got, {n: home[other[n]] for n in people}), neither)
    return out
