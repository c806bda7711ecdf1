"""LoRA: a frozen weight W plus a trainable low-rank update (alpha / r)·B·A (Hu et al., 2021).

    layer = LoRALinear(base_linear, r=4, alpha=8)      # y = W x + b + (alpha / r)·B (A x); W, b frozen
    layer.merged()                                       # an nn.Linear with W + (alpha / r)·B A: the same outputs
    model = with_lora(base_model, r=4, alpha=8)          # a copy: every linear layer of its blocks wrapped
    plain = merge_lora(model)                            # a copy with every adapter folded back in

A has shape (r, d_in) and starts random; B has shape (d_out, r) and starts at zero, so at initialisation the
update is zero and the model is exactly the base model.  A matrix of d_out × d_in weights gets r·(d_in + d_out)
trainable numbers.  The paper divides by r so that the update's size changes less with r and the learning rate
needs less retuning across ranks (section 11 still tries three rates per rank).
"""

import copy
import math

import torch
from torch import nn


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, r: int, alpha: float):
        super().__init__()
        if r < 1:
            raise ValueError(f"LoRA rank r must be at least 1, got {r}")
        self.base, self.r, self.alpha = base, r, alpha
        for p in base.parameters():
            p.requires_grad_(False)
        self.A = nn.Parameter(torch.empty(r, base.in_features, dtype=base.weight.dtype))
        self.B = nn.Parameter(torch.zeros(base.out_features, r, dtype=base.weight.dtype))
        nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))     # as nn.Linear initialises its weight
        self.scale = alpha / r

    def forward(self, x):
        return self.base(x) + (x @ self.A.T @ self.B.T) * self.scale

    def update(self) -> torch.Tensor:
        """The low-rank update (d_out, d_in) that `merged` adds to W."""
        return self.scale * self.B @ self.A

    def merged(self) -> nn.Linear:
        """A plain nn.Linear computing what this layer computes (up to float rounding)."""
        out = torch.nn.utils.skip_init(nn.Linear, self.base.in_features, self.base.out_features,  # draws nothing
                                       bias=self.base.bias is not None, dtype=self.base.weight.dtype)
        with torch.no_grad():
            out.weight.copy_(self.base.weight + self.update())
            if self.base.bias is not None:
                out.bias.copy_(self.base.bias)
        return out


def _linears(model):
    """(parent module, attribute name) of every nn.Linear inside the model's blocks."""
    return [(parent, name) for parent in model.blocks.modules() for name, child in parent.named_children()
            if isinstance(child, nn.Linear)]


def with_lora(model, r: int, alpha: float):
    """A copy of `model` whose blocks' linear layers are LoRALinear (attention's W_QKV and W_O, the MLP's two),
    with every other parameter frozen: only the adapters train."""
    model = copy.deepcopy(model)
    for p in model.parameters():
        p.requires_grad_(False)
    for parent, name in _linears(model):
        setattr(parent, name, LoRALinear(getattr(parent, name), r, alpha))
    return model


def merge_lora(model):
    """A copy of `model` with every LoRALinear replaced by its merged nn.Linear, all parameters trainable again."""
    model = copy.deepcopy(model)
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, LoRALinear):
                setattr(parent, name, child.merged())
    for p in model.parameters():
        p.requires_grad_(True)
    return model


def trainable_parameters(model) -> int:
    """The number of parameters that train (requires_grad)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
