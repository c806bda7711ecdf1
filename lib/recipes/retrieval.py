"""Section 07's retrieval runs: the dual encoder, and the base model fine-tuned to read what is retrieved.

    recipes.load("dual_encoder"); recipes.load("reader")
    recipes.load(encoder_name(seed=3, skewed=True))       # "dual_encoder_skewed_seed3"

The dual encoder is trained over ENCODER_SEEDS, with every training person
drawn as often as every other, and skewed: a person's chance of joining a
batch falls by NAME_DECAY per rank (`retrieval.name_weights`), so that some
names are seen in hundreds of pairs and others in none.

The reader starts from the base model's checkpoint (its parent: the reader's
key includes the base model's, so retraining the base model retrains the
reader).  How each is trained: `lib.trainers.retrieval`.
"""

from lib.nn.dual_encoder import DualEncoderConfig
from lib.recipes.base import BASE_MODEL
from lib.recipes.base import run as base_run
from lib.train.cache import Run
from lib.train.loop import OPTIMIZATION
from lib.trainers.retrieval import train_dual_encoder, train_reader

ENCODER = {"model": DualEncoderConfig().to_dict(), "steps": 300, "batch_size": 16, **OPTIMIZATION,
           "warmup": 20, "seed": 0, "eval_every": 25}
ENCODER_SEEDS, NAME_DECAY = (0, 1, 2, 3, 4), 0.8
READER = {**BASE_MODEL, "steps": 400, "batch_size": 32, "lr": 1e-3, "min_lr": 1e-4, "warmup": 20,
          "seed": 0, "eval_every": 50}


def encoder_name(seed: int = 0, skewed: bool = False) -> str:
    return "dual_encoder" + ("_skewed" if skewed else "") + (f"_seed{seed}" if seed else "")


def encoder_config(seed: int = 0, skewed: bool = False) -> dict:
    return {**ENCODER, "seed": seed, **({"name_decay": NAME_DECAY} if skewed else {})}


def runs() -> list:
    encoders = [Run(encoder_name(s, skewed), encoder_config(s, skewed), train_dual_encoder)
                for skewed in (False, True) for s in ENCODER_SEEDS]
    return encoders + [Run("reader", READER, train_reader, (base_run(0),))]
