"""Section 05's runs: BERT, ELECTRA, ELECTRA-15 % and two exercise-11 variants, on §04's data and schedule.

    model, log = load("electra", seed=0)        # from checkpoints/, trained first if missing
    python -m lib.electra_runs --only electra   # train with a progress bar

Every variant reads the same windows of training reviews and masks the same
15 % of positions as §04's BERT (same seed, steps, schedule, optimisation):
the generator's samples come from a generator of random numbers of their own,
so they never shift the batches.  The BERT of this section is §04's BERT
trained again with a different `evaluate`; evaluation draws no random numbers
from the training's, so its weights are bit-identical to §04's checkpoint.

Every `eval_every` steps the log records: the linear probes of §04 (k = 32 and
128, readouts "mean" and "last") on the discriminator (or BERT); and, for ELECTRA,
the diagnosis of `replacement_diagnosis` on 200 new reviews, the zero-shot
rating accuracy of the discriminator used as a scorer, and a few reviews as
the discriminator saw them (the slider).
"""

import argparse
import itertools
import math
from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F

from lib import checkpoints, experiments, objectives, probes, protocols, world
from lib.checkpoints import Run, get_or_train
from lib.electra import Electra, ElectraConfig, electra_losses, hard_negatives
from lib.objectives import electra_batch, mlm_batch
from lib.seeding import seed_everything
from lib.tokenizers import TOKENIZER
from lib.train import fit

SEEDS, LAMBDA, FROZEN_AT = experiments.SEEDS, 50.0, 600
SAMPLING_SEED = 10_000      # + seed: the generator's samples draw from their own random numbers
PROBE_KS, PROBE_READOUTS = (32, 128), ("mean", "last")
CLASSES = ("preserving", "changing", "obvious")


@dataclass(frozen=True)
class Variant:
    label: str
    electra: bool = True
    selected_only: bool = False     # ELECTRA-15 %: the discriminator's loss on the selected positions only
    frozen_at: int = None           # the generator stops training after this many steps
    hard: bool = False              # food adjectives become one of the other polarity: the selected ones...
    hard_rate: float = None         # ...or each with this probability, selected or not
    shared: bool = False            # the generator shares the discriminator's embeddings (the paper's setup)


VARIANTS = {
    "bert": Variant("BERT", electra=False),
    "electra": Variant("ELECTRA"),
    "electra_15": Variant("ELECTRA-15%", selected_only=True),
    "electra_frozen": Variant(f"ELECTRA, generator frozen at step {FROZEN_AT}", frozen_at=FROZEN_AT),
    "electra_hard": Variant("ELECTRA + hard negatives (selected)", hard=True),
    "electra_contrast": Variant("ELECTRA + hard negatives (half the reviews)", hard=True, hard_rate=0.5),
    "electra_shared": Variant("ELECTRA, shared embeddings", shared=True),
}


