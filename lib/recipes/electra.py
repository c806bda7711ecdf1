"""Section 05's runs: BERT, ELECTRA, ELECTRA-15 % and the exercise-11 variants, on section 04's data and schedule.

    recipes.load(run_name("electra_15", seed=2))     # "electra_15_seed2"

Every variant is section 04's BERT config (data, steps, schedule, seed) plus
what makes it (`lib.trainers.electra`); every variant over three seeds.  The
BERT of this section is section 04's BERT trained again with the probes in its
log; its weights are bit-identical to `compare_bert`'s.
"""

from dataclasses import dataclass

from lib.measure.electra_evals import PROBE_KS, PROBE_READOUTS
from lib.nn.electra import ElectraConfig
from lib.objectives import batches
from lib.recipes import comparison
from lib.train.cache import Run
from lib.trainers.electra import train_electra

SEEDS, LAMBDA, FROZEN_AT = comparison.SEEDS, 50.0, 600


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


def run_config(variant: str, seed: int = 0, steps: int = comparison.STEPS) -> dict:
    """Section 04's BERT config plus what makes the variant (the checkpoint key hashes it).

    >>> c = run_config("electra_15"); c["window"], c["mlm_rate"], c["mask_share"], c["selected_only"]
    (32, 0.15, 1.0, True)
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose from {list(VARIANTS)}")
    config = {**comparison.run_config("bert", steps=steps, seed=seed), "variant": variant,
              "probe_ks": list(PROBE_KS), "probe_readouts": list(PROBE_READOUTS)}
    v = VARIANTS[variant]
    if v.electra:  # the paper's masking: every selected position becomes <mask> for the generator
        config |= {"electra": ElectraConfig(batches.VOCAB_SIZE, comparison.POSITIONS,
                                            shared_embeddings=v.shared).to_dict(),
                   "lambda": LAMBDA, "mask_share": 1.0, "random_share": 0.0, "selected_only": v.selected_only,
                   "generator_steps": v.frozen_at or steps, "hard_negatives": v.hard, "hard_rate": v.hard_rate,
                   "eval_reviews": 200, "examples": 4}
    return config


def run_name(variant: str, seed: int = 0) -> str:
    """The checkpoint's name.

    >>> run_name("bert"), run_name("electra_15", seed=2)
    ('electra_bert', 'electra_15_seed2')
    """
    return ("electra_bert" if variant == "bert" else variant) + (f"_seed{seed}" if seed else "")


def run(variant: str, seed: int = 0) -> Run:
    return Run(run_name(variant, seed), run_config(variant, seed), train_electra)


def runs() -> list:
    """Every variant, three seeds."""
    return [run(variant, seed) for seed in SEEDS for variant in VARIANTS]
