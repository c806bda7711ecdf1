"""Section 01's measurements of tokenizers count what they claim on cases small enough to count by hand."""

import math
from fractions import Fraction

from lib.data import bpe
from lib.data.unigram import Unigram
from lib.measure.tokenization import conditional_segmentations, cost_ratios, tokens_per_line

LINES = ["the cat", "the rat", "a cat"]


def test_tokens_per_line_counts_each_line_with_its_newline():
    characters = bpe.bpe_train("\n".join(LINES) + "\n", 0, pattern=bpe.SPACE_PATTERN)
    assert tokens_per_line(characters, LINES) == (8 + 8 + 6) / 3
    words = bpe.bpe_train("\n".join(LINES) + "\n", pattern=bpe.SPACE_PATTERN)   # every chunk one token
    assert tokens_per_line(words, LINES) == (4 + 4 + 4) / 3                    # word, space, word, newline


def test_cost_ratios_are_one_for_characters_and_square_the_lengths_for_attention():
    text = "\n".join(LINES) + "\n"
    assert cost_ratios(LINES, bpe.bpe_train(text, 0, pattern=bpe.SPACE_PATTERN)) == (1.0, 1.0)
    tokens, attention = cost_ratios(LINES, bpe.bpe_train(text, pattern=bpe.SPACE_PATTERN))
    assert tokens == 22 / 12 and attention == (64 + 64 + 36) / (16 + 16 + 16)


def test_conditional_segmentations_divide_by_the_words_total():
    lecture = Unigram({"a": Fraction(1, 8), "b": Fraction(1, 8), "c": Fraction(1, 4), "ab": Fraction(1, 2)})
    # ab | c: 1/2 · 1/4 = 32/256; a | b | c: 1/8 · 1/8 · 1/4 = 1/256
    assert conditional_segmentations(lecture, "abc") == [(("ab", "c"), 32 / 33), (("a", "b", "c"), 1 / 33)]
    assert math.isclose(sum(p for _, p in conditional_segmentations(lecture, "ababc")), 1.0)
    assert conditional_segmentations(lecture, "c") == [(("c",), 1.0)]
