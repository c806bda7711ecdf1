"""Benchmark: training-step time of TinyGPT with explicit vs fused attention, side by side.

    PYTHONPATH=. .venv/bin/python scripts/bench_training.py [steps]

Both paths compute the same function (the tests check they agree to 1e-5);
the explicit one materialises the (B, h, T, T) weights so they can be drawn.
Runs each path in alternating rounds so machine noise hits both alike.
"""

import sys
import time

import torch
import torch.nn.functional as F

from lib.base_model import BASE_MODEL
from lib.models import TinyGPT
from lib.seeding import seed_everything
from lib.train import make_optimizer


def step_time(explicit: bool, steps: int) -> float:
    seed_everything(0)
    model = TinyGPT()
    optimizer = make_optimizer(model, BASE_MODEL)
    batch = torch.randint(44, (BASE_MODEL["batch_size"], model.config.context + 1))
    start = time.perf_counter()
    for _ in range(steps):
        logits = model.forward_with_attention(batch[:, :-1])[0] if explicit else model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, 44), batch[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return (time.perf_counter() - start) / steps


if __name__ == "__main__":
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    times = {True: [], False: []}
    for _ in range(3):
        for explicit in (True, False):
            times[explicit].append(step_time(explicit, steps))
    explicit, fused = min(times[True]), min(times[False])
    print(f"explicit attention: {explicit * 1000:.1f} ms/step | fused (SDPA): {fused * 1000:.1f} ms/step | "
          f"speed-up {explicit / fused:.2f}x  (best of 3 rounds of {steps} steps, batch "
          f"{BASE_MODEL['batch_size']}x{TinyGPT().config.context}, one thread)")
