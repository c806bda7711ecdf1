"""Benchmark: how much of one core's float32 matmul peak each kind of training reaches, the ideal time of a
cold rebuild of every checkpoint, and how close the recorded runs came to it.

    .venv/bin/python scripts/bench_training_efficiency.py [--steps 60] [--cores 2] [--times DIR]

A kind is every run with the same train function and the same config but for seed, steps, schedule and
evaluation (`processes.kind_of`: 30 kinds for the book's 107 checkpoints).  For each kind, the real train
function is run a few times on the training kernels (`cache.TRAINING_KERNELS`, oneDNN off, one thread),
as a training process runs it:

- FLOPs of one step (forward + backward): PyTorch's FlopCounterMode over a run of 2 steps minus a run of 1, each
  read right after its last optimizer step, so the setup cancels out and the evaluation after the last step
  (whose shapes can depend on the weights: an MoE's routing) is not counted.  Attention is counted too (the
  CPU's fused attention kernel is given the formula PyTorch uses for the GPU ones: 4·B·h·T·S·d forward, twice
  that and a recompute backward).
  A kind that changes what it trains mid-run (§05's frozen generator) is counted as it starts.
- Seconds of one step: a run of S + 20 steps minus a run of 20, over S; evaluations during training switched
  off (the book's runs do evaluate: that is in the recorded times, not here).
- The compute floor of one step: the FLOP-counted calls of that step (its matrix products and fused attention,
  recorded with their shapes, strides and dtypes while the FLOPs are counted) replayed on their own, on random
  inputs (one tensor per description, so they stay in cache), best over 2 s of replays; the replay's FLOPs are
  checked against the count.  It is what these calls cost with nothing around them: fusing the rest of the step, fewer
  Python-level steps or another optimizer cannot go below it.  Other calls could (several models' matrices
  stacked into one call, other kernels): `scripts/bench_levers.py` measures those.

Then the whole book: its training FLOPs over `--cores` cores at the measured peak (the ideal), the same runs at
their compute floors and at the measured step times, perfectly packed, and -- from the train_seconds.json in
which every training process records its run's wall time (`--times`, default checkpoints/) -- what the
recorded runs achieved and what every checkpoint would take at their speed, longest first.  Run it on a quiet
machine: timings move with whatever else runs.
"""

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path

from lib.train.cache import CHECKPOINT_DIR, TRAINING_KERNELS
from lib.train.processes import TIMES_FILE, estimated_seconds, kind_of, planned_seconds, recorded_seconds

QUIET = dict(TRAINING_KERNELS, TQDM_DISABLE="1")  # read when torch and tqdm start: re-run with them set
if any(os.environ.get(k) != v for k, v in QUIET.items()):
    os.execve(sys.executable, [sys.executable] + sys.argv, dict(os.environ, **QUIET))

import torch  # noqa: E402
from torch.optim.optimizer import register_optimizer_step_post_hook  # noqa: E402
from torch.utils import flop_counter  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from lib import recipes  # noqa: E402
from lib.train import processes  # noqa: E402

torch.backends.mkldnn.enabled = False
torch.set_num_threads(1)  # as in every training process (`seeding.seed_everything`)

aten = torch.ops.aten


@flop_counter.register_flop_formula(aten._scaled_dot_product_flash_attention_for_cpu)
def _cpu_attention_flops(query, key, value, *args, out_shape=None, **kwargs) -> int:
    return flop_counter.sdpa_flop_count(query, key, value)


