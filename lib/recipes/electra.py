"""Section 05's runs: BERT and ELECTRA in the paper's configuration, a sweep over the generator's size at the
FLOPs of BERT's 2,500 steps, and ELECTRA-15 %, on section 04's data and schedule.

    recipes.load(run_name("electra", generator=32, seed=2))     # "electra_g32_seed2"

Every run is section 04's BERT config (data, batch, masking rate, schedule,
seed) plus what makes it (`lib.trainers.electra`), over three seeds.  The BERT
of this section is section 04's BERT trained again with the probes in its log;
its weights are bit-identical to `compare_bert`'s.

ELECTRA follows Clark et al.: the generator shares the discriminator's token and
position embeddings, has its depth (2 layers) and a fraction of its width
(GENERATORS: d_g = 16, 32, 64 of d = 64; 0 is the paper's unigram sampler).
Compute is matched the way the paper matches it, by steps: every ELECTRA trains
for as many steps as its FLOPs per step allow within BERT's 2,500 steps
(STEPS; `tests/test_electra.py` checks the FLOPs, counted with vocabulary logits
only where a loss scores them).  LONG: the quarter-width ELECTRA also for four
times that budget. The `_alone` variants train a generator with lambda = 0 (its own masked-LM loss only),
to compare its learning with BERT's; CONTROLS holds one more, not in the section's tables: the quarter-width
generator alone with its two projections at the blocks' N(0, 0.02²) instead of N(0, 1/fan_in).
"""

from dataclasses import dataclass

from lib.measure.electra_evals import EVAL_REVIEWS, PROBE_KS, PROBE_READOUTS
from lib.nn.electra import ElectraConfig
from lib.objectives import batches
from lib.recipes import comparison
from lib.train.cache import Run
from lib.trainers.electra import train_electra

SEEDS, LAMBDA = comparison.SEEDS, 50.0
GENERATORS = (0, 16, 32, 64)           # the generator's width d_g (0: unigram); the discriminator's d is 64
MAIN = 16                              # the paper's ELECTRA-Small ratio: a generator a quarter of the width
# steps within the FLOPs of BERT's 2,500: the nearest multiple of the 50-step evaluation interval
STEPS = {"bert": comparison.STEPS, 0: 2600, 16: 2300, 32: 1950, 64: 1250}
LONG = 4                               # the long run: this many times the budget


@dataclass(frozen=True)
class Variant:
    label: str
    generator: int = None           # d_g; None: BERT
    selected_only: bool = False     # ELECTRA-15 %: the discriminator's loss on the selected positions only
    budgets: int = 1                # the FLOPs of this many BERT runs of 2,500 steps
    lam: float = LAMBDA             # the discriminator loss's weight; 0: the generator trains alone
    projection_std: float = None    # the generator's projections' std; None: 1/sqrt(fan_in) (lib.nn.electra)


VARIANTS = {
    "bert": Variant("BERT"),
    **{f"electra_g{g}": Variant(f"ELECTRA, generator d_g={g}" if g else "ELECTRA, unigram generator", generator=g)
       for g in GENERATORS},
    "electra_15": Variant(f"ELECTRA-15% (d_g={MAIN})", generator=MAIN, selected_only=True),
    "electra_long": Variant(f"ELECTRA (d_g={MAIN}), {LONG}x the budget", generator=MAIN, budgets=LONG),
    # the generator alone (lambda = 0: the discriminator's loss is computed, weighted 0): does it learn like a BERT?
    **{f"electra_g{g}_alone": Variant(f"generator d_g={g} alone (lambda=0)", generator=g, lam=0.0) for g in (16, 64)},
}
# the initialisation the generator's projections had before (the blocks' N(0, 0.02²)), everything else as
# electra_g16_alone: what the fix of its projections changed
CONTROLS = {f"electra_g{MAIN}_alone_std002": Variant(f"generator d_g={MAIN} alone, projections N(0, 0.02²)",
                                                       generator=MAIN, lam=0.0, projection_std=0.02)}
EVERY_VARIANT = VARIANTS | CONTROLS


def run_config(variant: str, seed: int = 0) -> dict:
    """Section 04's BERT config plus what makes the variant (the checkpoint key hashes it).

    >>> c = run_config("electra_15"); c["window"], c["mlm_rate"], c["mask_share"], c["selected_only"], c["steps"]
    (32, 0.15, 1.0, True, 2300)
    """
    if variant not in EVERY_VARIANT:
        raise ValueError(f"unknown variant {variant!r}; choose from {list(EVERY_VARIANT)}")
    v = EVERY_VARIANT[variant]
    steps = v.budgets * STEPS["bert" if v.generator is None else v.generator]
    config = {**comparison.run_config("bert", steps=steps, seed=seed), "variant": variant,
              "probe_ks": list(PROBE_KS), "probe_readouts": list(PROBE_READOUTS), "table_probes": True}
    if v.generator is not None:    # the paper's masking: every selected position becomes <mask> for the generator
        config |= {"electra": ElectraConfig(batches.VOCAB_SIZE, comparison.POSITIONS,
                                            generator_d_model=v.generator).to_dict(),
                   "lambda": v.lam, "mask_share": 1.0, "random_share": 0.0, "selected_only": v.selected_only,
                   "eval_reviews": EVAL_REVIEWS, "examples": 4}
    if v.projection_std is not None:      # only here: every other run's config, and so its key, stays as it was
        config["projection_std"] = v.projection_std
    return config


def run_name(variant: str, seed: int = 0) -> str:
    """The checkpoint's name.

    >>> run_name("bert"), run_name("electra_g32", seed=2)
    ('electra_bert', 'electra_g32_seed2')
    """
    return ("electra_bert" if variant == "bert" else variant) + (f"_seed{seed}" if seed else "")


def fine_tuned_run(variant: str, seed: int = 0) -> str:
    """The run whose yardstick entries (`lib.recipes.yardstick`) read `variant`: section 04's BERT for "bert"
    (this section's is its bit-identical twin), the variant's own run otherwise.

    >>> fine_tuned_run("bert", seed=1), fine_tuned_run("electra_g16")
    ('compare_bert_seed1', 'electra_g16')
    """
    return comparison.run_name("bert", seed=seed) if variant == "bert" else run_name(variant, seed)


def run(variant: str, seed: int = 0) -> Run:
    return Run(run_name(variant, seed), run_config(variant, seed), train_electra)


def runs() -> list:
    """Every variant and control, three seeds."""
    return [run(variant, seed) for seed in SEEDS for variant in EVERY_VARIANT]
