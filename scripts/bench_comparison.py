"""Benchmark: section 04's training time, one model alone vs the four in parallel processes.

    .venv/bin/python scripts/bench_comparison.py [--steps 2500] [--alone gpt t5] [--processes 2]

Trains with `lib.trainers.comparison.train_comparison` exactly as a checkpoint is trained, but
saves nothing (the checkpoints under checkpoints/ are not touched).  Each
training is single-threaded; the parallel run uses `spawn`ed worker processes.
Timings depend on what else the machine is doing: run it on a quiet machine.
"""

import argparse
import multiprocessing
import time

from lib.recipes import comparison as ex
from lib.trainers.comparison import train_comparison


def timed_training(job):
    recipe, steps = job
    start = time.perf_counter()
    train_comparison(ex.run_config(recipe, steps=steps), desc=recipe)
    return recipe, time.perf_counter() - start


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=ex.STEPS)
    parser.add_argument("--alone", nargs="*", default=["gpt", "t5_span"], choices=list(ex.RECIPES))
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    spawn = multiprocessing.get_context("spawn")
    alone = {}
    for recipe in args.alone:  # one at a time, each in a fresh process like a worker of the parallel run
        with spawn.Pool(1) as pool:
            alone.update(pool.map(timed_training, [(recipe, args.steps)]))
            pool.close()
            pool.join()
    start = time.perf_counter()
    with spawn.Pool(args.processes) as pool:
        parallel = dict(pool.imap_unordered(timed_training, [(r, args.steps) for r in ex.RECIPES]))
        pool.close()
        pool.join()
    wall = time.perf_counter() - start
    print(f"{args.steps} steps, batch {ex.BATCH_SIZE} x {ex.POSITIONS} positions, one thread per process")
    for recipe, seconds in alone.items():
        print(f"  {recipe:10} alone: {seconds:6.1f} s")
    for recipe, seconds in parallel.items():
        print(f"  {recipe:10} in the parallel run: {seconds:6.1f} s")
    print(f"  all four, {args.processes} processes: {wall:6.1f} s wall "
          f"(the four one after another would take about {sum(parallel.values()):.1f} s)")
