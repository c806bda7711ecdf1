"""Byte pair encoding (BPE): learn merges of frequent adjacent pairs, then apply them in order.

Training (Sennrich et al. 2016, as used by GPT-2):

1. Pre-tokenize: cut the text into chunks with `SPLIT_PATTERN` (a space sticks
   to the start of the next word; letters, digits and punctuation are separate
   chunks).  Merges never cross a chunk boundary.
2. Start from single symbols: characters, or UTF-8 bytes with `byte_level=True`.
3. Count adjacent pairs over all chunks, merge the most frequent pair
   everywhere, record the merge; repeat.  Ties go to the pair that occurs
   first in the text (`tie="first"`), or to the pair of smallest ids, the
   rule of HF `tokenizers` (`tie="smallest id"`: base symbols numbered in the
   order `symbol_order` sorts them, merged tokens in the order they are
   made).  Sennrich et al.'s subword-nmt has a third rule: the largest pair in
   string order.  A rule matters: in the mini internet about half of the
   first 300 merges are chosen among tied pairs.

    >>> tok = bpe_train("the car\\nthe cat\\nthe rat\\n", 3, pattern=SPACE_PATTERN)
    >>> tok.merges
    [('t', 'h'), ('th', 'e'), ('c', 'a')]
    >>> tok.tokens("the ox")
    ['the', ' ', 'o', 'x']
    >>> tok.decode(tok.encode("the cart"))
    'the cart'

Encoding applies the merges to each chunk in the order they were learned
(lowest rank first), so an unseen word falls back to known pieces and, at
worst, single symbols.  Character-level BPE can still meet a character it has
never seen (`encode` raises `UnknownTokenError`); byte-level BPE cannot.
"""

import re
from collections import Counter

from lib.data.tokenizers import Tokenizer, UnknownTokenError

# GPT-2's pre-tokenizer written with Python's `re` classes: [^\W\d_] is a letter
# (\p{L}), \d a digit (\p{N}), the third branch punctuation; runs of spaces keep
# their last space for the following word.
SPLIT_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""
# The textbook version: words and spaces are separate chunks (spaces never merge).
SPACE_PATTERN = r"\s+|\S+"


def pretokenize(text: str, pattern: str = SPLIT_PATTERN) -> list:
    """Cut text into the chunks BPE merges inside of.

    >>> pretokenize("zukun lives in quila.\\n95+42=137.")
    ['zukun', ' lives', ' in', ' quila', '.', '\\n', '95', '+', '42', '=', '137', '.']
    """
    return re.findall(pattern, text)


def merge(symbols: tuple, pair: tuple) -> tuple:
    """Replace every occurrence of `pair`, left to right, by the joined symbol.

    >>> merge(("a", "a", "a", "b"), ("a", "a"))
    ('aa', 'a', 'b')
    """
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            out.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return tuple(out)


def byte_level_char(symbol: str) -> str:
    """The printable character GPT-2's byte-level alphabet writes for a one-byte symbol: printable bytes
    stand for themselves, the other 68 (space, newline, ...) for the characters from U+0100 on, in byte
    order.  HF `tokenizers` numbers its alphabet in the order of these characters.

    >>> byte_level_char("a"), byte_level_char(" "), byte_level_char("\\n")
    ('a', 'Ġ', 'Ċ')
    """
    byte = ord(symbol)
    printable = lambda b: 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255
    if printable(byte):
        return chr(byte)
    return chr(256 + sum(1 for b in range(byte) if not printable(b)))


def pair_counts(words: list) -> dict:
    """{pair: count} over (symbols, frequency) words, in order of first occurrence.

    Words are listed in order of first appearance in the text, so the dict's
    insertion order is the order in which pairs first occur in the text.

    >>> pair_counts([(("l", "o", "w"), 3), (("l", "o"), 1)])
    {('l', 'o'): 4, ('o', 'w'): 3}
    """
    counts = {}
    for symbols, frequency in words:
        for pair in zip(symbols, symbols[1:]):
            counts[pair] = counts.get(pair, 0) + frequency
    return counts


