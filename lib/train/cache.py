"""The checkpoint cache: train once, then load in seconds.

    @trainer("char_lm", version=1)
    def train_char_lm(config, parents=(), desc="train"): ...        # returns (model, log)

    run = Run("base", config, train_char_lm)
    model, log = processes.get_or_train(run)   # checkpoints/base.pt when current, else trained in a process

A checkpoint's key is what the run *is*: its config, the digest of the
training data, the trainer's name and the version it declares, the keys of the
checkpoints it starts from (`Run.parents`), PyTorch's version and the pinned
training kernels.  Source code is not hashed: a refactor retrains nothing.  A
change of what a trainer computes is declared by bumping its version, and the
fingerprint (`lib.train.fingerprint`, stored in every checkpoint) catches a
change that was not declared: `python -m lib.recipes --check-fingerprints`
replays the first steps of one run of every kind and compares.

`lib.train.processes.get_or_train` loads a current checkpoint; a missing, stale or unreadable one prints one
line to stderr and is retrained in a training process, except where BOOK_NO_TRAINING is set (the
test suite sets it): there it raises `StaleCheckpoint`, naming the checkpoint.
Writes are atomic under a file lock; loads use weights_only=True (no pickled
code is ever run).
"""

import contextlib
import fcntl
import hashlib
import importlib
import json
import os
import pkgutil
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

from lib import nn as networks
from lib.train import fingerprint
from lib.data import world
from lib.nn.models import ModelConfig

CHECKPOINT_DIR = Path(__file__).resolve().parent.parent.parent / "checkpoints"
# Set in every training process (read by ATen and MKL when they start): the AVX2 code paths.
TRAINING_KERNELS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"}
FORMAT = "book checkpoint v2"     # what wrote a file: `_load` refuses any other


class StaleCheckpoint(RuntimeError):
    """A checkpoint that would have to be trained where training is not allowed (BOOK_NO_TRAINING)."""


def trainer(name: str, version: int, fingerprint_steps=None):
    """Declare a module-level function as a trainer: train_fn(config, parents=(), desc="train") -> (model, log).

    `version` is part of every key it trains: bump it when what the function computes changes (a loss, a
    batch, a schedule, what it logs), and its checkpoints are retrained.  `fingerprint_steps(config)` is how
    many steps its fingerprint covers (default: the first evaluation interval, at most `fingerprint.STEPS`:
    longer replays drift apart across CPUs); a trainer whose behaviour branches early can say so here."""
    def declare(function):
        function.trainer_name, function.trainer_version = name, version
        function.fingerprint_steps = fingerprint_steps or (
            lambda config: min(config["steps"], config["eval_every"], fingerprint.STEPS))
        return function
    return declare


@dataclass(frozen=True)
class Run:
    """One checkpoint: checkpoints/<name>.pt, trained by train_fn (a `trainer`) from `config`, starting from the
    checkpoints of `parents` (Runs), which the training process loads and hands to train_fn."""
    name: str
    config: dict
    train_fn: object
    parents: tuple = ()

    def __post_init__(self):
        if not hasattr(self.train_fn, "trainer_version"):
            raise TypeError(f"run {self.name!r}: {getattr(self.train_fn, '__qualname__', self.train_fn)} is not "
                            "declared with @trainer(name, version)")


@lru_cache(maxsize=None)
def _data_digest(stamp) -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(world.DATA_DIR.glob("*.txt")))).hexdigest()


def data_digest() -> str:
    """sha256 of the mini internet's text files (computed again when one of them changes)."""
    files = sorted(world.DATA_DIR.glob("*.txt"))
    return _data_digest(tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in files))


def checkpoint_key(run: Run) -> str:
    """What a checkpoint must match (see the module docstring)."""
    blob = json.dumps({"config": run.config, "data": data_digest(), "trainer": run.train_fn.trainer_name,
                       "version": run.train_fn.trainer_version, "parents": [checkpoint_key(p) for p in run.parents],
                       "torch": torch.__version__, "kernels": TRAINING_KERNELS}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@contextlib.contextmanager
def locked(path: Path):
    """An exclusive lock on path.lock: two processes never train or write the same checkpoint at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def write_atomically(path: Path, write, mode: str = "wb") -> None:
    """write(file) into a temporary file beside path, then rename it onto path: readers see the old file or
    the new one, never half of one."""
    with tempfile.NamedTemporaryFile(mode, dir=path.parent, prefix=f".{path.name}.", suffix=".tmp",
                                     delete=False) as tmp:
        write(tmp)
    os.chmod(tmp.name, 0o644)
    os.replace(tmp.name, path)


@lru_cache(maxsize=None)
def model_class(name: str):
    """The network class a checkpoint names (a class of the model layer, lib.nn: moving it between that
    layer's modules changes no checkpoint)."""
    for module in pkgutil.iter_modules(networks.__path__):
        found = getattr(importlib.import_module(f"{networks.__name__}.{module.name}"), name, None)
        if isinstance(found, type) and issubclass(found, torch.nn.Module) and found.__module__.startswith("lib.nn."):
            return found
    raise ValueError(f"model class {name!r} is not defined in lib.nn")


def path_of(run: Run, directory: Path = None) -> Path:
    return Path(directory or CHECKPOINT_DIR) / f"{run.name}.pt"


def read(path: Path) -> dict:
    """A checkpoint file as saved (weights_only: no code runs)."""
    return torch.load(path, weights_only=True)


def load_current(path: Path, run: Run):
    """(model, log) from the checkpoint at `path` when it matches the run's key, else (None, why not)."""
    return _load(path, checkpoint_key(run))


def _load(path: Path, key: str):
    """(model, log) from a checkpoint, or (None, reason) when it cannot be used."""
    if not path.exists():
        return None, "missing"
    try:
        saved = read(path)
        if saved.get("format") != FORMAT:
            return None, f"written by {saved.get('format', 'an older version')!r}, not {FORMAT!r}"
        if saved["key"] != key:  # checked before a model is built: building one draws from the global RNG
            return None, f"stale (key {saved['key']} != {key}: config, data, trainer version or a parent changed)"
        cls = model_class(saved["model_class"])
        with torch.random.fork_rng(devices=[]):  # loading must not move a notebook's later random draws
            model = cls(getattr(cls, "config_class", ModelConfig)(**saved["model_config"]))
        model.load_state_dict(saved["state_dict"])
    except Exception as error:  # a torn or foreign file: say so and retrain
        return None, f"unreadable ({type(error).__name__}: {str(error).splitlines()[0][:80]})"
    model.eval()
    return (model, saved["log"]), None


def is_current(run: Run, directory: Path = None) -> bool:
    """Whether the run's checkpoint exists, reads, and matches its key: `processes.get_or_train` would load it."""
    return load_current(path_of(run, directory), run)[0] is not None


def save(run: Run, model, log: list, fingerprint: dict, directory: Path = None) -> None:
    """Write the run's checkpoint atomically (the caller holds its lock)."""
    saved = {"format": FORMAT, "key": checkpoint_key(run), "name": run.name, "config": run.config,
             "trainer": {"name": run.train_fn.trainer_name, "version": run.train_fn.trainer_version},
             "parents": [p.name for p in run.parents], "model_class": type(model).__name__,
             "model_config": model.config.to_dict(), "state_dict": model.state_dict(), "log": log,
             "fingerprint": fingerprint}
    write_atomically(path_of(run, directory), lambda f: torch.save(saved, f))
