"""Multi-head latent attention (DeepSeek-AI 2024, DeepSeek-V2 §2.1): the KV cache holds one small latent per token.

    LatentAttention(d=64, n_heads=4, latent=32, rope=8)      # what `models.ModelConfig(kv_latent=32)` builds

Multi-head attention caches a key and a value per head, 2·h·d_h numbers per token and layer.  MLA caches instead
c = W_DKV x, a latent of d_c numbers, and rebuilds every head's key and value from it: k_i = W_UK,i c,
v_i = W_UV,i c.  Rotary embeddings do not fit that: a rotation that depends on the key's position sits between
W_UK,i and the query, so W_UK,i could no longer be folded away (below).  The position therefore travels in a
separate, "decoupled" part: each head's query gets d_R more features q_R,i, and one key k_R = RoPE(W_KR x) of d_R
features, shared by all heads, is cached beside the latent.  A score is

    q_i·k_i = (q_C,i · W_UK,i c + q_R,i · k_R) / sqrt(d_h + d_R)

and the cache holds d_c + d_R numbers per token and layer.

Absorption: q_C,i · (W_UK,i c) = (W_UK,iᵀ q_C,i) · c, so a head's query can be moved into the latent's space once
per query instead of expanding every cached latent into keys; likewise the values stay latents until after the
softmax: the head's output is W_UV,i Σ_j a_ij c_j (W_O W_UV,i could be precomputed as one matrix; this code applies
the two in turn, which costs the same per query and keeps W_O shared with the naive path).  `absorbed=True` computes that way; the scores and outputs are
the naive path's up to float rounding (a test checks), and the softmax scale stays 1/sqrt(d_h + d_R), the
un-absorbed head's, although the vectors that meet are now d_c + d_R long.

Left out of DeepSeek-V2's layer, as in its equations (9)-(11): the low-rank query projection (it saves training
memory, not cache) and the RMSNorm its code applies to the latent.  This module depends on torch and
`modern.apply_rope` only.
"""

import math

import torch
import torch.nn as nn

from lib.nn.attention import attend
from lib.nn.modern import apply_rope


class LatentAttention(nn.Module):
    """MLA with n_heads heads of width d_h = d / n_heads, a key/value latent of `latent` numbers and a decoupled
    RoPE key of `rope` numbers (0: no rotary part, for a model with learned positions).  forward has
    `models.SelfAttention`'s signature; its cache (`models.LayerCache`) holds (latent, rope key), each
    (B, 1, t, ·)."""

    def __init__(self, d: int, n_heads: int, latent: int, rope: int, bias: bool = True, interleaved: bool = False):
        super().__init__()
        if d % n_heads:
            raise ValueError(f"d={d} is not divisible by n_heads={n_heads}")
        if rope % 2:
            raise ValueError(f"the decoupled RoPE key pairs features: rope must be even, got {rope}")
        self.n_heads, self.d_h, self.latent, self.rope = n_heads, d // n_heads, latent, rope
        self.interleaved, self.absorbed = interleaved, False
        self.q = nn.Linear(d, n_heads * (self.d_h + rope), bias=bias)      # W_Q and W_QR: per head [q_C | q_R]
        self.down = nn.Linear(d, latent + rope, bias=bias)                 # W_DKV and W_KR: what the cache keeps
        self.up = nn.Linear(latent, 2 * d, bias=False)                     # W_UK and W_UV: every head's k_C and v
        self.proj = nn.Linear(d, d, bias=bias)                             # W_O

    def up_matrices(self):
        """(W_UK, W_UV), each (h, d_h, d_c): head i's key is W_UK[i] @ c, its value W_UV[i] @ c."""
        return self.up.weight.view(2, self.n_heads, self.d_h, self.latent).unbind(0)

    def forward(self, x, mask, return_weights=False, past=None, positions=None):
        B, T, _ = x.shape
        q = self.q(x).view(B, T, self.n_heads, self.d_h + self.rope).transpose(1, 2)      # (B, h, T, d_h + d_R)
        q_c, q_r = q.split((self.d_h, self.rope), dim=-1)
        c, k_r = (t[:, None] for t in self.down(x).split((self.latent, self.rope), dim=-1))   # (B, 1, T, .)
        if self.rope:
            if positions is None:      # positions continue the cache's
                start = 0 if past is None else len(past)
                positions = torch.arange(start, start + T)
            q_r = apply_rope(q_r, positions, interleaved=self.interleaved)
            k_r = apply_rope(k_r, positions, interleaved=self.interleaved)
        if past is not None:
            c, k_r = past.extend(c, k_r)
        scale = 1 / math.sqrt(self.d_h + self.rope)               # the un-absorbed head's width, on both paths
        w_uk, w_uv = self.up_matrices()
        if self.absorbed:   # queries into the latent's space; values stay latents until after the softmax
            query = torch.cat([q_c @ w_uk, q_r], dim=-1)                            # (B, h, T, d_c + d_R)
            key = torch.cat([c, k_r], dim=-1)                                       # (B, 1, t, d_c + d_R)
            y_latent, weights = attend(query, key.expand(B, self.n_heads, -1, -1),
                                       c.expand(B, self.n_heads, -1, -1), mask, return_weights, scale=scale)
            y = y_latent @ w_uv.transpose(1, 2)                                     # (B, h, T, d_h)
        else:               # every cached latent expanded into each head's key and value
            k = torch.cat([c @ w_uk.transpose(1, 2), k_r.expand(B, self.n_heads, -1, -1)], dim=-1)
            y, weights = attend(torch.cat([q_c, q_r], dim=-1), k, c @ w_uv.transpose(1, 2), mask, return_weights,
                                scale=scale)
        return self.proj(y.transpose(1, 2).reshape(B, T, -1)), weights


def absorb(model, on: bool = True):
    """Switch every LatentAttention layer of `model` to the absorbed path (on) or the naive one; returns model."""
    for module in model.modules():
        if isinstance(module, LatentAttention):
            module.absorbed = on
    return model
