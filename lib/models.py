"""The transformer models of the book, in one readable file.

`MaskedTransformer` is a pre-LayerNorm transformer whose attention mask is
given by the caller: causal (GPT), bidirectional (BERT) or prefix (prefix LM).
`TinyGPT` is the same network that always uses the causal mask; at its
defaults (V=44, T=96, d=64, L=2, 4 heads) it has exactly 109,056 parameters:

    >>> sum(p.numel() for p in TinyGPT().parameters())
    109056

With return_attention=True attention is computed explicitly (softmax of
masked scores) and its weights are returned, to be drawn; otherwise PyTorch's
fused scaled_dot_product_attention computes the same thing faster (the two
agree to float rounding, a test checks).  Masks are boolean, True = may attend.
"""

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 44     # V
    context: int = 96        # T, the number of learned positions
    d_model: int = 64        # d
    n_layers: int = 2        # L
    n_heads: int = 4

    def __post_init__(self):
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")

    def to_dict(self):
        return asdict(self)


def parameter_count(config: ModelConfig) -> int:
    """Parameters of a MaskedTransformer, from the formula.

    Per block: two LayerNorms (2·2d), qkv (d·3d + 3d), attention output
    (d·d + d), MLP up (d·4d + 4d) and down (4d·d + d) = 12d² + 13d.
    Plus token and position embeddings and the final LayerNorm; the output
    layer is tied to the token embedding, so it adds nothing.
    """
    V, T, d, L = config.vocab_size, config.context, config.d_model, config.n_layers
    return V * d + T * d + L * (12 * d * d + 13 * d) + 2 * d


def causal_mask(T: int) -> torch.Tensor:
    """(T, T) bool, True on and below the diagonal: position i sees 0..i."""
    return torch.ones(T, T, dtype=torch.bool).tril()


def bidirectional_mask(T: int) -> torch.Tensor:
    """(T, T) bool, all True: every position sees every position."""
    return torch.ones(T, T, dtype=torch.bool)


def prefix_mask(T: int, prefix: int) -> torch.Tensor:
    """Causal, except that the first `prefix` positions see each other fully.

    prefix=1 is the causal mask (GPT); prefix=T is bidirectional (BERT)."""
    if not 0 <= prefix <= T:
        raise ValueError(f"prefix length {prefix} outside 0..{T}")
    mask = causal_mask(T)
    mask[:prefix, :prefix] = True
    return mask


class SelfAttention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.n_heads = config.n_heads
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.proj = nn.Linear(config.d_model, config.d_model)

    def forward(self, x, mask, return_weights=False):
        B, T, d = x.shape
        h = self.n_heads
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (t.view(B, T, h, d // h).transpose(1, 2) for t in (q, k, v))  # (B, h, T, d_h)
        if return_weights:  # the explicit path, to show the weights
            # Scale by sqrt(d_h) so scores keep unit variance at init (Vaswani et al. §3.2.1).
            scores = q @ k.transpose(-2, -1) / math.sqrt(d // h)                # (B, h, T, T)
            scores = scores.masked_fill(~mask[:, None], float("-inf"))
            weights = scores.softmax(dim=-1)
            y = weights @ v                                                     # (B, h, T, d_h)
        else:  # the same computation fused by PyTorch: about 25% faster training on CPU
            weights = None
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None])
        return self.proj(y.transpose(1, 2).reshape(B, T, d)), weights


class MLP(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.fc = nn.Linear(config.d_model, 4 * config.d_model)
        self.fc2 = nn.Linear(4 * config.d_model, config.d_model)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc(x)))


class Block(nn.Module):
    """Pre-LN: x + attn(ln(x)), then x + mlp(ln(x)); the residual path stays clean."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.d_model)
        self.attn = SelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.d_model)
        self.mlp = MLP(config)

    def forward(self, x, mask, return_weights=False):
        a, weights = self.attn(self.ln_1(x), mask, return_weights)
        x = x + a
        x = x + self.mlp(self.ln_2(x))
        return x, weights


class MaskedTransformer(nn.Module):
    """Token + position embeddings, `n_layers` blocks, final LayerNorm, tied output.

    forward(idx, mask) -> logits (B, T, V); with return_attention=True also
    a list of per-layer attention weights, each (B, n_heads, T, T).
    """

    def __init__(self, config: ModelConfig = ModelConfig()):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.d_model)
        self.wpe = nn.Embedding(config.context, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.ln_f = nn.LayerNorm(config.d_model)
        self.apply(self._init_weights)
        for block in self.blocks:  # GPT-2: shrink the writes into the residual stream with depth
            for linear in (block.attn.proj, block.mlp.fc2):
                nn.init.normal_(linear.weight, std=0.02 / math.sqrt(2 * config.n_layers))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear):
            nn.init.zeros_(module.bias)

    def check_input(self, idx, mask):
        """Raise a ValueError that says what is wrong with idx or mask."""
        if not isinstance(idx, torch.Tensor) or idx.dtype != torch.long:
            raise ValueError(f"token ids must be a torch.long tensor, got {type(idx).__name__} "
                             f"{getattr(idx, 'dtype', '')}".rstrip())
        if idx.dim() != 2:
            raise ValueError(f"token ids must have shape (batch, time), got {tuple(idx.shape)}")
        B, T = idx.shape
        if not 1 <= T <= self.config.context:
            raise ValueError(f"sequence length {T} outside 1..{self.config.context} (the model's context)")
        if idx.numel() and not (0 <= int(idx.min()) and int(idx.max()) < self.config.vocab_size):
            raise ValueError(f"token ids must lie in 0..{self.config.vocab_size - 1}, "
                             f"got {int(idx.min())}..{int(idx.max())}")
        if mask.dtype != torch.bool or mask.shape not in ((T, T), (B, T, T)):
            raise ValueError(f"mask must be bool of shape ({T}, {T}) or ({B}, {T}, {T}), "
                             f"got {mask.dtype} {tuple(mask.shape)}")

    def forward(self, idx, mask, return_attention=False):
        self.check_input(idx, mask)
        B, T = idx.shape
        mask = mask.expand(B, T, T)
        x = self.wte(idx) + self.wpe(torch.arange(T))          # (B, T, d): the residual stream
        attention = []
        for block in self.blocks:
            x, weights = block(x, mask, return_attention)
            attention.append(weights)
        logits = self.ln_f(x) @ self.wte.weight.T              # (B, T, V), tied output layer
        return (logits, attention) if return_attention else logits


class TinyGPT(MaskedTransformer):
    """The book's base model: a MaskedTransformer that always uses the causal mask."""

    def forward(self, idx, return_attention=False):
        T = idx.shape[-1] if isinstance(idx, torch.Tensor) and idx.dim() else 0
        return super().forward(idx, causal_mask(T), return_attention)
