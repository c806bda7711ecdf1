"""Deterministic training: one seeding helper, the learning-rate schedule, losses, the base model.

    model, log = load_base_model()   # TinyGPT, trained on first use, then cached

Training is single-threaded and seeded, so a retrain on the same machine gives
bit-identical tensors; `lib.checkpoints.get_or_train` caches the result.
"""

import math
import random
import sys

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from lib import models, world
from lib.checkpoints import get_or_train
from lib.tokenizers import CharTokenizer

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


def optimizer_step(model, optimizer, loss, step: int, config: dict):
    """One update, the same for every recipe: this step's learning rate, backpropagation,
    gradient-norm clipping at config["grad_clip"], AdamW step."""
    for group in optimizer.param_groups:
        group["lr"] = learning_rate(step, config)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), config["grad_clip"])
    optimizer.step()


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
    logits = model(ids[:, :-1])
    return F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")


def validation_loss(model, batch) -> float:
    """Mean cross-entropy (nats) per real prediction of a `line_batch`."""
    ids, weights = batch
    return float((token_losses(model, ids) * weights).sum() / weights.sum())


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
        starts = torch.randint(len(train_ids) - T - 1, (config["batch_size"],), generator=generator)
        batch = torch.stack([train_ids[s: s + T + 1] for s in starts.tolist()])
        loss = next_token_loss(model, batch)
        optimizer_step(model, optimizer, loss, step, config)
        running.append(loss.item())
        if (step + 1) % config["eval_every"] == 0 or step + 1 == config["steps"]:
            log.append({"step": step + 1, "train_loss": sum(running) / len(running),
                        "val_loss": validation_loss(model, val)})
            running = []
    model.eval()
    return model, log


def runs() -> list:
    """The checkpoints this module trains for the book: [(name, config, train_fn)]."""
    return [("base", BASE_MODEL, train_char_lm)]


def load_base_model():
    """The book's base model (TinyGPT on the mini internet), trained on first use."""
    return get_or_train("base", BASE_MODEL, train_char_lm)
