"""Section 07's runs: dense TinyGPT against mixtures of experts, trained as the base model is, on equal steps.

    recipes.load(run_name("moe_top1", seed=1))     # "moe_top1_seed1"

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
assignments and its balancing loss (`lib.trainers.char_lm`).
"""

from lib.nn.models import ModelConfig
from lib.nn.moe import MoEConfig
from lib.recipes.base import BASE_MODEL
from lib.train.cache import Run
from lib.trainers.char_lm import train_char_lm

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
    model = (ModelConfig() if experts is None else
             MoEConfig(**experts, capacity_factor=CAPACITY_FACTOR if experts["n_experts"] else None))
    return {**BASE_MODEL, "network": "tinygpt" if experts is None else "moe", "variant": variant,
            "model": model.to_dict(), "balance": balance, "steps": STEPS, "eval_every": EVAL_EVERY, "seed": seed}


def run_name(variant: str, seed: int = 0) -> str:
    return variant + (f"_seed{seed}" if seed else "")


def run(variant: str, seed: int = 0) -> Run:
    return Run(run_name(variant, seed), run_config(variant, seed), train_char_lm)


def runs() -> list:
    """Six variants over three seeds."""
    return [run(variant, seed) for seed in SEEDS for variant in VARIANTS]
