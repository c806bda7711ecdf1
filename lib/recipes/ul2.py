"""Section 06's runs: UL2's objectives x backbones (Tay et al. 2022), on one kind of data and compute.

    recipes.load(run_name("ul2_encoder_decoder", seed=1))     # "ul2_ul2_encoder_decoder_seed1"

Six recipes, each over three seeds (`lib.trainers.ul2`): three objectives on each backbone,

    prefix_lm                  non-causal decoder  S (prefix LM) only, no mode token    section 04's prefix LM
    span_decoder               non-causal decoder  R(mu=3, r=0.15) only, no mode token
    ul2_decoder                non-causal decoder  the seven denoisers, mode tokens     UL2's mixture of denoisers
    prefix_lm_encoder_decoder  encoder-decoder     S (prefix LM) only, no mode token
    t5_span                    encoder-decoder     R(mu=3, r=0.15) only, no mode token  section 04's T5 (spans)
    ul2_encoder_decoder        encoder-decoder     the seven denoisers, mode tokens

so that each specialist objective is measured on both backbones (objective and
backbone vary independently; the mixture is the third objective).
CONTROLS holds a recipe that separates two readings of the results, over the same
three seeds: X(3, 0.5) alone on the decoder, short spans like R's but as many rating
words among its targets per step as S's (`batch_stats.totals`), without S's format.
The four one-denoiser recipes are also trained for SHORT = 357 steps, a whole
schedule in which they see as many targets of their denoiser as the mixture sees
in 2,500 (`run(recipe, seed, SHORT)`: "ul2_t5_span_steps357_seed1").

Both stacks are section 04's (d = 64, 4 heads, 2 layers each): the
encoder-decoder has about twice the parameters, but each token passes through
two layers either way, so a step costs about the same, as in the paper's
comparison.  Windows are 128 word tokens of the whole training text (spans of
64 tokens need long windows).
"""

from dataclasses import dataclass

from lib.nn.models import ModelConfig
from lib.objectives import batches
from lib.objectives.batches import UL2_DENOISERS, Denoiser
from lib.objectives.ul2 import CONTEXT, DECODER_CONTEXT, WINDOW, clamp_denoiser
from lib.train.cache import Run
from lib.train.loop import OPTIMIZATION
from lib.trainers.ul2 import train_ul2

STEPS, BATCH_SIZE, EVAL_EVERY, SEEDS = 2500, 8, 250, (0, 1, 2)
EVAL_WINDOWS = 32            # validation windows per denoiser in the log
# A one-denoiser recipe sees in SHORT steps as many targets of its denoiser as the mixture (one of seven per
# window) sees of it in STEPS: trained with a whole schedule of SHORT steps, it is the mixture's equal in those
# targets, learning rate annealed alike (section 06's token-budget comparison).
SHORT = STEPS // len(UL2_DENOISERS)


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
    "span_decoder": Recipe("spans (decoder)", "decoder", (Denoiser("R", 3, 0.15),), False),
    "prefix_lm_encoder_decoder": Recipe("prefix LM (encoder-decoder)", "encoder-decoder", (UL2_DENOISERS[-1],), False),
}


CONTROLS = {
    # spans as short as R's, half the window hidden: about as many rating words among the targets per step as S
    "dense_spans_decoder": Recipe("X(3, 0.5) only (decoder)", "decoder", (Denoiser("X", 3, 0.5),), False),
}


def run_config(recipe: str, seed: int = 0, steps: int = STEPS) -> dict:
    """Everything that defines one run (the checkpoint key hashes it).

    >>> c = run_config("ul2_decoder"); c["window"], c["model"]["context"], len(c["denoisers"]), c["mode_tokens"]
    (128, 160, 7, True)
    """
    every = RECIPES | CONTROLS
    if recipe not in every:
        raise ValueError(f"unknown recipe {recipe!r}; choose from {list(every)}")
    r = every[recipe]
    context = DECODER_CONTEXT if r.backbone == "decoder" else CONTEXT
    model = ModelConfig(vocab_size=batches.VOCAB_SIZE, context=context, d_model=64, n_layers=2, n_heads=4)
    return {"recipe": recipe, "backbone": r.backbone, "mode_tokens": r.mode_tokens,
            "denoisers": [[d.mode, d.mean_span, d.noise_density] for d in
                          (clamp_denoiser(d, WINDOW) for d in r.denoisers)],
            "model": model.to_dict(), "window": WINDOW, "steps": steps, "batch_size": BATCH_SIZE, "seed": seed,
            "eval_every": EVAL_EVERY, "eval_windows": EVAL_WINDOWS, **OPTIMIZATION}


def run_name(recipe: str, seed: int = 0, steps: int = STEPS) -> str:
    """ul2_<recipe>[_steps<n>][_seed<s>].

    >>> run_name("t5_span"), run_name("ul2_decoder", seed=2), run_name("t5_span", seed=1, steps=SHORT)
    ('ul2_t5_span', 'ul2_ul2_decoder_seed2', 'ul2_t5_span_steps357_seed1')
    """
    return f"ul2_{recipe}" + (f"_steps{steps}" if steps != STEPS else "") + (f"_seed{seed}" if seed else "")


def run(recipe: str, seed: int = 0, steps: int = STEPS) -> Run:
    return Run(run_name(recipe, seed, steps), run_config(recipe, seed, steps), train_ul2)


def runs() -> list:
    """The six recipes and the controls over three seeds, and the four one-denoiser recipes trained for SHORT steps."""
    return ([run(recipe, seed) for seed in SEEDS for recipe in [*RECIPES, *CONTROLS]]
            + [run(recipe, seed, SHORT) for seed in SEEDS for recipe in RECIPES if len(RECIPES[recipe].denoisers) == 1])
