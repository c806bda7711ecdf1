"""Every checkpoint the book loads, trained in one go: `make checkpoints` and `make reproduce`.

    python -m lib.schedule [--processes N]              # train what is missing or stale under checkpoints/
    python -m lib.schedule --reproduce DIR [--only NAME ...]  # retrain into DIR, compare with checkpoints/

Each section's module declares its runs (`runs()`: a list of
`checkpoints.Run`); this trains the missing or stale ones, one training
process per core, longest first (`checkpoints.train_missing`).  Notebooks
then only load.
"""

import argparse
import os
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


def same_checkpoint(a: Path, b: Path) -> bool:
    """Whether two checkpoint files hold bit-identical weights, the same log and the same key."""
    x, y = (torch.load(path, weights_only=True) for path in (a, b))
    return (x["key"] == y["key"] and x["log"] == y["log"] and x["state_dict"].keys() == y["state_dict"].keys()
            and all(torch.equal(x["state_dict"][k], y["state_dict"][k]) for k in x["state_dict"]))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m lib.schedule", description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=os.cpu_count(), help="training processes at once")
    parser.add_argument("--reproduce", type=Path, metavar="DIR",
                        help="retrain from scratch into DIR and compare every checkpoint with the committed one")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="only these checkpoints")
    args = parser.parse_args(argv)
    # `kill` stops the training processes too (as Ctrl-C does): nothing keeps running unseen
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    runs = [run for run in book_runs() if not args.only or run.name in args.only]
    start = time.perf_counter()
    trained = checkpoints.train_missing(runs, args.processes, directory=args.reproduce)
    print(f"{len(trained)} of {len(runs)} checkpoints trained in {time.perf_counter() - start:.0f} s "
          f"with {args.processes} processes" if trained else "every checkpoint is current")
    if args.reproduce:
        differ = [run.name for run in runs if not same_checkpoint(args.reproduce / f"{run.name}.pt",
                                                                   checkpoints.CHECKPOINT_DIR / f"{run.name}.pt")]
        print(f"{len(runs) - len(differ)} of {len(runs)} retrained checkpoints are bit-identical to the committed ones"
              + (f"; these differ: {differ}" if differ else ""))
        sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
