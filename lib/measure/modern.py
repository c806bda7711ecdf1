"""Section 09's measurements of the modern decoder's parts.

- `bits_by_kind`: validation bits per character on each kind of line, and on all of them;
- `distance_mask` / `same_line_mask`: attention masks for `evals.position_bits(model, windows, allowed)`: only
  some distances, or only the position's own line;
- `shift_gap`: how much a model's logits move when every position is shifted by the same amount (RoPE: by
  float rounding only, since its scores depend on m - n);
- `ported`: a RoPE model's weights run by code that pairs features the other way, with and without the row
  permutation that makes it right (`modern.half_to_interleaved`);
"""

from dataclasses import replace

import torch

from lib.data import world
from lib.measure import evals
from lib.nn.models import TinyGPT
from lib.nn.modern import half_to_interleaved


def bits_by_kind(model, lines: list = None) -> dict:
    """{kind: bits/char on the validation lines of that kind (`evals.bits_per_char`), "all": on every line,
    "no additions": on every line but the additions (the kinds' bits weighted by their characters)}."""
    lines = world.load_text("val").splitlines() if lines is None else lines
    chosen = {kind: [line for line in lines if world.kind_of(line) == kind] for kind in world.KINDS}
    out = {kind: evals.bits_per_char(model, chosen[kind]) for kind in world.KINDS}
    chars = {kind: sum(len(line) + 1 for line in chosen[kind]) for kind in world.KINDS}
    weighted = lambda kinds: sum(out[k] * chars[k] for k in kinds) / sum(chars[k] for k in kinds)
    every = sum(chars.values()) == sum(len(line) + 1 for line in lines)      # every line has a kind: no second pass
    return {**out, "all": weighted(world.KINDS) if every else evals.bits_per_char(model, lines),
            "no additions": weighted([k for k in world.KINDS if k != "addition"])}


def distance_mask(T: int, distances) -> torch.Tensor:
    """(T, T): query i may attend to key j when i - j is one of `distances` (0 included: itself)."""
    i, j = torch.arange(T)[:, None], torch.arange(T)[None]
    return torch.isin(i - j, torch.as_tensor(list(distances)))


def same_line_mask(windows) -> torch.Tensor:
    """(N, T, T) for windows (N, T + 1): causal, and a position attends only within its own line, a newline
    opening the line after it (as `evals.line_batch` reads a line: after a newline, nothing before it)."""
    inputs = windows[:, :-1]
    line = torch.cumsum(inputs == evals.NEWLINE_CHAR, dim=1)
    T = inputs.shape[1]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    return causal & (line[:, :, None] == line[:, None, :])


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
