"""UL2's data (Tay et al. 2022): seven denoisers, each announced by a mode token, on long windows of the
whole mini internet.

    g = torch.Generator().manual_seed(0)
    windows = random_windows(text_stream("train"), WINDOW, 32, g)   # (32, 128) word ids, several documents each
    batch = mixture_batch(windows, g)                      # one of the seven denoisers per window (ul2_batch)
    batch = denoiser_batch(windows, UL2_DENOISERS[4], g)   # every window by X(mu=64, r=0.15)
    plots.table(denoiser_table())                          # what each denoiser does to these windows, measured

The denoisers are `objectives.UL2_DENOISERS` and the batches `objectives.ul2_batch`; this module adds the
windows, the clamps those windows need, measurement, and the view of a language model as one span.

Windows.  Section 04's 32-token reviews are too short for spans of 64 tokens, so UL2 reads windows of
WINDOW = 128 word tokens cut anywhere from `text_stream`, the whole training text (facts, questions,
additions, reviews, stories; a newline is a token, so a window spans several documents).  The
encoder-decoder learns CONTEXT = 128 positions for each of its stacks, and WINDOW = longest_window(CONTEXT)
is the longest window whose every denoiser's source (mode token included) and target fit in them, in
the worst case over the random draws.  S sets the bound: its source is [S] plus up to n - 1 tokens.
Compute is not matched across denoisers: source + target is 129 positions for S and up to 160 for
X(mu=3, r=0.5); `denoiser_table` shows each one's lengths.

What 128 tokens clamp (`clamp_denoiser`; everything else is reached on average, X(mu=8, r=0.5) and
X(mu=64, r=0.5) exactly: 64 noise tokens in 8 spans, and in one):
- X(mu=3, r=0.5): 64 noise tokens would make 21 or 22 spans (64 / 3 = 21.3, rounded at random), that is
  up to 23 sentinels with the closing one, but the vocabulary has NUM_SENTINELS = 16.  The mean span is
  raised to 64 / 15 = 4.27, so every window gets exactly 15 spans; r stays 0.5.
- X(mu=64, r=0.15): 0.15 * 128 = 19.2 noise tokens cannot fill a 64-token span; `random_span_lengths`
  rounds the span count up to 1, so the one span has 19 or 20 tokens: mean span 19.2, r stays 0.15.
S draws its prefix length k uniformly from 1..127 (`ul2_batch`), so its target (mu = T - P) averages
64 tokens and its corruption rate (1 - P/T) 0.5.

    >>> WINDOW, clamp_denoiser(UL2_DENOISERS[2], WINDOW)
    (128, Denoiser(mode='X', mean_span=4.266666666666667, noise_density=0.5))
"""

import math
from dataclasses import replace
from functools import lru_cache

import torch

from lib.data import world
from lib.nn.models import EncoderDecoder
from lib.objectives.batches import (UL2_DENOISERS, Denoiser, EncoderDecoderBatch, StackBatch, batch_logits,
                                    check_windows, corrupt_spans, count_distribution, encoder_decoder_batch,
                                    masked_cross_entropy, pad, possible_counts, random_windows,
                                    span_corruption_lengths, stack_batch, ul2_batch)
from lib.data.tokenizers import BOS, FIRST_ORDINARY, MODE_TOKENS, NUM_SENTINELS, PAD, SENTINELS, TOKENIZER

CONTEXT = 128                    # learned positions of the encoder and of the decoder
MAX_SPANS = NUM_SENTINELS - 1    # one sentinel per span, and one closes the target


@lru_cache(maxsize=None)
def _text_ids(split: str) -> tuple:
    return tuple(TOKENIZER.encode(world.load_text(split)))


def text_stream(split: str = "train") -> torch.Tensor:
    """The whole of data/<split>.txt, every kind of document, as one stream of word ids."""
    return torch.tensor(_text_ids(split))


def label(denoiser: Denoiser) -> str:
    """How tables name a denoiser.

    >>> label(UL2_DENOISERS[0]), label(UL2_DENOISERS[-1])
    ('R(mu=3, r=0.15)', 'S (prefix LM)')
    """
    if denoiser.mode == "S":
        return "S (prefix LM)"
    return f"{denoiser.mode}(mu={denoiser.mean_span:g}, r={denoiser.noise_density:g})"


