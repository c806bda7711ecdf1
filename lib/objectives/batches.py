"""Training objectives as batch functions: what a model reads, and where it is asked to predict.

Each function turns word-token windows (a (B, n) tensor of `WordTokenizer`
ids, e.g. from `random_windows(review_stream(), n, B, generator)`) into a
batch that a model trains on directly.  Every function takes an explicit
torch.Generator: the same generator state gives the same batch.

    >>> g = torch.Generator().manual_seed(0)
    >>> window = torch.tensor([TOKENIZER.encode("review: the soup was tasty and the host was kind. rating: good.")])
    >>> b = span_corruption_batch(window, g)                              # T5
    >>> TOKENIZER.decode(b.source[0]), TOKENIZER.decode(b.targets[0])
    ('review: the soup was tasty and the <0> kind. rating: good.', '<0> host was <1>')

Two batch structures, one per kind of model (masks from `lib.masks`):

    StackBatch           one stack (MaskedTransformer): GPT, prefix LM, BERT
        logits = model(b.inputs, b.attention_mask)
    EncoderDecoderBatch  T5 i.i.d. denoising and span corruption, BART infilling, UL2 (EncoderDecoder)
        logits = model(b.source, b.decoder_input, b.source_mask, b.target_mask, b.cross_mask)

`batch_logits(model, b)` is that forward pass, `batch_loss(model, b)` its
`masked_cross_entropy` over b.loss_mask: the loss every recipe trains on.
`next_token_loss` is the character-level base model's loss on plain windows.

ELECTRA's discriminator gets an `ElectraBatch` (replaced or not, at every
position) from an MLM batch and its generator's logits: `electra_batch`.
"""

import math
from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F

from lib.data import world
from lib.nn.masks import bidirectional_mask, encoder_decoder_masks, hide_padding, prefix_masks
from lib.data.tokenizers import BOS, FIRST_ORDINARY, MASK, MODE_TOKENS, NUM_SENTINELS, PAD, SENTINELS, TOKENIZER

VOCAB_SIZE = len(TOKENIZER)
UNTOUCHED, MASKED, RANDOM, UNCHANGED = 0, 1, 2, 3  # what mlm_batch did at a position (StackBatch.actions)


@dataclass
class StackBatch:
    """One stack: the model reads `inputs` under `attention_mask` and predicts `targets` where `loss_mask`."""
    inputs: torch.Tensor          # (B, T) long
    targets: torch.Tensor         # (B, T) long: the next token (GPT, prefix LM) or the original token (BERT)
    loss_mask: torch.Tensor       # (B, T) bool: positions that carry loss
    attention_mask: torch.Tensor  # (B, T, T) bool, True = may attend (padding hidden)
    prefix_lengths: torch.Tensor  # (B,) long: the bidirectional prefix; 1 = causal (GPT), T = bidirectional (BERT)
    actions: torch.Tensor = None  # (B, T) long, mlm_batch only: UNTOUCHED, MASKED, RANDOM or UNCHANGED

    @property
    def positions(self) -> int:
        """Positions the model processes (padding excluded)."""
        return int((self.inputs != PAD).sum())


@dataclass
class EncoderDecoderBatch:
    """The encoder reads `source`; the decoder reads `decoder_input` (<bos> + targets[:-1]) and predicts `targets`."""
    source: torch.Tensor          # (B, S) long, padded with <pad> on the right
    decoder_input: torch.Tensor   # (B, T) long
    targets: torch.Tensor         # (B, T) long
    loss_mask: torch.Tensor       # (B, T) bool: real target positions
    source_mask: torch.Tensor     # (B, S, S) bool: bidirectional, padding hidden
    target_mask: torch.Tensor     # (B, T, T) bool: causal
    cross_mask: torch.Tensor      # (B, T, S) bool: every target position reads every real source position
    is_sentinel: torch.Tensor     # (B, T) bool: targets that are sentinels (T5, UL2 R/X), for counting
    modes: tuple = None           # ul2_batch only: "R", "S" or "X" per example

    @property
    def positions(self) -> int:
        """Positions the two stacks process together (padding excluded)."""
        return int((self.source != PAD).sum() + self.loss_mask.sum())


