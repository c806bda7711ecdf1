"""Section 06's runs: the objective x backbone 2 x 2 of UL2 (Tay et al. 2022), on one kind of data and compute.

    model, log = load("ul2_encoder_decoder", seed=0)   # from checkpoints/, trained first if missing
    python -m lib.ul2_runs --only ul2_decoder          # train with a progress bar

Four recipes, each over three seeds:

    prefix_lm            non-causal decoder   S (prefix LM) only, no mode token        section 04's prefix LM
    t5_span              encoder-decoder      R(mu=3, r=0.15) only, no mode token      section 04's T5 (spans)
    ul2_decoder          non-causal decoder   the seven denoisers, mode tokens         UL2's mixture of denoisers
    ul2_encoder_decoder  encoder-decoder      the seven denoisers, mode tokens

Every recipe reads the same data: STEPS steps of BATCH_SIZE windows of
`ul2.WINDOW` = 128 word tokens cut anywhere from the whole training text (not
only reviews, as in section 04: spans of 64 tokens need long windows), the
same seed, schedule and optimisation.  Every example is a source and a target
(`ul2.mixture_batch`); the encoder-decoder reads them as T5 does, the
non-causal decoder reads source + target as one sequence whose source is a
bidirectional prefix (`ul2.as_stack_batch`).  Both stacks are section 04's
(d = 64, 4 heads, 2 layers each): the encoder-decoder has about twice the
parameters, but each token passes through two layers either way, so a step
costs about the same, as in the paper's comparison.

Every `eval_every` steps the log records the held-out loss of each of the
seven denoisers on the same windows of validation text (`denoiser_losses`),
asked with its mode token when the recipe trains with them.
"""

import argparse
from dataclasses import dataclass

import torch

from lib import checkpoints, objectives
from lib.checkpoints import Run, get_or_train
from lib.models import EncoderDecoder, MaskedTransformer, ModelConfig
from lib.objectives import UL2_DENOISERS, Denoiser, random_windows
from lib.seeding import seed_everything
from lib.train import OPTIMIZATION, fit
from lib.ul2 import (CONTEXT, DECODER_CONTEXT, WINDOW, clamp_denoiser, label, mixture_batch, text_stream,
                     ul2_loss, without_mode_tokens)

STEPS, BATCH_SIZE, EVAL_EVERY, SEEDS = 2500, 8, 250, (0, 1, 2)
EVAL_WINDOWS = 32            # validation windows per denoiser in the log
BACKBONES = ("decoder", "encoder-decoder")


@dataclass(frozen=True)
class Recipe:
    label: str
    backbone: str            # "decoder" (non-causal, one stack) or "encoder-decoder"
    denoisers: tuple
    mode_tokens: bool


RECIPES = {
    "prefix_lm": Recipe("prefix LM", "decoder", (UL2_DENOISERS[-1],), False),
    "t5_span": Recipe("T5 (spans)", "encoder-decoder", (Denoiser("R", 3, 0.15),), False),
    "ul2_decoder": Recipe("UL2 (decoder)", "decoder", UL2_DENOISERS, True),
    "ul2_encoder_decoder": Recipe("UL2 (encoder-decoder)", "encoder-decoder", UL2_DENOISERS, True),
}


def denoisers_of(config: dict) -> list:
    """The config's denoisers as `Denoiser`s (a config stores them as lists)."""
    return [Denoiser(*d) for d in config["denoisers"]]


