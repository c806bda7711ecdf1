"""Section 08's trainer: a decoder's patches (FIM, multi-token prediction), a masked-diffusion LM, and the
adaptation of section 04's trained GPT to a bidirectional or prefix mask.

    model, log = train_patch(config)                         # from scratch
    model, log = train_patch(config, parents=(gpt_model,))   # adaptation: continue the given model

Every run reads section 04's training reviews, 32 windows per step, on section
04's schedule; config["objective"] says what a step trains on:

    fim           GPT's next-token loss, half of the rows rearranged (`patches.fim_batch`)
    multi-token   the sum of n heads' losses (`patches.multi_token_loss`, a `MultiTokenTransformer`)
    diffusion     the 1/t-weighted masked loss (`patches.diffusion_loss`), bidirectional
    masked LM     BERT's batch (`batches.mlm_batch`), from the parent's weights
    prefix LM     the prefix LM's batch (`batches.prefix_lm_batch`), from the parent's weights

Every `eval_every` steps (and at step 0) the log records the rating accuracy
by the shared protocol and a held-out loss (`lib.measure.patch_evals`): left
to right for the causal models (and per head for multi-token), BERT's 15 %
question for the bidirectional ones.
"""

import copy

from lib.data.seeding import seed_everything
from lib.measure import patch_evals, protocols
from lib.nn.models import MaskedTransformer, ModelConfig
from lib.nn.multi_token import MultiTokenConfig, MultiTokenTransformer
from lib.objectives import batches, patches
from lib.train.cache import trainer
from lib.train.loop import fit
from lib.trainers.comparison import batch_function

OBJECTIVES = ("fim", "multi-token", "diffusion", "masked LM", "prefix LM")


ADAPTATIONS = ("masked LM", "prefix LM")   # objectives this trainer runs only from a parent (section 04's GPT)


def build_model(config: dict, parents=()):
    """The run's starting network: a copy of the parent (adaptation) or a fresh one (global RNG)."""
    if (config["objective"] in ADAPTATIONS) != bool(parents):
        raise ValueError(f"objective {config['objective']!r} " + ("continues a trained network: pass its parent"
                         if not parents else "trains from scratch: it takes no parent"))
    if parents:
        return copy.deepcopy(parents[0]).train()
    if config["objective"] == "multi-token":
        return MultiTokenTransformer(MultiTokenConfig(**config["model"]))
    return MaskedTransformer(ModelConfig(**config["model"]))


def batch_parts(config: dict, generator) -> tuple:
    """(make_batch(windows), loss_fn(model, batch)) of the run's objective."""
    objective = config["objective"]
    if objective == "fim":
        return lambda w: patches.fim_batch(w, generator, config["fim_rate"]), batches.batch_loss
    if objective == "multi-token":
        return lambda w: w, patches.multi_token_loss
    if objective == "diffusion":
        return lambda w: patches.diffusion_batch(w, generator), patches.diffusion_loss
    if objective in ADAPTATIONS:          # section 04's BERT and prefix-LM batches (the same draws)
        make = batch_function(config)
        return lambda w: make(w, generator), batches.batch_loss
    raise ValueError(f"unknown objective {objective!r}; choose from {OBJECTIVES}")


def evaluate(model, config: dict, reviews: list, windows) -> dict:
    """The log's numbers: the rating by the shared protocol, and a held-out loss (BERT's 15 % question for a
    bidirectional run, the next token otherwise; each head's for multi-token)."""
    out = {"rating_accuracy": protocols.rating_accuracy(model, config["kind"], reviews)}
    if config["kind"] == "bidirectional":
        out["val_masked"] = patch_evals.masked_nats(model, windows[:, :-1])
    else:
        out["val_next"] = patch_evals.next_token_nats(model, windows)
    if config["objective"] == "multi-token":
        out["val_heads"] = patch_evals.head_nats(model, patch_evals.held_out_windows(32 + model.config.heads))
    return out


@trainer("patches", version=1)
def train_patch(config: dict, parents=(), desc: str = "patch"):
    """Train one run of `lib.recipes.patches`; config["stop_after"] = K stops after K steps (0: the start)."""
    generator = seed_everything(config["seed"])
    model = build_model(config, parents)
    make_batch, loss_fn = batch_parts(config, generator)
    stream = batches.review_stream("train")
    reviews, windows = protocols.new_reviews(config["eval_reviews"]), patch_evals.held_out_windows(33)

    def get_batch():
        return make_batch(batches.random_windows(stream, config["window"], config["batch_size"], generator))

    def measured(m):
        return evaluate(m, config, reviews, windows)

    model.eval()
    start = {"step": 0, **measured(model)}
    model.train()
    log = [start] + fit(model, get_batch, loss_fn, config, evaluate=measured, desc=desc,
                        stop_after=config.get("stop_after"))
    return model, log
