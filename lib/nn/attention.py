"""Attention's arithmetic, shared by every attention layer of the book (`models.SelfAttention`, `models.CrossAttention`,
`latent.LatentAttention`): heads split and merged, and scaled dot-product attention with an explicit path that
returns the weights (to be drawn) and PyTorch's fused one.  Depends on torch alone."""

import math

import torch.nn.functional as F


def attend(q, k, v, mask, return_weights=False, scale=None):
    """Scaled dot-product attention of q (B, h, Tq, d_k) over k (B, h, Tk, d_k), v (B, h, Tk, d_v); mask (B, Tq, Tk).
    The scores are divided by sqrt(d_k), or multiplied by `scale` when given (MLA keeps its un-absorbed head's)."""
    if return_weights:  # the explicit path, to show the weights
        # Scale by sqrt(d_h): unit-variance q, k components give q·k a variance of d_h (Vaswani et al. §3.2.1).
        # Under this book's N(0, 0.02) init the scores start near 0 with or without it (§02 measures both).
        scores = q @ k.transpose(-2, -1)
        scores = scores / math.sqrt(q.size(-1)) if scale is None else scores * scale           # (B, h, Tq, Tk)
        weights = scores.masked_fill(~mask[:, None], float("-inf")).softmax(dim=-1)
        return weights @ v, weights                                            # (B, h, Tq, d_h)
    # The same computation fused by PyTorch: about 25% faster training on CPU.
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None], scale=scale), None


def split_heads(x, n_heads):
    """(B, T, d) -> (B, n_heads, T, d / n_heads)."""
    B, T, d = x.shape
    return x.view(B, T, n_heads, d // n_heads).transpose(1, 2)


def merge_heads(y):
    """(B, n_heads, T, d_h) -> (B, T, n_heads * d_h)."""
    B, h, T, d_h = y.shape
    return y.transpose(1, 2).reshape(B, T, h * d_h)