class BPE(Tokenizer):
    """A trained BPE tokenizer: base symbols plus an ordered list of merges.  `BPE.train(text, vocab_size)`
    or `bpe_train(text, num_merges)` learns one."""

    def __init__(self, base: list, merges: list, merge_counts: list, pattern: str, byte_level: bool, tied=None):
        self.base, self.merges, self.merge_counts = list(base), list(merges), list(merge_counts)
        self.pattern, self.byte_level = pattern, byte_level
        self.ranks = {pair: rank for rank, pair in enumerate(self.merges)}
        # Two different merges can spell the same token ('a'+'bc', 'ab'+'c'); it gets one id.
        self.vocab = list(dict.fromkeys(self.base + [a + b for a, b in self.merges]))
        self.stoi = {token: i for i, token in enumerate(self.vocab)}
        self._cache = {}
        self.tied = tied    # from bpe_train: how many pairs shared the top count at each merge

    @classmethod
    def train(cls, text: str, vocab_size: int = None, pattern: str = SPLIT_PATTERN, byte_level: bool = False) -> "BPE":
        """`bpe_train` with vocab_size - (the base symbols) merges (None: until every chunk is one token).

        >>> len(BPE.train("the car\\nthe cat\\n", 8, pattern=SPACE_PATTERN))   # 7 characters + 1 merge
        8
        """
        base = 256 if byte_level else len(set(text))
        if vocab_size is not None and vocab_size < base:
            raise ValueError(f"vocab_size={vocab_size} is smaller than the {base} base symbols")
        return bpe_train(text, None if vocab_size is None else vocab_size - base, pattern, byte_level)

    def first(self, k: int) -> "BPE":
        """The tokenizer after its first k merges (what training with num_merges=k gives)."""
        if not 0 <= k <= len(self.merges):
            raise ValueError(f"k={k} is outside 0..{len(self.merges)} (the merges this tokenizer has)")
        return BPE(self.base, self.merges[:k], self.merge_counts[:k], self.pattern, self.byte_level)

    def _symbols(self, chunk: str) -> tuple:
        return tuple(bytes([b]) for b in chunk.encode("utf-8")) if self.byte_level else tuple(chunk)

    def encode_chunk(self, chunk: str) -> tuple:
        """Apply merges to one chunk, always the lowest-ranked pair present first."""
        if chunk not in self._cache:
            symbols = self._symbols(chunk)
            while len(symbols) > 1:
                pair = min(zip(symbols, symbols[1:]), key=lambda p: self.ranks.get(p, len(self.ranks)))
                if pair not in self.ranks:
                    break
                symbols = merge(symbols, pair)
            self._cache[chunk] = symbols
        return self._cache[chunk]

    def tokens(self, text: str) -> list:
        """The pieces of `text` (str, or bytes when byte-level); never fails."""
        return [token for chunk in pretokenize(text, self.pattern) for token in self.encode_chunk(chunk)]

    def encode(self, text: str) -> list:
        ids = []
        for token in self.tokens(text):
            if token not in self.stoi:  # only characters outside the training text get here
                offset = text.index(token)
                raise UnknownTokenError(f"unknown character {token!r} at offset {offset}; character-level BPE "
                                        f"knows only the {len(self.base)} characters of its training text")
            ids.append(self.stoi[token])
        return ids

    def decode(self, ids) -> str:
        pieces = [self.vocab[int(i)] for i in ids]
        return b"".join(pieces).decode("utf-8", errors="replace") if self.byte_level else "".join(pieces)


def bpe_train(text: str, num_merges: int = None, pattern: str = SPLIT_PATTERN, byte_level: bool = False,
              tie: str = "first", symbol_order=None) -> BPE:
    """Learn up to `num_merges` merges (None: until every chunk is one token).

    Training stops early when no pair is left, so `len(tok.merges)` may be
    smaller than `num_merges`.  `tok.tied[k]` is how many pairs shared the
    top count when merge k was chosen (1: no tie).  Ties go to the pair that
    occurs first in the text (tie="first") or to the pair of smallest ids
    (tie="smallest id"; the base symbols are numbered in the order
    `symbol_order` sorts them, by default their own order).

    >>> tok = bpe_train("low low low lower newest newest", 3, pattern=SPACE_PATTERN)
    >>> tok.merges, tok.merge_counts
    ([('l', 'o'), ('lo', 'w'), ('n', 'e')], [4, 4, 2])
    >>> tok.tokens("lowest")
    ['low', 'e', 's', 't']
    """
    if num_merges is not None and (not isinstance(num_merges, int) or num_merges < 0):
        raise ValueError(f"num_merges must be a non-negative integer or None, got {num_merges!r}")
    if not text:
        raise ValueError("cannot train BPE on empty text")
    tok = BPE([], [], [], pattern, byte_level)
    # Each distinct chunk once, with its frequency, in order of first appearance.
    words = [(tok._symbols(chunk), n) for chunk, n in Counter(pretokenize(text, pattern)).items()]
    base = [bytes([b]) for b in range(256)] if byte_level else sorted({s for w, _ in words for s in w})
    if tie not in ("first", "smallest id"):
        raise ValueError(f'tie must be "first" or "smallest id", got {tie!r}')
    ids = {symbol: i for i, symbol in enumerate(sorted(base, key=symbol_order))}
    merges, merge_counts, tied = [], [], []
    while num_merges is None or len(merges) < num_merges:
        counts = pair_counts(words)
        if not counts:
            break  # every chunk is a single token
        top = max(counts.values())
        candidates = [pair for pair, n in counts.items() if n == top]     # in order of first occurrence
        pair = candidates[0] if tie == "first" else min(candidates, key=lambda p: (ids[p[0]], ids[p[1]]))
        merges.append(pair)
        merge_counts.append(top)
        tied.append(len(candidates))
        ids.setdefault(pair[0] + pair[1], len(ids))
        words = [(merge(w, pair) if len(w) > 1 else w, n) for w, n in words]
    return BPE(base, merges, merge_counts, pattern, byte_level, tied)