@dataclass
class ElectraBatch:
    """ELECTRA's discriminator reads `inputs` and says at every position whether the token was `replaced`."""
    inputs: torch.Tensor          # (B, T) long: the original with the generator's samples at `selected`
    replaced: torch.Tensor        # (B, T) bool: the labels; a sample equal to the original counts as original
    loss_mask: torch.Tensor       # (B, T) bool: every real position
    attention_mask: torch.Tensor  # (B, T, T) bool: bidirectional
    selected: torch.Tensor        # (B, T) bool: where the generator sampled
    originals: torch.Tensor       # (B, T) long


def masked_cross_entropy(logits, targets, loss_mask):
    """Mean cross-entropy (nats) over the positions where loss_mask is True (0 if there are none)."""
    if not loss_mask.any():
        return logits.sum() * 0.0
    return F.cross_entropy(logits[loss_mask], targets[loss_mask])


def batch_logits(model, batch):
    """A model's logits for a batch of this module (StackBatch or EncoderDecoderBatch)."""
    if isinstance(batch, StackBatch):
        return model(batch.inputs, batch.attention_mask)
    return model(batch.source, batch.decoder_input, batch.source_mask, batch.target_mask, batch.cross_mask)


def batch_loss(model, batch):
    """The training loss of every recipe: mean cross-entropy over the batch's loss positions."""
    return masked_cross_entropy(batch_logits(model, batch), batch.targets, batch.loss_mask)


def scored_loss(model, batch: StackBatch):
    """`batch_loss` of a single stack with the vocabulary logits computed only at the loss positions (the
    work a step needs, as papers count FLOPs; the same value up to rounding)."""
    h = model.hidden_states(batch.inputs, batch.attention_mask)[batch.loss_mask]          # (K, d)
    return F.cross_entropy(h @ model.wte.weight.T, batch.targets[batch.loss_mask])


def next_token_loss(model, windows):
    """Mean cross-entropy (nats) of predicting windows[:, 1:] from windows[:, :-1] (a TinyGPT)."""
    logits = model(windows[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), windows[:, 1:].reshape(-1))


@lru_cache(maxsize=None)
def _review_ids(split: str) -> tuple:
    lines = world.load_text(split).splitlines()
    return tuple(i for line in lines if world.kind_of(line) == "review" for i in TOKENIZER.encode(line + "\n"))


def review_stream(split: str = "train") -> torch.Tensor:
    """The reviews of data/<split>.txt as one stream of word ids, each review followed by "\\n"."""
    if split not in ("train", "val"):
        raise ValueError(f"unknown split {split!r}: expected 'train' or 'val'")
    return torch.tensor(_review_ids(split))


def random_windows(stream, length: int, batch_size: int, generator) -> torch.Tensor:
    """(batch_size, length) windows starting at uniformly random offsets of a 1-D token stream."""
    if not 1 <= length <= len(stream):
        raise ValueError(f"window length {length} outside 1..{len(stream)} (the stream's length)")
    starts = torch.randint(len(stream) - length + 1, (batch_size,), generator=generator)
    return torch.stack([stream[s: s + length] for s in starts.tolist()])


