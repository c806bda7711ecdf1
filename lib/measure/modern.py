"""Section 09's measurements of the modern decoder's parts.

- `bits_by_kind`: validation bits per character on each kind of line, and on all of them;
- `banded_position_bits`: the same with attention limited to the last `width` positions (no distance beyond
  what training showed);
- `shift_gap`: how much a model's logits move when every position is shifted by the same amount (RoPE: by
  float rounding only, since its scores depend on m - n);
- `ported`: a RoPE model's weights run by code that pairs features the other way, with and without the row
  permutation that makes it right (`modern.half_to_interleaved`);
- `step_seconds`: the wall time of a training step of a config (forward, backward, AdamW).
"""

import math
import time
from dataclasses import replace

import torch
import torch.nn.functional as F

from lib.data import world
from lib.measure import evals
from lib.nn.models import MaskedTransformer, TinyGPT
from lib.nn.modern import half_to_interleaved
from lib.objectives.batches import next_token_loss, random_windows
from lib.train.loop import OPTIMIZATION, make_optimizer


def bits_by_kind(model, lines: list = None) -> dict:
    """{kind: bits/char on the validation lines of that kind (`evals.bits_per_char`), "all": on every line}."""
    lines = world.load_text("val").splitlines() if lines is None else lines
    out = {kind: evals.bits_per_char(model, [line for line in lines if world.kind_of(line) == kind])
           for kind in world.KINDS}
    return {**out, "all": evals.bits_per_char(model, lines)}


@torch.no_grad()
def banded_position_bits(model, windows, width: int) -> torch.Tensor:
    """`evals.position_bits` with each position attending only to itself and the width - 1 before it (a causal
    band): no query ever meets a key more than width - 1 positions away."""
    T = windows.shape[1] - 1
    i, j = torch.arange(T)[:, None], torch.arange(T)[None]
    logits = MaskedTransformer.forward(model, windows[:, :-1], (j <= i) & (i - j < width))
    nats = F.cross_entropy(logits.transpose(1, 2), windows[:, 1:], reduction="none")
    return nats.mean(0) / math.log(2)


@torch.no_grad()
def shift_gap(model, idx, shift: int) -> float:
    """The largest change in any logit when the tokens idx sit at positions shift, shift + 1, ... instead of
    0, 1, ...."""
    return float((model(idx, start=shift) - model(idx)).abs().max())


def ported(model, permute_rows: bool):
    """A copy of a rotate-half RoPE model run by interleaved-RoPE code (RoFormer's and Meta's LLaMA layout): with
    permute_rows, the rows of each head's W_q and W_k reordered by `half_to_interleaved` (the correct port), else
    copied as they are (the bug)."""
    if model.config.position != "rope" or model.config.rope_layout != "half":
        raise ValueError("ported() takes a RoPE model in the rotate-half layout")
    copy = TinyGPT(replace(model.config, rope_layout="interleaved")).to(next(model.parameters()).dtype)
    state = model.state_dict()
    if permute_rows:
        d, d_h, g = model.config.d_model, model.config.d_model // model.config.n_heads, model.config.groups
        order = half_to_interleaved(d_h)
        rows = torch.cat([head * d_h + order for head in range(d // d_h + g)])   # query heads, then key heads
        rows = torch.cat([rows, torch.arange(d + g * d_h, d + 2 * g * d_h)])     # value rows as they are
        for name in [n for n in state if n.endswith("attn.qkv.weight") or n.endswith("attn.qkv.bias")]:
            state[name] = state[name][rows]
    copy.load_state_dict(state)
    return copy.eval()


def step_seconds(model_config, steps: int = 20, batch_size: int = 32) -> float:
    """Mean wall seconds of one training step (forward, backward, clip, AdamW) of a fresh TinyGPT with this
    config on random windows of the training text, after two warm-up steps."""
    model = TinyGPT(model_config)
    optimizer = make_optimizer(model, OPTIMIZATION)
    stream = torch.tensor(evals.CHARS.encode(world.load_text("train")[:200_000]))
    generator = torch.Generator().manual_seed(0)
    for i in range(steps + 2):
        if i == 2:
            start = time.perf_counter()
        loss = next_token_loss(model, random_windows(stream, model_config.context + 1, batch_size, generator))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), OPTIMIZATION["grad_clip"])
        optimizer.step()
    return (time.perf_counter() - start) / steps
