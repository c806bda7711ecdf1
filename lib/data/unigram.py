"""Unigram language-model tokenization (Kudo 2018, the default of SentencePiece).

Every piece has a probability; a segmentation of a word is a sequence of
pieces that spells it, and its probability is the product of theirs.  With
`fractions.Fraction` probabilities the arithmetic is exact:

    >>> from fractions import Fraction as F
    >>> model = Unigram({"a": F(1, 8), "b": F(1, 8), "c": F(1, 4), "ab": F(1, 2)})
    >>> model.segmentations("abc")
    [(('ab', 'c'), Fraction(1, 8)), (('a', 'b', 'c'), Fraction(1, 256))]
    >>> model.viterbi("ababc")
    (('ab', 'ab', 'c'), Fraction(1, 16))

Tokenizing takes the most probable segmentation (Viterbi); subword
regularization samples one instead.  Training (`unigram_train`) starts from a
large seed vocabulary of frequent substrings, estimates probabilities with EM
and repeatedly drops the pieces whose removal costs the least likelihood.
`sentencepiece_unigram` runs SentencePiece's own unigram trainer, the same way every time (section 01 compares
the two).
Words are short here (chunks of the mini internet), so plain products of
probabilities do not underflow and no log space is needed.
"""

import io
import math
from collections import Counter
from fractions import Fraction
from functools import cached_property

from lib.data.bpe import SPLIT_PATTERN, pretokenize
from lib.data.tokenizers import Tokenizer


def _power(p, alpha):
    return p if alpha == 1 else p ** alpha  # p ** 1.0 would turn an exact Fraction into a float


class Unigram(Tokenizer):
    """A unigram tokenizer: {piece: probability}; probabilities may be Fractions or floats.  Text is cut
    into chunks by `pattern` (as BPE cuts it), and each chunk is a word to segment."""

    def __init__(self, probabilities: dict, pattern: str = SPLIT_PATTERN):
        bad = {piece: p for piece, p in probabilities.items() if not p > 0 or not piece}
        if bad:
            raise ValueError(f"pieces need a non-empty string and a positive probability: {bad}")
        self.probabilities = dict(probabilities)
        self.max_length = max(map(len, self.probabilities), default=0)
        self.pattern = pattern

    @classmethod
    def train(cls, text: str, vocab_size: int, pattern: str = SPLIT_PATTERN) -> "Unigram":
        """`unigram_train` on the chunks of `text`, counted."""
        return cls(unigram_train(Counter(pretokenize(text, pattern)), vocab_size).probabilities, pattern)

    @cached_property
    def vocab(self) -> list:
        return list(self.probabilities)

    @cached_property
    def stoi(self) -> dict:
        return {piece: i for i, piece in enumerate(self.vocab)}

    @classmethod
    def from_counts(cls, counts: dict) -> "Unigram":
        """Probabilities proportional to counts, exact.

        >>> Unigram.from_counts(Counter(["ab", "ab", "c"])).probabilities
        {'ab': Fraction(2, 3), 'c': Fraction(1, 3)}
        """
        total = sum(counts.values())
        return cls({piece: Fraction(n, total) for piece, n in counts.items() if n > 0})

    def probability(self, pieces) -> float:
        """The product of the pieces' probabilities (0 if one is not in the vocabulary)."""
        return math.prod(self.probabilities.get(piece, 0) for piece in pieces)

    def _pieces_ending_at(self, word: str, end: int, exclude=None):
        for start in range(max(0, end - self.max_length), end):
            piece = word[start:end]
            if piece in self.probabilities and piece != exclude:
                yield start, piece, self.probabilities[piece]

    def segmentations(self, word: str) -> list:
        """Every segmentation of `word` with its probability, most probable first.

        Exponential in the word's length: for teaching on short words.
        >>> Unigram({"a": 0.5, "aa": 0.5}).segmentations("aa")
        [(('aa',), 0.5), (('a', 'a'), 0.25)]
        """
        ways = {0: [((), 1)]}  # prefix length -> segmentations of word[:length]
        for end in range(1, len(word) + 1):
            ways[end] = [(pieces + (piece,), p * q) for start, piece, q in self._pieces_ending_at(word, end)
                         for pieces, p in ways[start]]
        return sorted(ways[len(word)], key=lambda seg: -seg[1])

    def viterbi(self, word: str, exclude: str = None) -> tuple:
        """(pieces, probability) of the most probable segmentation (dynamic programming).

        Among equally probable ones it keeps the one with the longest last piece.
        `exclude` leaves one piece out (used when pruning).  Raises ValueError
        when no segmentation exists.
        """
        best = [((), 1)] + [None] * len(word)  # best[i]: best segmentation of word[:i]
        for end in range(1, len(word) + 1):
            for start, piece, q in self._pieces_ending_at(word, end, exclude):
                if best[start] is not None and (best[end] is None or best[start][1] * q > best[end][1]):
                    best[end] = (best[start][0] + (piece,), best[start][1] * q)
        if best[-1] is None:
            raise ValueError(f"cannot segment {word!r}: some character is in no piece of the vocabulary")
        return best[-1]

    def tokens(self, text: str) -> list:
        """Viterbi pieces of each chunk of `text` in turn."""
        return [piece for word in pretokenize(text, self.pattern) for piece in self.viterbi(word)[0]]

    def forward(self, word: str, alpha: float = 1.0) -> list:
        """forward[i] = total probability (each segmentation's probability ** alpha) of word[:i]."""
        total = [1] + [0] * len(word)
        for end in range(1, len(word) + 1):
            total[end] = sum(total[start] * _power(q, alpha) for start, _, q in self._pieces_ending_at(word, end))
        return total

    def sample(self, word: str, rng, alpha: float = 1.0) -> tuple:
        """One segmentation drawn with probability proportional to P(segmentation) ** alpha.

        Subword regularization: alpha=1 samples the model's own distribution,
        alpha -> infinity approaches Viterbi, alpha=0 is uniform over segmentations.
        Draws the pieces from the end backwards, using the forward sums.
        """
        total = self.forward(word, alpha)
        if total[-1] == 0:
            raise ValueError(f"cannot segment {word!r}: some character is in no piece of the vocabulary")
        pieces, end = [], len(word)
        while end > 0:
            options = [(start, piece, float(total[start] * _power(q, alpha)))
                       for start, piece, q in self._pieces_ending_at(word, end)]
            start, piece, _ = rng.choices(options, weights=[w for _, _, w in options])[0]
            pieces.append(piece)
            end = start
        return tuple(reversed(pieces))


