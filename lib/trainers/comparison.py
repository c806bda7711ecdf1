"""Section 04's trainer: one architecture + objective on the training reviews (the controlled comparison).

    model, get_batch, loss_fn = training_parts(config)    # what a step trains on (also counted by measure.flops)
    model, log = train_comparison(config)

Every recipe (`lib.recipes.comparison`) trains on the training reviews only,
the same windows per step, the same schedule and seed; only the objective (and
the architecture it needs) differs, named by config["objective"] and
config["kind"].  Every `eval_every` steps the log records the mean training
loss since the last row and the rating accuracy on the first
config["eval_reviews"] of `protocols.new_reviews` by both protocols, shared and
training-format (T5 also by free generation).
"""

from lib.data.seeding import seed_everything
from lib.measure import protocols
from lib.nn.models import EncoderDecoder, MaskedTransformer, ModelConfig
from lib.objectives import batches
from lib.train.cache import trainer
from lib.train.loop import fit


def batch_function(config: dict):
    """The objective's batch function from lib.objectives.batches, with this config's parameters."""
    objective = config["objective"]
    if objective == "causal LM":
        return batches.lm_batch
    if objective == "prefix LM":
        return batches.prefix_lm_batch
    if objective == "masked LM":
        return lambda windows, g: batches.mlm_batch(windows, g, rate=config["mlm_rate"])
    if objective == "i.i.d. denoising":
        return lambda windows, g: batches.iid_denoising_batch(windows, g, config["noise_density"])
    if objective == "span corruption":
        return lambda windows, g: batches.span_corruption_batch(windows, g, config["noise_density"],
                                                                config["mean_span"])
    raise ValueError(f"unknown objective {objective!r}")


def build_model(config: dict):
    """The recipe's untrained model (its initialisation draws from the global RNG)."""
    model_config = ModelConfig(**config["model"])
    return EncoderDecoder(model_config) if config["kind"] == "encoder-decoder" else MaskedTransformer(model_config)


def training_parts(config: dict) -> tuple:
    """(model, get_batch, loss_fn) of one run, drawing from freshly seeded random numbers."""
    generator = seed_everything(config["seed"])
    model = build_model(config)
    make_batch = batch_function(config)
    stream = batches.review_stream("train")

    def get_batch():
        return make_batch(batches.random_windows(stream, config["window"], config["batch_size"], generator),
                          generator)

    return model, get_batch, batches.batch_loss


def evaluate(model, config: dict, reviews: list) -> dict:
    """The learning-curve numbers: rating accuracy by the shared protocol and by the training-format
    protocol (T5 also by free generation)."""
    results = {"rating_accuracy": protocols.rating_accuracy(model, config["kind"], reviews),
               "training_format_accuracy": protocols.training_format_accuracy(model, config, reviews)}
    if config["kind"] == "encoder-decoder":
        results["free_generation_accuracy"] = protocols.free_generation_accuracy(model, reviews)
    return results


@trainer("comparison", version=1)
def train_comparison(config: dict, parents=(), desc: str = "train"):
    """Train one recipe with `fit`: only `batch_function(config)` and the model differ between recipes.
    config["stop_after"] = K (a snapshot, `lib.recipes.yardstick`) stops after K steps of the same schedule."""
    model, get_batch, loss_fn = training_parts(config)
    reviews = protocols.new_reviews(config["eval_reviews"])
    log = fit(model, get_batch, loss_fn, config, evaluate=lambda m: evaluate(m, config, reviews), desc=desc,
              stop_after=config.get("stop_after"))
    return model, log
