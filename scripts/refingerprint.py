"""Recompute the fingerprints stored in the checkpoints, by replay, when the fingerprint itself changes.

    .venv/bin/python scripts/refingerprint.py [--processes 2] [--only NAME ...]

For when what a fingerprint records changes (`lib.train.fingerprint`: the weight summary; what a trainer's
evaluation returns) or a trainer's `fingerprint_steps` does, not the training: every run's first K steps are
replayed on the pinned kernels and checked against the fingerprint stored now on every number both cover (the
losses of the steps both replayed, the learning rates, and at the same K the exact weight bits and every number
of the stored evaluation), then only the fingerprint is rewritten; weights, log and key stay as they are (checked
bit for bit after writing).  The replay must come out exactly as stored: run it on the kind of CPU that recorded
the fingerprints (an Intel Xeon for today's).
"""

import argparse
import json
import os

import torch

from lib import recipes
from lib.train import cache, processes


def agreement(old: dict, new: dict) -> list:
    """What differs between two fingerprints on the numbers both cover (an empty list: nothing)."""
    both = min(old["steps"], new["steps"])
    problems = [f"losses of the first {both} steps"] if old["losses"][:both] != new["losses"][:both] else []
    if old["learning_rates"] != new["learning_rates"]:
        problems.append("learning rates")
    if old["steps"] == new["steps"]:
        if old["weights_sha256"] != new["weights_sha256"]:
            problems.append("weights")
        common = old["evaluation"].keys() & new["evaluation"].keys()     # a trainer may log more now, not less
        if common != old["evaluation"].keys() or any(json.dumps(old["evaluation"][k]) != json.dumps(new["evaluation"][k])
                                                     for k in common):   # as JSON text: NaN equals NaN there
            problems.append("evaluation")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--only", nargs="+", metavar="NAME")
    args = parser.parse_args()
    os.environ["BOOK_NO_TRAINING"] = "1"    # a stale parent fails the replay instead of being retrained
    runs = [recipes.run(name) for name in args.only] if args.only else recipes.all_runs()
    replayed = processes.replay_fingerprints(runs, args.processes)
    failed = []
    for run in runs:
        path = cache.path_of(run)
        old = cache.read(path)
        new = dict(replayed[run.name], cpu=old["fingerprint"]["cpu"])   # where the weights came from stays said
        new.pop("seconds")
        problems = agreement(old["fingerprint"], new)
        if problems:
            failed.append(run.name)
            print(f"KEPT {run.name}: the replay differs from the stored fingerprint in {', '.join(problems)}")
            continue
        with cache.locked(path):
            cache.write_atomically(path, lambda f: torch.save(dict(old, fingerprint=new), f))
        assert processes.same_weights_and_log(old, cache.read(path)) and cache.is_current(run), run.name
        print(f"rewritten {run.name}: K {old['fingerprint']['steps']} -> {new['steps']}")
    print(f"{len(runs) - len(failed)} of {len(runs)} fingerprints rewritten" + (f"; kept: {failed}" if failed else ""))
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
