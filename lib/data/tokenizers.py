"""The tokenizer interface, two fixed tokenizers for the mini internet (characters and words),
and the ids of the word vocabulary's special tokens.

Every tokenizer of the book (these two, `lib.bpe.BPE`, `lib.unigram.Unigram`)
is a `Tokenizer`: `train(text, vocab_size)` learns a vocabulary from text,
`tokens(text)` cuts text into pieces, `encode` gives their ids, `decode` the
text back, `len()` the vocabulary's size.

    >>> chars = CharTokenizer()
    >>> chars.decode(chars.encode("q: a."))
    'q: a.'
    >>> TOKENIZER.tokens("95+42=137.")
    ['95', '+', '42', '=', '137', '.']
    >>> CharTokenizer.train("abba").vocab
    ['a', 'b']

The default char and word tokenizers have closed vocabularies (the whole
world); text outside them raises `UnknownTokenError` naming the offending
character or word and where it is.
"""

import re
from functools import cached_property

from lib.data import world


class UnknownTokenError(ValueError):
    pass


def _where(text: str, offset: int) -> str:
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return f"at offset {offset} (line {line}, column {column})"


def _lookup(vocab: list, ids) -> list:
    """The tokens of these ids; an id outside the vocabulary is a ValueError that names it."""
    out = []
    for i in ids:
        if not 0 <= int(i) < len(vocab):
            raise ValueError(f"token id {int(i)} is outside the vocabulary (ids 0..{len(vocab) - 1})")
        out.append(vocab[int(i)])
    return out


class Tokenizer:
    """What every tokenizer does; subclasses set `vocab` (id -> token) and `stoi` (token -> id)."""

    @classmethod
    def train(cls, text: str, vocab_size: int = None) -> "Tokenizer":
        """A tokenizer whose vocabulary is learned from `text` (at most vocab_size tokens; None: no limit)."""
        raise NotImplementedError

    def tokens(self, text: str) -> list:
        raise NotImplementedError

    def encode(self, text: str) -> list:
        return [self.stoi[t] for t in self.tokens(text)]

    def decode(self, ids) -> str:
        return "".join(_lookup(self.vocab, ids))

    def __len__(self):
        return len(self.vocab)


def _no_limit(name: str, vocab_size):
    if vocab_size is not None:
        raise ValueError(f"a {name} vocabulary is every symbol of the text: vocab_size must be None, got {vocab_size}")


class CharTokenizer(Tokenizer):
    """One token per character of `world.ALPHABET` (44 symbols), or of the alphabet given."""

    def __init__(self, alphabet: str = world.ALPHABET):
        self.vocab = list(alphabet)
        self.stoi = {ch: i for i, ch in enumerate(self.vocab)}

    @classmethod
    def train(cls, text: str, vocab_size: int = None) -> "CharTokenizer":
        """Every character of `text`, sorted."""
        _no_limit("character", vocab_size)
        return cls("".join(sorted(set(text))))

    def tokens(self, text: str) -> list:
        return list(text)

    def encode(self, text: str) -> list:
        try:
            return [self.stoi[ch] for ch in text]
        except KeyError:
            offset = next(i for i, ch in enumerate(text) if ch not in self.stoi)
            raise UnknownTokenError(f"unknown character {text[offset]!r} {_where(text, offset)}; "
                                    f"the alphabet is {''.join(self.vocab)!r}") from None


# pad fills short sequences, mask is BERT's [MASK], bos starts a decoder, the
# sentinels <0>..<15> stand for dropped spans (T5), the mode tokens tag UL2's
# denoisers (R = regular spans, S = prefix LM, X = extreme spans).
NUM_SENTINELS = 16
SPECIAL_TOKENS = (["<pad>", "<mask>", "<bos>"] + [f"<{i}>" for i in range(NUM_SENTINELS)]
                  + ["[R]", "[S]", "[X]"])
