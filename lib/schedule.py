"""Every checkpoint the book loads, trained in one go: `make checkpoints` and `make reproduce`.

    python -m lib.schedule [--processes N]              # train what is missing or stale under checkpoints/
    python -m lib.schedule --reproduce DIR [--only NAME ...]  # retrain into DIR, compare with checkpoints/

Each section's module declares its runs (`runs()`: a list of
`checkpoints.Run`); this trains the missing or stale ones, one training
process per core, longest first (`checkpoints.train_missing`), and says how
busy the cores were.  Notebooks then only load.
"""

import argparse
import json
import os
import resource
import signal
import sys
import time
from pathlib import Path

import torch

from lib import (base_model, checkpoints, electra_runs, experiments, moe_runs, recurrent, retrieval_runs,
                 tinygpt_variants, ul2_runs)


def book_runs() -> list:
    """The `Run` of every checkpoint under checkpoints/, section by section."""
    return (base_model.runs() + recurrent.runs() + tinygpt_variants.runs() + experiments.runs() + longer_t5_runs()
            + electra_runs.runs() + ul2_runs.runs() + moe_runs.runs() + retrieval_runs.runs())


def longer_t5_runs() -> list:
    """Section 04's exercise 9: T5 (spans) trained for 6,000 steps, three seeds.  Declared here rather than in
    `experiments.runs()` because a checkpoint's key hashes its training module's source: adding a run there
    would make every section-04 checkpoint stale."""
    return [experiments.recipe_run("t5_span", steps=6000, seed=seed) for seed in experiments.SEEDS]


def children_cpu_seconds() -> float:
    """CPU seconds (user + system) used so far by this process's finished child processes."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def report(names: list, wall: float, cpu: float, processes: int, seconds: dict) -> str:
    """How well a schedule used the cores: its wall time against the best any schedule of these whole runs
    could do (their recorded wall times spread over the processes, or the longest run if that is more).

    >>> print(report(["a", "b", "c"], 70.0, 130.0, 2, {"a": 60.0, "b": 40.0, "c": 30.0}))
    3 checkpoints trained in 70 s with 2 processes; the training processes used 130 s of CPU: 0.93 of 2 cores busy.
    Runs' wall times: 130 s in all, the longest 60 s, so no schedule of whole runs beats 65 s (this one: 1.08x that).
    """
    busy = (f"{len(names)} checkpoints trained in {wall:.0f} s with {processes} processes; the training processes "
            f"used {cpu:.0f} s of CPU: {cpu / (wall * processes):.2f} of {processes} cores busy.")
    times = [seconds[name] for name in names if name in seconds]
    if not times:
        return busy
    bound = max(sum(times) / processes, max(times))
    return (f"{busy}\nRuns' wall times: {sum(times):.0f} s in all, the longest {max(times):.0f} s, so no "
            f"schedule of whole runs beats {bound:.0f} s (this one: {wall / bound:.2f}x that).")


def same_checkpoint(a: Path, b: Path) -> bool:
    """Whether two checkpoint files hold bit-identical weights, the same log and the same key."""
    x, y = (torch.load(path, weights_only=True) for path in (a, b))
    logs = [json.dumps(z["log"], sort_keys=True) for z in (x, y)]  # floats written exactly; NaN equals NaN here
    return (x["key"] == y["key"] and logs[0] == logs[1] and x["state_dict"].keys() == y["state_dict"].keys()
            and all(torch.equal(x["state_dict"][k], y["state_dict"][k]) for k in x["state_dict"]))


def positive(text: str) -> int:
    if int(text) < 1:
        raise argparse.ArgumentTypeError(f"needs at least 1, got {text}")
    return int(text)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m lib.schedule", description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=positive, default=os.cpu_count(), help="training processes at once")
    parser.add_argument("--reproduce", type=Path, metavar="DIR",
                        help="retrain from scratch into DIR and compare every checkpoint with the committed one")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="only these checkpoints")
    args = parser.parse_args(argv)
    # `kill` stops the training processes too (as Ctrl-C does): nothing keeps running unseen
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    runs = [run for run in book_runs() if not args.only or run.name in args.only]
    start, cpu = time.perf_counter(), children_cpu_seconds()
    trained = checkpoints.train_missing(runs, args.processes, directory=args.reproduce)
    if trained:
        recorded = checkpoints.recorded_seconds(args.reproduce)
        print(report(trained, time.perf_counter() - start, children_cpu_seconds() - cpu, args.processes,
                     {name: record["seconds"] for name, record in recorded.items()}))
    else:
        print("every checkpoint is current")
    if args.reproduce:
        differ = [run.name for run in runs if not same_checkpoint(args.reproduce / f"{run.name}.pt",
                                                                   checkpoints.CHECKPOINT_DIR / f"{run.name}.pt")]
        print(f"{len(runs) - len(differ)} of {len(runs)} retrained checkpoints are bit-identical to the committed ones"
              + (f"; these differ: {differ}" if differ else ""))
        sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