def clamp_denoiser(denoiser: Denoiser, n: int) -> Denoiser:
    """The denoiser as it runs on n-token windows: a mean span raised just enough that no window needs
    more than MAX_SPANS spans (there are only NUM_SENTINELS sentinels).  S is returned as it is."""
    if not isinstance(denoiser, Denoiser) or denoiser.mode not in MODE_TOKENS:
        raise ValueError(f"unknown denoiser {denoiser!r}: expected a Denoiser with mode R, S or X "
                         f"(e.g. one of UL2_DENOISERS)")
    if denoiser.mode == "S":
        return denoiser
    if denoiser.mean_span is None or denoiser.noise_density is None:
        raise ValueError(f"denoiser {denoiser!r} needs a mean_span and a noise_density")
    most_noise = max(noise for noise, _ in possible_counts(n, denoiser.noise_density, denoiser.mean_span))
    mean_span = max(denoiser.mean_span, most_noise / MAX_SPANS)
    while span_corruption_lengths(n, denoiser.noise_density, mean_span)["spans"] > MAX_SPANS:
        mean_span = math.nextafter(mean_span, math.inf)   # most_noise / MAX_SPANS may round down
    return Denoiser(denoiser.mode, mean_span, denoiser.noise_density)


def longest_lengths(denoiser: Denoiser, n: int) -> dict:
    """The longest source (mode token included) and target this denoiser can make from an n-token window."""
    denoiser = clamp_denoiser(denoiser, n)
    if denoiser.mode == "S":   # [S] + the first k tokens (k in 1..n-1); the rest is the target
        return {"source": n, "target": n - 1}
    lengths = span_corruption_lengths(n, denoiser.noise_density, denoiser.mean_span)
    return {"source": lengths["source"] + 1, "target": lengths["target"]}


def longest_window(context: int, denoisers=UL2_DENOISERS) -> int:
    """The longest window (up to 4 * context) whose every denoiser's source and target fit in `context`.

    >>> longest_window(32), longest_window(32, UL2_DENOISERS[:2])
    (32, 34)
    """
    fits = [n for n in range(2, 4 * context + 1)
            if all(max(longest_lengths(d, n).values()) <= context for d in denoisers)]
    if not fits:
        raise ValueError(f"no window fits in {context} positions")
    return max(fits)


WINDOW = longest_window(CONTEXT)


def mixture_batch(windows, generator, denoisers=UL2_DENOISERS) -> EncoderDecoderBatch:
    """`objectives.ul2_batch` with every denoiser clamped to the windows' length: each window gets one
    denoiser, uniformly at random, and its mode token first in the source."""
    check_windows(windows, 2, ordinary_only=True)
    return ul2_batch(windows, generator, [clamp_denoiser(d, windows.shape[1]) for d in denoisers])


def denoiser_batch(windows, denoiser: Denoiser, generator) -> EncoderDecoderBatch:
    """Every window by this one denoiser, its mode token first in the source (a mixture of one)."""
    return mixture_batch(windows, generator, [denoiser])


def span_statistics(batch: EncoderDecoderBatch) -> dict:
    """(B,) counts per example: window tokens the decoder writes (`corrupted`), the spans they form
    (runs between sentinels; S's whole target is one), sentinels in the target, source and target lengths."""
    words = batch.loss_mask & ~batch.is_sentinel
    after_word = torch.cat([torch.zeros_like(words[:, :1]), words[:, :-1]], dim=1)
    return {"corrupted": words.sum(1), "spans": (words & ~after_word).sum(1),
            "sentinels": (batch.loss_mask & batch.is_sentinel).sum(1),
            "source": (batch.source != PAD).sum(1), "target": batch.loss_mask.sum(1)}


