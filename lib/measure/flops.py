"""What one training step costs, counted rather than estimated.

    step_flops(*comparison.training_parts(config))      # FLOPs of one step, forward + backward

PyTorch's FlopCounterMode counts the matrix products (the attention's
included) of whatever runs inside it; a step is one batch, its loss and the
backward pass.  Nothing is updated.
"""

from collections import Counter

import torch
from torch.utils.flop_counter import FlopCounterMode


def step_flops(model, get_batch, loss_fn, batches: int = 10) -> float:
    """Mean FLOPs of one training step (loss_fn(model, get_batch()) and its backward) over `batches` batches."""
    total = 0
    for _ in range(batches):
        with FlopCounterMode(display=False) as counter:
            loss_fn(model, get_batch()).backward()
        total += counter.get_total_flops()
    return total / batches


def forward_flops(model, lengths) -> dict:
    """FLOPs of the forward passes of a causal `TinyGPT` over sequences of these lengths (each on its own, as
    the book scores lines), counted: {"total", "attention"}, "attention" being the two attention products
    (q kᵀ and weights · v, which grow with the square of the length); the rest is the linear layers and the
    output over the vocabulary (embeddings are lookups: no FLOPs).

    It runs `forward_with_attention`, whose attention is explicit matrix products: FlopCounterMode (torch
    2.13) has no formula for the fused attention kernel that `forward` uses on a CPU and would count it as 0.

    >>> from lib.nn.models import ModelConfig, TinyGPT
    >>> one, two = (forward_flops(TinyGPT(ModelConfig()), [n]) for n in (8, 16))
    >>> one["attention"] > 0, two["total"] - two["attention"] == 2 * (one["total"] - one["attention"])
    (True, True)
    >>> two["attention"] == 4 * one["attention"]
    True
    """
    out = {"total": 0, "attention": 0}
    with torch.no_grad():
        for length, count in Counter(lengths).items():
            with FlopCounterMode(display=False) as counter:
                model.forward_with_attention(torch.zeros(1, length, dtype=torch.long))
            by_op = counter.get_flop_counts()["Global"]
            out["total"] += count * counter.get_total_flops()
            out["attention"] += count * sum(n for op, n in by_op.items() if "bmm" in str(op))
    return out
