"""The checkpoint cache: train once, then load in seconds.

    model, log = get_or_train("base", config, train_fn)
    train_missing([Run("base", config, train_fn), ...], processes=2)

`get_or_train` loads checkpoints/<name>.pt when its key matches and otherwise
trains it: train_fn(config, desc=name) runs in a fresh process on pinned CPU
kernels (`TRAINING_KERNELS`), which saves the result; `train_missing` trains
several such processes side by side.  The key
hashes the config, the training data and the training code: the train
function's module and every lib module it imports, directly or not, as syntax
trees (so comments and docstrings do not count; this cache module itself does
not count either).  Because lib's imports run one way (see tests/test_layers.py),
a run's key follows exactly the code it uses: editing another section's own
module, or any measurement the run does not call on, leaves it alone.  A
missing, stale or unreadable checkpoint prints one line to stderr and is
retrained.  Writes are atomic under a file lock; loads use
weights_only=True (no pickled code is ever run).

Why a fresh process: which float32 kernels PyTorch runs depends on the CPU
(AVX2 or AVX-512 code in ATen, MKL's dispatch, oneDNN's JIT) and is chosen once,
when a process starts.  Training is chaotic, so a last-bit difference in step 1
becomes a different model by step 200.  A training process therefore starts
with the kernels pinned to the AVX2 code paths of ATen and MKL (code that
every x86-64 CPU with AVX2 runs, AVX-512 ones included) and oneDNN switched
off, whatever the environment of the notebook or shell that asked for it.
"""

import ast
import contextlib
import fcntl
import hashlib
import heapq
import importlib
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from lib import models, world

CHECKPOINT_DIR = Path(__file__).resolve().parent.parent / "checkpoints"
# Set in every training process (read by ATen and MKL when they start): the AVX2 code paths.
TRAINING_KERNELS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"}


@dataclass(frozen=True)
class Run:
    """One checkpoint: checkpoints/<name>.pt, trained by train_fn(config, desc=name), a module-level function."""
    name: str
    config: dict
    train_fn: object


def _source_digest(paths) -> str:
    """Hash of the syntax trees of these Python files (comments and docstrings excluded)."""
    digest = hashlib.sha256()
    for path in sorted(set(paths)):
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                    and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
                node.body = body[1:] or [ast.Pass()]
        digest.update(Path(path).name.encode() + ast.dump(tree).encode())
    return digest.hexdigest()