def run_config(variant: str, seed: int = 0, steps: int = experiments.STEPS) -> dict:
    """§04's BERT config (data, steps, schedule, seed) plus what makes the variant (the checkpoint key hashes it).

    >>> c = run_config("electra_15"); c["window"], c["mlm_rate"], c["mask_share"], c["selected_only"]
    (32, 0.15, 1.0, True)
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose from {list(VARIANTS)}")
    config = {**experiments.recipe_config("bert", steps=steps, seed=seed), "variant": variant,
              "probe_ks": list(PROBE_KS), "probe_readouts": list(PROBE_READOUTS)}
    v = VARIANTS[variant]
    if v.electra:  # the paper's masking: every selected position becomes <mask> for the generator
        config |= {"electra": ElectraConfig(objectives.VOCAB_SIZE, experiments.POSITIONS,
                                            shared_embeddings=v.shared).to_dict(),
                   "lambda": LAMBDA, "mask_share": 1.0, "random_share": 0.0, "selected_only": v.selected_only,
                   "generator_steps": v.frozen_at or steps, "hard_negatives": v.hard, "hard_rate": v.hard_rate,
                   "eval_reviews": 200, "examples": 4}
    return config


def checkpoint_name(variant: str, seed: int = 0) -> str:
    """The checkpoint's file name.

    >>> checkpoint_name("bert"), checkpoint_name("electra_15", seed=2)
    ('electra_bert', 'electra_15_seed2')
    """
    return ("electra_bert" if variant == "bert" else variant) + (f"_seed{seed}" if seed else "")


def training_parts(config: dict) -> tuple:
    """(model, get_batch, loss_fn) of one run, drawing from freshly seeded random numbers: `train_variant`
    trains with them and `step_flops` counts them."""
    generator = seed_everything(config["seed"])
    if "electra" not in config:
        model = experiments.build_model(config)
        make_batch = experiments.batch_function(config)
    else:
        model = Electra(ElectraConfig(**config["electra"]))

        def make_batch(windows, g):
            return mlm_batch(windows, g, config["mlm_rate"], config["mask_share"], config["random_share"])
    stream, steps = objectives.review_stream("train"), itertools.count()
    sampling = torch.Generator().manual_seed(SAMPLING_SEED + config["seed"])

    def get_batch():
        windows = objectives.random_windows(stream, config["window"], config["batch_size"], generator)
        return next(steps), make_batch(windows, generator)

    def loss_fn(model, numbered):
        step, batch = numbered
        if "electra" not in config:
            return objectives.batch_loss(model, batch)
        generator_loss, discriminator_loss, _ = electra_losses(
            model, batch, sampling, train_generator=step < config["generator_steps"],
            selected_only=config["selected_only"], hard=config["hard_negatives"], hard_rate=config["hard_rate"])
        return generator_loss + config["lambda"] * discriminator_loss

    return model, get_batch, loss_fn


def train_variant(config: dict, desc: str = "train"):
    """Train one variant with `fit`, evaluating every config["eval_every"] steps (`evaluate`)."""
    model, get_batch, loss_fn = training_parts(config)
    context = evaluation_context(config)
    log = fit(model, get_batch, loss_fn, config, evaluate=lambda m: evaluate(m, config, context), desc=desc)
    return model, log


def step_flops(config: dict, batches: int = 10) -> float:
    """Mean FLOPs of one training step (forward + backward, generator included) over `batches` real batches,
    counted by PyTorch's FlopCounterMode."""
    from torch.utils.flop_counter import FlopCounterMode

    model, get_batch, loss_fn = training_parts(config)
    total = 0
    for _ in range(batches):
        with FlopCounterMode(display=False) as counter:
            loss_fn(model, get_batch()).backward()
        total += counter.get_total_flops()
    return total / batches


# ---- measurement ------------------------------------------------------------------------------------------

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


def selection(ids, config: dict):
    """The masked batch of the evaluation: always the same 15 % of positions (its own fixed seed)."""
    return mlm_batch(ids, torch.Generator().manual_seed(protocols.EVAL_SEED), config["mlm_rate"],
                     config["mask_share"], config["random_share"]).loss_mask


@lru_cache(maxsize=None)
def replacement_class(ids: tuple, position: int, token: int) -> str:
    """What replacing ids[position] by `token` does to a true review, by the world's rule (`check_line`):
    "preserving" (the line is still true), "changing" (well-formed but false) or "obvious" (ill-formed).

    >>> ids = tuple(protocols.line_ids("review: the soup was tasty and the host was kind. rating: good."))
    >>> [replacement_class(ids, 6, TOKENIZER[w]) for w in ("fresh", "bland", "host")]
    ['preserving', 'changing', 'obvious']
    """
    changed = list(ids)
    changed[position] = token
    well_formed, true = world.check_line(TOKENIZER.decode(changed).strip("\n"))
    return "obvious" if not well_formed else "preserving" if true else "changing"


@torch.no_grad()
def replaced_batch(model: Electra, ids, config: dict):
    """(ElectraBatch, p(replaced) (B, T), the generator's logits (B, T, V)): the evaluation's fixed
    selection, filled by the generator (a fixed sampling seed; hard negatives where the variant uses
    them), read by the discriminator."""
    g = torch.Generator().manual_seed(protocols.EVAL_SEED)
    masked = mlm_batch(ids, g, config["mlm_rate"], config["mask_share"], config["random_share"])
    generator_logits = model.generator_logits(masked.inputs, masked.attention_mask)
    batch = electra_batch(masked, generator_logits, g)
    if config["hard_negatives"]:
        batch = hard_negatives(batch, g, config["hard_rate"])
    return batch, torch.sigmoid(model.replaced_logits(batch.inputs, batch.attention_mask)), generator_logits


