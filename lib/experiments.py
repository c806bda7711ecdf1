"""Section 04's controlled comparison: five architecture + objective recipes (two of them T5), trained by `train.fit`.

    runs = compare()                          # {"gpt": (model, log), "prefix_lm": ..., "t5_span": ...}
    python -m lib.experiments compare --steps 6000 --only t5_span     # with a progress bar

Every recipe trains on the training reviews only, 32 windows of about 32
positions per step, for the same number of steps, with the same learning-rate
schedule and seed; only the objective (and the architecture it needs) differs:

    gpt        MaskedTransformer, causal mask    lm_batch                  33-token windows (32 positions)
    prefix_lm  MaskedTransformer, prefix mask    prefix_lm_batch           33-token windows
    bert       MaskedTransformer, bidirectional  mlm_batch (15%)           32-token windows
    t5_iid     EncoderDecoder, 2 + 2 layers      iid_denoising_batch (15%) 24 tokens: source + target 32 on average
    t5_span    EncoderDecoder, 2 + 2 layers      span_corruption_batch     27 tokens: source + target <= 32
                                                 (15%, mean span 3)

T5's two are the objectives of Raffel et al.: its baseline (each token noise
with probability 0.15, adjacent noise tokens merged into one span) and its
final choice (span corruption, mean span length 3).

Every `eval_every` steps the log records the mean training loss since the
last row and the rating accuracy on the first 100 of `protocols.new_reviews`
by both protocols, shared and training-format (T5 also by free generation):
`fit`'s evaluate callback.  Models that still need training run in training processes
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
T5_NOISE_DENSITY, T5_MEAN_SPAN = 0.15, 3.0   # Raffel et al.: 15 % noise; final recipe's mean span 3
EVAL_EVERY = 50
MODEL = ModelConfig(vocab_size=objectives.VOCAB_SIZE, context=POSITIONS, d_model=64, n_layers=2, n_heads=4)


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


def recipe_config(recipe: str, steps: int = STEPS, mlm_rate: float = MLM_RATE, seed: int = 0) -> dict:
    """Everything that defines one training run (the checkpoint key hashes it).

    >>> [recipe_config(r)["window"] for r in RECIPES], "mlm_rate" in recipe_config("gpt")
    ([33, 33, 32, 24, 27], False)
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
              "model": MODEL.to_dict(), "steps": steps, "batch_size": BATCH_SIZE, "seed": seed,
              "eval_every": EVAL_EVERY, "eval_reviews": 100, **dict(RECIPES[recipe].parameters), **OPTIMIZATION}
    if recipe == "bert":
        config["mlm_rate"] = mlm_rate
    if config["objective"] == "i.i.d. denoising":
        config["window"] = objectives.expected_iid_window(POSITIONS, config["noise_density"])
    elif config["objective"] == "span corruption":
        config["window"] = objectives.longest_span_window(POSITIONS, config["noise_density"], config["mean_span"])
    else:  # a causal window has one token more than positions: the last one is only a target
        config["window"] = POSITIONS + (recipe != "bert")
    return config


def checkpoint_name(recipe: str, steps: int = STEPS, mlm_rate: float = MLM_RATE, seed: int = 0) -> str:
    """compare_<recipe>, plus what differs from the main run (so the exercises keep their own files).

    >>> checkpoint_name("bert", mlm_rate=0.4), checkpoint_name("t5_span", steps=6000), checkpoint_name("gpt", seed=1)
    ('compare_bert_mlm0.40', 'compare_t5_span_steps6000', 'compare_gpt_seed1')
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
    if objective == "i.i.d. denoising":
        return lambda windows, g: objectives.iid_denoising_batch(windows, g, config["noise_density"])
    if objective == "span corruption":
        return lambda windows, g: objectives.span_corruption_batch(windows, g, config["noise_density"],
                                                                   config["mean_span"])
    raise ValueError(f"unknown objective {objective!r}")


def build_model(config: dict):
    """The recipe's untrained model (its initialisation draws from the global RNG)."""
    model_config = ModelConfig(**config["model"])
    return EncoderDecoder(model_config) if config["kind"] == "encoder-decoder" else MaskedTransformer(model_config)


def evaluate(model, config: dict, reviews: list) -> dict:
    """The learning-curve numbers: rating accuracy by the shared protocol and by the training-format
    protocol (T5 also by free generation)."""
    results = {"rating_accuracy": protocols.rating_accuracy(model, config["kind"], reviews),
               "training_format_accuracy": protocols.training_format_accuracy(model, config, reviews)}
    if config["kind"] == "encoder-decoder":
        results["free_generation_accuracy"] = protocols.free_generation_accuracy(model, reviews)
    return results


def step_flops(config: dict, batches: int = 10, seed: int = 0) -> float:
    """Mean FLOPs of one training step (forward + backward) of this recipe over `batches` real batches,
    counted by PyTorch's FlopCounterMode (matrix products, the attention's included)."""
    from torch.utils.flop_counter import FlopCounterMode

    generator = seed_everything(seed)
    model, make_batch = build_model(config), batch_function(config)
    stream, total = objectives.review_stream("train"), 0
    for _ in range(batches):
        batch = make_batch(objectives.random_windows(stream, config["window"], config["batch_size"], generator),
                           generator)
        with FlopCounterMode(display=False) as counter:
            objectives.batch_loss(model, batch).backward()
        total += counter.get_total_flops()
    return total / batches


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
              evaluate=lambda m: evaluate(m, config, reviews), desc=desc)
    return model, log


SEEDS = (0, 1, 2)  # every recipe is trained three times: a conclusion must hold over seeds


def runs() -> list:
    """The checkpoints section 04 loads (`Run`s): the five recipes over three seeds,
    exercise 8 (BERT masking 40 %), three seeds each."""
    return ([recipe_run(r, seed=seed) for seed in SEEDS for r in RECIPES]
            + [recipe_run("bert", mlm_rate=0.40, seed=seed) for seed in SEEDS])


def compare(only=None, steps: int = STEPS, mlm_rate: float = MLM_RATE, seed: int = 0,
            processes: int = 2) -> dict:
    """{recipe: (model, log)} for the recipes in `only` (default: all five), from checkpoints when they
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
                     help="train only this recipe (repeatable; default: all five)")
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
