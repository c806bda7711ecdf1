"""The transformer models of the book, in one readable file.

`MaskedTransformer` is a pre-LayerNorm transformer whose attention mask is
given by the caller: causal (GPT), bidirectional (BERT) or prefix (prefix LM).
`TinyGPT` is the same network that always uses the causal mask; at its
defaults (V=44, T=96, d=64, L=2, 4 heads) it has exactly 109,056 parameters:

    >>> sum(p.numel() for p in TinyGPT().parameters())
    109056

`forward_with_attention` computes attention explicitly (softmax of masked
scores) and returns its weights too, to be drawn; `forward` lets PyTorch's
fused scaled_dot_product_attention compute the same thing faster (the two
agree to float rounding, a test checks).  Masks are boolean, True = may attend.
"""

import math
from dataclasses import asdict, dataclass, fields, replace

import torch
import torch.nn as nn
import torch.nn.functional as F

from lib.nn.attention import attend, merge_heads, split_heads  # noqa: F401 (split_heads, merge_heads: public here)
from lib.nn.latent import LatentAttention
from lib.nn.masks import causal_mask, encoder_decoder_masks
from lib.nn.modern import RMSNorm, SwiGLU, apply_rope


@dataclass(frozen=True, repr=False)
class ModelConfig:
    vocab_size: int = 44     # V
    context: int = 96        # T, the number of learned positions
    d_model: int = 64        # d
    n_layers: int = 2        # L
    n_heads: int = 4
    # Section 09's switches, each off by default (today's TinyGPT); to_dict leaves out those at their default,
    # so every recipe written before them keeps its key.
    norm: str = "layernorm"     # or "rmsnorm"
    mlp: str = "gelu"           # or "swiglu"
    mlp_hidden: int = None      # the MLP's hidden width; None: 4d (GELU), round(8d/3) (SwiGLU: the same 8d² weights)
    position: str = "learned"   # or "rope": no position table, q and k rotated (`modern.apply_rope`)
    rope_layout: str = "half"   # which features RoPE pairs: "half" (i, i + d_h/2) or "interleaved" (2i, 2i + 1)
    kv_heads: int = None        # key/value heads g: None = n_heads (multi-head), 1 = multi-query
    bias: bool = True           # biases in every linear layer and LayerNorm
    tie_output: bool = True     # the output layer is the token embedding (else a matrix of its own)
    kv_latent: int = None       # section 10: multi-head latent attention with a key/value latent of this many numbers
                                # (`latent.LatentAttention`; with RoPE, a decoupled key of d_h / 2); None: per-head keys

    def __post_init__(self):
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        for key, allowed in (("norm", ("layernorm", "rmsnorm")), ("mlp", ("gelu", "swiglu")),
                             ("position", ("learned", "rope")), ("rope_layout", ("half", "interleaved"))):
            if getattr(self, key) not in allowed:
                raise ValueError(f"{key}={getattr(self, key)!r}: choose from {allowed}")
        if self.kv_heads is not None and not (1 <= self.kv_heads <= self.n_heads and self.n_heads % self.kv_heads == 0):
            raise ValueError(f"kv_heads={self.kv_heads} must divide n_heads={self.n_heads}")
        if self.kv_latent is not None and (self.kv_heads is not None or self.kv_latent < 1):
            raise ValueError(f"kv_latent={self.kv_latent}: a positive latent width, and no kv_heads (MLA shares one "
                             f"latent among all heads)")
        if self.rope_key % 2:
            raise ValueError(f"MLA's decoupled RoPE key is half a head ({self.rope_key}): the head size must be a "
                             f"multiple of 4, got {self.d_model // self.n_heads}")
        if self.position == "rope" and (self.d_model // self.n_heads) % 2:
            raise ValueError(f"rotary embeddings need an even head size, got {self.d_model // self.n_heads}")

    @property
    def groups(self) -> int:
        """g, the number of key/value heads."""
        return self.kv_heads or self.n_heads

    @property
    def rope_key(self) -> int:
        """d_R, the width of MLA's decoupled RoPE key (half a head, as in DeepSeek-V2); 0 without RoPE or MLA."""
        return (self.d_model // self.n_heads) // 2 if self.kv_latent and self.position == "rope" else 0

    @property
    def hidden(self) -> int:
        """The MLP's hidden width."""
        return self.mlp_hidden or (4 * self.d_model if self.mlp == "gelu" else round(8 * self.d_model / 3))

    def switches(self) -> dict:
        """Section 09's switches that are on: {name: value} of those not at their default."""
        return {f.name: getattr(self, f.name) for f in fields(ModelConfig)[5:] if getattr(self, f.name) != f.default}

    def __repr__(self):     # the switches at their defaults left out, as in to_dict: today's models print as before
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.to_dict().items())})"

    def to_dict(self):
        on, defaults = self.switches(), {f.name for f in fields(ModelConfig)[5:]}
        return {k: v for k, v in asdict(self).items() if k not in defaults or k in on}