def check_windows(windows, min_length: int, ordinary_only: bool = False):
    if not isinstance(windows, torch.Tensor) or windows.dtype != torch.long or windows.dim() != 2:
        raise ValueError(f"windows must be a (batch, length) torch.long tensor, got "
                         f"{getattr(windows, 'dtype', type(windows).__name__)} {tuple(getattr(windows, 'shape', ()))}")
    if windows.shape[1] < min_length:
        raise ValueError(f"windows of {windows.shape[1]} tokens are too short: this objective needs {min_length}")
    low = FIRST_ORDINARY if ordinary_only else 0
    if windows.numel() and not (low <= int(windows.min()) and int(windows.max()) < VOCAB_SIZE):
        what = "ordinary tokens (no <pad>, <mask>, sentinels or mode tokens)" if ordinary_only else "token ids"
        raise ValueError(f"windows must hold {what} in {low}..{VOCAB_SIZE - 1}, "
                         f"got {int(windows.min())}..{int(windows.max())}")


def _check_share(name: str, value: float, low: float = 0.0, high: float = 1.0, open_low: bool = True):
    if not (low < value <= high if open_low else low <= value <= high):
        raise ValueError(f"{name}={value:g} outside {'(' if open_low else '['}{low:g}, {high:g}]")


def stack_batch(inputs, targets, loss_mask, prefix_lengths, actions=None) -> StackBatch:
    T = inputs.shape[1]
    masks = prefix_masks(T, prefix_lengths)                                         # (B, T, T)
    return StackBatch(inputs, targets, loss_mask & (targets != PAD), hide_padding(masks, inputs == PAD),
                      prefix_lengths, actions)


def lm_batch(windows, generator=None) -> StackBatch:
    """GPT: read windows[:, :-1] causally, predict windows[:, 1:]; every position is a target.

    Needs no randomness; `generator` is accepted so all batch functions are called alike."""
    check_windows(windows, 2)
    B, T = windows.shape[0], windows.shape[1] - 1
    return stack_batch(windows[:, :-1], windows[:, 1:], torch.ones(B, T, dtype=torch.bool),
                        torch.ones(B, dtype=torch.long))


def prefix_lm_batch(windows, generator) -> StackBatch:
    """Prefix LM: a prefix of k positions (k uniform in 1..T) sees itself both ways, the rest is causal;
    loss only on the tokens after the prefix (predicted from positions k-1..T-1)."""
    check_windows(windows, 2)
    B, T = windows.shape[0], windows.shape[1] - 1
    k = torch.randint(1, T + 1, (B,), generator=generator)
    loss_mask = torch.arange(T)[None, :] >= (k[:, None] - 1)
    return stack_batch(windows[:, :-1], windows[:, 1:], loss_mask, k)


def mlm_batch(windows, generator, rate: float = 0.15, mask_share: float = 0.8, random_share: float = 0.1) -> StackBatch:
    """BERT: select each position with probability `rate`; a selected token becomes <mask> (mask_share),
    a random ordinary token (random_share) or stays (the rest).  Loss only on selected positions."""
    check_windows(windows, 1)
    _check_share("rate", rate)
    _check_share("mask_share", mask_share, open_low=False)
    _check_share("random_share", random_share, open_low=False)
    _check_share("mask_share + random_share", mask_share + random_share, open_low=False)
    selected = (torch.rand(windows.shape, generator=generator) < rate) & (windows != PAD)
    roll = torch.rand(windows.shape, generator=generator)
    random_tokens = torch.randint(FIRST_ORDINARY, VOCAB_SIZE, windows.shape, generator=generator)
    actions = torch.full_like(windows, UNCHANGED)
    actions[roll < mask_share + random_share] = RANDOM
    actions[roll < mask_share] = MASKED
    actions[~selected] = UNTOUCHED
    inputs = torch.where(actions == MASKED, MASK, torch.where(actions == RANDOM, random_tokens, windows))
    return stack_batch(inputs, windows.clone(), selected, torch.full((windows.shape[0],), windows.shape[1]), actions)