def denoiser_table(count: int = 2000, window: int = WINDOW, seed: int = 0, denoisers=UL2_DENOISERS,
                   batch_size: int = 250) -> list:
    """One row per denoiser, measured by `denoiser_batch` on the same `count` random training windows:
    mean span (corrupted tokens / spans), corruption rate (corrupted / window tokens), sentinels per
    example, loss positions per 1,000 window tokens, and the source and target lengths."""
    generator = torch.Generator().manual_seed(seed)
    sample = random_windows(text_stream("train"), window, count, generator)
    tokens, rows = count * window, []
    for denoiser in denoisers:
        parts = [span_statistics(denoiser_batch(chunk, denoiser, generator)) for chunk in sample.split(batch_size)]
        stats = {key: torch.cat([part[key] for part in parts]) for key in parts[0]}
        corrupted, target = stats["corrupted"].sum().item(), stats["target"].sum().item()
        nominal = ("T-P", "1-P/T") if denoiser.mode == "S" else (float(denoiser.mean_span), denoiser.noise_density)
        rows.append({"denoiser": label(denoiser), "mode": f"[{denoiser.mode}]",
                     "nominal mu": nominal[0], "nominal r": nominal[1],
                     "mean span": corrupted / stats["spans"].sum().item(), "corruption rate": corrupted / tokens,
                     "sentinels / example": stats["sentinels"].double().mean().item(),
                     "loss positions / 1k tokens": 1000 * target / tokens,
                     "source mean": stats["source"].double().mean().item(), "source max": stats["source"].max().item(),
                     "target mean": target / count, "target max": stats["target"].max().item()})
    return rows


def expected_targets(denoiser: Denoiser, n: int = WINDOW) -> float:
    """The expected number of loss positions (target tokens) of one n-token window by this denoiser, computed
    from the draws of `ul2_batch` rather than sampled: S, n - k with k uniform in 1..n-1; R and X, the noise
    tokens + one sentinel per span + the closing one, over the random roundings and clamps of
    `random_span_lengths` (`batches.count_distribution`).

    >>> [round(expected_targets(d), 2) for d in (UL2_DENOISERS[0], UL2_DENOISERS[4], UL2_DENOISERS[-1])]
    [26.6, 21.2, 64.0]
    """
    denoiser = clamp_denoiser(denoiser, n)
    if denoiser.mode == "S":
        return sum(n - k for k in range(1, n)) / (n - 1)
    return sum(p * (noise + spans + 1) for (noise, spans), p in
               count_distribution(n, denoiser.noise_density, denoiser.mean_span).items())


def targets_per_step(denoisers, batch_size: int, n: int = WINDOW) -> dict:
    """{denoiser label: expected target tokens of that denoiser per training step} for a recipe that draws one
    of `denoisers` uniformly per window (`ul2_batch`); the others get 0."""
    chosen = [clamp_denoiser(d, n) for d in denoisers]
    return {label(d): batch_size * chosen.count(clamp_denoiser(d, n)) / len(chosen) * expected_targets(d, n)
            for d in UL2_DENOISERS}


def noise_masks(batch: EncoderDecoderBatch) -> torch.Tensor:
    """(B, n) bool: which tokens of each example's window the denoiser took out (the decoder writes them),
    read back from the batch itself: in the source, a kept token stands for itself and a sentinel for the
    span that follows it in the target; an S example keeps its source and hides the rest.

    >>> w = torch.tensor([TOKENIZER.encode("ebot lives in jelka .")])
    >>> noise_masks(denoiser_batch(w, UL2_DENOISERS[-1], torch.Generator().manual_seed(0))).int().tolist()
    [[0, 0, 0, 0, 1]]
    """
    masks = []
    for b in range(batch.source.shape[0]):
        source = [t for t in batch.source[b].tolist()[1:] if t != PAD]           # the mode token left out
        target = batch.targets[b][batch.loss_mask[b]].tolist()
        if not any(t in SENTINELS for t in source):                             # S: a prefix, the rest hidden
            masks.append([False] * len(source) + [True] * len(target))
            continue
        spans = {}                                                              # sentinel -> its span's length
        for t in target:
            if t in SENTINELS:
                current = t
                spans[current] = 0
            else:
                spans[current] += 1
        masks.append([m for t in source for m in ([True] * spans[t] if t in SENTINELS else [False])])
    if len({len(m) for m in masks}) != 1:
        raise ValueError("the examples come from windows of different lengths")
    return torch.tensor(masks)


