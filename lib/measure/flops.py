"""What one training step costs, counted rather than estimated.

    step_flops(*comparison.training_parts(config))      # FLOPs of one step, forward + backward

PyTorch's FlopCounterMode counts the matrix products of whatever runs inside
it; a step is one batch, its loss and the backward pass.  Nothing is updated.
On a CPU, attention runs as one fused kernel for which torch 2.13 has no FLOP
formula (it would count 0); `ATTENTION` gives it the formula of the other
fused attention kernels (q kᵀ and weights · v, and their backward).
"""

from collections import Counter

import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count


def _attention(query, key, value, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query, key, value)


def _attention_backward(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
    return sdpa_backward_flop_count(grad_out, query, key, value)


ATTENTION = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _attention,
             torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: _attention_backward}


def step_flops(model, get_batch, loss_fn, batches: int = 10) -> float:
    """Mean FLOPs of one training step (loss_fn(model, get_batch()) and its backward) over `batches` batches,
    the fused attention included (`ATTENTION`).

    >>> from lib.nn.models import MaskedTransformer, ModelConfig
    >>> from lib.nn.masks import bidirectional_mask
    >>> model, idx = MaskedTransformer(ModelConfig(vocab_size=10, context=8, d_model=16, n_layers=1, n_heads=1)), torch.zeros(1, 8, dtype=torch.long)
    >>> with_attention = step_flops(model, lambda: idx, lambda m, x: m(x, bidirectional_mask(8)).sum(), 1)
    >>> explicit = step_flops(model, lambda: idx, lambda m, x: m.forward_with_attention(x, bidirectional_mask(8))[0].sum(), 1)
    >>> with_attention - explicit == 2 * 8 * 8 * 16      # the fused backward recomputes q kᵀ: one product more
    True
    """
    total = 0
    for _ in range(batches):
        with FlopCounterMode(display=False, custom_mapping=ATTENTION) as counter:
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
