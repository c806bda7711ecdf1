"""Section 08's runs: a decoder's patches and a masked-diffusion LM on section 04's budget, and section 04's GPT
adapted to a bidirectional and a prefix mask.

    recipes.load("decoder_fim_seed1")         # GPT trained with half of its windows rearranged (FIM)
    recipes.load("decoder_mtp4")              # GPT with three extra heads for t+2 .. t+4
    recipes.load("diffusion_lm_seed2")        # a masked-diffusion LM (bidirectional)
    recipes.load("adapt_bidirectional")       # compare_gpt continued as a BERT (mask and objective)

Every run has section 04's shape (d = 64, 2 layers, 4 heads, 32 positions),
data, batch, schedule and steps (`recipes.comparison`); the runs from scratch
also its seeds, so seed s starts where compare_gpt_seed<s> does wherever the
network is the same (the multi-token heads are drawn after it).  The
adaptations start from compare_gpt of their seed and train on section 04's
BERT batch (15 % selected, 80/10/10) or prefix-LM batch for as many steps as
BERT and the prefix LM trained from scratch, on a fresh warm-up and decay (the
bidirectional one also at a tenth of the peak rate, `LOW_LR`).  `diffusion_lm_clip10` is the check on the diffusion
LM's optimisation: its 1/t-weighted gradients exceed the clip of 1.0 at every step, so this arm clips at 10.
"""

from lib.recipes import comparison
from lib.train.cache import Run
from lib.trainers.patches import train_patch

SEEDS = comparison.SEEDS
STEPS, POSITIONS = comparison.STEPS, comparison.POSITIONS
FIM_RATE = 0.5           # Bavarian et al.: half of the examples rearranged, PSM and SPM in equal shares
HEADS = (2, 4)           # multi-token prediction's n (n = 1 is compare_gpt)
LONG = 4 * STEPS         # the checks on FIM and diffusion: four times the budget, in case 2,500 steps are too few
LOW_LR = 3e-4            # the check on the adaptation: a tenth of the peak rate, so less of the start is overwritten

ARMS = {   # name: (objective, kind, window, extra config, parent recipe)
    "decoder_fim": ("fim", "causal", POSITIONS + 1, {"fim_rate": FIM_RATE}, None),
    f"decoder_fim_steps{LONG}": ("fim", "causal", POSITIONS + 1, {"fim_rate": FIM_RATE, "steps": LONG}, None),
    **{f"decoder_mtp{n}": ("multi-token", "causal", POSITIONS + n, {"heads": n}, None) for n in HEADS},
    "diffusion_lm": ("diffusion", "bidirectional", POSITIONS, {}, None),
    f"diffusion_lm_steps{LONG}": ("diffusion", "bidirectional", POSITIONS, {"steps": LONG}, None),
    "diffusion_lm_clip10": ("diffusion", "bidirectional", POSITIONS, {"grad_clip": 10.0}, None),
    "adapt_bidirectional": ("masked LM", "bidirectional", POSITIONS, {"mlm_rate": comparison.MLM_RATE}, "gpt"),
    "adapt_bidirectional_lowlr": ("masked LM", "bidirectional", POSITIONS,
                                  {"mlm_rate": comparison.MLM_RATE, "lr": LOW_LR, "min_lr": LOW_LR / 10}, "gpt"),
    "adapt_prefix": ("prefix LM", "prefix", POSITIONS + 1, {}, "gpt"),
}


OPTIMISATION_CHECKS = ("diffusion_lm_clip10",)   # arms that test how another arm trained, not read by the yardstick

LABELS = {"decoder_fim": "FIM", f"decoder_fim_steps{LONG}": f"FIM, {LONG:,} steps", "decoder_mtp2": "MTP, n = 2",
          "decoder_mtp4": "MTP, n = 4", "diffusion_lm": "diffusion", f"diffusion_lm_steps{LONG}": f"diffusion, {LONG:,} steps",
          "adapt_bidirectional": "GPT adapted, bidir.", "adapt_bidirectional_lowlr": "GPT adapted, bidir., lr 3e-4",
          "adapt_prefix": "GPT adapted, prefix", "diffusion_lm_clip10": "diffusion, clip 10"}     # how tables show the arms


def run_config(arm: str, seed: int = 0) -> dict:
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; choose from {list(ARMS)}")
    objective, kind, window, extra, _ = ARMS[arm]
    model = comparison.MODEL.to_dict()
    if "heads" in extra:
        model["heads"] = extra["heads"]
    base = comparison.run_config("gpt", seed=seed)
    return {"arm": arm, "objective": objective, "kind": kind, "model": model, "window": window, "steps": STEPS,
            **{k: base[k] for k in ("batch_size", "seed", "eval_every", "eval_reviews", "lr", "min_lr", "warmup",
                                    "weight_decay", "grad_clip")},
            **{k: v for k, v in extra.items() if k != "heads"}}


def run_name(arm: str, seed: int = 0) -> str:
    """The arm's name, and the seed's where it is not 0.

    >>> run_name("decoder_mtp4", 2)
    'decoder_mtp4_seed2'
    """
    return arm + (f"_seed{seed}" if seed else "")


def run(arm: str, seed: int = 0) -> Run:
    config = run_config(arm, seed)                  # refuses an unknown arm
    parent = ARMS[arm][4]
    return Run(run_name(arm, seed), config, train_patch,
               (comparison.run(parent, seed=seed),) if parent else ())


def runs() -> list:
    return [run(arm, seed) for arm in ARMS for seed in SEEDS]
