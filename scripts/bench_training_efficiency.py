"""Benchmark: how much of one core's float32 matmul peak each kind of training reaches, and the ideal
time of a cold rebuild of every checkpoint.

    .venv/bin/python scripts/bench_training_efficiency.py [--steps 150] [--cores 2]

Runs on the training kernels (`checkpoints.TRAINING_KERNELS`, oneDNN off, one thread), as a training
process does.  For each kind of training it counts the FLOPs of one step (forward + backward) with
PyTorch's FlopCounterMode and times steps of the real train function: the difference between a run of
S + 50 steps and one of 50 steps, so setup and the last evaluation cancel out (evaluations during
training are switched off here; the notebooks' runs do evaluate, which the ideal below leaves out).
Every ELECTRA variant of §05 is counted as plain ELECTRA (they differ by a few per cent), and every
character-level TinyGPT (§02's other seeds, LayerNorm and head variants) as the base model.
The base model's FLOPs are also given by the usual estimate 6·N·D plus attention.  Run it on a quiet
machine: timings move with whatever else runs.
"""

import argparse
import os
import sys
import time

from lib.checkpoints import TRAINING_KERNELS

QUIET = dict(TRAINING_KERNELS, TQDM_DISABLE="1")  # read when torch and tqdm start: re-run with them set
if any(os.environ.get(k) != v for k, v in QUIET.items()):
    os.execve(sys.executable, [sys.executable] + sys.argv, dict(os.environ, **QUIET))

import torch  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from lib import base_model, electra_runs, experiments, objectives, recurrent, schedule  # noqa: E402
from lib.seeding import seed_everything  # noqa: E402

torch.backends.mkldnn.enabled = False


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


def step_flops(kind: str) -> float:
    """FLOPs of one training step (forward + backward) of this kind, counted by PyTorch."""
    if kind == "electra":
        return electra_runs.step_flops(electra_runs.run_config(kind))
    if kind not in ("base", "gru"):
        return experiments.step_flops(experiments.recipe_config(kind))
    generator = seed_everything(0)
    if kind == "base":   # the two character-level models: same windows and loss, another network
        config = base_model.BASE_MODEL
        model = base_model.models.TinyGPT(base_model.models.ModelConfig(**config["model"]))
    else:
        config = recurrent.gru_config()
        model = recurrent.GRULanguageModel(recurrent.GRUConfig(**config["model"]))
    text = torch.randint(44, (10_000,), generator=generator)
    batch = objectives.random_windows(text, config["model"]["context"] + 1, config["batch_size"], generator)
    with FlopCounterMode(display=False) as counter:
        objectives.next_token_loss(model, batch).backward()
    return counter.get_total_flops()


def six_nd_plus_attention() -> float:
    """The textbook estimate for the base model: 6 · (matmul parameters) · tokens + attention's 12·L·T·d per token."""
    config = base_model.models.ModelConfig()
    V, T, d, L = config.vocab_size, config.context, config.d_model, config.n_layers
    matmul_parameters = L * 12 * d * d + V * d          # the blocks' matrices and the (tied) output layer
    tokens = base_model.BASE_MODEL["batch_size"] * T
    return 6 * matmul_parameters * tokens + 12 * L * T * d * tokens


def seconds_per_step(kind: str, steps: int) -> float:
    """Time of one step of the real train function: (run of steps + 50) - (run of 50), over steps."""
    def run(n):
        if kind == "base":
            config = dict(base_model.BASE_MODEL, steps=n, eval_every=10 ** 9)
            start = time.perf_counter()
            base_model.train_char_lm(config, desc=kind)
        elif kind == "gru":
            config = dict(recurrent.gru_config(), steps=n, eval_every=10 ** 9)
            start = time.perf_counter()
            recurrent.train_gru(config, desc=kind)
        elif kind == "electra":
            config = dict(electra_runs.run_config(kind, steps=n), eval_every=10 ** 9)
            start = time.perf_counter()
            electra_runs.train_variant(config, desc=kind)
        else:
            config = dict(experiments.recipe_config(kind, steps=n), eval_every=10 ** 9)
            start = time.perf_counter()
            experiments.train_recipe(config, desc=kind)
        return time.perf_counter() - start
    return (run(steps + 50) - run(50)) / steps


def kind_of(run) -> str:
    """Which measured kind a checkpoint's run is: a character-level TinyGPT ("base"), §02's GRU, a §04 recipe,
    or ELECTRA (every variant of §05 counted as plain ELECTRA; §05's BERT as §04's)."""
    if run.config.get("architecture") == "GRU":
        return "gru"
    return "electra" if "electra" in run.config else run.config.get("recipe", "base")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150, help="timed steps per kind")
    parser.add_argument("--cores", type=int, default=os.cpu_count(), help="cores of the ideal rebuild")
    args = parser.parse_args()
    peak = matmul_peak()
    print(f"single-thread float32 matmul peak: {peak:.1f} GFLOP/s (training kernels {TRAINING_KERNELS})")
    print(f"base model, 6ND + attention: {six_nd_plus_attention() / 1e9:.3f} GFLOP/step")
    flops, seconds = {}, {}
    for kind in ["base", "gru"] + list(experiments.RECIPES) + ["electra"]:
        flops[kind], seconds[kind] = step_flops(kind), seconds_per_step(kind, args.steps)
        achieved = flops[kind] / seconds[kind] / 1e9
        print(f"{kind:10} {flops[kind] / 1e9:6.3f} GFLOP/step (counted)  {seconds[kind] * 1000:6.1f} ms/step  "
              f"{achieved:5.1f} GFLOP/s = {achieved / peak:5.1%} of peak")
    total_flops = sum(run.config["steps"] * flops[kind_of(run)] for run in schedule.book_runs())
    total_steps_time = sum(run.config["steps"] * seconds[kind_of(run)] for run in schedule.book_runs())
    print(f"every checkpoint ({len(schedule.book_runs())} runs): {total_flops / 1e12:.2f} TFLOP; ideal on "
          f"{args.cores} cores at the peak {total_flops / (args.cores * peak * 1e9):.0f} s; at the measured step "
          f"times, perfectly packed and without evaluations {total_steps_time / args.cores:.0f} s")


if __name__ == "__main__":
    main()