def lib_dependencies(path: Path) -> set:
    """This lib file and every module of its folder it imports as lib.*, directly or not (read from the
    syntax trees), except this cache module: how checkpoints are stored does not change what training computes."""
    lib_dir, found, todo = Path(path).resolve().parent, set(), [Path(path).resolve()]
    while todo:
        current = todo.pop()
        if current in found or not current.exists() or current.name == Path(__file__).name:
            continue
        found.add(current)
        for node in ast.walk(ast.parse(current.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "lib":
                todo += [lib_dir / f"{alias.name}.py" for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lib."):
                todo.append(lib_dir / f"{node.module.split('.')[1]}.py")
            elif isinstance(node, ast.Import):
                todo += [lib_dir / f"{a.name.split('.')[1]}.py" for a in node.names if a.name.startswith("lib.")]
    return found


_DIGESTS = {}  # (path, every .py file of its folder with its mtime and size) -> digest: a notebook loads many checkpoints


def code_digest(path: Path) -> str:
    """The training code a run depends on: hash of the syntax trees of `lib_dependencies(path)`
    (computed again whenever a file of its folder changes)."""
    path = Path(path).resolve()
    stamp = (path, tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(path.parent.glob("*.py"))))
    if stamp not in _DIGESTS:
        _DIGESTS[stamp] = _source_digest(lib_dependencies(path))
    return _DIGESTS[stamp]


def checkpoint_key(config: dict, train_fn) -> str:
    """What a checkpoint must match: the config, the training data, the training code, and what picks
    the float kernels that ran it (PyTorch's version, the pinned kernels)."""
    code = code_digest(Path(inspect.getsourcefile(train_fn)))
    data = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(world.DATA_DIR.glob("*.txt")))).hexdigest()
    blob = json.dumps({"config": config, "train_fn": train_fn.__qualname__, "code": code,
                       "data": data, "torch": torch.__version__, "kernels": TRAINING_KERNELS}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive lock on path.lock: two processes never train or write the same checkpoint at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _class_name(model) -> str:
    """How a checkpoint names its model's class: `MaskedTransformer` for lib.models, else `lib.electra.Electra`."""
    module = type(model).__module__
    return type(model).__name__ if module == models.__name__ else f"{module}.{type(model).__name__}"


def _model_class(name: str):
    """The class `_class_name` wrote; only lib's modules are ever imported."""
    module, _, cls = name.rpartition(".")
    if module and not module.startswith("lib."):
        raise ValueError(f"model class {name!r} is not defined in lib")
    return getattr(importlib.import_module(module) if module else models, cls)


def _load(path: Path, key: str):
    """(model, log) from a checkpoint, or (None, reason) when it cannot be used."""
    if not path.exists():
        return None, "missing"
    try:
        saved = torch.load(path, weights_only=True)
        if saved["key"] != key:  # checked before a model is built: building one draws from the global RNG
            return None, f"stale (key {saved['key']} != {key}: config, data or code changed)"
        model_class = _model_class(saved["model_class"])
        config_class = getattr(model_class, "config_class", models.ModelConfig)
        with torch.random.fork_rng(devices=[]):  # loading must not move a notebook's later random draws
            model = model_class(config_class(**saved["model_config"]))
        model.load_state_dict(saved["state_dict"])
    except Exception as error:  # a torn or foreign file: say so and retrain
        return None, f"unreadable ({type(error).__name__}: {str(error).splitlines()[0][:80]})"
    model.eval()
    return (model, saved["log"]), None


def is_current(name: str, config: dict, train_fn, directory: Path = None) -> bool:
    """Whether checkpoints/<name>.pt exists, reads, and matches (config, data, code): `get_or_train` would load it."""
    path = Path(directory or CHECKPOINT_DIR) / f"{name}.pt"
    return _load(path, checkpoint_key(config, train_fn))[0] is not None


def get_or_train(name: str, config: dict, train_fn, directory: Path = None):
    """Load checkpoints/<name>.pt if it matches (config, data, code); otherwise train and save it.

    train_fn(config, desc=name) must be a module-level function that returns
    (model, log), where log is a list of dicts of numbers (the learning curve);
    it runs in a training process (see the module docstring).  Returns (model, log)."""
    path = Path(directory or CHECKPOINT_DIR) / f"{name}.pt"
    loaded, reason = _load(path, checkpoint_key(config, train_fn))
    if loaded is None:
        print(f"checkpoint {path.name}: {reason}; training {name!r} from scratch", file=sys.stderr)
        train_missing([Run(name, config, train_fn)], processes=1, directory=directory)
        loaded, reason = _load(path, checkpoint_key(config, train_fn))
        if loaded is None:
            raise RuntimeError(f"training {name!r} finished but checkpoint {path.name} is {reason}")
    return loaded


TIMES_FILE = "train_seconds.json"  # beside the checkpoints: how long each run took to train, for the next schedule


def recorded_seconds(directory: Path = None) -> dict:
    """{name: {"seconds": wall seconds, "steps": steps}} of the runs last trained into this directory (its
    train_seconds.json); {} when there is none or it does not read (it only guides the schedule)."""
    try:
        times = json.loads((Path(directory or CHECKPOINT_DIR) / TIMES_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return {name: record for name, record in times.items()  # a line of another form (an older file) is dropped
            if isinstance(record, dict) and {"seconds", "steps"} <= record.keys()}


PER_RUN_KEYS = ("seed", "steps", "eval_every", "lr", "min_lr", "warmup")  # what runs of one kind may differ in


def kind_of(run: Run) -> tuple:
    """Runs of one kind train the same network on the same batches with the same code, so one step costs the
    same: the train function and the config but for seed, steps, schedule and evaluation interval."""
    config = {k: v for k, v in run.config.items() if k not in PER_RUN_KEYS}
    function = (getattr(run.train_fn, "__module__", None), getattr(run.train_fn, "__qualname__", None))
    return function + (json.dumps(config, sort_keys=True),)


def estimated_seconds(runs: list, recorded: dict) -> dict:
    """{name: seconds} each run is expected to take: its steps at its own recorded seconds per step; else at
    those of its kind (`kind_of`), or of all recorded runs (0.1 s per step when nothing is recorded).

    >>> r = [Run("a", {"steps": 100, "d": 1}, None), Run("b", {"steps": 300, "d": 1}, None),
    ...      Run("c", {"steps": 100, "d": 2}, None), Run("e", {"steps": 200, "d": 3}, None)]
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


def train_missing(runs: list, processes: int = 2, directory: Path = None) -> list:
    """Train the runs (a list of `Run`) whose checkpoints are missing or stale, each in its own
    training process, `processes` at a time, longest first.  Returns the names trained.

    How long a run takes is estimated from checkpoints/train_seconds.json (`estimated_seconds`: the wall
    time of each run when it was last trained, of its kind when it was not); each training process
    records its run's time in the train_seconds.json of the directory it trains into.  One run shows its own
    progress bar; several show one bar over the estimated seconds of all of them (runs done / total,
    time left).  A run that fails is named with the end of its error output, the others still finish,
    then a RuntimeError lists the failures."""
    directory = Path(directory or CHECKPOINT_DIR)
    estimate = estimated_seconds(runs, recorded_seconds())
    todo = [run for run in runs if not is_current(run.name, run.config, run.train_fn, directory)]
    todo.sort(key=lambda run: -estimate[run.name])  # longest first: the last runs to start are short ones
    names, running, failures, done = [run.name for run in todo], [], [], 0.0
    if len(todo) > 1:  # the plan, then one bar for all the runs (a single run shows its own bar)
        plan = planned_seconds([estimate[name] for name in names], processes)
        print(f"{len(names)} checkpoints to train: about {plan / 60:.0f} min on {max(1, processes)} processes",
              file=sys.stderr)
    bar = tqdm(total=round(sum(estimate[name] for name in names)),
               desc=f"training checkpoints: 0/{len(names)} runs done", file=sys.stderr, disable=len(todo) < 2,
               mininterval=1.0, smoothing=0,  # time left from the mean rate so far
               bar_format="{desc}, {percentage:3.0f}% of the work |{bar}| {elapsed} elapsed, {remaining} left")
    try:
        while todo or running:
            while todo and len(running) < max(1, processes):
                running.append(_start_training_process(todo.pop(0), directory, quiet=not bar.disable))
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
                    print(f"training {job['name']!r} failed (exit {job['process'].returncode}):\n"
                          f"{job['log'].read_text(errors='replace')[-2000:]}", file=sys.stderr)
                job["log"].unlink(missing_ok=True)
                done += estimate[job["name"]]
                bar.set_description_str(f"training checkpoints: {len(names) - len(todo) - len(running)}/"
                                        f"{len(names)} runs done", refresh=False)
            # the work done: finished runs at their estimates, running ones as far as their estimates go
            bar.update(round(done + sum(min(time.perf_counter() - job["start"], 0.95 * estimate[job["name"]])
                                        for job in running)) - bar.n)
    finally:  # interrupted: stop the training processes (their locks go with them; nothing half-written is kept)
        for job in running:
            job["process"].kill()
            job["process"].wait()
            job["log"].unlink(missing_ok=True)
        bar.close()
    if failures:
        raise RuntimeError(f"training failed for {failures}; the other runs were saved")
    return names


def _write_atomically(path: Path, write, mode: str = "wb") -> None:
    """write(file) into a temporary file beside path, then rename it onto path: readers see the old file or
    the new one, never half of one."""
    with tempfile.NamedTemporaryFile(mode, dir=path.parent, prefix=f".{path.name}.", suffix=".tmp",
                                     delete=False) as tmp:
        write(tmp)
    os.chmod(tmp.name, 0o644)
    os.replace(tmp.name, path)


def _record_seconds(directory: Path, name: str, seconds: float, steps: int) -> None:
    """Add one run's wall time to the directory's train_seconds.json (under its lock), one line per run."""
    with _locked(directory / TIMES_FILE):
        times = {**recorded_seconds(directory), name: {"seconds": round(seconds, 1), "steps": steps}}
        lines = (f"{json.dumps(run)}: {json.dumps(record)}" for run, record in sorted(times.items()))
        _write_atomically(directory / TIMES_FILE, lambda f: f.write("{\n" + ",\n".join(lines) + "\n}\n"), "w")


def _start_training_process(run: Run, directory, quiet: bool) -> dict:
    """Start `python -m lib.checkpoints JOB` with the pinned kernels; its stderr goes to a file."""
    name, config, train_fn = run.name, run.config, run.train_fn
    module = inspect.getmodule(train_fn)
    # `python -m lib.electra_runs` runs the module as __main__; the training process imports it by its real name
    module = module.__spec__.name if module.__name__ == "__main__" and module.__spec__ else module.__name__
    if module == "__main__" or "<locals>" in train_fn.__qualname__:
        raise ValueError(f"train_fn {train_fn.__qualname__} must be a module-level function of an importable module")
    job = {"name": name, "config": config, "module": module, "function": train_fn.__qualname__,
           "directory": str(directory or CHECKPOINT_DIR), "sys_path": sys.path, "started_at": time.time()}
    env = dict(os.environ, **TRAINING_KERNELS, **({"TQDM_DISABLE": "1"} if quiet else {}))
    log = Path(tempfile.mkstemp(prefix=f"train-{name}-", suffix=".log")[1])
    with log.open("wb") as stderr:  # the child keeps its own copy of the file descriptor
        process = subprocess.Popen([sys.executable, "-m", "lib.checkpoints", json.dumps(job)], env=env,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
                                   cwd=Path(__file__).resolve().parent.parent)
    return {"name": name, "process": process, "log": log, "shown": 0, "start": time.perf_counter()}


def _relay(job: dict) -> None:
    """Copy what a training process wrote to stderr since the last call (its progress bar) to ours."""
    if job["process"].returncode not in (None, 0):
        return  # a failure is reported whole, once
    text = job["log"].read_bytes()[job["shown"]:]
    job["shown"] += len(text)
    if text:
        sys.stderr.write(text.decode(errors="replace"))
        sys.stderr.flush()


def _train_and_save(job: dict) -> None:
    """In a training process: train one checkpoint (unless another process just did) and save it atomically."""
    torch.backends.mkldnn.enabled = False  # oneDNN picks its kernels by CPU at run time; ATen + MKL suffice here
    sys.path[:] = job["sys_path"]
    train_fn = getattr(importlib.import_module(job["module"]), job["function"])
    name, config, path = job["name"], job["config"], Path(job["directory"]) / f"{job['name']}.pt"
    key = checkpoint_key(config, train_fn)
    with _locked(path):
        if _load(path, key)[0] is not None:
            return
        model, log = train_fn(config, desc=name)
        saved = {"key": key, "name": name, "config": config, "model_class": _class_name(model),
                 "model_config": model.config.to_dict(), "state_dict": model.state_dict(), "log": log}
        _write_atomically(path, lambda f: torch.save(saved, f))
    # trained here (not loaded above): the wall time since this process was started, for the next schedule
    _record_seconds(path.parent, name, time.time() - job["started_at"], config.get("steps", 1))


if __name__ == "__main__":
    _train_and_save(json.loads(sys.argv[1]))
