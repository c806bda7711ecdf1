"""One-off migration (issue #27) of the committed checkpoints to keys without source code, with fingerprints.

    .venv/bin/python scripts/migrate_checkpoints.py [--processes 2] [--only NAME ...]

For every run of `lib.recipes`: replay its first K steps on the pinned kernels (the fingerprint), check the
replay against the checkpoint's own log (the training loss of the rows the replay covers, every step's loss
where the log keeps them, the evaluation at step K), then rewrite the file with the new key, the run's config,
its trainer, the bare class name and the fingerprint, keeping every weight tensor and the log as they are
(checked bit for bit after writing).  A run whose replay drifts from its log (on another CPU than the one
that trained it, training amplifies rounding) is migrated when its kind was shown equivalent to the old code
bit for bit (`equivalent_kinds`).  Kept for the record: it is how today's checkpoints got their fingerprints.
"""

import argparse
import json
import os
import sys
from pathlib import Path

import torch

from lib import recipes
from lib.train import cache, fingerprint, processes


def equivalent_kinds() -> set:
    """Kinds of run whose new trainer was shown to give bit-identical weights and logs to the old code on this
    machine (60 steps each, old and new side by side: _build/equivalence.json).  A run whose replay here drifts
    from its log (trained on another CPU, a chaotic run) is migrated when its kind is among them."""
    record = Path("_build/equivalence.json")
    names = [name for name, same in json.loads(record.read_text()).items() if same] if record.exists() else []
    return {processes.kind_of(recipes.run(name)) for name in names}


def log_deviation(log: list, fp: dict) -> tuple:
    """`fingerprint.deviation` of the replay from the committed log's rows that the replay covers: their mean
    training losses and, where the log keeps them, every step's loss (at the losses' tolerance), and the
    evaluation of a row at step K (at the evaluation's)."""
    saved, replayed, previous = {"losses": {}}, {"losses": {}}, 0
    for row in log:
        if row["step"] > fp["steps"]:
            break
        losses = fp["losses"][previous:row["step"]]
        saved["losses"][f"row{row['step']}"], replayed["losses"][f"row{row['step']}"] = row["train_loss"], sum(losses) / len(losses)
        if "step_losses" in row:
            saved["losses"][f"row{row['step']}_steps"], replayed["losses"][f"row{row['step']}_steps"] = row["step_losses"], losses
        previous = row["step"]
    at_k = next((row for row in log if row["step"] == fp["steps"]), None)
    if at_k is not None:
        saved["evaluation"] = fingerprint.numbers({k: v for k, v in at_k.items() if k not in
                                                   ("step", "train_loss", "step_losses", "stream_lengths")})
        replayed["evaluation"] = fp["evaluation"]
    return fingerprint.deviation(saved, replayed)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--only", nargs="+")
    args = parser.parse_args()
    os.environ["BOOK_NO_TRAINING"] = "1"   # a replay that finds a parent stale fails instead of training it
    runs = [recipes.run(n) for n in args.only] if args.only else recipes.all_runs()
    for generation in (runs_without_parents(runs), [r for r in runs if r.parents]):  # parents migrated first
        if generation:
            migrate(generation, args.processes)


def runs_without_parents(runs: list) -> list:
    return [r for r in runs if not r.parents]


def migrate(runs: list, processes_count: int) -> None:
    replayed = processes.replay_fingerprints(runs, processes_count)
    report, worst = {}, 0.0
    for run in runs:
        path = cache.path_of(run)
        old = cache.read(path)
        fp = replayed.pop(run.name)
        seconds = fp.pop("seconds")
        ratio, where, deviation = log_deviation(old["log"], fp)
        worst = max(worst, ratio)
        report[run.name] = {"deviation_from_log": deviation, "of_tolerance": ratio, "where": where,
                            "replay_seconds": round(seconds, 1)}
        print(f"{run.name}: replay of {fp['steps']} steps in {seconds:.1f} s, deviation from the log {deviation:.1e} "
              f"at {where} ({ratio:.2g} of its tolerance)", flush=True)
        if ratio > 1 and processes.kind_of(run) not in equivalent_kinds():
            print(f"  NOT MIGRATED: the current trainer does not reproduce {run.name}", file=sys.stderr)
            continue
        fp["cpu"] = f"{fp['cpu']} (fingerprint replayed at migration; the weights were trained on an AMD EPYC)"
        model_class = old["model_class"].rpartition(".")[2]
        cls = cache.model_class(model_class)
        with cache.locked(path):
            saved = {"format": cache.FORMAT, "key": cache.checkpoint_key(run), "name": run.name, "config": run.config,
                     "trainer": {"name": run.train_fn.trainer_name, "version": run.train_fn.trainer_version},
                     "parents": [p.name for p in run.parents], "model_class": cls.__name__,
                     "model_config": old["model_config"], "state_dict": old["state_dict"], "log": old["log"],
                     "fingerprint": fp}
            cache.write_atomically(path, lambda f: torch.save(saved, f))
        new = cache.read(path)
        assert processes.same_weights_and_log(old, new), run.name
        assert cache.is_current(run), run.name
    Path("_build").mkdir(exist_ok=True)
    record = Path("_build/migration.json")
    earlier = json.loads(record.read_text()) if record.exists() else {}
    record.write_text(json.dumps({**earlier, **report}, indent=1))
    print(f"largest deviation of a replay from its committed log: {worst:.2g} of its tolerance")


if __name__ == "__main__":
    main()
