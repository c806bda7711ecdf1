"""The one training loop of the book, in the shape of nanoGPT's train.py.

    log = fit(model, get_batch, loss_fn, config, evaluate=None)

Every model of the book trains through `fit`, called by the trainers of
`lib.trainers` (the base model and its variants, section 04's recipes and every
later section).  Only what the caller hands in differs: where batches come from,
how a batch becomes a loss, and what to measure on the way (`evaluate`).  This
module never imports evaluation code; it calls the `evaluate` it is given.

Training is single-threaded and seeded (`lib.data.seeding.seed_everything`),
so a retrain on the same machine gives bit-identical tensors; `lib.train.cache`
caches the result, and inside a `fingerprint.recording` block `fit` reports
each step to it (the replay that guards a trainer's version).
"""

import math
import sys

import torch
from tqdm import tqdm

from lib.train import fingerprint

# The optimisation every run of the book shares; each run's config copies these keys.
OPTIMIZATION = {"lr": 3e-3, "min_lr": 3e-4, "warmup": 100, "weight_decay": 0.01, "grad_clip": 1.0}


def learning_rate(step: int, config: dict) -> float:
    """Linear warmup, then cosine decay from lr to min_lr at the last step.

    >>> [round(learning_rate(s, dict(lr=1.0, min_lr=0.1, warmup=2, steps=4)), 3) for s in range(4)]
    [0.5, 1.0, 1.0, 0.55]
    """
    if step < config["warmup"]:
        return config["lr"] * (step + 1) / config["warmup"]
    progress = (step - config["warmup"]) / max(1, config["steps"] - config["warmup"])
    return config["min_lr"] + 0.5 * (config["lr"] - config["min_lr"]) * (1 + math.cos(math.pi * progress))


def make_optimizer(model, config: dict):
    """AdamW; weight decay on every matrix (embeddings and position tables included), none on biases
    or LayerNorms."""
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": config["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=config["lr"], betas=(0.9, 0.95))


def optimizer_step(model, optimizer, loss, step: int, config: dict):
    """One update: this step's learning rate, backpropagation, gradient-norm clipping at
    config["grad_clip"], AdamW step."""
    for group in optimizer.param_groups:
        group["lr"] = learning_rate(step, config)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), config["grad_clip"])
    optimizer.step()


def fit(model, get_batch, loss_fn, config: dict, evaluate=None, desc: str = "train", stop_after: int = None) -> list:
    """Train `model` for config["steps"] steps and return its log (the learning curve).

    Each step: batch = get_batch(), loss = loss_fn(model, batch), one `optimizer_step` (the
    schedule and optimizer read config's lr, min_lr, warmup, weight_decay, grad_clip).  Every
    config["eval_every"] steps and at the last, the log gets a row: the step, the mean training loss
    since the last row, and the numbers evaluate(model) returns (called in eval mode).  The model
    is left in eval mode.

    stop_after=K ends the run after K of its steps (the schedule is still that of config["steps"]; K = 0
    returns the initialisation).
    Inside a `fingerprint.recording` block, fit reports every step to it; a replay's recorder stops
    the run at its step K."""
    optimizer = make_optimizer(model, config)
    recorder = fingerprint.active()
    if recorder is not None and recorder.stop:
        stop_after = recorder.steps
    log, running = [], []
    last = config["steps"] if stop_after is None else min(config["steps"], stop_after)
    for step in tqdm(range(last), desc=desc, file=sys.stderr,
                     mininterval=1.0):
        loss = loss_fn(model, get_batch())
        optimizer_step(model, optimizer, loss, step, config)
        value = loss.item()
        running.append(value)
        if (step + 1) % config["eval_every"] == 0 or step + 1 == config["steps"]:
            model.eval()
            log.append({"step": step + 1, "train_loss": sum(running) / len(running),
                        **(evaluate(model) if evaluate else {})})
            model.train()
            running = []
        if recorder is not None:
            row = log[-1] if log and log[-1]["step"] == step + 1 else None
            recorder.step(step, value, model, config, learning_rate, lambda: _evaluation(model, evaluate, row))
    model.eval()
    return log


def _evaluation(model, evaluate, row) -> dict:
    """The evaluation at this step: the log row's when it has one, else evaluate(model) in eval mode, under
    a fork of the global RNG so that training goes on exactly as without it."""
    if row is not None:
        return {k: v for k, v in row.items() if k not in ("step", "train_loss")}
    if evaluate is None:
        return {}
    with torch.random.fork_rng(devices=[]):
        model.eval()
        result = evaluate(model)
        model.train()
    return result
