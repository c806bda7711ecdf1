"""Section 04's controlled comparison: five architecture + objective recipes (two of them T5), same compute.

    recipes.load(run_name("t5_span", seed=1))     # "compare_t5_span_seed1"
    run_config("bert", mlm_rate=0.40)             # exercise 4.1's BERT

Every recipe trains on the training reviews only, 32 windows of about 32
positions per step, for the same number of steps, with the same learning-rate
schedule and seed; only the objective (and the architecture it needs) differs
(`lib.trainers.comparison`):

    gpt        MaskedTransformer, causal mask    lm_batch                  33-token windows (32 positions)
    prefix_lm  MaskedTransformer, prefix mask    prefix_lm_batch           33-token windows
    bert       MaskedTransformer, bidirectional  mlm_batch (15%)           32-token windows
    t5_iid     EncoderDecoder, 2 + 2 layers      iid_denoising_batch (15%) 24 tokens: source + target 32 on average
    t5_span    EncoderDecoder, 2 + 2 layers      span_corruption_batch     27 tokens: source + target <= 32
                                                 (15%, mean span 3)

T5's two are the objectives of Raffel et al.: its baseline (each token noise
with probability 0.15, adjacent noise tokens merged into one span) and its
final choice (span corruption, mean span length 3).  Each recipe over three
seeds; exercise 4.1 (BERT masking 40 %) and exercise 4.2 (T5 spans for 6,000
steps) over three seeds too, and T5 (spans) at peak learning rates 1e-3 and
1e-2 (three seeds each): is T5 slow because 3e-3 does not suit it?
"""

from dataclasses import dataclass

from lib.objectives import batches
from lib.nn.models import ModelConfig
from lib.train.cache import Run
from lib.train.loop import OPTIMIZATION
from lib.trainers.comparison import train_comparison

STEPS, BATCH_SIZE, POSITIONS, MLM_RATE = 2500, 32, 32, 0.15
T5_NOISE_DENSITY, T5_MEAN_SPAN = 0.15, 3.0   # Raffel et al.: 15 % noise; final recipe's mean span 3
EVAL_EVERY, SEEDS = 50, (0, 1, 2)
LR = OPTIMIZATION["lr"]
T5_LEARNING_RATES = (1e-3, 1e-2)   # the learning-rate check: T5 (spans) a third of and 3.3x the default
MODEL = ModelConfig(vocab_size=batches.VOCAB_SIZE, context=POSITIONS, d_model=64, n_layers=2, n_heads=4)


@dataclass(frozen=True)
class Recipe:
    """One architecture + objective: its name, the label figures show, the kind of model (`masks.MODEL_KINDS`)."""
    name: str
    label: str
    kind: str
    objective: str
    parameters: tuple = ()     # (key, value) pairs the objective's batch function takes


RECIPES = {recipe.name: recipe for recipe in (
    Recipe("gpt", "GPT", "causal", "causal LM"),
    Recipe("prefix_lm", "prefix LM", "prefix", "prefix LM"),
    Recipe("bert", "BERT", "bidirectional", "masked LM"),
    Recipe("t5_iid", "T5 (i.i.d.)", "encoder-decoder", "i.i.d. denoising", (("noise_density", T5_NOISE_DENSITY),)),
    Recipe("t5_span", "T5 (spans)", "encoder-decoder", "span corruption",
           (("noise_density", T5_NOISE_DENSITY), ("mean_span", T5_MEAN_SPAN))),
)}


def run_config(recipe: str, steps: int = STEPS, mlm_rate: float = MLM_RATE, seed: int = 0,
               lr: float = LR) -> dict:
    """Everything that defines one training run (the checkpoint key hashes it).  Another peak learning rate
    `lr` scales the schedule's floor with it (min_lr = lr / 10, as the default 3e-3 -> 3e-4).

    >>> [run_config(r)["window"] for r in RECIPES], "mlm_rate" in run_config("gpt")
    ([33, 33, 32, 24, 27], False)
    >>> c = run_config("t5_span", lr=1e-2); c["lr"], c["min_lr"]
    (0.01, 0.001)
    """
    if recipe not in RECIPES:
        raise ValueError(f"unknown recipe {recipe!r}; choose from {list(RECIPES)}")
    if not (isinstance(steps, int) and steps > 0):
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    if not 0 < mlm_rate < 1:
        raise ValueError(f"mlm_rate must lie in (0, 1), got {mlm_rate}")
    if not (isinstance(seed, int) and seed >= 0):
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if not lr > 0:
        raise ValueError(f"lr must be positive, got {lr!r}")
    config = {"recipe": recipe, "kind": RECIPES[recipe].kind, "objective": RECIPES[recipe].objective,
              "model": MODEL.to_dict(), "steps": steps, "batch_size": BATCH_SIZE, "seed": seed,
              "eval_every": EVAL_EVERY, "eval_reviews": 100, **dict(RECIPES[recipe].parameters), **OPTIMIZATION}
    if recipe == "bert":
        config["mlm_rate"] = mlm_rate
    if lr != LR:
        config.update(lr=lr, min_lr=lr / 10)
    if config["objective"] == "i.i.d. denoising":
        config["window"] = batches.expected_iid_window(POSITIONS, config["noise_density"])
    elif config["objective"] == "span corruption":
        config["window"] = batches.longest_span_window(POSITIONS, config["noise_density"], config["mean_span"])
    else:  # a causal window has one token more than positions: the last one is only a target
        config["window"] = POSITIONS + (recipe != "bert")
    return config


def run_name(recipe: str, steps: int = STEPS, mlm_rate: float = MLM_RATE, seed: int = 0, lr: float = LR) -> str:
    """compare_<recipe>, plus what differs from the main run (so the exercises keep their own files).

    >>> run_name("bert", mlm_rate=0.4), run_name("t5_span", steps=6000), run_name("gpt", seed=1)
    ('compare_bert_mlm0.40', 'compare_t5_span_steps6000', 'compare_gpt_seed1')
    >>> run_name("t5_span", lr=1e-2, seed=2)
    'compare_t5_span_lr0.01_seed2'
    """
    name = f"compare_{recipe}"
    if steps != STEPS:
        name += f"_steps{steps}"
    if recipe == "bert" and mlm_rate != MLM_RATE:
        name += f"_mlm{mlm_rate:.2f}"
    if lr != LR:
        name += f"_lr{lr:g}"
    if seed != 0:
        name += f"_seed{seed}"
    return name


def run(recipe: str, steps: int = STEPS, mlm_rate: float = MLM_RATE, seed: int = 0, lr: float = LR) -> Run:
    return Run(run_name(recipe, steps, mlm_rate, seed, lr), run_config(recipe, steps, mlm_rate, seed, lr),
               train_comparison)


def runs() -> list:
    """The five recipes over three seeds, exercise 4.1 (BERT masking 40 %), exercise 4.2 (T5 spans, 6,000 steps) and
    T5 (spans) at the other peak learning rates."""
    return ([run(r, seed=seed) for seed in SEEDS for r in RECIPES]
            + [run("bert", mlm_rate=0.40, seed=seed) for seed in SEEDS]
            + [run("t5_span", steps=6000, seed=seed) for seed in SEEDS]
            + [run("t5_span", seed=seed, lr=lr) for lr in T5_LEARNING_RATES for seed in SEEDS])
