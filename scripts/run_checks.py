"""`make test`'s checks, one process per core, the longest first: the lanes stay busy to the end.

    .venv/bin/python scripts/run_checks.py [--processes N] [--only TEXT ...]   # e.g. --only 04_ "unit tests"

The checks are independent jobs:
- the unit tests and doctests (`pytest tests lib`);
- strict nbval of each notebook on other CPU kernels than the ones that executed it (MKL's AVX2 branch,
  oneDNN at SSE4.1, ATen's AVX2 code: `figures.OTHER_KERNELS`), so an output that depends on the instruction
  set or the vendor's MKL path fails there on every machine, not only on an unlucky one;
- then, for each notebook, every figure its nbval run printed through `plots.fmt`, compared unrounded with the
  record made when the notebook was executed on the executing machine's own kernels and committed with its
  outputs (tests/figures/, `scripts/execute_notebooks.py`): a figure that moves by more than float64's
  rounding between the two kernel sets depends on the CPU even where both round to the same digits, and fails
  (on another machine, another vendor's BLAS, it would print other digits: `lib.measure.precision`).  So one
  nbval run per notebook compares two kernel sets: the other run is the execution that made its outputs;
- the fingerprint gate (`python -m lib.recipes --check-fingerprints`): the first steps of one run of every
  kind replayed and compared with what its checkpoint stores, so an undeclared change of a trainer fails;
- the strict book build (warnings are errors).  It renders the committed outputs, so it needs none of the
  others.

N jobs run at a time (default: one per core), the longest first by their times in the last run
(_build/check_seconds.json; a job without a time goes first).  Each job's output goes to a log under
_build/checks/; the log of a job that failed is printed whole at the end.  Ctrl-C (or SIGTERM) stops every
job.
"""

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # lib, also where the venv does not link it
from lib.present import figures  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "_build" / "checks"
FIGURES = ROOT / "_build" / "figures"       # each nbval run's figures, unrounded (lib.present.figures)
TIMES = ROOT / "_build" / "check_seconds.json"
# One thread per job, as there is one job per core: a job whose torch takes a second thread waits for the core
# the other job holds (the unit tests' slowest test: 11.3 s with two threads, 5.6 s with one, the other core busy).
# Every training process and notebook sets one thread itself (`seeding.seed_everything`); the unit tests did not.
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def jobs() -> dict:
    """{job name: (command, extra environment)}, in the order to run them when no times are recorded."""
    pytest = [sys.executable, "-m", "pytest"]
    nbval = pytest + ["--nbval", "--nbval-current-env", "--durations=5", "--nbval-sanitize-with",
                      "tests/nbval_sanitize.cfg", "-p", "no:cacheprovider"]
    book = [str(Path(sys.executable).parent / "jupyter-book"), "build", ".", "--all", "-W", "-n", "--keep-going",
            "--quiet"]  # --all: every page read again, so a warning is raised again until it is fixed
    # the fingerprint gate: one run of every kind replayed on the pinned kernels, in one process of its own
    gate = [sys.executable, "-m", "lib.recipes", "--check-fingerprints", "--processes", "1"]
    found = {"unit tests": (pytest + ["--durations=10", "tests", "lib"], {}), "book build": (book, {}),
             "fingerprints": (gate, {"BOOK_NO_TRAINING": "1", "TQDM_DISABLE": "1"})}
    for notebook in sorted((ROOT / "book").glob("*.ipynb")):
        found[f"nbval {notebook.stem}"] = (nbval + [str(notebook.relative_to(ROOT))], dict(
            figures.OTHER_KERNELS, BOOK_STATIC_WIDGETS="1", **{figures.ENV: str(FIGURES / f"{notebook.stem}.jsonl")}))
    return found


def recorded() -> dict:
    try:
        return json.loads(TIMES.read_text())
    except (OSError, ValueError):
        return {}


