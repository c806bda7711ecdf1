"""Training processes: every checkpoint is trained (or replayed) in a fresh process on pinned CPU kernels.

    train_missing(runs, processes=2)          # the missing or stale ones, one process per core, longest first
    replay_fingerprints(runs, processes=2)    # {name: the fingerprint a replay of its first K steps gives}
    call_in_processes([(name, function, kwargs)])   # a measurement that trains (a fine-tune), same kernels

Why a fresh process: which float32 kernels PyTorch runs depends on the CPU
(AVX2 or AVX-512 code in ATen, MKL's dispatch, oneDNN's JIT) and is chosen once,
when a process starts.  Training is chaotic, so a last-bit difference in step 1
becomes a different model by step 200.  A training process therefore starts
with the kernels pinned to the AVX2 code paths of ATen and MKL and oneDNN
switched off, whatever the environment of the notebook or shell that asked for
it: a retrain is bit-identical on the same machine.  Across CPU vendors it is
not (measured: Intel Xeon vs AMD EPYC, see CONTRIBUTING.md); there the
fingerprint agrees within its tolerance.  Each process records its run's wall
time in train_seconds.json beside the checkpoints; the next schedule reads it.
"""

import heapq
import importlib
import inspect
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from tqdm import tqdm

from lib.train import cache, fingerprint
from lib.train.cache import CHECKPOINT_DIR, TRAINING_KERNELS, Run

TIMES_FILE = "train_seconds.json"  # beside the checkpoints: how long each run took to train, for the next schedule
PER_RUN_KEYS = ("seed", "steps", "eval_every", "lr", "min_lr", "warmup")  # what runs of one kind may differ in


