"""One seeding helper for every notebook and every training run.

    generator = seed_everything(0)   # Python, NumPy and torch seeded; torch single-threaded

It sits below everything else in lib, so a notebook that trains nothing seeds
itself without importing the training stack.
"""

import random

import numpy as np
import torch


def seed_everything(seed: int) -> torch.Generator:
    """Seed every source of randomness, go single-threaded, return a torch generator."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(1)  # a single thread makes float reductions run in one fixed order
    return torch.Generator().manual_seed(seed)


def seeded_builds(build, seeds):
    """One model per seed: `build()` (which draws from the global RNG) right after `seed_everything(seed)`, in
    eval mode; the untrained networks that the controls of a trained model's score are drawn from."""
    for seed in seeds:
        seed_everything(seed)
        yield build().eval()
