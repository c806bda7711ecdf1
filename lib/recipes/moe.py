"""Section 07's runs: dense TinyGPT against mixtures of experts, trained as the base model is, on equal steps.

    recipes.load(run_name("moe_top1", seed=1))     # "moe_top1_seed1"

Six variants of the base model's feed-forward layers (attention, embeddings and
everything else stay TinyGPT's), each over three seeds:

    dense                 the base model's MLP, hidden 256                 active = total
    dense_wide            one MLP of hidden 1,024                           active = total = the MoEs' total
    moe_top1              4 experts of hidden 256, top-1                    active = dense, total = dense_wide
    moe_top2              8 experts of hidden 128, top-2                    active = dense, total = dense_wide
    moe_shared            1 shared + 7 routed experts of hidden 128, top-1  active = dense, total = dense_wide
    moe_top1_no_balance   moe_top1 without the balancing loss
    moe_top1_no_balance_uncapped   the same with no capacity limit

Two sweeps ask what the extra parameters buy (`SWEEP`): top-1 mixtures of
E experts of hidden 256 (E = 1 is the dense MLP: a router over one expert
always gives it the gate 1), so that every token uses the dense model's
parameters; and dense MLPs as wide as the mixtures are big (hidden 256 * E),
so that every token uses them all.  A control for the shared expert,
moe_no_shared, is moe_shared without its shared expert (7 routed experts of
hidden 128, top-1).  The sweep's mixtures drop more tokens as E grows (at most 1.25 x a fair share per
expert); UNCAPPED trains E = 8 and 16 with no limit, as the dense arms are.  The dense model is also trained for longer (LONGER): with
6,000 steps it is the base model itself (`run` returns the base model's run).

A world with many more facts (`FACT_VARIANTS`): the same question on a
facts-only text of FACT_PEOPLE people (`world.fact_world`; each fact 8 times
in shuffled order), learned by models of width 32, for FACT_STEPS steps, the log recording the share of people
recalled every FACT_EVAL_EVERY steps:

    facts_dense     TinyGPT's MLP, hidden 128                               active = total
    facts_experts   4 experts of hidden 128, top-1                          active = dense, total = facts_wide
    facts_wide      one MLP of hidden 512                                   active = total = facts_experts' total

and facts_dense also for twice the steps (facts_dense_steps32000); FACT_CONTROLS: facts_experts without a
capacity limit, every seed (facts_experts_uncapped_seed1: the seed whose capped run never took off; seeds 0 and 2,
which did, are the control for what removing the limit does to a run anyway).

Every other run reads the same windows as the base model (seeded the same way), with
the base model's optimisation and schedule, for STEPS steps (a third of the
base model's 6,000, so that all 18 runs fit in one evening on 2 cores).  The
MoE loss adds BALANCE x the balancing loss averaged over the two layers
(Switch Transformer's 0.01), and experts take at most 1.25 x their fair share
of a batch's tokens (Switch's training capacity factor).  Every EVAL_EVERY
steps the log records the validation loss (every line of the validation text,
read with no capacity limit: see `moe_evals`) and, averaged over the training
steps since the last row, each layer's expert load, its share of dropped
assignments and its balancing loss (`lib.trainers.char_lm`).
"""

from lib.nn.models import ModelConfig
from lib.nn.moe import MoEConfig
from lib.recipes.base import BASE_MODEL
from lib.recipes.base import run as base_run
from lib.train.cache import Run
from lib.trainers.char_lm import train_char_lm

STEPS, EVAL_EVERY, SEEDS = 2000, 100, (0, 1, 2)
BALANCE, CAPACITY_FACTOR = 0.01, 1.25

