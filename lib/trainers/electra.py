"""Section 05's trainer: BERT, ELECTRA and its variants on section 04's data and schedule.

    model, get_batch, loss_fn = training_parts(config)   # what a step trains on (also counted by measure.flops)
    model, log = train_electra(config)

Every variant (`lib.recipes.electra`) reads the same windows of training
reviews and masks the same 15 % of positions as section 04's BERT (same seed,
steps, schedule, optimisation): the generator's samples come from a generator
of random numbers of their own, so they never shift the batches.  BERT itself
(a config without "electra") trains exactly as section 04's; evaluation draws
no random numbers from the training's, so its weights are bit-identical to
section 04's checkpoint.

Every `eval_every` steps the log records: the linear probes of section 04
(k = 32 and 128, readouts "mean" and "last") on the discriminator (or BERT);
and, for ELECTRA, the diagnosis of `electra_evals.replacement_diagnosis` on
config["eval_reviews"] new reviews, the zero-shot rating accuracy of the
discriminator used as a scorer, and a few reviews as the discriminator saw
them (the slider).

Its fingerprint covers the first evaluation interval (50 steps), like every
run's, also for the variant whose generator freezes at step 600: sampled
replacements make a run diverge across CPUs soon after (measured: train loss
21.38 vs 21.45 at step 100 between an AMD EPYC and an Intel Xeon, identical to
1e-9 at step 50), so a fingerprint reaching step 650 would fail on every other
CPU.  The freeze itself is tested in tests/test_electra.py.
"""

import itertools

import torch

from lib.data.seeding import seed_everything
from lib.measure import probes, protocols
from lib.measure.electra_evals import examples, probe_results, replacement_diagnosis, scorer_accuracy, selection
from lib.nn.electra import Electra, ElectraConfig
from lib.objectives import batches
from lib.objectives.electra import electra_losses
from lib.train.cache import trainer
from lib.train.loop import fit
from lib.trainers import comparison

SAMPLING_SEED = 10_000      # + seed: the generator's samples draw from their own random numbers


def training_parts(config: dict) -> tuple:
    """(model, get_batch, loss_fn) of one run, drawing from freshly seeded random numbers."""
    generator = seed_everything(config["seed"])
    if "electra" not in config:
        model = comparison.build_model(config)
        make_batch = comparison.batch_function(config)
    else:
        model = Electra(ElectraConfig(**config["electra"]))

        def make_batch(windows, g):
            return batches.mlm_batch(windows, g, config["mlm_rate"], config["mask_share"], config["random_share"])
    stream, steps = batches.review_stream("train"), itertools.count()
    sampling = torch.Generator().manual_seed(SAMPLING_SEED + config["seed"])

    def get_batch():
        windows = batches.random_windows(stream, config["window"], config["batch_size"], generator)
        return next(steps), make_batch(windows, generator)

    def loss_fn(model, numbered):
        step, batch = numbered
        if "electra" not in config:
            return batches.batch_loss(model, batch)
        generator_loss, discriminator_loss, _ = electra_losses(
            model, batch, sampling, train_generator=step < config["generator_steps"],
            selected_only=config["selected_only"], hard=config["hard_negatives"], hard_rate=config["hard_rate"])
        return generator_loss + config["lambda"] * discriminator_loss

    return model, get_batch, loss_fn


def evaluation_context(config: dict) -> dict:
    """What every evaluation of a run reads: the probe openings and, for ELECTRA, the new reviews as ids,
    and the reviews the slider shows (the first ones with at least two selected positions)."""
    context = {"openings": probes.clause_sequences()}
    if "electra" in config:
        reviews = protocols.new_reviews(config["eval_reviews"])
        ids = torch.tensor([protocols.line_ids(r) for r in reviews])           # every review is 18 tokens
        selected = selection(ids, config)
        context |= {"reviews": reviews, "ids": ids,
                    "shown": [i for i in range(len(reviews)) if selected[i].sum() >= 2][:config["examples"]]}
    return context


def evaluate(model, config: dict, context: dict) -> dict:
    """One row of the learning curve (see the module docstring)."""
    if "electra" not in config:
        return probe_results(model, context["openings"])
    row = {**probe_results(model.discriminator, context["openings"]),
           **replacement_diagnosis(model, context["ids"], config),
           "scorer_accuracy": scorer_accuracy(model, context["reviews"][:100]),
           "examples": examples(model, context, config)}
    return row


@trainer("electra", version=1)
def train_electra(config: dict, parents=(), desc: str = "train"):
    """Train one variant with `fit`, evaluating every config["eval_every"] steps (`evaluate`)."""
    model, get_batch, loss_fn = training_parts(config)
    context = evaluation_context(config)
    log = fit(model, get_batch, loss_fn, config, evaluate=lambda m: evaluate(m, config, context), desc=desc)
    return model, log
