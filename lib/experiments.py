"""Section 04's controlled comparison: four architecture + objective recipes, trained by `train.fit`.

    runs = compare()                          # {"gpt": (model, log), "prefix_lm": ..., "bert": ..., "t5": ...}
    python -m lib.experiments compare --steps 6000 --only t5     # exercise 9, with a progress bar

Every recipe trains on the training reviews only, 32 windows of about 32
positions per step, for the same number of steps, with the same learning-rate
schedule and seed; only the objective (and the architecture it needs) differs:

    gpt        MaskedTransformer, causal mask    lm_batch              33-token windows (32 positions)
    prefix_lm  MaskedTransformer, prefix mask    prefix_lm_batch       33-token windows
    bert       MaskedTransformer, bidirectional  mlm_batch (15%)       32-token windows
    t5         EncoderDecoder, 2 + 2 layers      span_corruption_batch windows whose source + target <= 32

Every `eval_every` steps the log records the training loss and the rating
accuracy on the first 100 of `protocols.new_reviews` (T5 also by free
generation and, as a diagnostic, in its training format): `fit`'s evaluate
callback.  Models that still need training run in training processes
(`checkpoints.train_missing`), each single-threaded and seeded, so a
checkpoint is bit-identical whether it was trained alone or next to another one.
"""

import argparse
from dataclasses import dataclass

from lib import checkpoints, objectives, protocols
from lib.checkpoints import Run, get_or_train
from lib.models import EncoderDecoder, MaskedTransformer, ModelConfig
from lib.seeding import seed_everything
from lib.train import OPTIMIZATION, fit

STEPS, BATCH_SIZE, POSITIONS, MLM_RATE = 2500, 32, 32, 0.15
T5_NOISE_DENSITY, T5_MEAN_SPAN = 0.15, 1.0   # T5's baseline objective: i.i.d. one-token spans, 15%
MODEL = ModelConfig(vocab_size=objectives.VOCAB_SIZE, context=POSITIONS, d_model=64, n_layers=2, n_heads=4)


@dataclass(frozen=True)
class Recipe:
    """One architecture + objective: its name, the label figures show, the kind of model (`masks.MODEL_KINDS`)."""
    name: str
    label: str
    kind: str
    objective: str


RECIPES = {recipe.name: recipe for recipe in (
    Recipe("gpt", "GPT", "causal", "causal LM"),
    Recipe("prefix_lm", "prefix LM", "prefix", "prefix LM"),
    Recipe("bert", "BERT", "bidirectional", "masked LM"),
    Recipe("t5", "T5", "encoder-decoder", "span corruption"),
)}


def recipe_config(recipe: str, steps: int = STEPS, mlm_rate: float = MLM_RATE, seed: int = 0) -> dict:
    """Everything that defines one training run (the checkpoint key hashes it).

    >>> recipe_config("t5")["window"], recipe_config("gpt")["window"], "mlm_rate" in recipe_config("gpt")
    (23, 33, False)
    """
    if recipe not in RECIPES:
        raise ValueError(f"unknown recipe {recipe!r}; choose from {list(RECIPES)}")
    if not (isinstance(steps, int) and steps > 0):
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    if not 0 < mlm_rate < 1:
        raise ValueError(f"mlm_rate must lie in (0, 1), got {mlm_rate}")
    if not (isinstance(seed, int) and seed >= 0):
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    config = {"recipe": recipe, "kind": RECIPES[recipe].kind, "objective": RECIPES[recipe].objective,
              "model": MODEL.to_dict(), "steps": steps, "batch_size": BATCH_SIZE, "seed": seed, "eval_every": 500,
              "eval_reviews": 100, **OPTIMIZATION}
    if recipe == "bert":
        config["mlm_rate"] = mlm_rate
    if recipe == "t5":
        config.update(noise_density=T5_NOISE_DENSITY, mean_span=T5_MEAN_SPAN)
        config["window"] = objectives.longest_span_window(POSITIONS, T5_NOISE_DENSITY, T5_MEAN_SPAN)
    else:  # a causal window has one token more than positions: the last one is only a target
        config["window"] = POSITIONS + (recipe != "bert")
    return config


def checkpoint_name(recipe: str, steps: int = STEPS, mlm_rate: float = MLM_RATE, seed: int = 0) -> str:
    """compare_<recipe>, plus what differs from the main run (so the exercises keep their own files).

    >>> checkpoint_name("bert", mlm_rate=0.4), checkpoint_name("t5", steps=6000), checkpoint_name("gpt", seed=1)
    ('compare_bert_mlm0.40', 'compare_t5_steps6000', 'compare_gpt_seed1')
    """
    name = f"compare_{recipe}"
    if steps != STEPS:
        name += f"_steps{steps}"
    if recipe == "bert" and mlm_rate != MLM_RATE:
        name += f"_mlm{mlm_rate:.2f}"
    if seed != 0:
        name += f"_seed{seed}"
    return name


