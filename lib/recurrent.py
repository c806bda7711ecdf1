"""Section 02's opening: a recurrent language model with TinyGPT's parameter budget, trained like the base model.

    model, log = load("gru", seed=0)          # GRULanguageModel, trained on first use
    model, log = load("transformer", seed=1)  # the base model's recipe with another seed

A GRU reads a line one character at a time: its state after character t is a
function of the state after t - 1, so the T positions of a window are T
sequential steps, and whatever the rating needs from an adjective 30
characters back has to survive 30 updates of one 152-number state.  TinyGPT
computes every position of a window at once, in L = 2 layers, and any position
reads any earlier one directly through attention.  Both are trained on the
same windows of the training text, with the same optimisation and steps as the
base model (`base_model.BASE_MODEL`); only the network differs.
"""

from dataclasses import asdict, dataclass

import torch
import torch.nn as nn

from lib import base_model, evals, world
from lib.checkpoints import Run, get_or_train
from lib.objectives import next_token_loss, random_windows
from lib.seeding import seed_everything
from lib.tokenizers import CharTokenizer
from lib.train import fit

SEEDS = (0, 1, 2)


@dataclass(frozen=True)
class GRUConfig:
    vocab_size: int = 44
    d_embed: int = 64
    hidden: int = 152      # the width that brings the parameter count to TinyGPT's (109,056) within 100
    context: int = 96      # the length of the training windows (TinyGPT's context)

    def to_dict(self):
        return asdict(self)


def gru_parameter_count(config: GRUConfig) -> int:
    """Embedding V·e, the GRU's three gates 3·(e·h + h·h + 2h), the output layer h·V + V.

    >>> gru_parameter_count(GRUConfig())
    108956
    """
    V, e, h = config.vocab_size, config.d_embed, config.hidden
    return V * e + 3 * (e * h + h * h + 2 * h) + h * V + V


class GRULanguageModel(nn.Module):
    """Characters -> embedding -> one GRU layer -> logits for the next character; forward(idx) like TinyGPT's."""
    config_class = GRUConfig

    def __init__(self, config: GRUConfig = GRUConfig()):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.d_embed)
        self.gru = nn.GRU(config.d_embed, config.hidden, batch_first=True)
        self.head = nn.Linear(config.hidden, config.vocab_size)

    def forward(self, idx):
        states, _ = self.gru(self.wte(idx))        # (B, T, h): T sequential updates of one state
        return self.head(states)                    # (B, T, V)


def gru_config(seed: int = 0) -> dict:
    """The base model's training recipe with the GRU in TinyGPT's place."""
    return {**base_model.BASE_MODEL, "model": GRUConfig().to_dict(), "architecture": "GRU", "seed": seed}


def train_gru(config: dict, desc: str = "train"):
    """Train a GRULanguageModel exactly as `base_model.train_char_lm` trains TinyGPT: the same windows,
    loss, optimisation and validation."""
    generator = seed_everything(config["seed"])
    model = GRULanguageModel(GRUConfig(**config["model"]))
    stream = torch.tensor(CharTokenizer().encode(world.load_text("train")))[:-1]
    val = evals.line_batch(world.load_text("val").splitlines())
    log = fit(model, lambda: random_windows(stream, config["model"]["context"] + 1, config["batch_size"], generator),
              next_token_loss, config, evaluate=lambda m: {"val_loss": evals.validation_loss(m, val)}, desc=desc)
    return model, log


def run(architecture: str, seed: int = 0) -> Run:
    """"gru" or "transformer" (the base model's recipe; seed 0 is the base model itself)."""
    if architecture == "gru":
        return Run("gru" + (f"_seed{seed}" if seed else ""), gru_config(seed), train_gru)
    if architecture == "transformer":
        return (base_model.runs()[0] if seed == 0 else
                Run(f"base_seed{seed}", {**base_model.BASE_MODEL, "seed": seed}, base_model.train_char_lm))
    raise ValueError(f"unknown architecture {architecture!r}; choose 'gru' or 'transformer'")


def runs() -> list:
    """The checkpoints this module adds: the GRU over three seeds, TinyGPT over seeds 1 and 2."""
    return [run(a, s) for s in SEEDS for a in ("gru", "transformer") if (a, s) != ("transformer", 0)]


def load(architecture: str, seed: int = 0):
    r = run(architecture, seed)
    return get_or_train(r.name, r.config, r.train_fn)


@torch.no_grad()
def rating_choices(model, reviews: list) -> list:
    """For each review, the rating whose characters the model finds most likely after `... rating: `
    (the sum of log-probabilities of `good.`, `ok.` or `bad.` and the closing newline)."""
    chars, choices = CharTokenizer(), []
    for review in reviews:
        prefix = "\n" + review[:review.index("rating: ") + len("rating: ")]
        ids = [chars.encode(prefix + rating + ".\n") for rating in world.RATINGS]
        longest = max(map(len, ids))
        batch = torch.tensor([x + [chars.encode("\n")[0]] * (longest - len(x)) for x in ids])
        losses = evals.token_losses(model, batch)                                 # (3, longest - 1)
        scores = [losses[i, len(prefix) - 1:len(x) - 1].sum() for i, x in enumerate(ids)]
        choices.append(world.RATINGS[int(torch.stack(scores).argmin())])
    return choices