VARIANTS = {  # name -> (the MoEConfig fields of its feed-forward layers, weight of the balancing loss)
    "dense": (None, 0.0),                                          # None: TinyGPT's own MLP
    "dense_wide": ({"n_experts": 0, "n_shared": 1, "expert_hidden": 1024}, 0.0),
    "moe_top1": ({"n_experts": 4, "top_k": 1, "expert_hidden": 256}, BALANCE),
    "moe_top2": ({"n_experts": 8, "top_k": 2, "expert_hidden": 128}, BALANCE),
    "moe_shared": ({"n_experts": 7, "top_k": 1, "expert_hidden": 128, "n_shared": 1}, BALANCE),
    "moe_top1_no_balance": ({"n_experts": 4, "top_k": 1, "expert_hidden": 256}, 0.0),
}
MAIN = tuple(VARIANTS)           # the six variants every table of the section compares
VARIANTS.update({
    "moe_top1_e2": ({"n_experts": 2, "top_k": 1, "expert_hidden": 256}, BALANCE),
    "moe_top1_e8": ({"n_experts": 8, "top_k": 1, "expert_hidden": 256}, BALANCE),
    "moe_top1_e16": ({"n_experts": 16, "top_k": 1, "expert_hidden": 256}, BALANCE),
    "dense_h512": ({"n_experts": 0, "n_shared": 1, "expert_hidden": 512}, 0.0),
    "dense_h2048": ({"n_experts": 0, "n_shared": 1, "expert_hidden": 2048}, 0.0),
    "moe_no_shared": ({"n_experts": 7, "top_k": 1, "expert_hidden": 128}, BALANCE),
})
# the sweep's two largest mixtures without a capacity limit, as the dense arms train (no token dropped); and the
# unbalanced mixture without one: is its "parking" expert the missing balancing loss's doing, or the limit's too?
VARIANTS.update({f"{v}_uncapped": ({**VARIANTS[v][0], "capacity_factor": None}, VARIANTS[v][1])
                 for v in ("moe_top1_e8", "moe_top1_e16", "moe_top1_no_balance")})
# the sweep: E -> (top-1 mixture of E experts of hidden 256, dense MLP of hidden 256 * E); no dense of hidden 4,096
# (a third of an hour per run on 2 cores)
SWEEP = {1: ("dense", "dense"), 2: ("moe_top1_e2", "dense_h512"), 4: ("moe_top1", "dense_wide"),
         8: ("moe_top1_e8", "dense_h2048"), 16: ("moe_top1_e16", None)}
UNCAPPED = {8: "moe_top1_e8_uncapped", 16: "moe_top1_e16_uncapped"}   # E -> the sweep's mixture with no limit
LONGER = (4000, BASE_MODEL["steps"])     # the dense model's longer schedules


FACT_PEOPLE, FACT_STEPS, FACT_EVAL_EVERY = 3000, 16000, 1000
FACT_WIDTH = {"d_model": 32, "n_heads": 4}
FACT_VARIANTS = {  # name -> (the MoEConfig fields of its feed-forward layers, weight of the balancing loss)
    "facts_dense": (None, 0.0),
    "facts_experts": ({"n_experts": 4, "top_k": 1, "expert_hidden": 128}, BALANCE),
    "facts_wide": ({"n_experts": 0, "n_shared": 1, "expert_hidden": 512}, 0.0),
}
FACT_LONGER = 2 * FACT_STEPS     # facts_dense's longer schedule
# facts_experts without a capacity limit: do the plateau's drops hold a run back? (seed 1 never took off capped)
FACT_CONTROLS = {"facts_experts_uncapped": ({**FACT_VARIANTS["facts_experts"][0], "capacity_factor": None}, BALANCE)}
FACT_CONTROL_SEEDS = (0, 1, 2)


def _config(variant: str, table: dict, seed: int, steps: int, eval_every: int, width: dict = None, **extra) -> dict:
    """The base model's recipe with the feed-forward layers of `variant` (a row of `table`): the config both
    tables' runs are trained from (the key hashes it)."""
    if variant not in table:
        raise ValueError(f"unknown variant {variant!r}; choose from {list(table)}")
    experts, balance, width = *table[variant], width or {}
    model = (ModelConfig(**width) if experts is None else
             MoEConfig(**width, **{"capacity_factor": CAPACITY_FACTOR if experts["n_experts"] else None, **experts}))
    return {**BASE_MODEL, "network": "tinygpt" if experts is None else "moe", "variant": variant,
            "model": model.to_dict(), "balance": balance, "steps": steps, "eval_every": eval_every, "seed": seed,
            **extra}


