"""Section 05's trainer: BERT, ELECTRA and its variants on section 04's data and schedule.

    model, get_batch, loss_fn = training_parts(config)   # what a step trains on (also counted by measure.flops)
    model, log = train_electra(config)

Every variant (`lib.recipes.electra`) reads the same windows of training
reviews and masks the same 15 % of positions as section 04's BERT, step for
step (same seed, schedule shape and optimisation; each for its own number of
steps): the generator's samples come from a generator of random numbers of
their own, so they never shift the batches.  BERT itself
(a config without "electra") trains exactly as section 04's; evaluation draws
no random numbers from the training's, so its weights are bit-identical to
section 04's checkpoint.

Every `eval_every` steps the log records: the linear probes of section 04
(k = 32 and 128, readouts "mean" and "last") on the discriminator (or BERT),
the token-embedding table's probes (`electra_evals.table_probe_results`:
polarity and word class of held-out words); and, for ELECTRA, the diagnosis of
`electra_evals.replacement_diagnosis` on config["eval_reviews"] new reviews,
the zero-shot rating accuracy of the discriminator used as a scorer, and a few
reviews as the discriminator saw them (the slider).

Its fingerprint covers the first evaluation interval (50 steps), like every
run's: sampled replacements make a run diverge across CPUs soon after
(measured: train loss 21.38 vs 21.45 at step 100 between an AMD EPYC and an
Intel Xeon, identical to 1e-9 at step 50).
"""

import itertools

import torch

from lib.data.seeding import seed_everything
from lib.measure import probes, protocols
from lib.measure.electra_evals import (EVAL_REVIEWS, examples, masked_lm_accuracy, probe_results,
                                      replacement_diagnosis, scorer_accuracy, selection, table_probe_results)
from lib.measure.flops import step_flops
from lib.nn.electra import Electra, ElectraConfig
from lib.objectives import batches
from lib.objectives.electra import electra_losses, unigram_log_probs
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
        if model.config.generator_d_model == 0:
            model.generator.log_probs.copy_(unigram_log_probs())
        if "projection_std" in config:     # §05's control: the projections' initialisation before v2
            model.generator.rescale_projections(config["projection_std"])

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
        generator_loss, discriminator_loss, _ = electra_losses(model, batch, sampling, config["selected_only"])
        return generator_loss + config["lambda"] * discriminator_loss

    return model, get_batch, loss_fn


def evaluation_context(config: dict) -> dict:
    """What every evaluation of a run reads: the probe openings and, for ELECTRA, the new reviews as ids,
    and the reviews the slider shows (the first ones with at least two selected positions)."""
    context = {"openings": probes.clause_sequences()}
    reviews = protocols.new_reviews(config.get("eval_reviews", EVAL_REVIEWS))
    ids = torch.tensor([protocols.line_ids(r) for r in reviews])                # every review is 18 tokens
    context |= {"reviews": reviews, "ids": ids}
    if "electra" in config:
        selected = selection(ids, config)
        context["shown"] = [i for i in range(len(reviews)) if selected[i].sum() >= 2][:config["examples"]]
    return context


def evaluate(model, config: dict, context: dict) -> dict:
    """One row of the learning curve (see the module docstring)."""
    encoder = model.discriminator if "electra" in config else model
    row = {**probe_results(encoder, context["openings"]), **table_probe_results(encoder)}
    if "electra" not in config:    # BERT's masked-LM accuracy where a generator's is read (`replaced_batch`)
        return row | {"mlm_accuracy": masked_lm_accuracy(model, context["ids"], config)}
    row |= {
            **replacement_diagnosis(model, context["ids"], config),
            "scorer_accuracy": scorer_accuracy(model, context["reviews"][:100]),
            "examples": examples(model, context, config)}
    return row


def step_flops_of(config: dict) -> float:
    """FLOPs of one training step of a run as the paper counts them: vocabulary logits only where a loss
    scores them (BERT's through `batches.scored_loss`, the same loss; ELECTRA's generator computes only those)."""
    model, get_batch, loss_fn = training_parts(config)
    if "electra" not in config:
        loss_fn = lambda model, numbered: batches.scored_loss(model, numbered[1])      # noqa: E731
    return step_flops(model, get_batch, loss_fn)


@trainer("electra", version=2)   # 2: the generator's projections start as near-isometries (lib.nn.electra); probe features in float64
def train_electra(config: dict, parents=(), desc: str = "train"):
    """Train one variant with `fit`, evaluating every config["eval_every"] steps (`evaluate`)."""
    model, get_batch, loss_fn = training_parts(config)
    context = evaluation_context(config)
    log = fit(model, get_batch, loss_fn, config, evaluate=lambda m: evaluate(m, config, context), desc=desc)
    return model, log
