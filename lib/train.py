"""Deterministic training and the checkpoint cache.

    model, log = get_or_train("base", BASE_MODEL, train_char_lm)

`get_or_train` returns the committed checkpoint when its key matches, and
otherwise trains, saves and returns.  The key hashes the config, the training
data and the code that training runs: the train function's module and every
lib module it imports, as syntax trees (so comments and docstrings do not
count).  A missing, stale or unreadable checkpoint prints
one line to stderr and is retrained; training is single-threaded and seeded,
so a retrain on the same machine gives bit-identical tensors.
"""

import ast
import contextlib
import fcntl
import hashlib
import inspect
import json
import math
import os
import random
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from lib import models, world
from lib.tokenizers import CharTokenizer

ROOT = Path(__file__).resolve().parent.parent
CHECKPOINT_DIR = ROOT / "checkpoints"

BASE_MODEL = {
    "model": models.ModelConfig().to_dict(),
    "steps": 6000, "batch_size": 32, "lr": 3e-3, "min_lr": 3e-4, "warmup": 100,
    "weight_decay": 0.01, "grad_clip": 1.0, "seed": 0, "eval_every": 100,
}


def seed_everything(seed: int) -> torch.Generator:
    """Seed every source of randomness, go single-threaded, return a torch generator."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(1)  # a single thread makes float reductions run in one fixed order
    return torch.Generator().manual_seed(seed)


def learning_rate(step: int, config: dict) -> float:
    """Linear warmup, then cosine decay from lr to min_lr at the last step."""
    if step < config["warmup"]:
        return config["lr"] * (step + 1) / config["warmup"]
    progress = (step - config["warmup"]) / max(1, config["steps"] - config["warmup"])
    return config["min_lr"] + 0.5 * (config["lr"] - config["min_lr"]) * (1 + math.cos(math.pi * progress))


def make_optimizer(model, config: dict):
    """AdamW; weight decay only on matrices, not on biases, LayerNorms or position tables' rows."""
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": config["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=config["lr"], betas=(0.9, 0.95))


def next_token_loss(model, windows):
    """Mean cross-entropy (nats) of predicting windows[:, 1:] from windows[:, :-1]."""
    logits = model(windows[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), windows[:, 1:].reshape(-1))


def line_batch(lines: list, tokenizer=CharTokenizer()):
    """Each document on its own: newline + line + newline, right-padded with newlines.

    Returns (ids (N, L), weights (N, L - 1)) where weights are 1 on the real
    predictions (every character of the line and its closing newline).  The
    documents of the world are independent, so a line needs no other context;
    scoring lines one by one matches `world.entropy_floor` and avoids charging
    the model for windows that start in the middle of a word."""
    newline = tokenizer.encode("\n")[0]
    seqs = [tokenizer.encode("\n" + line + "\n") for line in lines]
    ids = torch.full((len(seqs), max(map(len, seqs))), newline)
    weights = torch.zeros(len(seqs), ids.shape[1] - 1)
    for i, seq in enumerate(seqs):
        ids[i, :len(seq)] = torch.tensor(seq)
        weights[i, :len(seq) - 1] = 1.0
    return ids, weights


@torch.no_grad()
def token_losses(model, ids) -> torch.Tensor:
    """Cross-entropy (nats) of every next-token prediction, (N, L - 1); causal, so padding on the right is harmless."""
    model.eval()
    logits = model(ids[:, :-1])
    return F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")


def validation_loss(model, batch) -> float:
    """Mean cross-entropy (nats) per real prediction of a `line_batch`."""
    ids, weights = batch
    loss = float((token_losses(model, ids) * weights).sum() / weights.sum())
    model.train()
    return loss


def train_char_lm(config: dict, desc: str = "train"):
    """Train a TinyGPT on the mini internet's training text; return (model, log)."""
    generator = seed_everything(config["seed"])
    tokenizer = CharTokenizer()
    model = models.TinyGPT(models.ModelConfig(**config["model"]))
    T = model.config.context
    train_ids = torch.tensor(tokenizer.encode(world.load_text("train")))
    val = line_batch(world.load_text("val").splitlines(), tokenizer)
    optimizer = make_optimizer(model, config)
    log, running = [], []
    for step in tqdm(range(config["steps"]), desc=desc, file=sys.stderr, mininterval=1.0):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, config)
        starts = torch.randint(len(train_ids) - T - 1, (config["batch_size"],), generator=generator)
        batch = torch.stack([train_ids[s: s + T + 1] for s in starts.tolist()])
        loss = next_token_loss(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config["grad_clip"])
        optimizer.step()
        running.append(loss.item())
        if (step + 1) % config["eval_every"] == 0 or step + 1 == config["steps"]:
            log.append({"step": step + 1, "train_loss": sum(running) / len(running),
                        "val_loss": validation_loss(model, val)})
            running = []
    model.eval()
    return model, log


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
    """This lib file and every lib module it imports, directly or not (read from the syntax trees)."""
    lib_dir, found, todo = Path(__file__).resolve().parent, set(), [Path(path).resolve()]
    while todo:
        current = todo.pop()
        if current in found or not current.exists():
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


def load_base_model():
    """The book's base model (TinyGPT on the mini internet), trained on first use."""
    return get_or_train("base", BASE_MODEL, train_char_lm)