def run(processes: int, only=None) -> bool:
    """Run every job (or those whose names contain one of `only`), `processes` at a time; print one line per
    finished job; True if all passed."""
    todo = jobs()
    times = {name: seconds for name, seconds in recorded().items() if name in todo}   # no job that is gone
    if only:
        todo = {name: job for name, job in todo.items() if any(text in name for text in only)}
        if not todo:
            raise SystemExit(f"no job's name contains any of {only}; the jobs: {list(jobs())}")
    order = sorted(todo, key=lambda name: -times.get(name, float("inf")))  # stable: unrecorded jobs keep their order
    LOGS.mkdir(parents=True, exist_ok=True)
    FIGURES.mkdir(parents=True, exist_ok=True)
    if "book build" in todo:
        shutil.rmtree(ROOT / "_build" / "html", ignore_errors=True)  # no page left over from an earlier build
    running, failed, start = {}, [], time.perf_counter()
    try:
        while order or running:
            while order and len(running) < processes:
                name = order.pop(0)
                command, extra = todo[name]
                if figures.ENV in extra:
                    Path(extra[figures.ENV]).unlink(missing_ok=True)     # the figures of this run only
                log = LOGS / (re.sub(r"\W+", "_", name) + ".log")
                with log.open("wb") as out:
                    env = dict(os.environ, **ONE_THREAD, **extra)
                    running[name] = (subprocess.Popen(command, cwd=ROOT, env=env, stdout=out,
                                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL),
                                     log, time.perf_counter())
            time.sleep(0.2)
            for name, (process, log, began) in list(running.items()):
                if process.poll() is None:
                    continue
                del running[name]
                seconds = time.perf_counter() - began
                text = re.sub(r"\x1b\[[0-9;]*m", "", log.read_text(errors="replace"))  # no terminal colours
                lines = [line.strip("= ") for line in text.splitlines() if line.strip("= ")]
                if process.returncode == 0:
                    times[name] = round(seconds, 1)
                else:
                    failed.append((name, log))
                done = len(todo) - len(order) - len(running)
                print(f"[{done:2}/{len(todo)}] {'passed' if process.returncode == 0 else 'FAILED'} {name} in "
                      f"{seconds:.0f} s: {lines[-1] if lines else '(no output)'}", flush=True)
    finally:  # interrupted (Ctrl-C, or SIGTERM: see main): no job outlives the run
        _stop([process for process, _, _ in running.values()])
        TIMES.write_text(json.dumps(times, indent=1, sort_keys=True) + "\n")
    print(f"{len(todo)} job{'s' if len(todo) > 1 else ''} in {time.perf_counter() - start:.0f} s on {processes} "
          "processes")
    for name, log in failed:
        print(f"\n== {name} failed; its log ({log.relative_to(ROOT)}):\n{log.read_text(errors='replace')}")
    return same_figures({name: job for name, job in todo.items() if name not in dict(failed)}) and not failed


def same_figures(todo: dict) -> bool:
    """For each notebook whose nbval run is among `todo`: whether every figure it printed on the
    other kernels agrees unrounded with the committed record of its execution (`figures.differences`); one line
    per notebook says so."""
    agree = True
    for name, (command, extra) in sorted(todo.items()):
        if not name.startswith("nbval "):
            continue
        committed = figures.record_of(command[-1])
        executed = figures.rerun_by_nbval(figures.read(committed), nbformat.read(ROOT / command[-1], as_version=4).cells)
        found = figures.differences(executed, figures.read(extra[figures.ENV]))
        if found:
            agree = False
            print(f"FAILED figures of {name[6:]}: {len(found)} differ by more than {figures.TOLERANCE:g} between "
                  f"the record of its execution ({committed.relative_to(ROOT)}: the executing machine's own "
                  "kernels) and this run on other kernels. Either a figure is computed in float32 somewhere, so it "
                  "depends on the CPU (lib.measure.precision), or the notebook changed since the record was made: "
                  "re-execute it (scripts/execute_notebooks.py), which rewrites both\n  " + "\n  ".join(found[:20])
                  + (f"\n  ... and {len(found) - 20} more" if len(found) > 20 else ""))
        else:
            print(f"figures of {name[6:]}: all {len(executed)} agree to {figures.TOLERANCE:g} with "
                  "the record of its execution, on other kernels")
    return agree


def _stop(processes: list, grace: float = 10.0) -> None:
    """SIGINT to each job (pytest then shuts its notebook's kernel down), SIGKILL to any still running after
    `grace` seconds.  A Ctrl-C in the terminal has reached them already: they are in our process group."""
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGINT)
    deadline = time.monotonic() + grace
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=len(os.sched_getaffinity(0)), help="jobs at a time")
    parser.add_argument("--only", nargs="+", metavar="TEXT", help="only the jobs whose names contain one of these")
    args = parser.parse_args()
    if args.processes < 1:
        parser.error(f"--processes needs at least 1, got {args.processes}")
    signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(128 + number))  # run `finally`: stop the jobs
    try:
        passed = run(args.processes, args.only)
    except KeyboardInterrupt:
        sys.exit("interrupted: every job stopped")
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