WORD_PATTERN = re.compile(r"[a-z]+|[0-9]+|[.?:+=,]|\n| +|.", re.DOTALL)
_NO_SPACE_BEFORE = set(".?:,+=\n")
_NO_SPACE_AFTER = set("+=\n")


def sentinel(i: int) -> str:
    """The token that stands for the i-th dropped span.

    >>> sentinel(3)
    '<3>'
    """
    if not 0 <= i < NUM_SENTINELS:
        raise ValueError(f"sentinel index {i} out of range 0..{NUM_SENTINELS - 1}")
    return f"<{i}>"


def _words_of(text: str) -> set:
    return {t for t in WORD_PATTERN.findall(text) if t.strip()}


class WordTokenizer(Tokenizer):
    """Words, numbers and punctuation marks as tokens; spaces are implied.

    The default vocabulary is closed: every word the world can produce (all
    people, cities, numbers 0..198 and template words), plus the newline and
    `SPECIAL_TOKENS` first (so their ids are fixed: `PAD`, `MASK`, ...).
    `decode(encode(line)) == line` for every corpus line.
    """

    def __init__(self, words: set = None):
        self._words = words  # None: the world's words, gathered on first use

    @classmethod
    def train(cls, text: str, vocab_size: int = None) -> "WordTokenizer":
        """Every word, number and punctuation mark of `text`, after the special tokens and the newline."""
        _no_limit("word", vocab_size)
        return cls(_words_of(text))

    @cached_property
    def vocab(self) -> list:
        words = self._words
        if words is None:
            w = world.build_world()
            numbers = {str(n) for n in range(0, 2 * world.NUMBER_RANGE[1] + 1)}
            words = _words_of("\n".join(w.train + w.val)) | numbers | set(w.names) | set(world.CITIES)
        return SPECIAL_TOKENS + ["\n"] + sorted(words, key=lambda t: (t.isdigit(), len(t) if t.isdigit() else 0, t))

    @cached_property
    def stoi(self) -> dict:
        return {t: i for i, t in enumerate(self.vocab)}

    def __getitem__(self, token: str) -> int:
        """The id of one token: `tok["<mask>"]`."""
        if token not in self.stoi:
            raise UnknownTokenError(f"unknown token {token!r}")
        return self.stoi[token]

    def tokens(self, text: str) -> list:
        out = []
        for m in WORD_PATTERN.finditer(text):
            token = m.group()
            if token.strip(" ") == "" and token != "\n":
                continue  # spaces separate words; they are not tokens
            if token not in self.stoi:
                kind = "word" if re.fullmatch(r"[a-z0-9]+", token) else "character"
                raise UnknownTokenError(f"unknown {kind} {token!r} {_where(text, m.start())}; "
                                        f"the vocabulary has {len(self)} tokens")
            out.append(token)
        return out

    def decode(self, ids) -> str:
        """Join tokens with the spacing rules of the corpus (`37+45=82.`, `a: quila.`)."""
        out = ""
        for token in _lookup(self.vocab, ids):
            if out and out[-1] not in _NO_SPACE_AFTER and token not in _NO_SPACE_BEFORE:
                out += " "
            out += token
        return out


# The word-level models' one tokenizer and the ids of its special tokens (fixed: the specials come first).
TOKENIZER = WordTokenizer()
PAD, MASK, BOS = (SPECIAL_TOKENS.index(token) for token in ("<pad>", "<mask>", "<bos>"))
SENTINELS = [SPECIAL_TOKENS.index(sentinel(i)) for i in range(NUM_SENTINELS)]
MODE_TOKENS = {mode: SPECIAL_TOKENS.index(f"[{mode}]") for mode in "RSX"}
NEWLINE_WORD = len(SPECIAL_TOKENS)  # the word id of "\n", the first ordinary token
FIRST_ORDINARY = len(SPECIAL_TOKENS)  # ids below this are specials; "\n", words, numbers, punctuation follow


CHARS = CharTokenizer()      # the mini internet's 44 characters: every char-level model of the book
