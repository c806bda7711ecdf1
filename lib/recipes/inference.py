"""Section 10's runs: four ways to attend, at equal parameters, and what each caches per token; and a draft model.

    recipes.load("attention_mla_seed1")        # multi-head latent attention, seed 1
    recipes.load("draft")                      # a small decoder that drafts for speculative decoding

Every kind is section 09's rope rung (RMSNorm, SwiGLU, RoPE; `modern.rung_switches("rope")`) with one change
to attention, its MLP widened or narrowed to the base model's 109,056 parameters (`modern.matched_model`):

    mha   multi-head: a key and a value per head                   the ladder's rope rung itself
    gqa   grouped-query, g = 2 key/value heads                     the ladder's gqa rung itself
    mqa   multi-query, g = 1                                       new runs
    mla   multi-head latent attention, a latent of LATENT numbers  new runs (`lib.nn.latent`)

Three seeds each, the base model's data, steps and schedule.  MHA and GQA are the ladder's runs, not retrained:
the same config would train the same bits.

The draft (`DRAFT`) is the base model's recipe at a sixth of its parameters (width 32, one layer of 2 heads): a
cheap proposer whose guesses the base model verifies (`lib.nn.inference.speculative_generate`).
"""

from lib.nn.models import ModelConfig
from lib.recipes import modern
from lib.recipes.base import BASE_MODEL, SEEDS
from lib.train.cache import Run
from lib.trainers.char_lm import train_char_lm

LATENT = 32             # d_c = 2·d_h: MLA caches d_c + d_R = 32 + 8 numbers per token and layer, MQA 32, MHA 128
KINDS = {"mha": {}, "gqa": {"kv_heads": 2}, "mqa": {"kv_heads": 1}, "mla": {"kv_latent": LATENT}}
REUSED = {"mha": "rope", "gqa": "gqa"}       # kinds that are a rung of section 09's ladder
DRAFT = ModelConfig(d_model=32, n_layers=1, n_heads=2).to_dict()


def model_config(kind: str) -> dict:
    """The model config (a dict) of an attention kind."""
    if kind not in KINDS:
        raise ValueError(f"unknown attention kind {kind!r}; choose from {tuple(KINDS)}")
    return modern.matched_model({**modern.rung_switches("rope"), **KINDS[kind]})


def run_name(kind: str, seed: int = 0) -> str:
    return modern.run_name(REUSED[kind], seed) if kind in REUSED else f"attention_{kind}" + (f"_seed{seed}" if seed else "")


def run(kind: str, seed: int = 0) -> Run:
    if kind in REUSED:
        return modern.run(REUSED[kind], seed)
    return Run(run_name(kind, seed), {**BASE_MODEL, "model": model_config(kind), "seed": seed}, train_char_lm)


def draft_run() -> Run:
    return Run("draft", {**BASE_MODEL, "model": DRAFT}, train_char_lm)


def runs() -> list:
    """The new runs only (MQA and MLA, three seeds each; MHA and GQA are section 09's), and the draft."""
    return [run(kind, s) for kind in KINDS if kind not in REUSED for s in SEEDS] + [draft_run()]