def parameter_count(config: ModelConfig) -> int:
    """Parameters of a MaskedTransformer, from the formula.

    Per block: two LayerNorms (2·2d), qkv (d·3d + 3d), attention output
    (d·d + d), MLP up (d·4d + 4d) and down (4d·d + d) = 12d² + 13d.
    Plus token and position embeddings and the final LayerNorm; the output
    layer is tied to the token embedding, so it adds nothing.
    """
    V, T, d, L = config.vocab_size, config.context, config.d_model, config.n_layers
    # The same sum with section 09's switches (all off, it is the formula above): norms (weight, and a bias for LayerNorm with biases), attention (q: d·d,
    # k and v: d·g·d_h each, output d·d), the MLP (two or three matrices), each matrix's bias when bias=True.
    b, kv, h = int(config.bias), config.groups * (d // config.n_heads), config.hidden
    norm = d * (1 + (config.norm == "layernorm" and config.bias))
    attention = 2 * d * d + 2 * d * kv + b * (2 * d + 2 * kv)
    if config.kv_latent:   # MLA: W_Q with each head's RoPE part, W_DKV and W_KR, W_UK and W_UV (no bias), W_O
        c, r, q = config.kv_latent, config.rope_key, d + config.n_heads * config.rope_key
        attention = d * q + d * (c + r) + c * 2 * d + d * d + b * (q + c + r + d)
    mlp = (2 * d * h + b * (h + d)) if config.mlp == "gelu" else (3 * d * h + b * (2 * h + d))
    return (V * d + T * d * (config.position == "learned") + L * (2 * norm + attention + mlp) + norm
            + V * d * (not config.tie_output))


class SelfAttention(nn.Module):
    """Multi-head self-attention; with config.kv_heads = g < n_heads, grouped-query attention: g key/value
    heads, each shared by n_heads / g query heads (g = 1: multi-query).  With config.position = "rope" the
    queries and keys are rotated by their positions before they meet."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.n_heads, self.groups, self.rope = config.n_heads, config.groups, config.position == "rope"
        self.interleaved = config.rope_layout == "interleaved"
        d_kv = self.groups * (config.d_model // config.n_heads)
        self.sizes = (config.d_model, d_kv, d_kv)
        self.qkv = nn.Linear(config.d_model, sum(self.sizes), bias=config.bias)   # W_Q, W_K, W_V in one matrix
        self.proj = nn.Linear(config.d_model, config.d_model, bias=config.bias)  # W_O

    def forward(self, x, mask, return_weights=False, past=None, positions=None):
        q, k, v = self.qkv(x).split(self.sizes, dim=2)
        q, k, v = split_heads(q, self.n_heads), split_heads(k, self.groups), split_heads(v, self.groups)
        if self.rope:              # positions continue the cache's when none are given
            if positions is None:
                start = 0 if past is None else len(past)
                positions = torch.arange(start, start + x.shape[1])
            q, k = (apply_rope(t, positions, interleaved=self.interleaved) for t in (q, k))
        if past is not None:       # a LayerCache: the earlier positions' keys and values come first (g heads)
            k, v = past.extend(k, v)
        if self.groups != self.n_heads:   # each key/value head serves n_heads / g consecutive query heads
            k, v = (t.repeat_interleave(self.n_heads // self.groups, dim=1) for t in (k, v))
        y, weights = attend(q, k, v, mask, return_weights)
        return self.proj(merge_heads(y)), weights


class CrossAttention(nn.Module):
    """Queries from the decoder, keys and values from the encoder's output."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.n_heads = config.n_heads
        self.q = nn.Linear(config.d_model, config.d_model)
        self.kv = nn.Linear(config.d_model, 2 * config.d_model)
        self.proj = nn.Linear(config.d_model, config.d_model)

    def forward(self, x, memory, mask, return_weights=False):
        q = split_heads(self.q(x), self.n_heads)
        k, v = (split_heads(t, self.n_heads) for t in self.kv(memory).split(x.size(-1), dim=2))
        y, weights = attend(q, k, v, mask, return_weights)
        return self.proj(merge_heads(y)), weights


class MLP(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.fc = nn.Linear(config.d_model, config.hidden, bias=config.bias)
        self.fc2 = nn.Linear(config.hidden, config.d_model, bias=config.bias)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc(x)))