def expected_counts(model: Unigram, word_counts: dict) -> tuple:
    """E-step: (expected count of every piece, log-likelihood) over all segmentations (forward-backward)."""
    counts, log_likelihood = Counter(), 0.0
    for word, frequency in word_counts.items():
        forward = model.forward(word)
        backward = [0] * len(word) + [1]  # backward[i] = total probability of word[i:]
        for start in range(len(word) - 1, -1, -1):
            backward[start] = sum(model.probabilities.get(word[start:end], 0) * backward[end]
                                  for end in range(start + 1, min(len(word), start + model.max_length) + 1))
        for end in range(1, len(word) + 1):
            for start, piece, q in model._pieces_ending_at(word, end):
                counts[piece] += frequency * forward[start] * q * backward[end] / forward[-1]
        log_likelihood += frequency * math.log(forward[-1])
    return counts, log_likelihood


def em_step(model: Unigram, word_counts: dict, keep=()) -> tuple:
    """One EM iteration: (new model with probabilities ∝ expected counts, log-likelihood of the old one).

    Pieces in `keep` count at least once: EM would otherwise starve single
    characters towards probability 0 once longer pieces cover every word,
    and products of such numbers underflow.
    """
    counts, log_likelihood = expected_counts(model, word_counts)
    for piece in keep:
        counts[piece] = max(counts[piece], 1.0)
    total = sum(counts.values())
    return Unigram({piece: n / total for piece, n in counts.items() if n > 0}), log_likelihood


def seed_vocabulary(word_counts: dict, size: int, max_piece_length: int = 12) -> dict:
    """The `size` most frequent substrings (length >= 2) plus every character, with their counts."""
    if size < 0 or max_piece_length < 1:
        raise ValueError(f"need size >= 0 and max_piece_length >= 1, got {size}, {max_piece_length}")
    substrings, characters = Counter(), Counter()
    for word, frequency in word_counts.items():
        for start in range(len(word)):
            characters[word[start]] += frequency
            for end in range(start + 2, min(len(word), start + max_piece_length) + 1):
                substrings[word[start:end]] += frequency
    return dict(characters) | dict(substrings.most_common(size))  # most_common keeps first-seen order on ties


