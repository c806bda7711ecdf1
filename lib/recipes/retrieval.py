"""Section 07's retrieval runs: the dual encoder, and the base model fine-tuned to read what is retrieved.

    recipes.load("dual_encoder"); recipes.load("reader")

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
READER = {**BASE_MODEL, "steps": 400, "batch_size": 32, "lr": 1e-3, "min_lr": 1e-4, "warmup": 20,
          "seed": 0, "eval_every": 50}


def runs() -> list:
    return [Run("dual_encoder", ENCODER, train_dual_encoder), Run("reader", READER, train_reader, (base_run(0),))]
