"""Section 11's runs: supervised fine-tuning of the base model, LoRA against full fine-tuning, preference tuning.

    recipes.load("sft_visit_answer_seed1")     # SFT on the `visit` task, loss on the answers only, seed 1
    recipes.load("lora_r4_lr3e-3")             # 16 new facts through rank-4 adapters
    recipes.load("pref_dpo_b0.1_seed2")        # DPO from its seed's reference

Every SFT and LoRA run starts from the base model of its seed (`base`, `base_seed1`, `base_seed2`), every preference
run from its seed's reference; the three seeds change the base, the examples drawn and their order.

SFT (`sft_<task>_<loss>`): the chat tasks of `lib.data.chat`, loss on the answers only ("answer"), on every
character as one mean ("all": the answer's share of the mean is its share of the characters), or GPT-1's sum of
the answer's mean and half the prompt's ("gpt1"); "diluted" (the answer's loss times 0.1, `where` and `rate`) is
the control for `all`'s slow start: the answer's smaller share of the loss without the prompt's loss.  `where` and `rate` learn from 24 examples, `visit` (a 60-character answer) from 1,024 and for
longer.  `sft_where_padbug`: `where` with the padding ignored by id, the reply's end with it.  `sft_rate_<loss>_n<N>`
(FEW_EXAMPLES, `answer` and `all`): `rate` from only N examples, where the loss on the prompt is said to help most.

LoRA (`lora_r<r>_lr<lr>`, `full_lr<lr>`): 16 people the mini internet never mentions, as plain fact lines; ranks 1,
4 and 16 against every weight, each at three learning rates (adapters train at larger ones: their update starts at
zero and is scaled by alpha / r).

Preference (`pref_<arm>`, the arms of PREFERENCE_ARMS): a reference fine-tuned to write reviews from 256 examples of which 40 % carry a
wrong rating (`review_ref`, true rate about a half), then 256 pairs (a true review, the same with a wrong rating)
for 200 steps: DPO at three β, IPO at two, the SFT loss on the chosen reviews alone, and DPO, IPO (targets 5 and 50)
and SFT at ten times the learning rate.  The pairs' chosen reviews are the reference's own 256 examples with their true ratings.
"""

from lib.recipes.base import BASE_MODEL, SEEDS
from lib.recipes import base
from lib.train.cache import Run
from lib.trainers.finetuning import train_preference, train_sft

FEW_EXAMPLES = (4, 8)        # `rate` also from this few examples (answer and all): where Shi et al. place IM's gain
SFT_TASKS = {"where": {"examples": 24, "steps": 200, "eval_every": 10},
             "rate": {"examples": 24, "steps": 200, "eval_every": 10},
             "visit": {"examples": 1024, "steps": 600, "eval_every": 50}}
LOSSES = {"answer": {"prompt_loss": False},                        # the answer's characters only
          "all": {"prompt_loss": True},                            # every character, one mean (the answer diluted)
          "gpt1": {"prompt_loss": False, "prompt_weight": 0.5},    # the answer's mean + 0.5 x the prompt's mean
          "diluted": {"prompt_loss": False, "answer_scale": 0.1}}  # the answer's mean x 0.1: the dilution alone
DILUTED_TASKS = ("where", "rate")       # the control for `all`'s slow start, where it starts slow
FINETUNE = {"batch_size": 16, "lr": 3e-4, "min_lr": 3e-5, "warmup": 20, "padding": "by_position"}

LORA_RANKS = (1, 4, 16)
LORA_ALPHA = 8
LORA_RATES = (3e-4, 1e-3, 3e-3)
FULL_RATES = (3e-5, 1e-4, 3e-4)
FACTS = {"task": "facts", "people": 16, "steps": 200, "eval_every": 20, "prompt_loss": True}

REFERENCE = {"task": "review", "examples": 256, "wrong_share": 0.4, "steps": 200, "eval_every": 100,
             "prompt_loss": False}