def run_config(recipe: str, seed: int = 0, steps: int = STEPS) -> dict:
    """Everything that defines one run (the checkpoint key hashes it).

    >>> c = run_config("ul2_decoder"); c["window"], c["model"]["context"], len(c["denoisers"]), c["mode_tokens"]
    (128, 160, 7, True)
    """
    if recipe not in RECIPES:
        raise ValueError(f"unknown recipe {recipe!r}; choose from {list(RECIPES)}")
    r = RECIPES[recipe]
    context = DECODER_CONTEXT if r.backbone == "decoder" else CONTEXT
    model = ModelConfig(vocab_size=objectives.VOCAB_SIZE, context=context, d_model=64, n_layers=2, n_heads=4)
    return {"recipe": recipe, "backbone": r.backbone, "mode_tokens": r.mode_tokens,
            "denoisers": [[d.mode, d.mean_span, d.noise_density] for d in
                          (clamp_denoiser(d, WINDOW) for d in r.denoisers)],
            "model": model.to_dict(), "window": WINDOW, "steps": steps, "batch_size": BATCH_SIZE, "seed": seed,
            "eval_every": EVAL_EVERY, "eval_windows": EVAL_WINDOWS, **OPTIMIZATION}


def build_model(config: dict):
    """The recipe's untrained model (its initialisation draws from the global RNG)."""
    model_config = ModelConfig(**config["model"])
    return EncoderDecoder(model_config) if config["backbone"] == "encoder-decoder" else MaskedTransformer(model_config)


def make_batch(windows, config: dict, generator, denoisers=None):
    """The recipe's batch of these windows (by `denoisers` instead of its own when given)."""
    batch = mixture_batch(windows, generator, denoisers or denoisers_of(config))
    return batch if config["mode_tokens"] else without_mode_tokens(batch)


def evaluation_batches(config: dict, count: int = EVAL_WINDOWS, seed: int = 0) -> dict:
    """{denoiser label: one batch of `count` validation windows by that denoiser}, the same windows and
    draws for every recipe, with or without mode tokens as the recipe trains."""
    generator = torch.Generator().manual_seed(seed)
    windows = random_windows(text_stream("val"), WINDOW, count, generator)
    return {label(d): make_batch(windows, config, generator, [clamp_denoiser(d, WINDOW)]) for d in UL2_DENOISERS}


@torch.no_grad()
def denoiser_losses(model, batches: dict) -> dict:
    """{denoiser label: held-out loss (nats per target token)}."""
    return {name: ul2_loss(model, batch).item() for name, batch in batches.items()}


def train_recipe(config: dict, desc: str = "train"):
    """Train one recipe with `fit`; only the model and the denoisers differ between recipes."""
    generator = seed_everything(config["seed"])
    model = build_model(config)
    stream, batches = text_stream("train"), evaluation_batches(config)

    def get_batch():
        return make_batch(random_windows(stream, config["window"], config["batch_size"], generator), config,
                          generator)

    log = fit(model, get_batch, ul2_loss, config, evaluate=lambda m: denoiser_losses(m, batches), desc=desc)
    return model, log


def checkpoint_name(recipe: str, seed: int = 0) -> str:
    """ul2_<recipe>[_seed<s>].

    >>> checkpoint_name("t5_span"), checkpoint_name("ul2_decoder", seed=2)
    ('ul2_t5_span', 'ul2_ul2_decoder_seed2')
    """
    return f"ul2_{recipe}" + (f"_seed{seed}" if seed else "")


def run(recipe: str, seed: int = 0) -> Run:
    return Run(checkpoint_name(recipe, seed), run_config(recipe, seed), train_recipe)


def runs() -> list:
    """The checkpoints section 06 loads: the four recipes over three seeds."""
    return [run(recipe, seed) for seed in SEEDS for recipe in RECIPES]


def load(recipe: str, seed: int = 0):
    """(model, log) of one run, trained first if its checkpoint is missing or stale."""
    r = run(recipe, seed)
    return get_or_train(r.name, r.config, r.train_fn)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m lib.ul2_runs", description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=list(RECIPES), action="append", help="only this recipe (repeatable)")
    parser.add_argument("--seed", type=int, nargs="+", default=list(SEEDS), help="seeds (default 0 1 2)")
    parser.add_argument("--processes", type=int, default=2, help="parallel training processes (default 2)")
    args = parser.parse_args(argv)
    checkpoints.train_missing([run(r, s) for s in args.seed for r in args.only or RECIPES], args.processes)


if __name__ == "__main__":
    main()
