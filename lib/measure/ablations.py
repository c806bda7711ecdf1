"""Ablations: switch parts of a trained transformer off and see what breaks.

`ablate` returns a copy of a model with some of its parts removed, and
`WithMask` runs a MaskedTransformer under a fixed kind of mask, so that every
function written for TinyGPT (`evals.bits_per_char`, `answers.fact_completion`,
`evals.generate`) works on the result unchanged:

    >>> from lib.nn.models import TinyGPT
    >>> broken = ablate(TinyGPT(), zero_positions=True, attention_off=[1], mask="bidirectional")
    >>> broken
    WithMask(bidirectional, zero_positions=True, attention_off=(1,), mlp_off=())
    >>> broken(torch.zeros(1, 5, dtype=torch.long)).shape
    torch.Size([1, 5, 44])

Switching a part off means zeroing the weights that write its output into
the residual stream (the attention's output projection `proj`, the MLP's
`fc2`, the position table): the residual stream then passes through that
branch unchanged, as if the branch were not there.
"""

import copy

import torch
import torch.nn as nn

from lib.nn.masks import for_kind
from lib.nn.models import MaskedTransformer

MASKS = ("causal", "bidirectional")  # the kinds of mask an ablated model can run under (`masks.for_kind`)


class WithMask(nn.Module):
    """A MaskedTransformer that always uses one kind of mask: called like a TinyGPT.

    forward(idx) -> logits (B, T, V); forward_with_attention(idx) -> (logits, attention)."""

    def __init__(self, model: MaskedTransformer, mask="causal", description: str = ""):
        super().__init__()
        kinds = mask if isinstance(mask, tuple) else (mask,)
        if any(kind not in MASKS for kind in kinds) or len(kinds) not in (1, model.config.n_layers):
            raise ValueError(f"unknown mask {mask!r}; choose one of {sorted(MASKS)} or a tuple of one per layer "
                             f"({model.config.n_layers} layers)")
        self.model, self.mask, self.description = model, mask, description
        self.config = model.config

    def _mask(self, idx):
        T = idx.shape[-1] if isinstance(idx, torch.Tensor) and idx.dim() else 0
        return [for_kind(kind, T) for kind in self.mask] if isinstance(self.mask, tuple) else for_kind(self.mask, T)

    def forward(self, idx):
        return self.model(idx, self._mask(idx))

    def forward_with_attention(self, idx):
        return self.model.forward_with_attention(idx, self._mask(idx))

    def __repr__(self):
        mask = "/".join(self.mask) if isinstance(self.mask, tuple) else self.mask
        return f"WithMask({', '.join(filter(None, [mask, self.description]))})"


def _check_layers(layers, n_layers: int, what: str) -> tuple:
    layers = tuple(sorted(set(layers)))
    bad = [layer for layer in layers if not (isinstance(layer, int) and 0 <= layer < n_layers)]
    if bad:
        raise ValueError(f"{what}: layers {bad} do not exist; the model has layers 0..{n_layers - 1}")
    return layers


@torch.no_grad()
def ablate(model: MaskedTransformer, zero_positions: bool = False, attention_off=(), mlp_off=(),
           mask="causal", heads_off=(), mean_positions: bool = False) -> WithMask:
    """A copy of `model` with the named parts switched off, run under `mask` ("causal" or "bidirectional",
    or a tuple of one per layer: ("bidirectional", "causal") makes layer 0 alone bidirectional).

    heads_off: (layer, head) pairs whose output the attention projection no longer reads (the columns of
    `proj` for that head zeroed; the others heads and the bias unchanged).  mean_positions: every row of
    the position table replaced by their mean (the control for zeroing it: the same average input, no
    order).  The original model is not changed.  With no ablation and the causal mask the copy computes
    exactly what a TinyGPT with the same weights computes."""
    if not isinstance(model, MaskedTransformer):
        raise ValueError(f"ablate() needs a TinyGPT or MaskedTransformer, got {type(model).__name__}")
    n_layers = model.config.n_layers
    attention_off = _check_layers(attention_off, n_layers, "attention_off")
    mlp_off = _check_layers(mlp_off, n_layers, "mlp_off")
    # A plain MaskedTransformer with the same parameter names, so the mask is ours to choose.
    copied = MaskedTransformer(model.config).to(next(model.parameters()).dtype)   # float64 stays float64
    copied.load_state_dict(copy.deepcopy(model.state_dict()))
    copied.eval()
    if zero_positions and mean_positions:
        raise ValueError("zero_positions and mean_positions are two different ablations: choose one")
    if zero_positions:
        copied.wpe.weight.zero_()
    if mean_positions:
        copied.wpe.weight.copy_(copied.wpe.weight.mean(0, keepdim=True).expand_as(copied.wpe.weight))
    d_head = model.config.d_model // model.config.n_heads
    for layer, head in heads_off:
        if not (0 <= layer < n_layers and 0 <= head < model.config.n_heads):
            raise ValueError(f"no head {layer}.{head}: {n_layers} layers of {model.config.n_heads} heads")
        copied.blocks[layer].attn.proj.weight[:, head * d_head:(head + 1) * d_head] = 0
    for layer in attention_off:
        copied.blocks[layer].attn.proj.weight.zero_()   # attention writes nothing into the residual stream
        copied.blocks[layer].attn.proj.bias.zero_()
    for layer in mlp_off:
        copied.blocks[layer].mlp.fc2.weight.zero_()     # neither does the MLP
        copied.blocks[layer].mlp.fc2.bias.zero_()
    description = f"zero_positions={zero_positions}, attention_off={attention_off}, mlp_off={mlp_off}"
    description += f", heads_off={tuple(heads_off)}" if heads_off else ""
    description += ", mean_positions=True" if mean_positions else ""
    return WithMask(copied, mask, description)