PREFERENCE = {"pairs": 256, "steps": 200, "batch_size": 16, "lr": 3e-5, "min_lr": 3e-6, "warmup": 20, "eval_every": 25}
PREFERENCE_ARMS = {"dpo_b0.1": {"loss": "dpo", "beta": 0.1}, "dpo_b0.3": {"loss": "dpo", "beta": 0.3},
                   "dpo_b1": {"loss": "dpo", "beta": 1.0}, "ipo_b0.1": {"loss": "ipo", "beta": 0.1},
                   "ipo_b0.05": {"loss": "ipo", "beta": 0.05},
                   "sft": {"loss": "sft", "beta": 0.1},
                   "dpo_b0.1_lr3e-4": {"loss": "dpo", "beta": 0.1, "lr": 3e-4, "min_lr": 3e-5},
                   "ipo_b0.1_lr3e-4": {"loss": "ipo", "beta": 0.1, "lr": 3e-4, "min_lr": 3e-5},
                   "ipo_b0.01_lr3e-4": {"loss": "ipo", "beta": 0.01, "lr": 3e-4, "min_lr": 3e-5},   # target 50
                   "sft_lr3e-4": {"loss": "sft", "beta": 0.1, "lr": 3e-4, "min_lr": 3e-5}}


def _suffix(seed: int) -> str:
    return f"_seed{seed}" if seed else ""


def _config(seed: int, **keys) -> dict:
    return {**BASE_MODEL, **FINETUNE, "seed": seed, **keys}


def sft_run(task: str, loss: str, seed: int = 0, padding: str = "by_position", examples: int = None) -> Run:
    """examples: fewer training pairs than the task's (SFT_TASKS), named `_n<examples>`."""
    if padding == "by_id" and loss != "answer":
        raise ValueError("the padding bug's runs (padding='by_id') are trained with loss='answer' only")
    bug = "_padbug" if padding == "by_id" else ""
    few = f"_n{examples}" if examples else ""
    name = f"sft_{task}{bug}" + ("" if bug else f"_{loss}") + few + _suffix(seed)
    config = _config(seed, task=task, **LOSSES[loss], **SFT_TASKS[task], padding=padding)
    if examples:
        config["examples"] = examples
    return Run(name, config, train_sft, (base.run(seed),))


def lora_run(rank, lr: float, seed: int = 0) -> Run:
    """rank None: full fine-tuning at this learning rate."""
    arm = f"lora_r{rank}" if rank else "full"
    lora = {"lora_rank": rank, "lora_alpha": LORA_ALPHA} if rank else {}
    config = _config(seed, **FACTS, **lora, lr=lr, min_lr=lr / 10)
    return Run(f"{arm}_lr{lr:.0e}".replace("e-0", "e-") + _suffix(seed), config, train_sft, (base.run(seed),))


def reference_run(seed: int = 0) -> Run:
    return Run("review_ref" + _suffix(seed), _config(seed, **REFERENCE), train_sft, (base.run(seed),))


def preference_run(arm: str, seed: int = 0) -> Run:
    if arm not in PREFERENCE_ARMS:
        raise ValueError(f"unknown preference arm {arm!r}; choose from {tuple(PREFERENCE_ARMS)}")
    config = {**BASE_MODEL, **PREFERENCE, "seed": seed, **PREFERENCE_ARMS[arm]}
    return Run(f"pref_{arm}" + _suffix(seed), config, train_preference, (reference_run(seed),))


def runs() -> list:
    return ([sft_run(t, loss, s) for t in SFT_TASKS for loss in LOSSES if loss != "diluted" or t in DILUTED_TASKS
             for s in SEEDS]
            + [sft_run("where", "answer", s, padding="by_id") for s in SEEDS]
            + [sft_run("rate", loss, s, examples=n) for n in FEW_EXAMPLES for loss in ("answer", "all") for s in SEEDS]
            + [lora_run(r, lr, s) for r in LORA_RANKS for lr in LORA_RATES for s in SEEDS]
            + [lora_run(None, lr, s) for lr in FULL_RATES for s in SEEDS]
            + [reference_run(s) for s in SEEDS]
            + [preference_run(arm, s) for arm in PREFERENCE_ARMS for s in SEEDS])