def replacement_diagnosis(model: Electra, ids, config: dict) -> dict:
    """What the discriminator is taught and what it learned, on the evaluation batch: the generator's
    accuracy at the selected positions, the share of them it replaced, the replacements' classes
    (`replacement_class`), the discriminator's loss (on the positions it trains on), its recall per class
    and false alarms on originals (it says "replaced" when p > 0.5), and the share of all positions whose label is a meaning-changing replacement."""
    batch, p, generator_logits = replaced_batch(model, ids, config)
    flagged = p > 0.5
    where = batch.selected if config["selected_only"] else batch.loss_mask
    rows, columns = batch.replaced.nonzero(as_tuple=True)
    classes = [replacement_class(tuple(ids[r].tolist()), c, int(batch.inputs[r, c]))
               for r, c in zip(rows.tolist(), columns.tolist())]
    result = {"generator_accuracy": (generator_logits.argmax(-1) == batch.originals)[batch.selected].float().mean().item(),
              "discriminator_loss": F.binary_cross_entropy(p[where], batch.replaced[where].float()).item(),
              "replaced_share": (batch.replaced & batch.selected).sum().item() / batch.selected.sum().item(),
              "false_alarm": flagged[~batch.replaced].float().mean().item(),
              "changing_per_position": classes.count("changing") / batch.replaced.numel()}
    for name in CLASSES:
        members = [i for i, c in enumerate(classes) if c == name]
        result[f"count_{name}"] = len(members)
        result[f"share_{name}"] = len(members) / len(classes) if classes else math.nan
        result[f"recall_{name}"] = (flagged[rows[members], columns[members]].float().mean().item()
                                    if members else math.nan)
    return result


@torch.no_grad()
def scorer_predictions(model: Electra, reviews: list) -> list:
    """The discriminator as a zero-shot scorer: each of good / ok / bad is put in the rating slot and the
    rating whose line looks most untouched (the highest sum over positions of log p(original)) is chosen."""
    lines = [protocols.line_ids(r) for r in reviews]
    slot = protocols.review_slots(lines[0])["rating"]
    candidates = torch.tensor([ids[:slot] + [rating] + ids[slot + 1:] for ids in lines for rating in protocols.RATING_IDS])
    mask = torch.ones(candidates.shape[1], candidates.shape[1], dtype=torch.bool).expand(len(candidates), -1, -1)
    log_original = F.logsigmoid(-model.replaced_logits(candidates, mask)).sum(-1).view(len(lines), -1)
    return [world.RATINGS[i] for i in log_original.argmax(-1).tolist()]


def scorer_accuracy(model: Electra, reviews: list) -> float:
    """Share of reviews whose rating `scorer_predictions` gets right."""
    return sum(p == protocols.true_rating(r) for p, r in zip(scorer_predictions(model, reviews), reviews)) / len(reviews)


def probe_results(encoder, openings: list) -> dict:
    """§04's probe (mean test accuracy over 100 label draws, held-out adjectives) for each readout and k."""
    results = {}
    for readout in PROBE_READOUTS:
        features = probes.representations(encoder, "bidirectional", readout, openings)
        results |= {f"probe_{readout}_k{k}": probes.probe_accuracy(features, k) for k in PROBE_KS}
    return results


@torch.no_grad()
def examples(model: Electra, context: dict, config: dict) -> list:
    """The reviews the slider shows, as the discriminator saw them at this step: the input ids, which
    positions were selected and replaced, and p(replaced) (rounded to 3 decimals)."""
    batch, p, _ = replaced_batch(model, context["ids"], config)
    return [{"inputs": batch.inputs[i].tolist(), "selected": batch.selected[i].tolist(),
             "replaced": batch.replaced[i].tolist(), "p_replaced": [round(x, 3) for x in p[i].tolist()]}
            for i in context["shown"]]


def evaluate(model, config: dict, context: dict) -> dict:
    """One row of the learning curve (see the module docstring)."""
    if "electra" not in config:
        return probe_results(model, context["openings"])
    row = {**probe_results(model.discriminator, context["openings"]),
           **replacement_diagnosis(model, context["ids"], config),
           "scorer_accuracy": scorer_accuracy(model, context["reviews"][:100]),
           "examples": examples(model, context, config)}
    return row


def run(variant: str, seed: int = 0) -> Run:
    return Run(checkpoint_name(variant, seed), run_config(variant, seed), train_variant)


def runs() -> list:
    """The checkpoints section 05 loads: every variant, three seeds."""
    return [run(variant, seed) for seed in SEEDS for variant in VARIANTS]


def load(variant: str, seed: int = 0):
    """(model, log) of one variant from its checkpoint (trained first when missing or stale)."""
    r = run(variant, seed)
    return get_or_train(r.name, r.config, r.train_fn)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m lib.electra_runs", description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=list(VARIANTS), action="append", help="only this variant (repeatable)")
    parser.add_argument("--seed", type=int, nargs="+", default=list(SEEDS))
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args(argv)
    checkpoints.train_missing([run(v, s) for s in args.seed for v in args.only or VARIANTS], args.processes)


if __name__ == "__main__":
    main()
