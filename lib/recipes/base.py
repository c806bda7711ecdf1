"""Section 00's base model: TinyGPT trained on the mini internet's text, character by character.

    from lib import recipes
    model, log = recipes.load("base")             # seeds 1 and 2: "base_seed1", "base_seed2"
"""

from lib.nn.models import ModelConfig
from lib.train.cache import Run
from lib.train.loop import OPTIMIZATION
from lib.trainers.char_lm import train_char_lm

SEEDS = (0, 1, 2)
BASE_MODEL = {"network": "tinygpt", "model": ModelConfig().to_dict(), "steps": 6000, "batch_size": 32,
              **OPTIMIZATION, "seed": 0, "eval_every": 100}


def run_name(seed: int = 0) -> str:
    return "base" + (f"_seed{seed}" if seed else "")


def run(seed: int = 0) -> Run:
    """The base model's recipe with this seed (seed 0 is the base model itself)."""
    return Run(run_name(seed), {**BASE_MODEL, "seed": seed}, train_char_lm)


def runs() -> list:
    return [run(seed) for seed in SEEDS]