def recipe_run(recipe: str, steps: int = STEPS, mlm_rate: float = MLM_RATE, seed: int = 0) -> Run:
    """The checkpoint of one run: its name, its config, `train_recipe`."""
    return Run(checkpoint_name(recipe, steps, mlm_rate, seed), recipe_config(recipe, steps, mlm_rate, seed),
               train_recipe)


def batch_function(config: dict):
    """The objective's batch function from lib.objectives, with this config's parameters."""
    objective = config["objective"]
    if objective == "causal LM":
        return objectives.lm_batch
    if objective == "prefix LM":
        return objectives.prefix_lm_batch
    if objective == "masked LM":
        return lambda windows, g: objectives.mlm_batch(windows, g, rate=config["mlm_rate"])
    if objective == "span corruption":
        return lambda windows, g: objectives.span_corruption_batch(windows, g, config["noise_density"],
                                                                   config["mean_span"])
    raise ValueError(f"unknown objective {objective!r}")


def build_model(config: dict):
    """The recipe's untrained model (its initialisation draws from the global RNG)."""
    model_config = ModelConfig(**config["model"])
    return EncoderDecoder(model_config) if config["kind"] == "encoder-decoder" else MaskedTransformer(model_config)


def evaluate(model, kind: str, reviews: list) -> dict:
    """The learning-curve numbers: rating accuracy by the one protocol (T5 also by free generation, and
    in its training format as a diagnostic)."""
    results = {"rating_accuracy": protocols.rating_accuracy(model, kind, reviews)}
    if kind == "encoder-decoder":
        results["free_generation_accuracy"] = protocols.free_generation_accuracy(model, reviews)
        results["training_format_accuracy"] = protocols.training_format_accuracy(model, reviews)
    return results


def train_recipe(config: dict, desc: str = "train"):
    """Train one recipe with `fit`: only `batch_function(config)` and the model differ between recipes."""
    generator = seed_everything(config["seed"])
    model = build_model(config)
    make_batch = batch_function(config)
    stream = objectives.review_stream("train")
    reviews = protocols.new_reviews(config["eval_reviews"])

    def get_batch():
        return make_batch(objectives.random_windows(stream, config["window"], config["batch_size"], generator),
                          generator)

    log = fit(model, get_batch, objectives.batch_loss, config,
              evaluate=lambda m: evaluate(m, config["kind"], reviews), desc=desc)
    return model, log


SEEDS = (0, 1, 2)  # every recipe is trained three times: a conclusion must hold over seeds


def runs() -> list:
    """The checkpoints section 04 loads (`Run`s): the four recipes over three seeds,
    exercise 8 (BERT masking 40 %) and exercise 9 (T5 for 6,000 steps), three seeds each."""
    return ([recipe_run(r, seed=seed) for seed in SEEDS for r in RECIPES]
            + [recipe_run("bert", mlm_rate=0.40, seed=seed) for seed in SEEDS]
            + [recipe_run("t5", steps=6000, seed=seed) for seed in SEEDS])


def compare(only=None, steps: int = STEPS, mlm_rate: float = MLM_RATE, seed: int = 0,
            processes: int = 2) -> dict:
    """{recipe: (model, log)} for the recipes in `only` (default: all four), from checkpoints when they
    match; the ones that need training are trained first, in parallel processes (`train_missing`)."""
    recipes = list(RECIPES) if only is None else [only] if isinstance(only, str) else list(only)
    runs = {r: recipe_run(r, steps, mlm_rate, seed) for r in recipes}
    checkpoints.train_missing(list(runs.values()), processes)
    return {r: get_or_train(run.name, run.config, run.train_fn) for r, run in runs.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m lib.experiments", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("compare", help="train (or load) the recipes and print their learning curves")
    run.add_argument("--steps", type=int, default=STEPS, help=f"training steps (default {STEPS})")
    run.add_argument("--mlm-rate", type=float, default=MLM_RATE, help=f"BERT's masking rate (default {MLM_RATE})")
    run.add_argument("--only", choices=list(RECIPES), action="append",
                     help="train only this recipe (repeatable; default: all four)")
    run.add_argument("--seed", type=int, nargs="+", default=[0],
                     help="seeds of initialisation and batches, one run each (default 0)")
    run.add_argument("--processes", type=int, default=2, help="parallel training processes (default 2)")
    args = parser.parse_args(argv)
    recipes = args.only or list(RECIPES)
    checkpoints.train_missing([recipe_run(r, args.steps, args.mlm_rate, seed) for seed in args.seed
                               for r in recipes], args.processes)
    for seed in args.seed:
        for recipe, (model, log) in compare(recipes, args.steps, args.mlm_rate, seed, args.processes).items():
            parameters = sum(p.numel() for p in model.parameters())
            print(f"{checkpoint_name(recipe, args.steps, args.mlm_rate, seed)}: {parameters:,} parameters")
            for row in log:
                print("  " + "  ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()))


if __name__ == "__main__":
    main()