def pruning_loss(model: Unigram, word_counts: dict) -> dict:
    """For each multi-character piece: how much log-likelihood is lost if it goes.

    Its Viterbi uses are re-spelled by the best segmentation without it:
    loss = uses * (log p(piece) - log p(best alternative)).  A simplification
    of SentencePiece's estimate, which also hands the piece's count to the
    pieces of its alternative and renormalises before taking the logarithms.
    """
    uses = Counter()
    for word, frequency in word_counts.items():
        for piece in model.viterbi(word)[0]:
            uses[piece] += frequency
    loss = {}
    for piece, p in model.probabilities.items():
        if len(piece) > 1:
            _, alternative = model.viterbi(piece, exclude=piece)
            loss[piece] = uses[piece] * (math.log(p) - math.log(alternative))
    return loss


def unigram_train(word_counts: dict, vocab_size: int, seed_size: int = 2000, keep_share: float = 0.8,
                  em_steps: int = 2, max_piece_length: int = 12, history: list = None) -> Unigram:
    """EM training with pruning, from a seed vocabulary down to `vocab_size` pieces.

    Each round: `em_steps` EM iterations, then keep the `keep_share` of the
    multi-character pieces with the largest pruning loss (never below
    vocab_size); single characters always stay, so every word can be spelled.
    (SentencePiece keeps 0.75 a round, stops pruning at 1.1 x vocab_size and
    then keeps the vocab_size most probable pieces.)  A list given as
    `history` receives one {"pieces", "log_likelihood"} per round: the
    vocabulary EM ran on and the log-likelihood of the words under it.

    >>> model = unigram_train(Counter({"low": 5, "lower": 2, "newest": 6, "widest": 3}), vocab_size=12)
    >>> sorted(piece for piece in model.probabilities if len(piece) > 1), model.viterbi("lowest")[0]
    (['low', 'newest'], ('low', 'e', 's', 't'))
    """
    characters = {ch for word in word_counts for ch in word}
    if vocab_size < len(characters):
        raise ValueError(f"vocab_size={vocab_size} is smaller than the {len(characters)} characters of the words")
    if not 0 < keep_share < 1:
        raise ValueError(f"keep_share must be between 0 and 1, got {keep_share}")
    seed = seed_vocabulary(word_counts, seed_size, max_piece_length)
    total = sum(seed.values())
    model = Unigram({piece: n / total for piece, n in seed.items()})
    while True:
        pieces = len(model)
        for _ in range(em_steps):
            model, _ = em_step(model, word_counts, keep=characters)
        if history is not None:
            history.append({"pieces": pieces, "log_likelihood": expected_counts(model, word_counts)[1]})
        if len(model) <= vocab_size:
            return model
        loss = pruning_loss(model, word_counts)
        keep = max(vocab_size - len(characters), int(keep_share * len(loss)))
        kept = sorted(loss, key=lambda piece: -loss[piece])[:keep]  # stable: ties keep vocabulary order
        kept_probabilities = {piece: model.probabilities[piece] for piece in kept}
        model = Unigram(kept_probabilities | {ch: model.probabilities[ch] for ch in characters})


def sentencepiece_unigram(lines: list, vocab_size: int):
    """SentencePiece's unigram trainer on `lines` (no dummy prefix, no BOS/EOS), one thread and the lines in their
    order with no log, so the same lines give the same model every run; returns the SentencePieceProcessor."""
    import sentencepiece as spm     # only section 01 needs it

    model_file = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model_file, model_type="unigram", vocab_size=vocab_size,
        character_coverage=1.0, add_dummy_prefix=False, bos_id=-1, eos_id=-1,
        num_threads=1, shuffle_input_sentence=False, minloglevel=2)
    return spm.SentencePieceProcessor(model_proto=model_file.getvalue())


def pieces_of(processor) -> set:
    """A SentencePiece model's pieces, with its ▁ written as a space."""
    return {processor.id_to_piece(i).replace("▁", " ") for i in range(processor.get_piece_size())}