def electra_batch(masked: StackBatch, generator_logits, generator, temperature: float = 1.0) -> ElectraBatch:
    """ELECTRA: at the positions `masked` (an mlm_batch) selected, sample a token from the generator's
    logits computed on masked.inputs, (K, V) at the K selected positions (or (B, T, V) at every position);
    label every position replaced or original."""
    B, T = masked.inputs.shape
    K = int(masked.loss_mask.sum())
    if tuple(generator_logits.shape) not in ((K, VOCAB_SIZE), (B, T, VOCAB_SIZE)):
        raise ValueError(f"generator logits must have shape {(K, VOCAB_SIZE)} (the selected positions) or "
                         f"{(B, T, VOCAB_SIZE)}, got {tuple(generator_logits.shape)}")
    if generator_logits.dim() == 3:
        generator_logits = generator_logits[masked.loss_mask]
    _check_share("temperature", temperature, high=math.inf)
    logits = generator_logits.detach() / temperature                                # (K, V), a new tensor
    logits[:, :FIRST_ORDINARY] = -math.inf        # the generator proposes words, never special tokens
    inputs = masked.targets.clone()
    if len(logits):
        inputs[masked.loss_mask] = torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(1)
    real = masked.targets != PAD
    return ElectraBatch(inputs, inputs != masked.targets, real,
                        hide_padding(bidirectional_mask(T), ~real), masked.loss_mask.clone(), masked.targets.clone())


def _stochastic_round(x: float, generator) -> int:
    """floor(x) or floor(x) + 1, the latter with probability x - floor(x): on average exactly x."""
    return math.floor(x) + int(torch.rand(1, generator=generator).item() < x - math.floor(x))


def noise_tokens(x: float, n: int) -> int:
    """x noise tokens (a rounded r * n) as an n-token window allows: at least one, and one token kept."""
    return min(max(x, 1), n - 1)


def span_count(x: float, noise: int, n: int) -> int:
    """x spans (a rounded noise / mu) as `noise` noise tokens allow: at least one, no more than the tokens, and
    no more than the n - noise kept tokens can keep apart."""
    return min(max(x, 1), noise, n - noise + 1)


def _rounding(x: float) -> dict:
    """{value: probability} of `_stochastic_round(x)`."""
    low, up = math.floor(x), x - math.floor(x)
    return {low: 1 - up, low + 1: up} if up else {low: 1.0}


def count_distribution(n: int, noise_density: float, mean_span: float) -> dict:
    """{(noise tokens, spans): probability} that `random_span_lengths` draws for an n-token window.

    >>> {counts: round(p, 3) for counts, p in count_distribution(128, 0.15, 64).items()}
    {(19, 1): 0.8, (20, 1): 0.2}
    """
    out = {}
    for x, p in _rounding(noise_density * n).items():
        noise = noise_tokens(x, n)
        for y, q in _rounding(noise / mean_span).items():
            key = (noise, span_count(y, noise, n))
            out[key] = out.get(key, 0.0) + p * q
    return out


def possible_counts(n: int, noise_density: float, mean_span: float) -> list:
    """Every (noise tokens, spans) that `random_span_lengths` can draw for an n-token window."""
    return sorted(count_distribution(n, noise_density, mean_span))


def span_corruption_lengths(n: int, noise_density: float, mean_span: float) -> dict:
    """The most spans, and the longest source and target, span corruption can make from an n-token window.

    >>> span_corruption_lengths(23, 0.15, 1.0)
    {'spans': 4, 'source': 23, 'target': 9, 'positions': 32}
    """
    counts = possible_counts(n, noise_density, mean_span)
    return {"spans": max(s for _, s in counts), "source": max(n - noise + s for noise, s in counts),
            "target": max(noise + s + 1 for noise, s in counts),
            "positions": max(n + 2 * s + 1 for _, s in counts)}


def longest_span_window(positions: int, noise_density: float, mean_span: float, extra: int = 0) -> int:
    """The longest window whose span corruption never needs more than `positions` positions
    (source + target, plus `extra`, e.g. 1 for a UL2 mode token), so compute matches a `positions`-long LM.

    >>> longest_span_window(32, 0.15, 1.0), longest_span_window(32, 0.15, 3.0)
    (23, 27)
    """
    fits = [n for n in range(2, positions) if span_corruption_lengths(n, noise_density, mean_span)["positions"]
            + extra <= positions]
    if not fits:
        raise ValueError(f"no window fits in {positions} positions")
    return max(fits)


