"""Section 06's trainer: one objective (a list of denoisers) on one backbone, on windows of the whole text.

    model, log = train_ul2(config)

Every recipe (`lib.recipes.ul2`) reads the same data: STEPS steps of
config["batch_size"] windows of `ul2.WINDOW` = 128 word tokens cut anywhere
from the training text, the same seed, schedule and optimisation.  Every
example is a source and a target (`ul2.mixture_batch`); the encoder-decoder
reads them as T5 does, the non-causal decoder reads source + target as one
sequence whose source is a bidirectional prefix (`ul2.as_stack_batch`).  Every
`eval_every` steps the log records the held-out loss of each of the seven
denoisers on the same windows of validation text (`denoiser_losses`), asked
with its mode token when the recipe trains with them.
"""

import torch

from lib.data.seeding import seed_everything
from lib.nn.models import EncoderDecoder, MaskedTransformer, ModelConfig
from lib.objectives.batches import UL2_DENOISERS, Denoiser, random_windows
from lib.objectives.ul2 import WINDOW, clamp_denoiser, label, mixture_batch, text_stream, ul2_loss, without_mode_tokens
from lib.train.cache import trainer
from lib.train.loop import fit


def denoisers_of(config: dict) -> list:
    """The config's denoisers as `Denoiser`s (a config stores them as lists)."""
    return [Denoiser(*d) for d in config["denoisers"]]


def build_model(config: dict):
    """The recipe's untrained model (its initialisation draws from the global RNG)."""
    model_config = ModelConfig(**config["model"])
    return EncoderDecoder(model_config) if config["backbone"] == "encoder-decoder" else MaskedTransformer(model_config)


def make_batch(windows, config: dict, generator, denoisers=None):
    """The recipe's batch of these windows (by `denoisers` instead of its own when given)."""
    batch = mixture_batch(windows, generator, denoisers or denoisers_of(config))
    return batch if config["mode_tokens"] else without_mode_tokens(batch)


def evaluation_batches(config: dict, count: int = None, seed: int = 0) -> dict:
    """{denoiser label: one batch of `count` (default config["eval_windows"]) validation windows by that
    denoiser}, the same windows and draws for every recipe, with or without mode tokens as the recipe trains."""
    generator = torch.Generator().manual_seed(seed)
    windows = random_windows(text_stream("val"), WINDOW, count or config["eval_windows"], generator)
    return {label(d): make_batch(windows, config, generator, [clamp_denoiser(d, WINDOW)]) for d in UL2_DENOISERS}


@torch.no_grad()
def denoiser_losses(model, batches: dict) -> dict:
    """{denoiser label: held-out loss (nats per target token)}."""
    return {name: ul2_loss(model, batch).item() for name, batch in batches.items()}


@trainer("ul2", version=1)
def train_ul2(config: dict, parents=(), desc: str = "train"):
    """Train one recipe with `fit`; only the model and the denoisers differ between recipes.  config["stop_after"]
    = K (a snapshot, `lib.recipes.yardstick`) stops after K steps of the same schedule (0: the initialisation)."""
    generator = seed_everything(config["seed"])
    model = build_model(config)
    stream, batches = text_stream("train"), evaluation_batches(config)

    def get_batch():
        return make_batch(random_windows(stream, config["window"], config["batch_size"], generator), config,
                          generator)

    log = fit(model, get_batch, ul2_loss, config, evaluate=lambda m: denoiser_losses(m, batches), desc=desc,
              stop_after=config.get("stop_after"))
    return model, log