def _name(variant: str, seed: int, steps: int, usual_steps: int) -> str:
    return variant + (f"_steps{steps}" if steps != usual_steps else "") + (f"_seed{seed}" if seed else "")


def fact_run(variant: str, seed: int = 0, steps: int = FACT_STEPS) -> Run:
    """A run of the facts-only world: width 32, FACT_PEOPLE people, the base model's optimisation.

    >>> r = fact_run("facts_experts", 1); r.name, r.config["fact_world"], r.config["model"]["d_model"]
    ('facts_experts_seed1', 3000, 32)
    """
    config = _config(variant, FACT_VARIANTS | FACT_CONTROLS, seed, steps, FACT_EVAL_EVERY, FACT_WIDTH,
                     fact_world=FACT_PEOPLE)
    return Run(_name(variant, seed, steps, FACT_STEPS), config, train_char_lm)


def run_config(variant: str, seed: int = 0, steps: int = STEPS) -> dict:
    """The base model's recipe for STEPS steps with this variant's feed-forward layers (the key hashes it).

    >>> c = run_config("moe_top2"); c["steps"], c["model"]["n_experts"], c["model"]["top_k"], c["balance"]
    (2000, 8, 2, 0.01)
    """
    return _config(variant, VARIANTS, seed, steps, EVAL_EVERY)


def run_name(variant: str, seed: int = 0, steps: int = STEPS) -> str:
    """<variant>[_steps<n>][_seed<s>]; the dense model's 6,000 steps are the base model's checkpoints.

    >>> run_name("moe_top1", seed=1), run_name("dense", 2, steps=4000), run_name("dense", 1, steps=6000)
    ('moe_top1_seed1', 'dense_steps4000_seed2', 'base_seed1')
    """
    return run(variant, seed, steps).name


def run(variant: str, seed: int = 0, steps: int = STEPS) -> Run:
    if variant == "dense" and steps == BASE_MODEL["steps"]:
        return base_run(seed)      # the same recipe: the base model's config plus keys its network ignores
    return Run(_name(variant, seed, steps, STEPS), run_config(variant, seed, steps), train_char_lm)


def runs() -> list:
    """Every variant over three seeds, the dense model's longer schedules, and the facts-only world's runs."""
    return ([run(variant, seed) for seed in SEEDS for variant in VARIANTS]
            + [run("dense", seed, steps) for steps in LONGER for seed in SEEDS]
            + [fact_run(variant, seed) for seed in SEEDS for variant in FACT_VARIANTS]
            + [fact_run("facts_dense", seed, FACT_LONGER) for seed in SEEDS]
            + [fact_run(variant, seed) for seed in FACT_CONTROL_SEEDS for variant in FACT_CONTROLS])


def feed_forward(variant: str) -> dict:
    """A variant's (or a fact world variant's) feed-forward layer in words and widths: the routed experts, the
    experts every token uses, and the hidden width one token passes through and all of them together.

    >>> feed_forward("moe_shared")["per token"], feed_forward("moe_shared")["in all"]
    (256, 1024)
    """
    c = (fact_run(variant) if variant in FACT_VARIANTS else run(variant)).config["model"]
    if "n_experts" not in c:                                   # TinyGPT's own MLP
        return {"routed": "-", "every token": f"the MLP, hidden {4 * c['d_model']}",
                "per token": 4 * c["d_model"], "in all": 4 * c["d_model"]}
    h, routed = c["expert_hidden"], c["n_experts"]
    return {"routed": f"{routed} x hidden {h}, top-{c['top_k']}" if routed else "-",
            "every token": f"{c['n_shared']} x hidden {h}" if c["n_shared"] else "-",
            "per token": (c["top_k"] * (routed > 0) + c["n_shared"]) * h, "in all": (routed + c["n_shared"]) * h}