def random_span_lengths(n: int, noise_density: float, mean_span: float, generator) -> list:
    """T5's span lengths for an n-token window: about noise_density·n noise tokens in about
    noise/mean_span spans (both rounded up or down at random, so on average exactly), each span >= 1."""
    noise = noise_tokens(_stochastic_round(noise_density * n, generator), n)
    spans = span_count(_stochastic_round(noise / mean_span, generator), noise, n)
    # A uniformly random composition of `noise` into `spans` positive parts: spans - 1 distinct cut points.
    cuts = sorted((torch.randperm(noise - 1, generator=generator)[:spans - 1] + 1).tolist())
    return [b - a for a, b in zip([0] + cuts, cuts + [noise])]


def place_spans(n: int, lengths: list, generator) -> list:
    """[(start, end)] for spans of these lengths at random places in an n-token window, in order.

    Kept tokens are dealt into the len(lengths) + 1 gaps around the spans; inner gaps get at least
    one, so two spans never touch (they would read as one).  A span of length 0 is an insertion point."""
    keep = n - sum(lengths)
    if len(lengths) > keep + 1:
        raise ValueError(f"{len(lengths)} separate spans do not fit among {keep} kept tokens")
    gaps = sorted(torch.randperm(keep + 1, generator=generator)[:len(lengths)].tolist())
    spans, covered = [], 0
    for gap, length in zip(gaps, lengths):
        spans.append((gap + covered, gap + covered + length))
        covered += length
    return spans


def corrupt_spans(tokens: list, spans: list) -> tuple:
    """T5: each span -> the next sentinel in the source; target = sentinel + span for each span, then a
    closing sentinel.  Returns (source, target, is_sentinel) as lists."""
    source, target, is_sentinel, previous = [], [], [], 0
    for i, (start, end) in enumerate(spans):
        source += tokens[previous:start] + [SENTINELS[i]]
        target += [SENTINELS[i]] + tokens[start:end]
        is_sentinel += [True] + [False] * (end - start)
        previous = end
    return source + tokens[previous:], target + [SENTINELS[len(spans)]], is_sentinel + [True]


def _check_span_parameters(n: int, noise_density: float, mean_span: float):
    _check_share("noise_density", noise_density, high=1.0)
    if noise_density >= 1.0:
        raise ValueError(f"noise_density={noise_density} must be below 1: some tokens must stay")
    if not mean_span >= 1.0:
        raise ValueError(f"mean_span={mean_span} must be at least 1 token")
    spans = span_corruption_lengths(n, noise_density, mean_span)["spans"]
    if spans + 1 > NUM_SENTINELS:
        raise ValueError(f"{n}-token windows at noise_density={noise_density}, mean_span={mean_span} can need "
                         f"{spans} spans plus a closing sentinel, but there are "
                         f"only {NUM_SENTINELS} sentinels: use shorter windows, lower density or longer spans")


def pad(rows: list, value: int = PAD) -> tuple:
    """(ids (B, T) right-padded with `value`, is_pad (B, T)) from lists of ids of any lengths.

    >>> pad([[5, 6], [7]], value=0)[0].tolist(), pad([[5, 6], [7]])[1].tolist()
    ([[5, 6], [7, 0]], [[False, False], [False, True]])
    """
    ids = torch.full((len(rows), max(map(len, rows))), value)
    for i, row in enumerate(rows):
        ids[i, :len(row)] = torch.tensor(row)
    return ids, torch.arange(ids.shape[1])[None, :] >= torch.tensor([len(row) for row in rows])[:, None]


