"""Train, reproduce and check every checkpoint of the book.

    python -m lib.recipes [--processes N] [--only NAME ...]   # train what is missing or stale under checkpoints/
    python -m lib.recipes --list                              # every run: name, trainer, steps
    python -m lib.recipes --check-fingerprints [--all]        # replay one run of every kind (or all) and compare
    python -m lib.recipes --reproduce DIR [--sample N]        # retrain from scratch into DIR and compare
    python -m lib.recipes --yardstick [--only NAME ...]       # §04's fine-tunes that are missing or stale

--check-fingerprints replays the first K steps of runs on the pinned kernels
and compares what they give with the fingerprint stored in each checkpoint
(`lib.train.fingerprint`).  A mismatch means the trainer computes something
else than when the checkpoint was trained: bump its version (the message says
where, and what that retrains), or undo the change.
"""

import argparse
import os
import random
import signal
import sys
import time
from pathlib import Path

from lib import recipes
from lib.recipes import yardstick
from lib.train import cache, fingerprint, processes


def positive(text: str) -> int:
    if int(text) < 1:
        raise argparse.ArgumentTypeError(f"needs at least 1, got {text}")
    return int(text)


def selected(names) -> list:
    """The runs called `names` (all when None); an unknown name exits with the list of known ones."""
    if not names:
        return recipes.all_runs()
    try:
        return [recipes.run(name) for name in names]
    except KeyError as error:
        raise SystemExit(f"error: {error.args[0]}")


def one_per_kind(runs: list) -> list:
    """The cheapest run of each kind (`processes.kind_of`: trainer and config but for seed, steps, schedule)."""
    kinds = {}
    for r in sorted(runs, key=lambda r: (r.train_fn.fingerprint_steps(r.config), r.name)):
        kinds.setdefault(processes.kind_of(r), r)
    return list(kinds.values())


def bump_message(run: cache.Run) -> str:
    """Which trainer to bump and what the bump retrains (runs, minutes on 2 processes by the recorded times)."""
    same = [r for r in recipes.all_runs() if r.train_fn.trainer_name == run.train_fn.trainer_name]
    children = [r for r in recipes.all_runs() if any(p.name in {s.name for s in same} for p in r.parents)]
    seconds = processes.estimated_seconds(same + children, processes.recorded_seconds())
    minutes = processes.planned_seconds(sorted(seconds.values(), reverse=True), 2) / 60
    source = sys.modules[run.train_fn.__module__].__file__
    count = len(same) + len(children)
    return (f"if the change is meant, bump @trainer({run.train_fn.trainer_name!r}, "
            f"version={run.train_fn.trainer_version + 1}) in {os.path.relpath(source)}: that retrains "
            f"{count} run{'s' * (count != 1)} (about {max(1, round(minutes))} min on 2 processes); "
            "otherwise undo the change")


def check_fingerprints(runs: list, processes_count: int) -> bool:
    """Replay the runs, compare with their stored fingerprints, print one line each; True if all agree."""
    start = time.perf_counter()
    replayed = processes.replay_fingerprints(runs, processes_count)
    ok = True
    for r in runs:
        if not cache.is_current(r):    # another config, data or version: retrain it, bumping nothing
            print(f"FAIL {r.name}: its checkpoint is stale or missing (config, data, trainer version or a parent "
                  f"changed): retrain it with `python -m lib.recipes --only {r.name}`")
            ok = False
            continue
        saved = cache.read(cache.path_of(r)).get("fingerprint")
        if saved is None:
            print(f"FAIL {r.name}: its checkpoint has no fingerprint")
            ok = False
            continue
        ratio, where, worst = fingerprint.deviation(saved, replayed[r.name])
        bits = "bit-identical weights" if saved["weights_sha256"] == replayed[r.name]["weights_sha256"] else \
            f"weights differ in the last bits (trained on {saved.get('cpu')})"
        if ratio <= 1:
            print(f"ok   {r.name}: {saved['steps']} steps replayed in {replayed[r.name]['seconds']:.1f} s, "
                  f"largest deviation {worst:.1e} ({ratio:.2g} of its tolerance; {bits})")
        else:
            ok = False
            print(f"FAIL {r.name}: the replay of its first {saved['steps']} steps deviates by {worst:.2e} at "
                  f"{where} ({ratio:.3g} times its tolerance): trainer {r.train_fn.trainer_name!r} "
                  f"v{r.train_fn.trainer_version} computes something else than when it was trained.\n     "
                  + bump_message(r))
    print(f"{sum(1 for _ in runs)} runs replayed in {time.perf_counter() - start:.0f} s")
    return ok


