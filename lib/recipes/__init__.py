"""Every run of the book, section by section, and the one way to get a trained model.

    from lib import recipes
    model, log = recipes.load("compare_t5_span_seed1")    # from checkpoints/, trained first if missing or stale
    recipes.run("base")                                   # the Run: name, config, trainer, parents
    python -m lib.recipes --help                          # train, reproduce, check the fingerprints

A section's runs are a table in its own module (nanoGPT's config/*.py over one
train.py): `base` (section 00), `inside` (02), `comparison` (04), `electra`
(05), `ul2` (06), `moe` and `retrieval` (07), `patches` (08), `modern` (09), `inference` (10), `finetuning` (11).  Each module exports `runs()`;
most also `run_name(...)` and `run_config(...)`, which say how a run of the
table is named and configured.
"""

import difflib
import functools
import re

from lib.recipes import base, comparison, electra, finetuning, inference, inside, modern, moe, patches, retrieval, ul2
from lib.measure import precision
from lib.data.tokenizers import CHARS, TOKENIZER
from lib.train import cache, processes

SECTIONS = {"00": base, "02": inside, "04": comparison, "05": electra, "06": ul2, "07": (moe, retrieval), "08": patches, "09": modern, "10": inference, "11": finetuning}


def all_runs() -> list:
    """The `Run` of every checkpoint under checkpoints/, section by section."""
    found = {}
    for number in SECTIONS:
        for r in section_runs(number):
            # a run two sections share (the base model's seeds) is listed once; one name for two runs is an error
            if r.name in found and cache.checkpoint_key(found[r.name]) != cache.checkpoint_key(r):
                raise ValueError(f"two different runs are called {r.name!r} (section {number} and another)")
            found.setdefault(r.name, r)
    return list(found.values())


def section_runs(number: str) -> list:
    """The runs of a section ("07": its modules' `runs()`); none for a section that trains nothing."""
    entry = SECTIONS.get(number, ())
    return [run for module in (entry if isinstance(entry, tuple) else (entry,)) for run in module.runs()]


@functools.cache
def _runs_by_name() -> dict:
    return {r.name: r for r in all_runs()}     # built once per process: the tables are code, fixed while it runs


def run(name: str) -> cache.Run:
    """The Run of the checkpoint called `name`; an unknown name is an error that lists the closest known ones."""
    runs = _runs_by_name()
    if name not in runs:
        close = difflib.get_close_matches(name, runs, n=5, cutoff=0.5)
        raise KeyError(f"no run is called {name!r}" + (f"; did you mean {close}?" if close else "")
                       + f"\nthe {len(runs)} runs: {', '.join(runs)}")
    return runs[name]


def load(name: str):
    """(model, log) of the run called `name`: from its checkpoint, or trained first when it is missing or
    stale (one line on stderr says so; a training process on pinned kernels trains it).  The model is a
    float64 copy of the float32 weights, so that what it computes prints the same digits on every CPU
    (`lib.measure.precision`)."""
    model, log = processes.get_or_train(run(name))
    return precision.for_measurement(model, copy_model=False), log


TOKENIZERS = {len(CHARS): "characters", len(TOKENIZER): "words"}     # the book's two vocabularies, by their size
SHAPE = ("vocab_size", "context", "d_model", "n_layers", "n_heads")   # a network's size; its other options are named


def recipe_name(run_name: str) -> str:
    """A run's name without its seed suffix: the recipe its seeds share ("compare_gpt_seed1" -> "compare_gpt")."""
    return re.sub(r"_seed\d+$", "", run_name)


def trained_on(run: cache.Run) -> str:
    """What a run's config says it is trained on: objective and kind (§04, §05, §08), backbone (§06's "decoder" reads
    its source bidirectionally: a non-causal decoder) and denoisers (§06), task, preference loss and LoRA rank (§11);
    the character-level trainers' causal LM otherwise."""
    c = run.config
    parts = [str(c[k]) for k in ("objective", "kind") if k in c]
    parts += [{"decoder": "non-causal decoder"}.get(c["backbone"], c["backbone"])] if "backbone" in c else []
    if "denoisers" in c:
        letters = "".join(dict.fromkeys(d[0] for d in c["denoisers"]))
        parts.append(f"denoisers {letters}" + (" + mode tokens" if c["mode_tokens"] else ""))
    parts += [f"SFT, task {c['task']}"] if "task" in c else []
    parts += [c["loss"] + (f", beta {c['beta']}" if c["loss"] != "sft" else "")] if "loss" in c else []
    parts += [f"LoRA rank {c['lora_rank']}"] if "lora_rank" in c else []
    return ", ".join(parts) or {"char_lm": "causal LM", "reader": "causal LM"}.get(run.train_fn.trainer_name, "-")


def roster() -> list:
    """One row per recipe of the book (its seeds together, listed under the first section that trains it): section,
    the recipe's name, the network (its class, width x layers and the options beyond its size), what it is trained
    on (`trained_on`; then the recipes it starts from), the window and its tokens, parameters (counted in the
    committed checkpoint, a tied matrix once), steps and seeds.  Read from the tables and the checkpoints, so it cannot
    go stale; a missing checkpoint is an error (train it first: `python -m lib.recipes`)."""
    groups = {}                                           # recipe -> (the first section that trains it, its runs)
    for number in SECTIONS:
        for r in section_runs(number):
            section, runs = groups.setdefault(recipe_name(r.name), (number, []))
            if section == number:
                runs.append(r)
    rows = []
    for recipe, (number, runs) in groups.items():
        saved = cache.read(cache.path_of(runs[0]))
        sizes = {t.untyped_storage().data_ptr(): t.numel() for t in saved["state_dict"].values()}
        model = saved["model_config"]
        options = ", ".join(f"{k} {v}" for k, v in model.items() if k not in SHAPE and v is not None)
        window = runs[0].config.get("window", model.get("context"))
        size = f", {model['d_model']} x {model['n_layers']}" if "d_model" in model else ""
        parents = sorted({recipe_name(p.name) for p in runs[0].parents})
        rows.append({"section": number, "run": recipe,
                     "network": saved["model_class"] + size + (f" ({options})" if options else ""),
                     "trained on": trained_on(runs[0]) + "".join(f"; from {name}" for name in parents),
                     "window": f"{window} {TOKENIZERS.get(model.get('vocab_size'), 'tokens')}" if window else "-",
                     "params": sum(sizes.values()), "steps": runs[0].config["steps"],
                     "seeds": [r.config.get("seed", 0) for r in runs]})
    return rows
