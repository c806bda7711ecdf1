"""Section 02's runs: a GRU against TinyGPT, where LayerNorm sits, and one head against four.

    recipes.load("gru_seed1")                              # a GRU with TinyGPT's parameter budget
    recipes.load(layernorm_name("post", 0, 1e-2, seed=1))  # one run of the LayerNorm grid
    recipes.load("heads1_seed2")                           # TinyGPT with one 64-wide head

All are the base model's recipe (`base.BASE_MODEL`: windows, loss,
optimisation, validation) with another network:

    gru        GRULanguageModel, hidden 152: 108,956 parameters       6,000 steps, 3 seeds
    ln_*       pre-LN or post-LN x warm-up 100 or 0 x peak lr 3e-3 or 1e-2, every step logged
                                                                       1,000 steps, 3 seeds (24 runs)
    heads1     n_heads = 1: the same 109,056 parameters                6,000 steps, 3 seeds
    heads1_steps12000   the same, twice as long (slower, or stuck?)  12,000 steps, 3 seeds

Four heads and the Transformer side of the GRU comparison are the base model's
own seeds (`base.run(seed)`).
"""

from lib.nn.models import ModelConfig
from lib.nn.recurrent import GRUConfig
from lib.recipes.base import BASE_MODEL, SEEDS
from lib.recipes.base import run as base_run
from lib.train.cache import Run
from lib.trainers.char_lm import train_char_lm

PLACEMENTS = {"pre": "tinygpt", "post": "post_ln"}    # where LayerNorm sits -> the network
WARMUPS = (100, 0)
LEARNING_RATES = (3e-3, 1e-2)
LAYERNORM_STEPS = 1000


def _seeded(name: str, seed: int) -> str:
    return name + (f"_seed{seed}" if seed else "")


def gru_run(seed: int = 0) -> Run:
    config = {**BASE_MODEL, "network": "gru", "model": GRUConfig().to_dict(), "seed": seed}
    return Run(_seeded("gru", seed), config, train_char_lm)


def layernorm_name(placement: str, warmup: int, lr: float, seed: int = 0) -> str:
    return _seeded(f"ln_{placement}_warmup{warmup}_lr{lr:g}", seed)


def layernorm_run(placement: str, warmup: int, lr: float, seed: int = 0) -> Run:
    if placement not in PLACEMENTS:
        raise ValueError(f"unknown placement {placement!r}; choose one of {list(PLACEMENTS)}")
    config = {**BASE_MODEL, "network": PLACEMENTS[placement], "warmup": warmup, "lr": lr, "seed": seed,
              "steps": LAYERNORM_STEPS, "eval_every": 50, "log_steps": True}
    return Run(layernorm_name(placement, warmup, lr, seed), config, train_char_lm)


def heads_run(n_heads: int, seed: int = 0, steps: int = BASE_MODEL["steps"]) -> Run:
    """TinyGPT with n_heads heads for `steps` steps (the cosine schedule stretched to them); four heads for the
    base model's steps are the base model's own runs."""
    if n_heads == ModelConfig().n_heads and steps == BASE_MODEL["steps"]:
        return base_run(seed)
    config = {**BASE_MODEL, "model": {**BASE_MODEL["model"], "n_heads": n_heads}, "seed": seed, "steps": steps}
    name = f"heads{n_heads}" + ("" if steps == BASE_MODEL["steps"] else f"_steps{steps}")
    return Run(_seeded(name, seed), config, train_char_lm)


def runs() -> list:
    """The GRU over three seeds, the LayerNorm grid (24 runs) and one head over three seeds, for the base
    model's 6,000 steps and for twice as many."""
    grid = [layernorm_run(p, w, lr, s) for lr in LEARNING_RATES for p in PLACEMENTS for w in WARMUPS for s in SEEDS]
    return ([gru_run(s) for s in SEEDS] + grid + [heads_run(1, s) for s in SEEDS]
            + [heads_run(1, s, steps=2 * BASE_MODEL["steps"]) for s in SEEDS])
