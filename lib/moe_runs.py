"""Section 07's runs: dense TinyGPT against mixtures of experts, trained as the base model is, on equal steps.

    model, log = load("moe_top1", seed=0)     # from checkpoints/, trained first if missing
    python -m lib.moe_runs --only moe_top2    # train with a progress bar

Six variants of the base model's feed-forward layers (attention, embeddings and
everything else stay TinyGPT's), each over three seeds:

    dense                 the base model's MLP, hidden 256                 active = total
    dense_wide            one MLP of hidden 1,024                           active = total = the MoEs' total
    moe_top1              4 experts of hidden 256, top-1                    active = dense, total = dense_wide
    moe_top2              8 experts of hidden 128, top-2                    active = dense, total = dense_wide
    moe_shared            1 shared + 7 routed experts of hidden 128, top-1  active = dense, total = dense_wide
    moe_top1_no_balance   moe_top1 without the balancing loss

Every run reads the same windows as the base model (seeded the same way), with
the base model's optimisation and schedule, for STEPS steps (a third of the
base model's 6,000, so that all 18 runs fit in one evening on 2 cores).  The
MoE loss adds BALANCE x the balancing loss averaged over the two layers
(Switch Transformer's 0.01), and experts take at most 1.25 x their fair share
of a batch's tokens (Switch's training capacity factor).  Every EVAL_EVERY
steps the log records the validation loss (every line of the validation text,
read with no capacity limit: see `moe_evals`) and, averaged over the training
steps since the last row, each layer's expert load, its share of dropped
assignments and its balancing loss.
"""

import argparse

import torch

from lib import base_model, checkpoints, evals, models, world
from lib.checkpoints import Run, get_or_train
from lib.moe import MoEConfig, MoEGPT, with_capacity
from lib.objectives import next_token_loss, random_windows
from lib.seeding import seed_everything
from lib.tokenizers import CharTokenizer
from lib.train import fit

STEPS, EVAL_EVERY, SEEDS = 2000, 100, (0, 1, 2)
BALANCE, CAPACITY_FACTOR = 0.01, 1.25

VARIANTS = {  # name -> (the MoEConfig fields of its feed-forward layers, weight of the balancing loss)
    "dense": (None, 0.0),                                          # None: TinyGPT's own MLP
    "dense_wide": ({"n_experts": 0, "n_shared": 1, "expert_hidden": 1024}, 0.0),
    "moe_top1": ({"n_experts": 4, "top_k": 1, "expert_hidden": 256}, BALANCE),
    "moe_top2": ({"n_experts": 8, "top_k": 2, "expert_hidden": 128}, BALANCE),
    "moe_shared": ({"n_experts": 7, "top_k": 1, "expert_hidden": 128, "n_shared": 1}, BALANCE),
    "moe_top1_no_balance": ({"n_experts": 4, "top_k": 1, "expert_hidden": 256}, 0.0),
}


def run_config(variant: str, seed: int = 0) -> dict:
    """The base model's recipe for STEPS steps with this variant's feed-forward layers (the key hashes it).

    >>> c = run_config("moe_top2"); c["steps"], c["model"]["n_experts"], c["model"]["top_k"], c["balance"]
    (2000, 8, 2, 0.01)
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose from {list(VARIANTS)}")
    experts, balance = VARIANTS[variant]
    model = (models.ModelConfig() if experts is None else
             MoEConfig(**experts, capacity_factor=CAPACITY_FACTOR if experts["n_experts"] else None))
    return {**base_model.BASE_MODEL, "variant": variant, "model": model.to_dict(), "balance": balance,
            "steps": STEPS, "eval_every": EVAL_EVERY, "seed": seed}


def build_model(config: dict):
    """The variant's untrained model (its initialisation draws from the global RNG)."""
    if "n_experts" in config["model"]:
        return MoEGPT(MoEConfig(**config["model"]))
    return models.TinyGPT(models.ModelConfig(**config["model"]))


class RoutingRecorder:
    """Sums each layer's routing over the training steps; `row()` gives the means since the last row."""

    def __init__(self, model):
        self.layers = model.moe_layers() if isinstance(model, MoEGPT) and model.config.n_experts else []
        self.reset()

    def reset(self):
        self.steps, self.load, self.dropped, self.balance = 0, [0.0] * len(self.layers), [0] * len(self.layers), 0.0

    def record(self):
        self.steps += 1
        for i, layer in enumerate(self.layers):
            self.load[i] = self.load[i] + layer.last["load"]
            self.dropped[i] += layer.last["dropped"] / layer.last["kept"].numel()
            self.balance += layer.last["balance"].item() / len(self.layers)

    def row(self) -> dict:
        if not self.layers:
            return {}
        row = {"load": [(load / self.steps).tolist() for load in self.load],
               "dropped": [d / self.steps for d in self.dropped], "balance": self.balance / self.steps}
        self.reset()
        return row


def train_variant(config: dict, desc: str = "train"):
    """Train one variant with `fit` on the base model's windows; return (model, log)."""
    generator = seed_everything(config["seed"])
    model = build_model(config)
    stream = torch.tensor(CharTokenizer().encode(world.load_text("train")))[:-1]
    val = evals.line_batch(world.load_text("val").splitlines())
    recorder = RoutingRecorder(model)

    def loss_fn(m, windows):
        loss = next_token_loss(m, windows)
        if recorder.layers:
            recorder.record()
            loss = loss + config["balance"] * m.balance()
        return loss

    log = fit(model, lambda: random_windows(stream, model.config.context + 1, config["batch_size"], generator),
              loss_fn, config, desc=desc,
              evaluate=lambda m: {"val_loss": evals.validation_loss(with_capacity(m, None), val), **recorder.row()})
    return model, log


def checkpoint_name(variant: str, seed: int = 0) -> str:
    return variant + (f"_seed{seed}" if seed else "")


def run(variant: str, seed: int = 0) -> Run:
    return Run(checkpoint_name(variant, seed), run_config(variant, seed), train_variant)


def runs() -> list:
    """The checkpoints section 07's comparison loads: six variants over three seeds."""
    return [run(variant, seed) for seed in SEEDS for variant in VARIANTS]


def load(variant: str, seed: int = 0):
    """(model, log) of one run, trained first if its checkpoint is missing or stale."""
    r = run(variant, seed)
    return get_or_train(r.name, r.config, r.train_fn)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m lib.moe_runs", description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=list(VARIANTS), action="append", help="only this variant (repeatable)")
    parser.add_argument("--seed", type=int, nargs="+", default=list(SEEDS), help="seeds (default 0 1 2)")
    parser.add_argument("--processes", type=int, default=2, help="parallel training processes (default 2)")
    args = parser.parse_args(argv)
    checkpoints.train_missing([run(v, s) for s in args.seed for v in args.only or VARIANTS], args.processes)


if __name__ == "__main__":
    main()
