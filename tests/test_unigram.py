"""Unigram tokenization: exact worked examples, Viterbi against brute force, sampling, EM training."""

import itertools
import math
import random
from collections import Counter
from fractions import Fraction as F

import pytest

from lib.data import bpe, world
from lib.data.unigram import Unigram, em_step, pieces_of, seed_vocabulary, sentencepiece_unigram, unigram_train

LECTURE = {"a": F(1, 8), "b": F(1, 8), "c": F(1, 4), "ab": F(1, 2)}


def brute_force(model: Unigram, word: str) -> dict:
    """{pieces: probability} by trying every way to cut the word (2 ** (n - 1) of them)."""
    out = {}
    for cuts in itertools.product([False, True], repeat=len(word) - 1):
        pieces, start = [], 0
        for i, cut in enumerate(cuts, start=1):
            if cut:
                pieces.append(word[start:i])
                start = i
        pieces.append(word[start:])
        if all(p in model.probabilities for p in pieces):
            out[tuple(pieces)] = math.prod(model.probabilities[p] for p in pieces)
    return out


def test_ababc_likelihood_is_4_27_not_4_9():
    model = Unigram.from_counts(Counter(["ab", "ab", "c"]))
    assert model.probabilities == {"ab": F(2, 3), "c": F(1, 3)}
    pieces, p = model.viterbi("ababc")
    assert pieces == ("ab", "ab", "c") and p == F(4, 27) and p != F(4, 9)


def test_abc_under_the_four_piece_vocabulary():
    model = Unigram(LECTURE)
    assert model.segmentations("abc") == [(("ab", "c"), F(1, 8)), (("a", "b", "c"), F(1, 256))]
    assert model.viterbi("abc") == (("ab", "c"), F(1, 8))


def test_ababc_has_four_segmentations():
    model = Unigram(LECTURE)
    segs = model.segmentations("ababc")
    assert len(segs) == 4
    assert [p for _, p in segs] == [F(1, 16), F(1, 512), F(1, 512), F(1, 16384)]
    assert model.forward("ababc")[-1] == sum(p for _, p in segs)


@pytest.mark.parametrize("seed", range(25))
def test_viterbi_equals_brute_force_on_random_vocabularies(seed):
    rng = random.Random(seed)
    alphabet = "abc"[: rng.randint(2, 3)]
    pieces = set(alphabet) | {"".join(rng.choices(alphabet, k=rng.randint(2, 4))) for _ in range(rng.randint(1, 8))}
    weights = {p: rng.randint(1, 20) for p in sorted(pieces)}
    model = Unigram({p: F(w, sum(weights.values())) for p, w in weights.items()})
    for _ in range(10):
        word = "".join(rng.choices(alphabet, k=rng.randint(1, 9)))
        expected = brute_force(model, word)
        best, p = model.viterbi(word)
        assert p == max(expected.values()) and expected[best] == p
        assert dict(model.segmentations(word)) == expected
        assert model.forward(word)[-1] == sum(expected.values())


def test_sampling_follows_the_segmentation_probabilities():
    model = Unigram(LECTURE)
    rng = random.Random(0)
    draws = Counter(model.sample("ababc", rng) for _ in range(4000))
    segs = dict(model.segmentations("ababc"))
    total = sum(segs.values())
    for pieces, p in segs.items():
        assert abs(draws[pieces] / 4000 - float(p / total)) < 0.02
    uniform = Counter(model.sample("ababc", rng, alpha=0.0) for _ in range(4000))
    assert all(abs(n / 4000 - 0.25) < 0.03 for n in uniform.values()) and len(uniform) == 4


def test_em_never_lowers_the_likelihood():
    words = Counter({"low": 5, "lower": 2, "newest": 6, "widest": 3})
    seed = seed_vocabulary(words, 50)
    model = Unigram({p: n / sum(seed.values()) for p, n in seed.items()})
    likelihoods = []
    for _ in range(6):
        model, log_likelihood = em_step(model, words)
        likelihoods.append(log_likelihood)
    assert all(b >= a - 1e-9 for a, b in zip(likelihoods, likelihoods[1:]))


def test_training_on_the_world_reaches_the_vocabulary_size():
    chunks = Counter(bpe.pretokenize(world.load_text("train")))
    rounds = []
    model = unigram_train(chunks, vocab_size=150, history=rounds)
    sizes = [r["pieces"] for r in rounds]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > sizes[-1] and len(rounds) >= 3
    assert rounds[-1]["log_likelihood"] <= rounds[1]["log_likelihood"]    # pruning to 150 costs likelihood
    characters = {ch for chunk in chunks for ch in chunk}
    assert len(model) == 150 and characters <= set(model.probabilities)
    assert abs(sum(model.probabilities.values()) - 1) < 1e-9
    for chunk in chunks:
        assert "".join(model.viterbi(chunk)[0]) == chunk


def test_bad_input_gives_clear_errors():
    with pytest.raises(ValueError, match="positive probability"):
        Unigram({"a": F(0)})
    with pytest.raises(ValueError, match="cannot segment 'abx'"):
        Unigram(LECTURE).viterbi("abx")
    with pytest.raises(ValueError, match="cannot segment 'abx'"):
        Unigram(LECTURE).sample("abx", random.Random(0))
    with pytest.raises(ValueError, match="smaller than the 3 characters"):
        unigram_train(Counter({"abc": 2}), vocab_size=2)


def test_sentencepiece_unigram_gives_the_same_pieces_every_run():
    lines = [line for line in world.build_world().train[:2000]]
    first, again = (pieces_of(sentencepiece_unigram(lines, vocab_size=120)) for _ in range(2))
    assert first == again and len(first) == 120 and " the" not in first     # " the" is always followed by a space
