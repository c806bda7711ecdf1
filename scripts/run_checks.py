"""`make test`'s checks, one process per core, the longest first: the lanes stay busy to the end.

    .venv/bin/python scripts/run_checks.py [--processes N] [--only TEXT ...]   # e.g. --only 04_ "unit tests"

The checks are independent jobs:
- the unit tests and doctests (`pytest tests lib`);
- strict nbval of each notebook on this machine's CPU kernels, and again on other kernels (MKL's SSE2
  branch, oneDNN at SSE4.1, ATen's AVX2 code: `figures.OTHER_KERNELS`): an output that depends on the
  instruction set or the vendor's MKL path fails there on every machine, not only on an unlucky one;
- then, for each notebook, every figure its two nbval runs printed through `plots.fmt`, compared unrounded
  (`lib.present.figures`): a figure that moves by more than float64's rounding between the two kernel sets
  depends on the CPU even where both round to the same digits here, and fails (on another machine, another
  vendor's BLAS, it would print other digits: `lib.measure.precision`);
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # lib, also where the venv does not link it
from lib.present import figures  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "_build" / "checks"
FIGURES = ROOT / "_build" / "figures"       # each nbval run's figures, unrounded (lib.present.figures)
TIMES = ROOT / "_build" / "check_seconds.json"


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
    notebooks = sorted((ROOT / "book").glob("*.ipynb"))
    for suffix, extra in ((", other kernels", figures.OTHER_KERNELS), ("", {})):
        for notebook in notebooks:
            figure_log = FIGURES / f"{notebook.stem}{'.other' if extra else ''}.jsonl"
            found[f"nbval {notebook.stem}{suffix}"] = (nbval + [str(notebook.relative_to(ROOT))], dict(
                extra, BOOK_STATIC_WIDGETS="1", **{figures.ENV: str(figure_log)}))
    return found


def recorded() -> dict:
    try:
        return json.loads(TIMES.read_text())
    except (OSError, ValueError):
        return {}


def run(processes: int, only=None) -> bool:
    """Run every job (or those whose names contain one of `only`), `processes` at a time; print one line per
    finished job; True if all passed."""
    todo, times = jobs(), recorded()
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
                    running[name] = (subprocess.Popen(command, cwd=ROOT, env=dict(os.environ, **extra), stdout=out,
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
    return same_figures(todo) and not failed


def same_figures(todo: dict) -> bool:
    """For each notebook whose two nbval runs (this machine's kernels, other kernels) were among `todo`: whether
    every figure they printed agrees unrounded (`figures.differences`); one line per notebook says so."""
    agree = True
    for name, (_, extra) in sorted(todo.items()):
        other = f"{name}, other kernels"
        if not name.startswith("nbval ") or other not in todo:
            continue
        native, generic = figures.read(extra[figures.ENV]), figures.read(todo[other][1][figures.ENV])
        found = figures.differences(native, generic)
        if found:
            agree = False
            print(f"FAILED figures of {name[6:]}: {len(found)} differ between this machine's kernels and the other "
                  f"ones by more than {figures.TOLERANCE:g}: computed in float32 somewhere, so they depend on the "
                  "CPU (lib.measure.precision)\n  " + "\n  ".join(found[:20])
                  + (f"\n  ... and {len(found) - 20} more" if len(found) > 20 else ""))
        else:
            print(f"figures of {name[6:]}: all {len(native)} agree to {figures.TOLERANCE:g} between this machine's "
                  "kernels and the other ones")
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
