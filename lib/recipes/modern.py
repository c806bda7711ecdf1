"""Section 09's runs: the base model turned into a LLaMA-style decoder one change at a time, and GQA by uptraining.

    recipes.load("modern_rope_seed1")          # RMSNorm + SwiGLU + RoPE, seed 1
    recipes.load("uptrain_g1_seed2")           # the rope rung's seed 2, key/value heads mean-pooled to 1, uptrained

The ladder is additive: each rung keeps every change above it and adds one (`LADDER`).  Everything else is the
base model's recipe (`base.BASE_MODEL`: data, 6,000 steps, schedule, seeds 0-2), and the rung "base" is the base
model's own runs.  Parameters are matched to the base model's 109,056 by the MLP's hidden width
(`matched_hidden`): RoPE drops the 6,144-number position table, GQA half of the key/value projections,
and an untied output adds a 2,816-number matrix, so each of those rungs widens or narrows the MLP to stay within
1 %.

Uptraining (Ainslie et al. 2023): the rope rung (multi-head, g = 4) has its key/value heads mean-pooled into
g = 2 or 1 groups (`models.pool_kv_heads`) and trains `UPTRAIN_STEPS` more steps (5 % of its training, the
paper's share); g = 4 trains the same steps unpooled, the control for what the extra steps alone give.
"""

from lib.nn.models import ModelConfig, parameter_count
from lib.recipes.base import BASE_MODEL, SEEDS
from lib.recipes.base import run as base_run
from lib.train.cache import Run
from lib.trainers.char_lm import train_char_lm

# rung -> the switch it turns on (on top of every rung before it)
LADDER = {"base": {}, "rmsnorm": {"norm": "rmsnorm"}, "swiglu": {"mlp": "swiglu"}, "rope": {"position": "rope"},
          "gqa": {"kv_heads": 2}, "nobias": {"bias": False}, "untied": {"tie_output": False}}
RUNGS = tuple(LADDER)
TARGET = parameter_count(ModelConfig())          # the base model's 109,056
UPTRAIN_FROM = "rope"                             # the last multi-head rung
UPTRAIN_GROUPS = (4, 2, 1)
UPTRAIN_STEPS = 300
UPTRAIN = {"steps": UPTRAIN_STEPS, "lr": 1e-3, "warmup": 30, "eval_every": 50}


def _seeded(name: str, seed: int) -> str:
    return name + (f"_seed{seed}" if seed else "")


def matched_hidden(switches: dict) -> int:
    """The MLP hidden width that brings a config with these switches closest to the base model's parameter
    count (a GELU MLP keeps its 4d unless a later switch needs it)."""
    config = ModelConfig(**BASE_MODEL["model"], **switches)
    if config.mlp == "gelu" and abs(parameter_count(config) - TARGET) <= 0.01 * TARGET:
        return None
    return min(range(16, 512), key=lambda h: abs(parameter_count(ModelConfig(
        **BASE_MODEL["model"], **switches, mlp_hidden=h)) - TARGET))


def rung_switches(rung: str) -> dict:
    """Every switch up to and including a rung's."""
    if rung not in LADDER:
        raise ValueError(f"unknown rung {rung!r}; choose from {RUNGS}")
    switches = {}
    for name in RUNGS[: RUNGS.index(rung) + 1]:
        switches.update(LADDER[name])
    return switches


def matched_model(switches: dict) -> dict:
    """The base model's config (a dict) with these switches, the MLP width matched to its parameter count."""
    hidden = matched_hidden(switches)
    return ModelConfig(**BASE_MODEL["model"], **switches, **({"mlp_hidden": hidden} if hidden else {})).to_dict()


def rung_model(rung: str) -> dict:
    """The model config (a dict) of a rung: every switch up to and including it, the MLP width matched."""
    return matched_model(rung_switches(rung))


def run_name(rung: str, seed: int = 0) -> str:
    return base_run(seed).name if rung == "base" else _seeded(f"modern_{rung}", seed)


def run(rung: str, seed: int = 0) -> Run:
    if rung == "base":
        return base_run(seed)
    return Run(run_name(rung, seed), {**BASE_MODEL, "model": rung_model(rung), "seed": seed}, train_char_lm)


def uptrain_name(groups: int, seed: int = 0) -> str:
    return _seeded(f"uptrain_g{groups}", seed)


def uptrain_run(groups: int, seed: int = 0) -> Run:
    """The rope rung's seed, its key/value heads pooled into `groups`, trained UPTRAIN_STEPS more steps."""
    if groups not in UPTRAIN_GROUPS:
        raise ValueError(f"groups must be one of {UPTRAIN_GROUPS}, got {groups}")
    config = {**BASE_MODEL, **UPTRAIN, "model": rung_model(UPTRAIN_FROM), "pool_kv_heads": groups, "seed": seed}
    return Run(uptrain_name(groups, seed), config, train_char_lm, parents=(run(UPTRAIN_FROM, seed),))


def runs() -> list:
    """Six rungs above the base model over three seeds (18 runs), then the uptraining (9 short runs)."""
    return ([run(rung, s) for rung in RUNGS[1:] for s in SEEDS]
            + [uptrain_run(g, s) for g in UPTRAIN_GROUPS for s in SEEDS])
