"""Measuring tokenizers on the mini internet (section 01).

- `tokens_per_line`: how many tokens a tokenizer cuts a line into, on average;
- `cost_ratios`: what character-level tokens cost against another tokenizer, in tokens and in attention;
- `conditional_segmentations`: a unigram model's segmentations of one word, with P(segmentation | word).
"""


def tokens_per_line(tokenizer, lines: list) -> float:
    """Mean number of `tokenizer.tokens(line + "\\n")` over lines: each line with its closing newline.

    >>> from lib.data import bpe
    >>> tokens_per_line(bpe.bpe_train("ab ab\\n", 1, pattern=bpe.SPACE_PATTERN), ["ab ab", "ab"])   # 4 and 2
    3.0
    """
    return sum(len(tokenizer.tokens(line + "\n")) for line in lines) / len(lines)


def cost_ratios(lines: list, tokenizer) -> tuple:
    """(tokens, attention matrix elements): characters / `tokenizer`'s tokens over these lines, each line
    with its closing newline; a line attends only to itself, so its attention matrix has n² elements.

    >>> from lib.data import bpe
    >>> cost_ratios(["ab", "abab"], bpe.bpe_train("ab\\n", 1))   # characters 3, 5; tokens 2 (ab ⏎), 3 (ab ab ⏎)
    (1.6, 2.6153846153846154)
    """
    chars = [len(line) + 1 for line in lines]
    pieces = [len(tokenizer.tokens(line + "\n")) for line in lines]
    return sum(chars) / sum(pieces), sum(n * n for n in chars) / sum(n * n for n in pieces)


def conditional_segmentations(model, word: str) -> list:
    """[(pieces, P(pieces | word))] for every segmentation of `word` by a unigram model, most probable first:
    each segmentation's probability divided by the word's total over all of them.

    >>> from lib.data.unigram import Unigram
    >>> conditional_segmentations(Unigram({"a": 0.25, "b": 0.25, "ab": 0.5}), "ab")   # 0.5 and 0.0625
    [(('ab',), 0.8888888888888888), (('a', 'b'), 0.1111111111111111)]
    """
    segmentations = model.segmentations(word)
    total = sum(p for _, p in segmentations)
    return [(pieces, float(p / total)) for pieces, p in segmentations]
