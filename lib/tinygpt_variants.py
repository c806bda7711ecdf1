"""Section 02's design choices, trained: where LayerNorm sits (with and without warm-up), and one head or four.

    model, log = load_layernorm("post", warmup=0, lr=1e-2, seed=1)   # one run of the LayerNorm grid
    model, log = load_heads(1, seed=2)                                # TinyGPT with one 64-wide head

The LayerNorm grid is 2 placements x 2 warm-ups (100 steps or none) x 2 peak
learning rates (the book's 3e-3 and 1e-2) x 3 seeds, 1,000 steps each, on the
base model's data and schedule.  Pre-LN is `models.TinyGPT`; post-LN
(`PostLNGPT`) starts from the very same weights at the same seed and only moves
the LayerNorms: x <- LN(x + f(x)) after each sub-layer, as in the original
Transformer, which then has no final LayerNorm (128 parameters fewer).  Every
step's training loss and the length of the residual stream leaving the last
block are logged, so what happens in the first steps stays visible.

The heads runs are the base model's full recipe (6,000 steps) with n_heads = 1:
the same 109,056 parameters, one 64-dimensional look-up per layer instead of
four 16-dimensional ones.  Four heads are the base model and its seeds 1 and 2
(`recurrent.run("transformer", seed)`).
"""

import torch
import torch.nn as nn

from lib import base_model, evals, models, recurrent, world
from lib.checkpoints import Run, get_or_train
from lib.objectives import next_token_loss, random_windows
from lib.seeding import seed_everything
from lib.tokenizers import CharTokenizer
from lib.train import fit

SEEDS = (0, 1, 2)
PLACEMENTS = ("pre", "post")
WARMUPS = (100, 0)
LEARNING_RATES = (3e-3, 1e-2)
LAYERNORM_STEPS = 1000


class PostLNBlock(models.Block):
    """Post-LN: x <- LN(x + attn(x)), then x <- LN(x + mlp(x)); the same parameters as the pre-LN `Block`."""

    def forward(self, x, mask, return_weights=False):
        a, weights = self.attn(x, mask, return_weights)
        x = self.ln_1(x + a)
        return self.ln_2(x + self.mlp(x)), weights


class PostLNGPT(models.TinyGPT):
    """TinyGPT with post-LN blocks, initialised with exactly the weights TinyGPT gets at the same seed."""

    def __init__(self, config: models.ModelConfig = models.ModelConfig()):
        super().__init__(config)
        blocks = nn.ModuleList(PostLNBlock(config) for _ in range(config.n_layers))
        blocks.load_state_dict(self.blocks.state_dict())
        self.blocks = blocks
        self.ln_f = nn.Identity()      # the stream already leaves the last block normalised


MODEL_CLASSES = {"pre": models.TinyGPT, "post": PostLNGPT}


def layernorm_config(placement: str, warmup: int, lr: float, seed: int) -> dict:
    if placement not in MODEL_CLASSES:
        raise ValueError(f"unknown placement {placement!r}; choose one of {list(MODEL_CLASSES)}")
    return {**base_model.BASE_MODEL, "placement": placement, "warmup": warmup, "lr": lr, "seed": seed,
            "steps": LAYERNORM_STEPS, "eval_every": 50}


def train_layernorm(config: dict, desc: str = "train"):
    """The base model's training (same windows, loss, optimiser, validation) with the LayerNorms placed as
    config["placement"] says.  The log's rows also carry, for every step, the training loss ("step_losses")
    and the mean length of the residual stream leaving the last block ("stream_lengths")."""
    generator = seed_everything(config["seed"])
    model = MODEL_CLASSES[config["placement"]](models.ModelConfig(**config["model"]))
    stream = torch.tensor(CharTokenizer().encode(world.load_text("train")))[:-1]
    val = evals.line_batch(world.load_text("val").splitlines())
    last, per_step = {}, {"step_losses": [], "stream_lengths": []}
    hook = model.blocks[-1].register_forward_hook(lambda module, args, out: last.__setitem__("stream", out[0]))

    def loss_fn(m, batch):
        loss = next_token_loss(m, batch)
        per_step["step_losses"].append(loss.item())
        per_step["stream_lengths"].append(float(last["stream"].detach().norm(dim=-1).mean()))
        return loss

    log = fit(model, lambda: random_windows(stream, model.config.context + 1, config["batch_size"], generator),
              loss_fn, config, evaluate=lambda m: {"val_loss": evals.validation_loss(m, val)}, desc=desc)
    hook.remove()
    start = 0
    for row in log:
        row |= {key: values[start:row["step"]] for key, values in per_step.items()}
        start = row["step"]
    return model, log


def layernorm_run(placement: str, warmup: int, lr: float, seed: int) -> Run:
    name = f"ln_{placement}_warmup{warmup}_lr{lr:g}" + (f"_seed{seed}" if seed else "")
    return Run(name, layernorm_config(placement, warmup, lr, seed), train_layernorm)


def heads_run(n_heads: int, seed: int = 0) -> Run:
    """TinyGPT with n_heads heads, the base model's recipe; four heads are the base model's own runs."""
    if n_heads == models.ModelConfig().n_heads:
        return recurrent.run("transformer", seed)
    config = {**base_model.BASE_MODEL, "model": {**base_model.BASE_MODEL["model"], "n_heads": n_heads}, "seed": seed}
    return Run(f"heads{n_heads}" + (f"_seed{seed}" if seed else ""), config, base_model.train_char_lm)


def runs() -> list:
    """The checkpoints this module adds: the LayerNorm grid (24 runs) and one head over three seeds."""
    grid = [layernorm_run(p, w, lr, s) for lr in LEARNING_RATES for p in PLACEMENTS for w in WARMUPS for s in SEEDS]
    return grid + [heads_run(1, s) for s in SEEDS]


def _load(r: Run):
    return get_or_train(r.name, r.config, r.train_fn)


def load_layernorm(placement: str, warmup: int, lr: float, seed: int = 0):
    return _load(layernorm_run(placement, warmup, lr, seed))


def load_heads(n_heads: int, seed: int = 0):
    return _load(heads_run(n_heads, seed))