def recorded_seconds(directory: Path = None) -> dict:
    """{name: {"seconds": wall seconds, "steps": steps}} of the runs last trained into this directory (its
    train_seconds.json); {} when there is none or it does not read (it only guides the schedule)."""
    try:
        times = json.loads((Path(directory or CHECKPOINT_DIR) / TIMES_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return {name: record for name, record in times.items()  # a line of another form (an older file) is dropped
            if isinstance(record, dict) and {"seconds", "steps"} <= record.keys()}


def kind_of(run: Run) -> tuple:
    """Runs of one kind train the same network on the same batches with the same code, so one step costs the
    same: the trainer and the config but for seed, steps, schedule and evaluation interval."""
    config = {k: v for k, v in run.config.items() if k not in PER_RUN_KEYS}
    return (getattr(run.train_fn, "trainer_name", None), json.dumps(config, sort_keys=True))


def estimated_seconds(runs: list, recorded: dict) -> dict:
    """{name: seconds} each run is expected to take: its steps at its own recorded seconds per step; else at
    those of its kind (`kind_of`), or of all recorded runs (0.1 s per step when nothing is recorded).

    >>> from lib.trainers.char_lm import train_char_lm as f
    >>> r = [Run("a", {"steps": 100, "d": 1}, f), Run("b", {"steps": 300, "d": 1}, f),
    ...      Run("c", {"steps": 100, "d": 2}, f), Run("e", {"steps": 200, "d": 3}, f)]
    >>> estimated_seconds(r, {"a": {"seconds": 10.0, "steps": 50}, "c": {"seconds": 50.0, "steps": 100}})
    {'a': 20.0, 'b': 60.0, 'c': 50.0, 'e': 80.0}
    """
    def per_step(group):
        known = [recorded[run.name] for run in group if run.name in recorded]
        steps = sum(record["steps"] for record in known)
        return sum(record["seconds"] for record in known) / steps if steps else None

    overall = per_step(runs) or 0.1
    kinds = {}
    for run in runs:
        kinds.setdefault(kind_of(run), []).append(run)
    rate = {kind: per_step(group) or overall for kind, group in kinds.items()}
    return {run.name: run.config.get("steps", 1) * (per_step([run]) or rate[kind_of(run)]) for run in runs}


def planned_seconds(seconds: list, processes: int) -> float:
    """Wall time of running jobs of these durations in this order, each on the first free process.

    >>> planned_seconds([5, 4, 3, 3, 1], 2)
    8
    """
    free = [0] * max(1, processes)
    for duration in seconds:
        heapq.heappush(free, heapq.heappop(free) + duration)
    return max(free)


def with_parents(runs: list) -> list:
    """The runs and every checkpoint they start from (their parents, theirs, ...), each once."""
    found, todo = {}, list(runs)
    while todo:
        run = todo.pop()
        if run.name not in found:
            found[run.name] = run
            todo += run.parents
    return list(found.values())


def cold_seconds(runs: list, processes: int = 2) -> float:
    """Wall seconds to train these runs and their parents from nothing on `processes` processes, planned as
    `train_missing` trains them: longest first, the runs that start from another of them after it."""
    runs = with_parents(runs)
    seconds = estimated_seconds(runs, recorded_seconds())
    names = {run.name for run in runs}
    waits = {run.name: any(parent.name in names for parent in run.parents) for run in runs}
    groups = [[seconds[name] for name in seconds if waits[name] == later] for later in (False, True)]
    return sum(planned_seconds(sorted(group, reverse=True), processes) for group in groups if group)


def train_missing(runs: list, processes: int = 2, directory: Path = None) -> list:
    """Train the runs whose checkpoints are missing or stale, each in its own training process, `processes`
    at a time, longest first (by `estimated_seconds`).  Returns the names trained.

    One run shows its own progress bar; several show one bar over the estimated seconds of all of them (runs
    done / total, time left).  A run that fails is named with the end of its error output, the others still
    finish, then a RuntimeError lists the failures.  Parents are trained first when they are missing."""
    directory = Path(directory or CHECKPOINT_DIR)
    parents = [p for run in runs for p in run.parents if p.name not in {r.name for r in runs}]
    if parents:
        train_missing(parents, processes, directory)
    estimate = estimated_seconds(runs, recorded_seconds())
    todo = [run for run in runs if not cache.is_current(run, directory)]
    todo.sort(key=lambda run: -estimate[run.name])  # longest first: the last runs to start are short ones
    later = [run for run in todo if any(p in todo for p in run.parents)]  # a parent trained in this call first
    todo = [run for run in todo if run not in later]
    names = [run.name for run in todo + later]
    if len(names) > 1:  # the plan, then one bar for all the runs (a single run shows its own bar)
        plan = planned_seconds([estimate[name] for name in names], processes)
        print(f"{len(names)} checkpoints to train: about {plan / 60:.0f} min on {max(1, processes)} processes",
              file=sys.stderr)
    failures = _run_jobs([_train_job(run, directory) for run in todo], processes, estimate, len(names))
    failures += _run_jobs([_train_job(run, directory) for run in later], processes, estimate, len(names)) if later else []
    if failures:
        raise RuntimeError(f"training failed for {failures}; the other runs were saved")
    return names


def _train_job(run: Run, directory: Path) -> dict:
    module = inspect.getmodule(run.train_fn)
    module = module.__spec__.name if module.__name__ == "__main__" and module.__spec__ else module.__name__
    if module == "__main__" or "<locals>" in run.train_fn.__qualname__:
        raise ValueError(f"train_fn {run.train_fn.__qualname__} must be a module-level function of an importable module")
    return {"task": "train", "name": run.name, "runs": [_describe(run)], "directory": str(directory)}


def _describe(run: Run) -> dict:
    """A Run as JSON, for a training process (its train function by module and name)."""
    return {"name": run.name, "config": run.config, "module": inspect.getmodule(run.train_fn).__spec__.name,
            "function": run.train_fn.__qualname__, "parents": [_describe(p) for p in run.parents]}


def _undescribe(job: dict) -> Run:
    train_fn = getattr(importlib.import_module(job["module"]), job["function"])
    return Run(job["name"], job["config"], train_fn, tuple(_undescribe(p) for p in job["parents"]))


def _run_jobs(jobs: list, processes: int, estimate: dict, total: int, what: str = "training checkpoints") -> list:
    """Run training-process jobs `processes` at a time; the names of those that failed.  The progress bar
    counts `what` ("training checkpoints: 3/81 runs done")."""
    running, failures, done = [], [], 0.0
    bar = tqdm(total=round(sum(estimate.get(job["name"], 1) for job in jobs)),
               desc=f"{what}: 0/{total} runs done", file=sys.stderr, disable=total < 2,
               mininterval=1.0, smoothing=0,  # time left from the mean rate so far
               bar_format="{desc}, {percentage:3.0f}% of the work |{bar}| {elapsed} elapsed, {remaining} left")
    try:
        while jobs or running:
            while jobs and len(running) < max(1, processes):
                running.append(_start(jobs.pop(0), quiet=not bar.disable))
            time.sleep(0.2)
            for job in list(running):
                if bar.disable:
                    _relay(job)  # a single run: show its own progress bar as it goes
                if job["process"].poll() is None:
                    continue
                running.remove(job)
                _relay(job)
                if job["process"].returncode != 0:
                    failures.append(job["name"])
                    print(f"{job['task']} of {job['name']!r} failed (exit {job['process'].returncode}):\n"
                          f"{job['log'].read_text(errors='replace')[-2000:]}", file=sys.stderr)
                job["log"].unlink(missing_ok=True)
                done += estimate.get(job["name"], 1)
                bar.set_description_str(f"{what}: {total - len(jobs) - len(running)}/"
                                        f"{total} runs done", refresh=False)
            # the work done: finished runs at their estimates, running ones as far as their estimates go
            bar.update(round(done + sum(min(time.perf_counter() - job["start"], 0.95 * estimate.get(job["name"], 1))
                                        for job in running)) - bar.n)
    finally:  # interrupted: stop the training processes (their locks go with them; nothing half-written is kept)
        for job in running:
            job["process"].kill()
            job["process"].wait()
            job["log"].unlink(missing_ok=True)
        bar.close()
    return failures


def _start(job: dict, quiet: bool) -> dict:
    """Start `python -m lib.train.processes JOB` with the pinned kernels; its stderr goes to a file."""
    job = dict(job, sys_path=sys.path, started_at=time.time())
    env = dict(os.environ, **TRAINING_KERNELS, **({"TQDM_DISABLE": "1"} if quiet else {}))
    log = Path(tempfile.mkstemp(prefix=f"{job['task']}-{job['name']}-", suffix=".log")[1])
    with log.open("wb") as stderr:  # the child keeps its own copy of the file descriptor
        process = subprocess.Popen([sys.executable, "-m", "lib.train.processes", json.dumps(job)], env=env,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
                                   cwd=Path(__file__).resolve().parent.parent.parent)
    return {**job, "process": process, "log": log, "shown": 0, "start": time.perf_counter()}


def _relay(job: dict) -> None:
    """Copy what a training process wrote to stderr since the last call (its progress bar) to ours."""
    if job["process"].returncode not in (None, 0):
        return  # a failure is reported whole, once
    text = job["log"].read_bytes()[job["shown"]:]
    job["shown"] += len(text)
    if text:
        sys.stderr.write(text.decode(errors="replace"))
        sys.stderr.flush()


def _record_seconds(directory: Path, name: str, seconds: float, steps: int) -> None:
    """Add one run's wall time to the directory's train_seconds.json (under its lock), one line per run."""
    with cache.locked(directory / TIMES_FILE):
        times = {**recorded_seconds(directory), name: {"seconds": round(seconds, 1), "steps": steps}}
        lines = (f"{json.dumps(run)}: {json.dumps(record)}" for run, record in sorted(times.items()))
        cache.write_atomically(directory / TIMES_FILE, lambda f: f.write("{\n" + ",\n".join(lines) + "\n}\n"), "w")


def cpu_name() -> str:
    """The CPU's model name (what a fingerprint was recorded on)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def train_with_fingerprint(run: Run, stop: bool = False, desc: str = None, directory: Path = None):
    """(model, log, fingerprint) of training the run in this process: the whole run, or (stop=True) a replay
    of its first K steps.  Parents are loaded from their checkpoints in `directory` (default: checkpoints/),
    where the run itself is trained: a retrain into another folder retrains the whole chain."""
    parents = tuple(get_or_train(p, directory)[0] for p in run.parents)
    with fingerprint.recording(run.train_fn.fingerprint_steps(run.config), stop=stop) as recorder:
        model, log = run.train_fn(run.config, parents=parents, desc=desc or run.name)
    if recorder.result is None:
        raise RuntimeError(f"{run.name}: fit never reached step {recorder.steps} (does the trainer call fit?)")
    return model, log, dict(recorder.result, cpu=cpu_name(), kernels=TRAINING_KERNELS)


def _train_and_save(job: dict) -> None:
    """In a training process: train one checkpoint (unless another process just did) and save it atomically."""
    run, directory = _undescribe(job["runs"][0]), Path(job["directory"])
    with cache.locked(cache.path_of(run, directory)):
        if cache.is_current(run, directory):
            return
        model, log, fp = train_with_fingerprint(run, directory=directory)
        cache.save(run, model, log, fp, directory)
    # trained here (not loaded above): the wall time since this process was started, for the next schedule
    _record_seconds(directory, run.name, time.time() - job["started_at"], run.config.get("steps", 1))


def _replay(job: dict) -> None:
    """In a training process: replay the first K steps of each run; write {name: fingerprint} to job["out"]."""
    results = {}
    for described in job["runs"]:
        run = _undescribe(described)
        start = time.perf_counter()
        results[run.name] = dict(train_with_fingerprint(run, stop=True)[2], seconds=time.perf_counter() - start)
    Path(job["out"]).write_text(json.dumps(results))


def replay_fingerprints(runs: list, processes: int = 2) -> dict:
    """{name: fingerprint} of a replay of each run's first K steps, in training processes (pinned kernels),
    the runs shared out over `processes` of them."""
    estimate = {run.name: run.train_fn.fingerprint_steps(run.config) for run in runs}
    lanes = [[] for _ in range(max(1, min(processes, len(runs))))]
    for run in sorted(runs, key=lambda r: -estimate[r.name]):
        min(lanes, key=lambda lane: sum(estimate[r.name] for r in lane)).append(run)
    with tempfile.TemporaryDirectory() as tmp:
        jobs = [{"task": "replay", "name": f"lane{i}", "runs": [_describe(r) for r in lane],
                 "out": str(Path(tmp) / f"lane{i}.json")} for i, lane in enumerate(lanes)]
        failures = _run_jobs(list(jobs), len(jobs), {}, 1)
        if failures:
            raise RuntimeError(f"replay failed in {failures}")
        return {name: fp for job in jobs for name, fp in json.loads(Path(job["out"]).read_text()).items()}


def _call(job: dict) -> None:
    """In a training process: call job["module"].job["function"](**job["kwargs"])."""
    getattr(importlib.import_module(job["module"]), job["function"])(**job["kwargs"])


def call_in_processes(calls: list, processes: int = 2, estimate: dict = None) -> list:
    """Run measurements that must give the same bits on every retry (a fine-tune is a short training) in
    processes on the pinned kernels, `processes` at a time, in the order given: calls are
    (name, function, kwargs) with `function` a module-level function that saves its own result.
    Returns the names that failed (each reported with the end of its error output)."""
    jobs = []
    for name, function, kwargs in calls:
        module = inspect.getmodule(function).__spec__.name
        jobs.append({"task": "call", "name": name, "module": module, "function": function.__qualname__,
                     "kwargs": kwargs})
    estimate = estimate or {}
    return _run_jobs(jobs, processes, estimate, len(jobs), what="measuring")


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


def get_or_train(run: Run, directory: Path = None):
    """(model, log) of the run: loaded from its checkpoint when it matches the key, otherwise trained (in a
    training process, `train_missing`) and saved.  With BOOK_NO_TRAINING set, raises StaleCheckpoint."""
    path = cache.path_of(run, directory)
    loaded, reason = cache.load_current(path, run)
    if loaded is None:
        if os.environ.get("BOOK_NO_TRAINING"):
            raise cache.StaleCheckpoint(f"checkpoint {path.name} is {reason}; training is off here "
                                        f"(BOOK_NO_TRAINING): train it with `python -m lib.recipes --only {run.name}`")
        print(f"checkpoint {path.name}: {reason}; training {run.name!r} from scratch", file=sys.stderr)
        train_missing([run], processes=1, directory=directory)
        loaded, reason = cache.load_current(path, run)
        if loaded is None:
            raise RuntimeError(f"training {run.name!r} finished but checkpoint {path.name} is {reason}")
    return loaded


def same_checkpoint(a: Path, b: Path) -> bool:
    """Whether two checkpoint files hold bit-identical weights, the same log and the same key."""
    return checkpoint_difference(a, b) is None


def checkpoint_difference(a: Path, b: Path):
    """None when two checkpoint files hold the same key, bit-identical weights and the same log (compared as
    JSON text, so NaN equals NaN); else what differs first, in words."""
    x, y = (torch.load(path, weights_only=True) for path in (a, b))
    if x["key"] != y["key"]:
        return "another key"
    if same_weights_and_log(x, y):
        return None
    if x["state_dict"].keys() != y["state_dict"].keys():
        return "other weight tensors"
    gaps = {k: float((x["state_dict"][k].double() - y["state_dict"][k].double()).abs().max()) for k in x["state_dict"]}
    worst = max(gaps, key=gaps.get)
    if gaps[worst] > 0:
        return f"weights differ (largest |difference| {gaps[worst]:.2g}, in {worst})"
    for row, other in zip(x["log"], y["log"]):
        for key in sorted(row.keys() | other.keys()):
            if json.dumps(row.get(key)) != json.dumps(other.get(key)):
                return (f"same weights; the log differs first at step {row.get('step')}, {key}: "
                        f"{row.get(key)!r} vs {other.get(key)!r}")
    return f"same weights; the log has {len(x['log'])} rows against {len(y['log'])}"


def same_weights_and_log(x: dict, y: dict) -> bool:
    """Whether two saved checkpoints (as read) hold bit-identical weights and the same log."""
    logs = [json.dumps(z["log"], sort_keys=True) for z in (x, y)]  # floats written exactly; NaN equals NaN here
    return (logs[0] == logs[1] and x["state_dict"].keys() == y["state_dict"].keys()
            and all(torch.equal(x["state_dict"][k], y["state_dict"][k]) for k in x["state_dict"]))


if __name__ == "__main__":
    torch.backends.mkldnn.enabled = False  # oneDNN picks its kernels by CPU at run time; ATen + MKL suffice here
    JOB = json.loads(sys.argv[1])
    sys.path[:] = JOB["sys_path"]
    {"train": _train_and_save, "replay": _replay, "call": _call}[JOB["task"]](JOB)