def make_norm(config: ModelConfig):
    """The block's normalisation: LayerNorm (its bias follows config.bias) or RMSNorm."""
    if config.norm == "rmsnorm":
        return RMSNorm(config.d_model)
    return nn.LayerNorm(config.d_model, bias=config.bias)


def make_mlp(config: ModelConfig):
    return MLP(config) if config.mlp == "gelu" else SwiGLU(config.d_model, config.hidden, config.bias)


def make_attention(config: ModelConfig):
    """Multi-head, grouped-query or multi-query attention (`SelfAttention`), or multi-head latent attention."""
    if config.kv_latent:
        return LatentAttention(config.d_model, config.n_heads, config.kv_latent, config.rope_key, config.bias,
                               config.rope_layout == "interleaved")
    return SelfAttention(config)


class Block(nn.Module):
    """Pre-LN: x + attn(ln(x)), then x + mlp(ln(x)); the residual path stays clean."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.ln_1 = make_norm(config)
        self.attn = make_attention(config)
        self.ln_2 = make_norm(config)
        self.mlp = make_mlp(config)

    def forward(self, x, mask, return_weights=False, past=None, positions=None):
        a, weights = self.attn(self.ln_1(x), mask, return_weights, past, positions)
        x = x + a
        x = x + self.mlp(self.ln_2(x))
        return x, weights


def init_weights(model: nn.Module, n_layers: int):
    """GPT-2 initialisation: N(0, 0.02) weights, zero biases, and the projections that write
    into the residual stream shrunk by sqrt(2 * n_layers) so its variance does not grow with depth."""
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
    for name, module in model.named_modules():
        if name.endswith(("attn.proj", "cross.proj", "mlp.fc2")):
            nn.init.normal_(module.weight, std=0.02 / math.sqrt(2 * n_layers))


def check_ids(idx, config: ModelConfig, what: str = "token ids"):
    """Raise a ValueError that says what is wrong with a (batch, time) tensor of token ids."""
    if not isinstance(idx, torch.Tensor) or idx.dtype != torch.long:
        raise ValueError(f"{what} must be a torch.long tensor, got {type(idx).__name__} "
                         f"{getattr(idx, 'dtype', '')}".rstrip())
    if idx.dim() != 2:
        raise ValueError(f"{what} must have shape (batch, time), got {tuple(idx.shape)}")
    if not 1 <= idx.shape[1] <= config.context:
        raise ValueError(f"sequence length {idx.shape[1]} outside 1..{config.context} (the model's context)")
    if not (0 <= int(idx.min()) and int(idx.max()) < config.vocab_size):
        raise ValueError(f"{what} must lie in 0..{config.vocab_size - 1}, got {int(idx.min())}..{int(idx.max())}")


def check_mask(mask, B: int, rows: int, cols: int, what: str = "mask"):
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or tuple(mask.shape) not in (
            (rows, cols), (B, rows, cols)):
        raise ValueError(f"{what} must be bool of shape ({rows}, {cols}) or ({B}, {rows}, {cols}), "
                         f"got {getattr(mask, 'dtype', type(mask).__name__)} {tuple(getattr(mask, 'shape', ()))}")
    # A query that may attend to no key has no softmax (the explicit path gives NaN, the fused one
    # an arbitrary number), so such a mask is refused rather than computed two different ways.
    empty = ~mask.any(dim=-1)
    if empty.any():
        where = empty.nonzero()[0].tolist()
        raise ValueError(f"{what} lets query row {where[-1]}{f' of batch item {where[0]}' if len(where) == 2 else ''} "
                         f"attend to no position; every row needs at least one True")
    return mask.expand(B, rows, cols)


class MaskedTransformer(nn.Module):
    """Token + position embeddings, `n_layers` blocks, final LayerNorm, tied output.

    forward(idx, mask) -> logits (B, T, V); forward_with_attention(idx, mask) -> (logits, a list of
    per-layer attention weights, each (B, n_heads, T, T)).
    """

    def __init__(self, config: ModelConfig = ModelConfig()):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.d_model)
        if config.position == "learned":
            self.wpe = nn.Embedding(config.context, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.ln_f = make_norm(config)
        if not config.tie_output:
            self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        init_weights(self, config.n_layers)

    def embed(self, idx, start: int = 0, positions=None):
        """The residual stream's start (B, T, d): token embeddings, plus learned positions start.. (or each row's
        own `positions` (B, T)) if the model has a position table."""
        x = self.wte(idx)
        if self.config.position == "learned":
            x = x + self.wpe(torch.arange(start, start + idx.shape[1]) if positions is None else positions)
        return x

    def output(self, h):
        """Logits (..., V) of hidden states h (..., d): the tied token embedding, or lm_head when untied."""
        return h @ self.wte.weight.T if self.config.tie_output else self.lm_head(h)

    def _stream(self, idx, mask, return_attention, start: int = 0, positions=None):
        """(the residual stream after the final LayerNorm (B, T, d), attention weights or Nones per layer).
        `mask` is one mask for every layer, or a list of one per layer (an ablation in section 02); the tokens
        sit at positions start, start + 1, ... (section 09 shifts them), or at each row's own `positions` (B, T)
        (section 11's packed rows restart them at every example)."""
        check_ids(idx, self.config)
        B, T = idx.shape
        if not 0 <= start <= self.config.context - T:
            raise ValueError(f"positions {start}..{start + T - 1} outside the model's context 0..{self.config.context - 1}")
        masks = list(mask) if isinstance(mask, (list, tuple)) else [mask] * len(self.blocks)
        if len(masks) != len(self.blocks):
            raise ValueError(f"one mask per layer: {len(self.blocks)} layers, got {len(masks)} masks")
        masks = [check_mask(m, B, T, T) for m in masks]
        if positions is not None and (start or positions.dtype != torch.long or positions.shape != idx.shape
                                      or positions.min() < 0 or positions.max() >= self.config.context):
            raise ValueError(f"positions must be (B, T) = {tuple(idx.shape)} integer ids in 0..{self.config.context - 1}, "
                             "and replace start (give one of them)")
        x = self.embed(idx, start, positions)                   # (B, T, d): the residual stream
        own = torch.arange(start, start + T) if positions is None else positions
        rope = {"positions": own} if self.config.position == "rope" else {}
        attention = []
        for block, mask in zip(self.blocks, masks):
            x, weights = block(x, mask, return_attention, **rope)
            attention.append(weights)
        return self.ln_f(x), attention

    def hidden_states(self, idx, mask, start: int = 0, positions=None):
        """The residual stream after the final LayerNorm, (B, T, d)."""
        return self._stream(idx, mask, False, start, positions)[0]

    def forward(self, idx, mask, start: int = 0, positions=None):
        return self.output(self.hidden_states(idx, mask, start, positions))    # (B, T, V)

    def forward_with_attention(self, idx, mask):
        """(logits (B, T, V), per-layer attention weights), attention computed explicitly."""
        h, attention = self._stream(idx, mask, True)
        return self.output(h), attention


def _length(idx) -> int:
    return idx.shape[-1] if isinstance(idx, torch.Tensor) and idx.dim() else 0


class LayerCache:
    """What one layer keeps of the positions computed so far, tensors (B, heads, t, width): keys and values of the
    g key/value heads (`SelfAttention`), or the latent and the RoPE key (`latent.LatentAttention`, one "head";
    `k` and `v` then name those two)."""

    def __init__(self):
        self.tensors = ()       # views of the first len(self) positions of `_room`
        self._room = ()         # the tensors with room for more positions: appending writes into them

    def extend(self, *new):
        """Append the new positions' tensors; return all of them.  They are written into tensors with room to
        spare (twice what is needed whenever they fill up), so a step copies its own positions only, not the
        whole cache again (concatenating every step: 4,000 lines of 96 characters spent a third of their time
        copying; scripts/bench_measurement_speed.py)."""
        held, added = len(self), new[0].shape[2]
        if not self._room or held + added > self._room[0].shape[2]:
            room = tuple(t.new_empty(*t.shape[:2], 2 * (held + added), t.shape[3]) for t in new)
            for bigger, old in zip(room, self.tensors):
                bigger[:, :, :held] = old
            self._room = room
        for into, t in zip(self._room, new):
            into[:, :, held:held + added] = t
        self.tensors = tuple(t[:, :, :held + added] for t in self._room)
        return self.tensors

    def __len__(self):
        return self.tensors[0].shape[2] if self.tensors else 0

    def keep_rows(self, keep) -> None:
        """Keep only the batch rows where `keep` (B,) is True (rows that are done writing leave the cache)."""
        self._room = tuple(t[keep] for t in self._room)
        self.tensors = tuple(t[:, :, :len(self)] for t in self._room)

    def numbers_per_token(self) -> int:
        """Numbers held per cached token and batch row, read off the tensors."""
        return sum(t.shape[1] * t.shape[3] for t in self.tensors)

    @property
    def k(self):
        return self.tensors[0] if self.tensors else None

    @property
    def v(self):
        return self.tensors[1] if self.tensors else None


class KVCache:
    """A causal decoder's keys and values, one `LayerCache` per layer: what a new position attends to."""

    def __init__(self, n_layers: int):
        self.layers = [LayerCache() for _ in range(n_layers)]

    def __len__(self):
        """The number of positions cached."""
        return len(self.layers[0])

    def keep_rows(self, keep) -> None:
        """Keep only the batch rows where `keep` (B,) is True, in every layer."""
        for layer in self.layers:
            layer.keep_rows(keep)


class TinyGPT(MaskedTransformer):
    """The book's base model: a MaskedTransformer that always uses the causal mask."""

    supports_kv_cache = True    # forward_cached gives what forward gives (MoEGPT: False)

    def forward(self, idx, start: int = 0):
        """Logits (B, T, V); the tokens at positions start, start + 1, ... (default 0)."""
        return super().forward(idx, causal_mask(_length(idx)), start)

    def forward_with_attention(self, idx):
        return super().forward_with_attention(idx, causal_mask(_length(idx)))

    def forward_cached(self, idx, cache: KVCache, positions=None, real=None):
        """Logits (B, T, V) of tokens idx (B, T) that continue the `len(cache)` positions in `cache`: each new
        position attends to every cached one and causally to the new ones, and their keys and values join the
        cache.  Equal, up to float rounding, to the last T positions of `forward` on the whole sequence, at
        the cost of the new positions only.

        A left-padded batch (`inference.left_pad`) gives each row's position ids (B, T) and `real` (B, len(cache)
        + T), False at padding: no position attends to padding (a padding position attends to itself alone, so
        that its softmax exists; nothing reads it)."""
        if not self.supports_kv_cache:
            raise ValueError(f"{type(self).__name__} does not decode with a KV cache; call forward on the whole sequence")
        start, (B, T) = len(cache), idx.shape
        if start + T > self.config.context:
            raise ValueError(f"{start} cached + {T} new positions exceed the model's context {self.config.context}")
        check_ids(idx, self.config)
        mask = torch.ones(T, start + T, dtype=torch.bool).tril(diagonal=start).expand(B, T, start + T)
        if real is not None:
            itself = torch.arange(start + T)[None, :] == torch.arange(start, start + T)[:, None]     # (T, start + T)
            mask = (mask & real[:, None, :]) | itself
            if positions is None:       # each row's own: its first real token is position 0
                positions = (real.long().cumsum(1) - 1).clamp(min=0)[:, start:]
        x = self.embed(idx, start, positions)
        rope = {"positions": positions} if positions is not None and self.config.position == "rope" else {}
        for block, past in zip(self.blocks, cache.layers):
            x, _ = block(x, mask, past=past, **rope)
        return self.output(self.ln_f(x))


class DecoderBlock(nn.Module):
    """Pre-LN: causal self-attention, then cross-attention to the encoder, then the MLP."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.d_model)
        self.attn = SelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.d_model)
        self.cross = CrossAttention(config)
        self.ln_3 = nn.LayerNorm(config.d_model)
        self.mlp = MLP(config)

    def forward(self, x, memory, self_mask, cross_mask, return_weights=False):
        a, self_weights = self.attn(self.ln_1(x), self_mask, return_weights)
        x = x + a
        c, cross_weights = self.cross(self.ln_2(x), memory, cross_mask, return_weights)
        x = x + c
        return x + self.mlp(self.ln_3(x)), self_weights, cross_weights


def encoder_decoder_parameter_count(config: ModelConfig) -> int:
    """Shared token embedding, two position tables, L encoder blocks (12d² + 13d each) and their
    final LayerNorm, L decoder blocks (16d² + 19d each: a cross-attention more) and the final LayerNorm."""
    V, T, d, L = config.vocab_size, config.context, config.d_model, config.n_layers
    return V * d + 2 * T * d + L * (12 * d * d + 13 * d) + 2 * d + L * (16 * d * d + 19 * d) + 2 * d


class EncoderDecoder(nn.Module):
    """T5-like: a bidirectional encoder reads the source, a causal decoder writes the target while
    cross-attending to the encoder's output.  Token embeddings are shared by both and the output layer.

    forward(source, target) -> logits (B, T, V); masks default to `encoder_decoder_masks`.
    forward_with_attention(...) -> (logits, {"encoder": ..., "decoder": ..., "cross": ...}).
    """

    def __init__(self, config: ModelConfig = ModelConfig()):
        super().__init__()
        if config.switches():
            raise ValueError("section 09's switches are built for decoders (MaskedTransformer); EncoderDecoder has none")
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.d_model)
        self.wpe_encoder = nn.Embedding(config.context, config.d_model)
        self.wpe_decoder = nn.Embedding(config.context, config.d_model)
        self.encoder = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.ln_encoder = nn.LayerNorm(config.d_model)
        self.decoder = nn.ModuleList(DecoderBlock(config) for _ in range(config.n_layers))
        self.ln_f = nn.LayerNorm(config.d_model)
        init_weights(self, 2 * config.n_layers)

    def _encode(self, source, mask, return_attention):
        check_ids(source, self.config, "source ids")
        B, S = source.shape
        mask = check_mask(encoder_decoder_masks(S, 1)["encoder"] if mask is None else mask, B, S, S, "source mask")
        x = self.wte(source) + self.wpe_encoder(torch.arange(S))
        attention = []
        for block in self.encoder:
            x, weights = block(x, mask, return_attention)
            attention.append(weights)
        return self.ln_encoder(x), attention

    def encode(self, source, mask=None):
        """The encoder's output (B, S, d)."""
        return self._encode(source, mask, False)[0]

    def encode_with_attention(self, source, mask=None):
        """(the encoder's output (B, S, d), its attention weights per layer)."""
        return self._encode(source, mask, True)

    def forward(self, source, target, source_mask=None, target_mask=None, cross_mask=None):
        return self._forward(source, target, source_mask, target_mask, cross_mask, False)[0]

    def forward_with_attention(self, source, target, source_mask=None, target_mask=None, cross_mask=None):
        """(logits (B, T, V), {"encoder": [...], "decoder": [...], "cross": [...]} weights per layer)."""
        logits, encoder_attention, decoder_attention, cross_attention = self._forward(
            source, target, source_mask, target_mask, cross_mask, True)
        return logits, {"encoder": encoder_attention, "decoder": decoder_attention, "cross": cross_attention}

    def _forward(self, source, target, source_mask, target_mask, cross_mask, return_attention):
        check_ids(source, self.config, "source ids")
        check_ids(target, self.config, "target ids")
        (B, S), T = source.shape, target.shape[1]
        default = encoder_decoder_masks(S, T)
        memory, encoder_attention = self._encode(source, source_mask, return_attention)
        target_mask = check_mask(default["decoder"] if target_mask is None else target_mask, B, T, T, "target mask")
        cross_mask = check_mask(default["cross"] if cross_mask is None else cross_mask, B, T, S, "cross mask")
        x = self.wte(target) + self.wpe_decoder(torch.arange(T))
        decoder_attention, cross_attention = [], []
        for block in self.decoder:
            x, self_weights, cross_weights = block(x, memory, target_mask, cross_mask, return_attention)
            decoder_attention.append(self_weights)
            cross_attention.append(cross_weights)
        logits = self.ln_f(x) @ self.wte.weight.T                  # (B, T, V)
        return logits, encoder_attention, decoder_attention, cross_attention


class SlotClassifier(nn.Module):
    """A network without an output over words (ELECTRA's discriminator) fine-tuned the BERT way: a new linear
    layer reads its last hidden state at every position into `classes` logits.  forward(idx, mask) ->
    (B, T, classes), so a slot is read exactly like a masked LM's (`lib.measure.protocols.slot_logits`)."""

    def __init__(self, network: MaskedTransformer, classes: int):
        super().__init__()
        self.config = network.config
        self.network = network
        self.head = nn.Linear(network.config.d_model, classes)
        nn.init.normal_(self.head.weight, std=0.02)
        nn.init.zeros_(self.head.bias)

    def forward(self, idx, mask):
        return self.head(self.network.hidden_states(idx, mask))


def pool_kv_heads(model: MaskedTransformer, kv_heads: int) -> MaskedTransformer:
    """A copy of `model` with grouped-query attention: its key/value heads mean-pooled into `kv_heads` groups of
    consecutive heads (Ainslie et al. 2023's conversion of a multi-head checkpoint), every other weight copied.
    Pooling the projection rows pools the keys and values themselves (the projection is linear, and RoPE
    rotates after it)."""
    old = model.config
    if old.kv_latent:
        raise ValueError("a multi-head latent attention model has no key/value heads to pool")
    if old.groups % kv_heads:
        raise ValueError(f"{old.groups} key/value heads do not pool evenly into {kv_heads}")
    pooled = type(model)(replace(old, kv_heads=kv_heads)).to(next(model.parameters()).dtype)
    state, d, d_h = model.state_dict(), old.d_model, old.d_model // old.n_heads
    for name in [n for n in state if n.endswith("attn.qkv.weight") or n.endswith("attn.qkv.bias")]:
        q, k, v = state[name].split((d, old.groups * d_h, old.groups * d_h))
        pool = lambda t: t.reshape(kv_heads, old.groups // kv_heads, d_h, *t.shape[1:]).mean(1).flatten(0, 1)
        state[name] = torch.cat([q, pool(k), pool(v)])
    pooled.load_state_dict(state)
    return pooled


def kv_numbers_per_token(config: ModelConfig) -> int:
    """Numbers a KV cache holds per token: a key and a value of d_h each, for each of the g key/value heads of
    each of the L layers (2·L·g·d_h; multi-head: 2·L·d); with MLA the latent and the RoPE key, L·(d_c + d_R)."""
    if config.kv_latent:
        return config.n_layers * (config.kv_latent + config.rope_key)
    return 2 * config.n_layers * config.groups * (config.d_model // config.n_heads)


def with_context(model: MaskedTransformer, context: int) -> MaskedTransformer:
    """A copy of a RoPE model that accepts `context` positions (no weight depends on the length: RoPE computes
    each position's rotation).  A model with learned positions has no row for a position it was not trained at,
    and is refused."""
    if model.config.position != "rope":
        raise ValueError(f"learned positions stop at {model.config.context}: the table has no row for position "
                         f"{model.config.context}, so this model cannot run on {context} positions")
    longer = type(model)(replace(model.config, context=context)).to(next(model.parameters()).dtype)
    longer.load_state_dict(model.state_dict())
    return longer.eval()
