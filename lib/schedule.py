"""Every checkpoint the book loads, trained in one go: `make checkpoints`.

    python -m lib.schedule [--processes N]

Each section's module declares its runs (`runs()`: name, config, train
function); this trains the missing or stale ones, one training process per
core, longest first (`checkpoints.train_missing`).  Notebooks then only load.
"""

import argparse
import os
import time

from lib import checkpoints, experiments, train


def book_runs() -> list:
    """[(name, config, train_fn)] of every checkpoint under checkpoints/, section by section."""
    return train.runs() + experiments.runs()


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m lib.schedule", description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=os.cpu_count(), help="training processes at once")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    trained = checkpoints.train_missing(book_runs(), args.processes)
    print(f"{len(trained)} of {len(book_runs())} checkpoints trained in {time.perf_counter() - start:.0f} s "
          f"with {args.processes} processes" if trained else "every checkpoint is current")


if __name__ == "__main__":
    main()