@flop_counter.register_flop_formula(aten._scaled_dot_product_flash_attention_for_cpu_backward)
def _cpu_attention_backward_flops(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
    return flop_counter.sdpa_backward_flop_count(grad_out, query, key, value)


def matmul_peak(seconds: float = 1.0) -> float:
    """Best single-thread float32 GFLOP/s of a square matmul, over a few sizes."""
    best = 0.0
    for n in (64, 128, 256, 512):
        a, b = torch.randn(n, n), torch.randn(n, n)
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds / 4:
            torch.mm(a, b)
            count += 1
        best = max(best, 2 * n ** 3 * count / (time.perf_counter() - start) / 1e9)
    return best


def _described(x):
    if isinstance(x, list):
        return tuple(map(_described, x))
    return ("tensor", tuple(x.shape), x.stride(), x.dtype) if isinstance(x, torch.Tensor) else x


class ComputeRecorder(TorchDispatchMode):
    """Counts the calls of every operation FlopCounterMode counts FLOPs of, by their inputs' description
    (shape, strides, dtype; other arguments as they are), so that they can be replayed on their own."""

    def __init__(self):
        super().__init__()
        self.calls = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func._overloadpacket in flop_counter.flop_registry:
            self.calls[func, tuple(map(_described, args)),
                       tuple((k, _described(v)) for k, v in sorted(kwargs.items()))] += 1
        return func(*args, **kwargs)


def _made(x, made: dict, name: str = ""):
    """A random tensor as `_described` describes it (an attention mask that hides nothing; the same tensor for
    the same description, from `made`), else x itself."""
    if not (isinstance(x, tuple) and x and x[0] == "tensor"):
        return x
    if (x, name == "attn_mask") not in made:
        _, shape, stride, dtype = x
        storage = torch.empty(1 + sum((n - 1) * s for n, s in zip(shape, stride)) if all(shape) else 0, dtype=dtype)
        if dtype.is_floating_point and name != "attn_mask":
            storage.normal_(0.0, 0.1)
        else:
            storage.fill_(True) if dtype == torch.bool else storage.zero_()
        made[x, name == "attn_mask"] = storage.as_strided(shape, stride)
    return made[x, name == "attn_mask"]


def replay_seconds(calls: Counter, repeats: int = 10, seconds: float = 2.0) -> float:
    """Best wall seconds of running every recorded call once more on random inputs, over at least `repeats`
    replays and `seconds` (the first replays of a step can take 1.5x as long: memory the allocator has not
    settled on yet)."""
    made = {}
    prepared = [(func, [_made(a, made) for a in args], {k: _made(v, made, k) for k, v in kwargs})
                for (func, args, kwargs), n in calls.items() for _ in range(n)]
    best, replays, began = float("inf"), 0, time.perf_counter()
    while replays < repeats or time.perf_counter() - began < seconds:
        start = time.perf_counter()
        for func, args, kwargs in prepared:
            func(*args, **kwargs)
        best, replays = min(best, time.perf_counter() - start), replays + 1
    return best


def six_nd_plus_attention(config: dict) -> float:
    """The textbook estimate for a character-level TinyGPT's step: 6 · (matmul parameters) · tokens, plus
    attention's 12·L·T·d per token (forward and backward)."""
    m = config["model"]
    V, T, d, L = m["vocab_size"], m["context"], m["d_model"], m["n_layers"]
    tokens = config["batch_size"] * T
    return 6 * (L * 12 * d * d + V * d) * tokens + 12 * L * T * d * tokens


def kinds(runs: list) -> dict:
    """{the first run's name: every run of that kind (`processes.kind_of`)}, in the book's order."""
    grouped = {}
    for run in runs:
        grouped.setdefault(kind_of(run), []).append(run)
    return {members[0].name: members for members in grouped.values()}


def train(run, steps: int) -> float:
    """Wall seconds of the run's train function for `steps` steps, without evaluations but the last."""
    start = time.perf_counter()
    run.train_fn(dict(run.config, steps=steps, eval_every=10 ** 9),
                 parents=tuple(processes.get_or_train(p)[0] for p in run.parents), desc=run.name)
    return time.perf_counter() - start


def step_compute(run) -> tuple:
    """(FLOPs of one training step of this run, the step's FLOP-counted calls); see the module docstring."""
    after_last_step = []
    for steps in (1, 2):
        with flop_counter.FlopCounterMode(display=False) as counter, ComputeRecorder() as recorder:
            seen = {}
            handle = register_optimizer_step_post_hook(
                lambda optimizer, args, kwargs: seen.update(flops=counter.get_total_flops(),
                                                            calls=recorder.calls.copy()))
            try:
                train(run, steps)
            finally:
                handle.remove()
        after_last_step.append(seen)
    first, second = after_last_step
    return second["flops"] - first["flops"], second["calls"] - first["calls"]


def floor_seconds(flops: float, calls: Counter) -> float:
    """`replay_seconds` of one step's calls, after checking that the replay does the step's FLOPs."""
    with flop_counter.FlopCounterMode(display=False) as replayed:
        replay_seconds(calls, repeats=1, seconds=0)
    if replayed.get_total_flops() != flops:
        raise RuntimeError(f"the replay does {replayed.get_total_flops()} FLOPs, the step {flops}")
    return replay_seconds(calls)


def seconds_per_step(run, steps: int) -> float:
    return (train(run, steps + 20) - train(run, 20)) / steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="timed steps per kind")
    parser.add_argument("--cores", type=int, default=os.cpu_count(), help="cores of the ideal rebuild")
    parser.add_argument("--times", type=Path, default=CHECKPOINT_DIR,
                        help="folder whose train_seconds.json records a rebuild (default: checkpoints/)")
    args = parser.parse_args()
    runs = recipes.all_runs()
    recorded = recorded_seconds(args.times)
    peak = matmul_peak()
    print(f"single-thread float32 matmul peak: {peak:.1f} GFLOP/s (training kernels {TRAINING_KERNELS})")
    computed = {name: step_compute(members[0]) for name, members in kinds(runs).items()}
    print(f"the base model's step by 6·N·D + attention: {six_nd_plus_attention(runs[0].config) / 1e9:.3f} GFLOP "
          f"(counted below: {computed[runs[0].name][0] / 1e9:.3f})")
    print("per step: its FLOPs, the compute floor (those operations alone) and the whole step; per rebuild: the "
          "recorded runs' wall times")
    print(f"{'kind':24} {'runs':>4} {'steps':>7} {'GFLOP/step':>10} {'floor ms':>8} {'of peak':>8} {'ms/step':>8} "
          f"{'of peak':>8}   {'rebuild s':>9} {'of peak':>8}")
    total = {"flops": 0.0, "floor_seconds": 0.0, "step_seconds": 0.0, "recorded": 0.0, "recorded_flops": 0.0}
    for name, members in kinds(runs).items():
        (flops, calls), seconds = computed[name], seconds_per_step(members[0], args.steps)
        floor = floor_seconds(flops, calls)
        steps = sum(run.config["steps"] for run in members)
        total["flops"] += steps * flops
        total["floor_seconds"] += steps * floor
        total["step_seconds"] += steps * seconds
        timed = [recorded[run.name] for run in members if run.name in recorded]
        wall, timed_flops = sum(r["seconds"] for r in timed), sum(r["steps"] for r in timed) * flops
        total["recorded"] += wall
        total["recorded_flops"] += timed_flops
        print(f"{name:24} {len(members):4} {steps:7} {flops / 1e9:10.3f} {floor * 1000:8.1f} "
              f"{flops / floor / 1e9 / peak:8.1%} {seconds * 1000:8.1f} {flops / seconds / 1e9 / peak:8.1%}   "
              f"{wall:9.0f} {timed_flops / wall / 1e9 / peak if timed else float('nan'):8.1%}", flush=True)
    ideal = total["flops"] / (args.cores * peak * 1e9)
    print(f"every checkpoint ({len(runs)} runs): {total['flops'] / 1e12:.2f} TFLOP; ideal on {args.cores} cores at "
          f"the peak: {ideal:.0f} s; perfectly packed and without evaluations, at the compute floor: "
          f"{total['floor_seconds'] / args.cores:.0f} s ({total['floor_seconds'] / args.cores / ideal:.2f}x the "
          f"ideal), at the measured step times: {total['step_seconds'] / args.cores:.0f} s "
          f"({total['step_seconds'] / args.cores / ideal:.2f}x)")
    if recorded:
        subset_ideal = total["recorded_flops"] / (args.cores * peak * 1e9)
        planned = planned_seconds(sorted(estimated_seconds(runs, recorded).values(), reverse=True), args.cores)
        print(f"recorded runs ({args.times / TIMES_FILE}: {len(recorded)}): wall times {total['recorded']:.0f} s in "
              f"all, {total['recorded_flops'] / total['recorded'] / 1e9 / peak:.1%} of one core's peak per process; "
              f"perfectly packed on {args.cores} cores {total['recorded'] / args.cores:.0f} s = "
              f"{total['recorded'] / args.cores / subset_ideal:.2f}x their ideal ({subset_ideal:.0f} s)")
        print(f"every checkpoint at those runs' (and their kinds') recorded speed, longest first on {args.cores} "
              f"processes: {planned:.0f} s = {planned / ideal:.2f}x the ideal")


if __name__ == "__main__":
    main()
