"""Section 00's base model: a TinyGPT trained on the mini internet's text, character by character.

    model, log = load_base_model()   # trained on first use (`lib.checkpoints`), then loaded

Batches are random windows of the training text (`objectives.random_windows`),
the loss is next-character cross-entropy, and every `eval_every` steps the
log records the validation loss, line by line (`evals.validation_loss`).
"""

import torch

from lib import evals, models, world
from lib.checkpoints import Run, get_or_train
from lib.objectives import next_token_loss, random_windows
from lib.seeding import seed_everything
from lib.tokenizers import CharTokenizer
from lib.train import OPTIMIZATION, fit

BASE_MODEL = {"model": models.ModelConfig().to_dict(), "steps": 6000, "batch_size": 32, **OPTIMIZATION,
              "seed": 0, "eval_every": 100}


def train_char_lm(config: dict, desc: str = "train"):
    """Train a TinyGPT on the mini internet's training text; return (model, log)."""
    generator = seed_everything(config["seed"])
    tokenizer = CharTokenizer()
    model = models.TinyGPT(models.ModelConfig(**config["model"]))
    window = model.config.context + 1
    # Windows never end on the text's last character: the base model has always been trained so.
    stream = torch.tensor(tokenizer.encode(world.load_text("train")))[:-1]
    val = evals.line_batch(world.load_text("val").splitlines(), tokenizer)
    log = fit(model, lambda: random_windows(stream, window, config["batch_size"], generator), next_token_loss,
              config, evaluate=lambda m: {"val_loss": evals.validation_loss(m, val)}, desc=desc)
    return model, log


def runs() -> list:
    """The checkpoints this module trains for the book."""
    return [Run("base", BASE_MODEL, train_char_lm)]


def load_base_model():
    """The book's base model (TinyGPT on the mini internet), trained on first use."""
    return get_or_train("base", BASE_MODEL, train_char_lm)
