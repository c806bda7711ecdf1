"""The parts a LLaMA-style decoder swaps into the book's block (section 09): RMSNorm, the SwiGLU MLP and rotary
position embeddings.  `models.ModelConfig` switches each on (`norm`, `mlp`, `position`); this module depends on
torch alone.

    RMSNorm(d)(x)                          x / rms(x) * g: LayerNorm without the mean and the bias
    SwiGLU(d, hidden)(x)                   W_2 (silu(W_1 x) * W_3 x): three matrices, a gated MLP
    apply_rope(q, positions)               rotate each pair of q's features by an angle proportional to the position

Why RMSNorm works as well as LayerNorm (Zhang & Sennrich 2019): what stabilises training is the rescaling, not
the re-centring, and dropping the mean saves a reduction.  On a vector whose mean is already 0 the two agree:

    >>> x = torch.randn(3, 8); x = x - x.mean(-1, keepdim=True)
    >>> torch.allclose(RMSNorm(8, eps=1e-5)(x), torch.nn.functional.layer_norm(x, (8,), eps=1e-5), atol=1e-6)
    True

Rotary embeddings (Su et al. 2021) make a query at position m and a key at position n meet through the angle
(m - n)·θ_i only: a rotation by mθ, then by nθ, leaves q·k a function of m - n.  `apply_rope` uses the rotate-half
layout (feature i pairs with feature i + d/2, as GPT-NeoX and LLaMA's Hugging Face port do); the original RoFormer
and Meta's LLaMA code pair neighbours (2i, 2i + 1), `interleaved=True`.  The two give the same scores once the rows
of W_q and W_k are permuted (`half_to_interleaved`): loading one layout's weights into the other's code is a
classic porting bug.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    """x / sqrt(mean(x²) + eps) * weight over the last dimension; the weight starts at 1 and there is no bias."""

    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class SwiGLU(nn.Module):
    """Shazeer (2020)'s gated MLP: fc2(silu(gate(x)) * fc(x)).  Three d×hidden matrices against the GELU MLP's two
    d×4d, so hidden = 8d/3 spends the same 8d² parameters.  `fc2` writes into the residual stream (and gets the
    smaller initialisation of `models.init_weights`, as the GELU MLP's fc2 does)."""

    def __init__(self, d: int, hidden: int, bias: bool = True):
        super().__init__()
        self.gate = nn.Linear(d, hidden, bias=bias)
        self.fc = nn.Linear(d, hidden, bias=bias)
        self.fc2 = nn.Linear(hidden, d, bias=bias)

    def forward(self, x):
        return self.fc2(F.silu(self.gate(x)) * self.fc(x))


def rope_angles(positions, d_head: int, base: float = 10000.0):
    """(..., d_head / 2) angles m·θ_i with θ_i = base^(-2i / d_head) for positions (...), in float64 (cast by the
    caller)."""
    if d_head % 2:
        raise ValueError(f"rotary embeddings pair features: d_head must be even, got {d_head}")
    theta = base ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
    return torch.as_tensor(positions, dtype=torch.float64)[..., None] * theta


def apply_rope(x, positions, base: float = 10000.0, interleaved: bool = False):
    """x (..., T, d_head) rotated pair by pair: the pair's angle is position·θ_i (`rope_angles`).  positions is
    (T,), or (B, T) for x (B, heads, T, d_head) whose rows sit at positions of their own (a left-padded batch).
    Rotate-half pairs feature i with i + d_head/2; interleaved pairs 2i with 2i + 1.  Norms are preserved."""
    T, d_head = x.shape[-2:]
    positions = torch.as_tensor(positions)
    if positions.shape[-1] != T:
        raise ValueError(f"{positions.shape[-1]} positions for {T} rows")
    angles = rope_angles(positions, d_head, base)
    if angles.dim() == 3:                                                       # (B, T, .) -> (B, 1, T, .)
        angles = angles[:, None]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)              # (T, d_head / 2)
    if interleaved:
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)
    first, second = x[..., : d_head // 2], x[..., d_head // 2:]
    return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)


def half_to_interleaved(d_head: int):
    """The order of features that turns rotate-half pairs into interleaved ones: feature i and i + d/2 go to
    2i and 2i + 1.  Permuting the rows of each head's W_q and W_k by it makes interleaved RoPE give the scores
    that rotate-half RoPE gives with the original rows."""
    half = d_head // 2
    return torch.stack([torch.arange(half), torch.arange(half) + half], dim=1).flatten()
