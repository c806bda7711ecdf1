"""The checkpoint cache: train once, then load in seconds.

    model, log = get_or_train("base", config, train_fn)

`get_or_train` loads checkpoints/<name>.pt when its key matches and otherwise
calls train_fn(config, desc=name), saves the result and returns it.  The key
hashes the config, the training data and the training code: the train
function's module and every lib module it imports, as syntax trees (so
comments and docstrings do not count; this cache module itself does not count
either).  A missing, stale or unreadable checkpoint prints one line to stderr
and is retrained.  Writes are atomic under a file lock; loads use
weights_only=True (no pickled code is ever run).
"""

import ast
import contextlib
import fcntl
import hashlib
import inspect
import json
import os
import sys
import tempfile
from pathlib import Path

import torch

from lib import models, world

CHECKPOINT_DIR = Path(__file__).resolve().parent.parent / "checkpoints"


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
    """This lib file and every lib module it imports, directly or not (read from the syntax trees),
    except this cache module: how checkpoints are stored does not change what training computes."""
    lib_dir, found, todo = Path(__file__).resolve().parent, set(), [Path(path).resolve()]
    while todo:
        current = todo.pop()
        if current in found or not current.exists() or current == Path(__file__).resolve():
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


def checkpoint_key(config: dict, train_fn) -> str:
    """What a checkpoint must match: the config, the training data and the training code."""
    code = lib_dependencies(Path(inspect.getsourcefile(train_fn)))
    data = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(world.DATA_DIR.glob("*.txt")))).hexdigest()
    blob = json.dumps({"config": config, "train_fn": train_fn.__qualname__,
                       "code": _source_digest(code), "data": data}, sort_keys=True)
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


def _load(path: Path, key: str):
    """(model, log) from a checkpoint, or (None, reason) when it cannot be used."""
    if not path.exists():
        return None, "missing"
    try:
        saved = torch.load(path, weights_only=True)
        model_class = getattr(models, saved["model_class"])
        model = model_class(models.ModelConfig(**saved["model_config"]))
        if saved["key"] != key:
            return None, f"stale (key {saved['key']} != {key}: config, data or code changed)"
        model.load_state_dict(saved["state_dict"])
    except Exception as error:  # a torn or foreign file: say so and retrain
        return None, f"unreadable ({type(error).__name__}: {str(error).splitlines()[0][:80]})"
    model.eval()
    return (model, saved["log"]), None


def is_current(name: str, config: dict, train_fn, directory: Path = None) -> bool:
    """Whether checkpoints/<name>.pt exists, reads, and matches (config, data, code): `get_or_train` would load it."""
    path = Path(directory or CHECKPOINT_DIR) / f"{name}.pt"
    with torch.random.fork_rng(devices=[]):  # a check must not move the global random state (model init draws from it)
        return _load(path, checkpoint_key(config, train_fn))[0] is not None


def get_or_train(name: str, config: dict, train_fn, directory: Path = None):
    """Load checkpoints/<name>.pt if it matches (config, data, code); otherwise train and save it.

    train_fn(config, desc=name) must return (model, log), where log is a list
    of dicts of numbers (the learning curve).  Returns (model, log)."""
    path = Path(directory or CHECKPOINT_DIR) / f"{name}.pt"
    key = checkpoint_key(config, train_fn)
    with _locked(path):
        loaded, reason = _load(path, key)
        if loaded is not None:
            return loaded
        print(f"checkpoint {path.name}: {reason}; training {name!r} from scratch", file=sys.stderr)
        model, log = train_fn(config, desc=name)
        saved = {"key": key, "name": name, "config": config, "model_class": type(model).__name__,
                 "model_config": model.config.to_dict(), "state_dict": model.state_dict(), "log": log}
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{name}.", suffix=".tmp", delete=False) as tmp:
            torch.save(saved, tmp)
        os.chmod(tmp.name, 0o644)
        os.replace(tmp.name, path)  # atomic: readers see the old file or the new one, never half of one
        return model, log
