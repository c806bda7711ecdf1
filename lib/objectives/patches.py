"""Section 08's patches to a decoder's weaknesses, as batch functions over section 04's review windows.

    g = torch.Generator().manual_seed(0)
    fim_transform(ids, g, "psm")          # <PRE> prefix <SUF> suffix <MID> middle: a decoder learns to fill in
    fim_restore(fim_transform(ids, g, "spm")) == ids
    multi_token_targets(windows, n)       # (inputs, targets k = 1..n): position t predicts t + k
    diffusion_batch(windows, g)           # a mask rate t per row, every chosen token <mask>, loss weighted 1/t

Fill-in-the-middle (Bavarian et al. 2022) cuts a sequence at two random
points into prefix, middle and suffix and moves the middle to the end, behind
three sentinel tokens, so that plain next-token training teaches a decoder to
write a middle after reading what follows it.  PSM orders the parts prefix,
suffix, middle; SPM puts the suffix first (<PRE> <SUF> suffix <MID> prefix
middle), so that the prefix and the middle it continues stay adjacent.  The
sentinels are three of the word tokenizer's spare sentinel ids (<13> <14>
<15>): no model of the book trained on them, and the vocabulary, hence every
older checkpoint's key, stays as it was.  Each is one token, so a cut between
two tokens can never split one.

Multi-token prediction (Gloeckle et al. 2024) asks position t for tokens t+1
... t+n, one head each.  The masked-diffusion objective (Sahoo et al. 2024;
Nie et al. 2025) masks each row at its own rate t (uniform on [MIN_RATE, 1):
the papers' (0, 1] with a floor), every chosen token becoming <mask>, and weights the cross-entropy of the masked tokens by
1/t, an upper bound on the negative log-likelihood of the sequence.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from lib.data.tokenizers import MASK, SENTINELS
from lib.nn.masks import causal_mask
from lib.objectives.batches import StackBatch, check_windows, lm_batch, stack_batch

FIM_PRE, FIM_SUF, FIM_MID = SENTINELS[13], SENTINELS[14], SENTINELS[15]
FIM_TOKENS = (FIM_PRE, FIM_SUF, FIM_MID)
FIM_NAMES = {FIM_PRE: "<PRE>", FIM_SUF: "<SUF>", FIM_MID: "<MID>"}   # how the book shows them
FIM_MODES = ("psm", "spm")
MIN_RATE = 1e-3     # the diffusion mask rate's floor: t = 0 would weight an empty loss by 1/0


def fim_cuts(n: int, rng) -> tuple:
    """Two cut points 0 <= i <= j <= n, drawn uniformly (the prefix is ids[:i], the middle ids[i:j])."""
    i, j = sorted(torch.randint(n + 1, (2,), generator=rng).tolist())
    return i, j


def fim_arrange(ids: list, i: int, j: int, mode: str) -> list:
    """ids rearranged around the cuts i <= j: PSM <PRE> p <SUF> s <MID> m, SPM <PRE> <SUF> s <MID> p m."""
    if mode not in FIM_MODES:
        raise ValueError(f"unknown FIM mode {mode!r}; choose from {FIM_MODES}")
    if not 0 <= i <= j <= len(ids):
        raise ValueError(f"cuts {i}, {j} must satisfy 0 <= i <= j <= {len(ids)}")
    if any(t in FIM_TOKENS for t in ids):
        raise ValueError("the sequence already holds a FIM sentinel: it cannot be rearranged unambiguously")
    prefix, middle, suffix = list(ids[:i]), list(ids[i:j]), list(ids[j:])
    if mode == "psm":
        return [FIM_PRE, *prefix, FIM_SUF, *suffix, FIM_MID, *middle]
    return [FIM_PRE, FIM_SUF, *suffix, FIM_MID, *prefix, *middle]


def fim_transform(ids, rng, mode: str) -> list:
    """The ids (a list or 1-D tensor) cut at two random points (`rng`, a torch.Generator) and rearranged in
    `mode` ("psm" or "spm"), with its three sentinels: len(ids) + 3 ids."""
    ids = [int(t) for t in ids]
    return fim_arrange(ids, *fim_cuts(len(ids), rng), mode)


def fim_restore(arranged) -> list:
    """The original sequence of a `fim_transform` output (either mode): fim_restore(fim_transform(x)) == x."""
    arranged = [int(t) for t in arranged]
    if [t for t in arranged if t in FIM_TOKENS] != [FIM_PRE, FIM_SUF, FIM_MID]:
        raise ValueError("not a FIM sequence: it must hold <PRE>, <SUF>, <MID> once each, in that order")
    suf, mid = arranged.index(FIM_SUF), arranged.index(FIM_MID)
    if arranged[0] != FIM_PRE:
        raise ValueError("a FIM sequence starts with <PRE>")
    if suf == 1:                                      # SPM: <PRE> <SUF> suffix <MID> prefix+middle
        return arranged[mid + 1:] + arranged[2:mid]
    return arranged[1:suf] + arranged[mid + 1:] + arranged[suf + 1:mid]   # PSM: prefix, middle, suffix


def fim_batch(windows, generator, rate: float = 0.5, spm_share: float = 0.5) -> StackBatch:
    """GPT's batch with a share `rate` of the rows rearranged (`fim_transform` of their first W - 3 tokens, so
    every row keeps W tokens), half of those in SPM: every position a next-token target, sentinels included,
    as in Bavarian et al.  Unlike their document- and context-level variants, the cuts fall anywhere in the window,
    across review boundaries too, and no end-of-text token follows the middle: a model learns to start a middle,
    not where it ends (the book asks for one token of it)."""
    check_windows(windows, 5, ordinary_only=True)
    rows = []
    for row in windows:
        use, spm = torch.rand(2, generator=generator).tolist()
        if use < rate:
            row = torch.tensor(fim_transform(row[:-3], generator, "spm" if spm < spm_share else "psm"))
        rows.append(row)
    return lm_batch(torch.stack(rows))


def multi_token_targets(ids, n: int) -> tuple:
    """(inputs (B, W - n), targets (B, n, W - n)) of windows ids (B, W): targets[:, k - 1, t] = ids[:, t + k], the
    token k places after input position t, k = 1 .. n (k = 1 is GPT's next token)."""
    check_windows(ids, n + 1)
    if not (isinstance(n, int) and n >= 1):
        raise ValueError(f"n must be a positive integer, got {n!r}")
    T = ids.shape[1] - n
    return ids[:, :T], torch.stack([ids[:, k: k + T] for k in range(1, n + 1)], 1)


def head_losses(model, ids) -> list:
    """Each head's mean cross-entropy (nats) on windows ids (B, T + n) of a `MultiTokenTransformer`: [t+1, ..., t+n]."""
    inputs, targets = multi_token_targets(ids, model.config.heads)
    logits = model.head_logits(inputs, causal_mask(inputs.shape[1]))
    return [F.cross_entropy(l.reshape(-1, l.shape[-1]), targets[:, k].reshape(-1)) for k, l in enumerate(logits)]


def multi_token_loss(model, ids) -> torch.Tensor:
    """Gloeckle et al.'s loss: the sum over the n heads of each head's mean cross-entropy (nats)."""
    return sum(head_losses(model, ids))


@dataclass
class DiffusionBatch:
    batch: StackBatch             # bidirectional; loss_mask = the masked positions
    rates: torch.Tensor           # (B,) each row's mask rate t


def diffusion_batch(windows, generator) -> DiffusionBatch:
    """Each row masked at its own rate t ~ U(MIN_RATE, 1): every chosen token becomes <mask> (no random or kept
    tokens, unlike BERT); the loss is on the masked positions."""
    check_windows(windows, 1, ordinary_only=True)
    B, T = windows.shape
    rates = MIN_RATE + (1 - MIN_RATE) * torch.rand(B, generator=generator)
    chosen = torch.rand(B, T, generator=generator) < rates[:, None]
    batch = stack_batch(torch.where(chosen, MASK, windows), windows.clone(), chosen, torch.full((B,), T))
    return DiffusionBatch(batch, rates)


def diffusion_loss(model, b: DiffusionBatch) -> torch.Tensor:
    """The masked-diffusion loss: (1 / (B T)) sum over rows of (1 / t) x the row's masked cross-entropy sum."""
    logits = model(b.batch.inputs, b.batch.attention_mask)
    ce = F.cross_entropy(logits.transpose(1, 2), b.batch.targets, reduction="none")     # (B, T)
    return ((ce * b.batch.loss_mask).sum(1) / b.rates).sum() / ce.numel()