def encoder_decoder_batch(sources: list, targets: list, is_sentinel: list, modes=None) -> EncoderDecoderBatch:
    """Pad examples of different lengths on the right and build the three masks."""
    (source, source_pad), (target, target_pad) = pad(sources), pad(targets)
    B, S, T = len(sources), source.shape[1], target.shape[1]
    sentinel_mask = torch.zeros(B, T, dtype=torch.bool)
    for b in range(B):
        sentinel_mask[b, :len(targets[b])] = torch.tensor(is_sentinel[b], dtype=torch.bool)
    decoder_input = torch.cat([torch.full((B, 1), BOS), target[:, :-1]], dim=1)
    masks = encoder_decoder_masks(S, T, source_pad)      # the decoder's padding is after every real target
    return EncoderDecoderBatch(source, decoder_input, target, ~target_pad, masks["encoder"], masks["decoder"],
                               masks["cross"], sentinel_mask, modes)


def span_corruption_batch(windows, generator, noise_density: float = 0.15,
                          mean_span: float = 3.0) -> EncoderDecoderBatch:
    """T5 span corruption of every window; see `random_span_lengths`, `place_spans`, `corrupt_spans`."""
    check_windows(windows, 2, ordinary_only=True)
    _check_span_parameters(windows.shape[1], noise_density, mean_span)
    examples = []
    for row in windows.tolist():
        lengths = random_span_lengths(len(row), noise_density, mean_span, generator)
        examples.append(corrupt_spans(row, place_spans(len(row), lengths, generator)))
    return encoder_decoder_batch(*zip(*examples))


def iid_noise_spans(n: int, noise_density: float, generator, hidden=()) -> list:
    """T5's i.i.d. corruption: each of n tokens is noise with probability noise_density, independently,
    and each run of adjacent noise tokens becomes one span [(start, end)].  Positions in `hidden` are
    noise for sure (a protocol hides its slot this way: the other tokens keep their training odds)."""
    noise = (torch.rand(n, generator=generator) < noise_density).tolist()
    for i in hidden:
        noise[i] = True
    spans, start = [], None
    for i, is_noise in enumerate(noise + [False]):
        if is_noise and start is None:
            start = i
        elif not is_noise and start is not None:
            spans.append((start, i))
            start = None
    return spans


def expected_iid_window(positions: int, noise_density: float) -> int:
    """The longest window whose i.i.d. corruption needs at most `positions` positions on average.

    An n-token window gets p + (n - 1)·p·(1 - p) spans on average (a span starts at a noise token whose
    left neighbour is kept); source + target = n + 2·spans + 1.  (The count varies, so unlike
    `longest_span_window` this bounds the mean, not the worst case.)

    >>> expected_iid_window(32, 0.15)
    24
    """
    _check_share("noise_density", noise_density)
    fits = [n for n in range(2, positions) if n + 2 * (noise_density + (n - 1) * noise_density * (1 - noise_density))
            + 1 <= positions]
    if not fits:
        raise ValueError(f"no window fits in {positions} positions")
    return max(fits)


def iid_denoising_batch(windows, generator, noise_density: float = 0.15) -> EncoderDecoderBatch:
    """T5's baseline objective (i.i.d. noise, spans replaced by sentinels): `iid_noise_spans`, then
    `corrupt_spans`.  The number of spans varies from window to window, and a span can lie anywhere."""
    check_windows(windows, 2, ordinary_only=True)
    _check_share("noise_density", noise_density)
    if noise_density >= 1.0:
        raise ValueError(f"noise_density={noise_density} must be below 1: some tokens must stay")
    if (windows.shape[1] + 1) // 2 + 1 > NUM_SENTINELS:
        raise ValueError(f"{windows.shape[1]}-token windows can need {(windows.shape[1] + 1) // 2} spans plus a "
                         f"closing sentinel, but there are only {NUM_SENTINELS} sentinels: use shorter windows")
    examples = [corrupt_spans(row, iid_noise_spans(len(row), noise_density, generator)) for row in windows.tolist()]
    return encoder_decoder_batch(*zip(*examples))