def reproduce(runs: list, directory: Path, processes_count: int) -> bool:
    """Retrain the runs (and the parents they start from) into `directory` and compare each with the committed
    checkpoint: bits on the CPU that trained it; on another CPU whole runs diverge (training amplifies
    rounding), so such a difference is reported and explained.  True unless a difference is unexplained."""
    trained = processes.train_missing(runs, processes_count, directory=directory)
    print(f"{len(trained)} runs trained into {directory}")
    here, differ, unexplained = processes.cpu_name(), [], []
    for r in runs:
        committed = cache.read(cache.path_of(r))
        difference = processes.checkpoint_difference(directory / f"{r.name}.pt", cache.path_of(r))
        trained_on = committed.get("fingerprint", {}).get("cpu")
        if difference:
            differ.append(r.name)
            if trained_on == here:
                unexplained.append(r.name)
        print(f"{'DIFFERS' if difference else 'same'} {r.name}" + (f": {difference}" if difference else "")
              + ("" if not difference or trained_on == here else
                 f" (committed trained on {trained_on}, retrained on {here}: bits are not expected to match)"))
    print(f"{len(runs) - len(differ)} of {len(runs)} retrained checkpoints are bit-identical to the committed ones"
          " (weights, and logs compared as JSON text: NaN equals NaN)"
          + (f"; {len(unexplained)} differ on the CPU that trained them: {unexplained}" if unexplained else ""))
    return not unexplained


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m lib.recipes", description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=positive, default=os.cpu_count(), help="training processes at once")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="only these runs")
    parser.add_argument("--list", action="store_true", help="list every run")
    parser.add_argument("--check-fingerprints", action="store_true",
                        help="replay one run of every kind (with --all: every run) and compare its fingerprint")
    parser.add_argument("--all", action="store_true", help="with --check-fingerprints: every run")
    parser.add_argument("--reproduce", type=Path, metavar="DIR", help="retrain into DIR and compare")
    parser.add_argument("--yardstick", action="store_true",
                        help="fine-tune the comparison checkpoints (lib.recipes.yardstick) where results are missing")
    parser.add_argument("--sample", type=positive, metavar="N", help="with --reproduce: N runs drawn at random")
    parser.add_argument("--seed", type=int, default=0, help="with --sample: which N runs are drawn (default 0)")
    args = parser.parse_args(argv)
    if args.all and not args.check_fingerprints:
        parser.error("--all goes with --check-fingerprints")
    if args.sample and not args.reproduce:
        parser.error("--sample goes with --reproduce")
    # `kill` stops the training processes too (as Ctrl-C does): nothing keeps running unseen
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    runs = selected(args.only)
    if args.yardstick and args.reproduce:
        sys.exit(0 if yardstick.reproduce(args.reproduce / "yardstick", args.sample, args.seed) else 1)
    if args.yardstick:
        start = time.perf_counter()
        done = yardstick.fill(args.processes, only=args.only)
        print(f"{len(done)} yardstick entries fine-tuned in {time.perf_counter() - start:.0f} s"
              if done else "every yardstick entry is current")
        return
    if args.list:
        for r in runs:
            print(f"{r.name:34s} {r.train_fn.trainer_name} v{r.train_fn.trainer_version}  {r.config['steps']} steps"
                  + (f"  from {[p.name for p in r.parents]}" if r.parents else ""))
        return
    if args.check_fingerprints:
        sys.exit(0 if check_fingerprints(runs if args.all or args.only else one_per_kind(runs), args.processes)
                 else 1)
    if args.reproduce:
        if args.sample:
            runs = random.Random(args.seed).sample(runs, min(args.sample, len(runs)))
            print(f"{len(runs)} runs drawn with --seed {args.seed}: {', '.join(r.name for r in runs)}")
        sys.exit(0 if reproduce(runs, args.reproduce, args.processes) else 1)
    start, cpu = time.perf_counter(), processes.children_cpu_seconds()
    trained = processes.train_missing(runs, args.processes)
    if trained:
        recorded = processes.recorded_seconds()
        print(processes.report(trained, time.perf_counter() - start, processes.children_cpu_seconds() - cpu,
                               args.processes, {name: record["seconds"] for name, record in recorded.items()}))
    else:
        print(f"every checkpoint of the {len(runs)} runs is current")


if __name__ == "__main__":
    main()