def tail_span_batch(windows, prefix_lengths) -> EncoderDecoderBatch:
    """A language model as span corruption: one span, the last n - P tokens of each window (`corrupt_spans`:
    source [S] + the first P tokens + <0>, target <0> + the rest + <1>).  P = 0 is a plain LM (mu = T,
    r = 1), 0 < P < n a prefix LM (mu = T - P, r = 1 - P/T).  prefix_lengths: an int or one per window.
    Its two sentinels make it up to two positions longer than the S denoiser: it is for comparing, not training."""
    check_windows(windows, 1, ordinary_only=True)
    B, n = windows.shape
    prefix_lengths = torch.as_tensor(prefix_lengths).expand(B).tolist()
    if not all(0 <= p < n for p in prefix_lengths):
        raise ValueError(f"prefix lengths must lie in 0..{n - 1} (the span needs a token), got {prefix_lengths}")
    examples = []
    for row, p in zip(windows.tolist(), prefix_lengths):
        source, target, is_sentinel = corrupt_spans(row, [(p, n)])
        examples.append(([MODE_TOKENS["S"]] + source, target, is_sentinel))
    return encoder_decoder_batch(*zip(*examples), modes=("S",) * B)


def prediction_problems(batch) -> list:
    """Per example, each loss position as (the ordinary tokens visible when predicting it, the target).

    Visible: in a StackBatch, the inputs the position's attention_mask row admits (causal: up to itself;
    prefix LM: the whole prefix, then up to itself; BERT: all).  In an EncoderDecoderBatch, every real
    source token through cross_mask (the bidirectional encoder reaches no further), then decoder_input up
    to the position through target_mask (<bos> + the targets before it).  Each of these masks is closed
    (what a visible position sees is visible too), so one layer's mask is what the whole model can use.
    Specials (padding, <mask>, <bos>, sentinels, mode tokens) carry no text and are left out.

    >>> w = torch.tensor([TOKENIZER.encode("ebot lives")])
    >>> [(TOKENIZER.decode(seen), TOKENIZER.decode([t])) for seen, t in prediction_problems(tail_span_batch(w, 0))[0]]
    [('', '<0>'), ('', 'ebot'), ('ebot', 'lives'), ('ebot lives', '<1>')]
    """
    if isinstance(batch, StackBatch):
        readers = [(batch.inputs, batch.attention_mask)]
    else:
        readers = [(batch.source, batch.cross_mask), (batch.decoder_input, batch.target_mask)]
    problems = []
    for b in range(batch.targets.shape[0]):
        rows = [(ids[b].tolist(), mask[b].tolist()) for ids, mask in readers]
        problems.append([(tuple(token for ids, mask in rows for token, seen in zip(ids, mask[t])
                                if seen and token >= FIRST_ORDINARY), batch.targets[b, t].item())
                         for t in batch.loss_mask[b].nonzero().flatten().tolist()])
    return problems


def word_problems(batch) -> list:
    """`prediction_problems` without the ones whose target is a sentinel: the words a model is asked to write."""
    return [[(seen, target) for seen, target in rows if target not in SENTINELS] for rows in prediction_problems(batch)]


def longest_sequence(denoiser: Denoiser, n: int) -> int:
    """The most positions one stack needs for this denoiser's example: mode token + source + decoder input
    (`as_stack_batch`), in the worst case over the random draws.

    >>> [longest_sequence(d, WINDOW) for d in (UL2_DENOISERS[0], UL2_DENOISERS[2], UL2_DENOISERS[-1])]
    [144, 160, 129]
    """
    denoiser = clamp_denoiser(denoiser, n)
    if denoiser.mode == "S":   # [S] + k tokens, then <bos> + the other n - k tokens but the last
        return 1 + n
    return 1 + span_corruption_lengths(n, denoiser.noise_density, denoiser.mean_span)["positions"]


DECODER_CONTEXT = max(longest_sequence(d, WINDOW) for d in UL2_DENOISERS)


def without_mode_tokens(batch: EncoderDecoderBatch) -> EncoderDecoderBatch:
    """The same batch with each source's first token, its mode token, removed (a denoiser run as plain
    T5 or prefix LM, which never see one)."""
    if batch.modes is None or not all(t in MODE_TOKENS.values() for t in batch.source[:, 0].tolist()):
        raise ValueError("every source must start with a mode token (a batch of mixture_batch or denoiser_batch)")
    return replace(batch, source=batch.source[:, 1:], source_mask=batch.source_mask[:, 1:, 1:],
                   cross_mask=batch.cross_mask[:, :, 1:], modes=None)


