"""What one training step costs, counted rather than estimated.

    step_flops(*comparison.training_parts(config))      # FLOPs of one step, forward + backward

PyTorch's FlopCounterMode counts the matrix products (the attention's
included) of whatever runs inside it; a step is one batch, its loss and the
backward pass.  Nothing is updated.
"""

from torch.utils.flop_counter import FlopCounterMode


def step_flops(model, get_batch, loss_fn, batches: int = 10) -> float:
    """Mean FLOPs of one training step (loss_fn(model, get_batch()) and its backward) over `batches` batches."""
    total = 0
    for _ in range(batches):
        with FlopCounterMode(display=False) as counter:
            loss_fn(model, get_batch()).backward()
        total += counter.get_total_flops()
    return total / batches