def poisson_span_lengths(n: int, noise_density: float, poisson_lambda: float, generator) -> list:
    """BART's span lengths: drawn from Poisson(lambda) until they cover about noise_density·n tokens
    (the last one cut to fit); zero-length spans are insertions.  Spans that cannot be kept apart are merged."""
    noise = noise_tokens(_stochastic_round(noise_density * n, generator), n)
    lengths = []
    while sum(lengths) < noise:
        lengths.append(min(int(torch.poisson(torch.tensor(poisson_lambda), generator=generator)),
                           noise - sum(lengths)))
    while len(lengths) > n - noise + 1:
        lengths[-2:] = [lengths[-2] + lengths[-1]]
    return lengths


def bart_infilling_batch(windows, generator, noise_density: float = 0.3,
                         poisson_lambda: float = 3.0) -> EncoderDecoderBatch:
    """BART text infilling: each span (Poisson lengths) -> one <mask>; the decoder writes the whole window."""
    check_windows(windows, 2, ordinary_only=True)
    _check_share("noise_density", noise_density)
    if noise_density >= 1.0 or not poisson_lambda > 0:
        raise ValueError(f"need noise_density < 1 and poisson_lambda > 0, got {noise_density}, {poisson_lambda}")
    sources, targets = [], []
    for row in windows.tolist():
        spans = place_spans(len(row), poisson_span_lengths(len(row), noise_density, poisson_lambda, generator),
                            generator)
        source, previous = [], 0
        for start, end in spans:
            source += row[previous:start] + [MASK]
            previous = end
        sources.append(source + row[previous:])
        targets.append(row)
    return encoder_decoder_batch(sources, targets, [[False] * len(t) for t in targets])


@dataclass(frozen=True)
class Denoiser:
    """One of UL2's denoisers: its mode token and span parameters (None for S, the prefix LM)."""
    mode: str                     # "R", "S" or "X"
    mean_span: float = None       # mu
    noise_density: float = None   # r


UL2_DENOISERS = (Denoiser("R", 3, 0.15), Denoiser("R", 8, 0.15),
                 Denoiser("X", 3, 0.5), Denoiser("X", 8, 0.5), Denoiser("X", 64, 0.15), Denoiser("X", 64, 0.5),
                 Denoiser("S"))


def ul2_batch(windows, generator, denoisers=UL2_DENOISERS) -> EncoderDecoderBatch:
    """UL2's mixture of denoisers: each window gets one denoiser, uniformly at random, and its mode token
    first in the source.  R and X are span corruption with their (mean_span, noise_density); S is a
    prefix LM: source = the first k tokens (k uniform in 1..n-1), target = the rest."""
    check_windows(windows, 2, ordinary_only=True)
    if not denoisers or any(d.mode not in MODE_TOKENS for d in denoisers):
        raise ValueError(f"denoisers must be a non-empty list of Denoiser with mode R, S or X, got {denoisers!r}")
    for d in denoisers:
        if d.mode != "S":
            _check_span_parameters(windows.shape[1], d.noise_density, d.mean_span)
    choices = torch.randint(len(denoisers), (windows.shape[0],), generator=generator).tolist()
    examples = []
    for row, choice in zip(windows.tolist(), choices):
        d, n = denoisers[choice], len(row)
        if d.mode == "S":
            k = int(torch.randint(1, n, (1,), generator=generator))
            source, target, is_sentinel = row[:k], row[k:], [False] * (n - k)
        else:
            lengths = random_span_lengths(n, d.noise_density, d.mean_span, generator)
            source, target, is_sentinel = corrupt_spans(row, place_spans(n, lengths, generator))
        examples.append(([MODE_TOKENS[d.mode]] + source, target, is_sentinel))
    return encoder_decoder_batch(*zip(*examples), modes=tuple(denoisers[c].mode for c in choices))