def questions(sources: list, decoder_inputs: list) -> EncoderDecoderBatch:
    """Encoder-decoder inputs from lists of ids, for asking rather than training: the decoder reads each
    decoder_inputs row (e.g. `[BOS, SENTINELS[0]]`), and `decoder_logits` gives its next-token logits.
    (The targets are the decoder inputs shifted left, the last one a placeholder.)"""
    if not all(row and row[0] == BOS for row in decoder_inputs):
        raise ValueError("every decoder input must start with <bos>")
    return encoder_decoder_batch(sources, [row[1:] + [BOS] for row in decoder_inputs],
                                  [[False] * len(row) for row in decoder_inputs])


FORMS = ("span", "prefix")   # how a question is posed: a span to fill (R, X, T5) or a continuation (S, prefix LM)


def with_mode(source: list, mode) -> list:
    """The source with mode's token first ("R", "S" or "X"), or as it is (None)."""
    if mode is not None and mode not in MODE_TOKENS:
        raise ValueError(f"unknown mode {mode!r}; expected one of {list(MODE_TOKENS)} or None")
    return ([MODE_TOKENS[mode]] if mode else []) + source


def ask_slot(ids: list, slot: int, form: str, mode=None, end: int = None) -> tuple:
    """(source, decoder start) asking for ids[slot:end] (one token by default) in this form: "span", the
    text with <0> there and the decoder starting `<bos> <0>`; "prefix", the text up to it and `<bos>`."""
    if form not in FORMS:
        raise ValueError(f"unknown form {form!r}; expected one of {FORMS}")
    end = slot + 1 if end is None else end
    if not 1 <= slot < end < len(ids):
        raise ValueError(f"the slot {slot}..{end} must lie inside the line (1..{len(ids) - 1})")
    if form == "span":
        return with_mode(ids[:slot] + [SENTINELS[0]] + ids[end:], mode), [BOS, SENTINELS[0]]
    return with_mode(ids[:slot], mode), [BOS]


def question_logits(model, sources: list, starts: list) -> torch.Tensor:
    """(N, V): the logits a model of section 06 gives for the token after each decoder start, given its source."""
    batch = questions(sources, starts)
    logits = decoder_logits(model, batch)
    return logits[torch.arange(logits.shape[0]), batch.loss_mask.sum(1) - 1]


def as_stack_batch(batch: EncoderDecoderBatch) -> StackBatch:
    """The same examples for one stack, a non-causal decoder (UL2's "prefix LM" backbone): each row is
    source + decoder_input, the source its bidirectional prefix, the rest causal; the position that reads
    decoder_input[j] predicts targets[j], so the loss positions and their targets are the same ones."""
    source_lengths = (batch.source != PAD).sum(1).tolist()
    target_lengths = batch.loss_mask.sum(1).tolist()   # decoder_input holds one more real token where it is padded
    rows, targets, loss = [], [], []
    for b, (s, t) in enumerate(zip(source_lengths, target_lengths)):
        rows.append(batch.source[b, :s].tolist() + batch.decoder_input[b, :t].tolist())
        targets.append([PAD] * s + batch.targets[b, :t].tolist())
        loss.append([False] * s + batch.loss_mask[b, :t].tolist())
    inputs, _ = pad(rows)
    return stack_batch(inputs, pad(targets)[0], pad(loss, value=False)[0].bool(), torch.tensor(source_lengths))


def decoder_logits(model, batch: EncoderDecoderBatch) -> torch.Tensor:
    """(B, T, V): the logits at the batch's decoder positions, from an EncoderDecoder or from one stack
    (a MaskedTransformer reading `as_stack_batch`, its logits gathered back to the decoder positions)."""
    if isinstance(model, EncoderDecoder):
        return batch_logits(model, batch)
    stack = as_stack_batch(batch)
    logits = batch_logits(model, stack)                                           # (B, L, V)
    T = batch.decoder_input.shape[1]
    at = (stack.prefix_lengths[:, None] + torch.arange(T)[None, :]).clamp(max=logits.shape[1] - 1)   # (B, T)
    return logits.gather(1, at[:, :, None].expand(-1, -1, logits.shape[-1]))


def ul2_loss(model, batch: EncoderDecoderBatch):
    """The training loss of every model of section 06: cross-entropy over the decoder's loss positions."""
    return masked_cross_entropy(decoder_logits(model, batch), batch.targets, batch.loss_mask)
