"""The fine-tuning yardstick (section 04's third protocol), cached: checkpoints of sections 04-06, 08 and 09 fine-tuned (`lib.measure.finetune`).

    yardstick.result("compare_bert_seed1")            # {"rows": [...], ...}: the final checkpoint
    yardstick.result("compare_bert_seed1", step=0)    # the same run's untrained network: the floor
    yardstick.result("compare_bert_seed1", head=True) # BERT read through a new classifier head, as in its paper
    yardstick.swept_rows("compare_t5_span")           # T5 (spans) over the grid and LOW_RATES below it
    python -m lib.recipes --yardstick                  # compute what is missing or stale (pinned processes)
    python -m lib.recipes --yardstick --reproduce DIR [--sample N]   # recompute into DIR and compare

An entry is a backbone and the label counts it is fine-tuned with.  A backbone
is a comparison run after `step` of its steps: the committed checkpoint
(`step=None`), or a snapshot retrained here with config["stop_after"] (same
schedule, stopped early; step 0 is the run's initialisation, the network of
the same shape that learned nothing).  Each entry's fine-tunes (every n, label
split and learning rate of `measure.finetune.sweep`) are one JSON file under
checkpoints/yardstick/, keyed like a checkpoint: the backbone's checkpoint key
and the harness's version and settings.  A stale or missing file is computed in
a process on the pinned kernels (a fine-tune is a short training: same machine,
same bits), never inside a test (BOOK_NO_TRAINING).
"""

import functools
import hashlib
import json
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from lib.measure import finetune, protocols
from lib.nn.electra import Electra
from lib.recipes import comparison, electra, modern, patches, ul2
from lib.train import cache, processes
from lib.train.cache import CHECKPOINT_DIR, Run, StaleCheckpoint

DIRECTORY = CHECKPOINT_DIR / "yardstick"
CURVE = (8, 32, 128)              # labelled reviews: the curve at the final checkpoint and at the floor
N = 32                            # the label count of the table and of the snapshots
SNAPSHOTS = (250, 500, 1000)      # pretraining steps fine-tuned on the way (the final one is the checkpoint)
SPLITS = (0, 1, 2)                # label splits (each: which adjectives are labelled, which reviews)
FLOOR_SEEDS = range(3, 13)        # ten more untrained initialisations per kind of §04 network, for the floor
LOW_RATES = (1e-5, 3e-5)          # below the grid's lowest rate: where T5 (spans) chose that lowest rate


@dataclass(frozen=True)
class Entry:
    run: Run            # the comparison run
    step: object        # None: its committed checkpoint; an int: a snapshot after that many steps
    ns: tuple           # the label counts fine-tuned
    head: bool = False  # fine-tuned through a new classifier head (`finetune.finetune`) instead of its own slot
    kind: str = None    # how the slot is asked, where the run's config does not say (section 06: `protocols.ul2_kind`;
                        # section 05: `protocols.UNMASKED`; section 09: `protocols.CHARACTERS`)
    labels_scored: bool = False   # each fine-tune also scored on the reviews it was fine-tuned on (`finetune.sweep`)
    rates: tuple = None # the learning rates swept, where not `finetune.LEARNING_RATES` (`LOW_RATES`: below its grid)

    def __post_init__(self):
        if self.rates not in (None, LOW_RATES):
            raise ValueError(f"an entry sweeps the grid or LOW_RATES {LOW_RATES}, not {self.rates}")

    @property
    def name(self) -> str:
        asked = "" if self.kind is None else "_" + self.form            # _span, _prefix or _unmasked
        return (self.run.name + asked + ("" if self.step is None else f"_at{self.step}") + ("_head" if self.head else "")
                + ("" if self.rates is None else "_low"))

    @property
    def learning_rates(self) -> tuple:
        return self.rates or finetune.LEARNING_RATES

    @property
    def model_kind(self) -> str:
        return self.kind or self.run.config["kind"]

    @property
    def form(self):
        """How the slot is asked where the run's config does not say: section 06's "span" or "prefix", section
        05's "unmasked" (a period at the slot, `protocols.UNMASKED`), section 09's "chars" (a character-level
        decoder, `protocols.CHARACTERS`); None for the others."""
        if self.kind is None:
            return None
        named = {protocols.UNMASKED: "unmasked", protocols.CHARACTERS: "chars"}
        return named.get(self.kind) or protocols.ul2_question(self.kind)[0]

    def backbone(self) -> Run:
        """The run whose network is fine-tuned (a snapshot is the run stopped after `step` steps)."""
        if self.step is None:
            return self.run
        return Run(self.name, {**self.run.config, "stop_after": self.step}, self.run.train_fn, self.run.parents)


def entries() -> list:
    """Every main comparison run (5 recipes x 3 seeds) at its floor and final checkpoint over the label curve
    (and the floor at ten more initialisations, `floor_entries`)
    and at the snapshots with N labels; the exercises' runs (BERT masking 40 %, T5 spans for 6,000 steps) at
    their final checkpoints with N labels; T5 (spans), whose validation chose the grid's lowest rate, at
    LOW_RATES too; BERT's final checkpoints and its floor also through a new
    classifier head (the BERT paper's way of fine-tuning), with N labels; section 05's ELECTRA
    discriminators (every variant but BERT, which is section 04's) through a new head, with N labels, read at
    <mask> and unmasked (`protocols.UNMASKED`), BERT and its floor unmasked too; and section 06's runs in both
    of their forms (`ul2_entries`)."""
    out = []
    for seed in electra.SEEDS:
        bert = comparison.run("bert", seed=seed)
        out += [Entry(bert, 0, (N,), head=True)]
        out += [Entry(electra.run(v, seed), None, (N,), head=True) for v in electra.VARIANTS if v != "bert"]
        out += [Entry(bert, step, (N,), head=True, kind=protocols.UNMASKED, labels_scored=True) for step in (None, 0)]
        out += [Entry(electra.run(v, seed), None, (N,), head=True, kind=protocols.UNMASKED, labels_scored=True)
                for v in electra.VARIANTS if v != "bert"]
    for seed in comparison.SEEDS:
        for recipe in comparison.RECIPES:
            run = comparison.run(recipe, seed=seed)
            out += [Entry(run, None, CURVE), Entry(run, 0, CURVE)] + [Entry(run, s, (N,)) for s in SNAPSHOTS]
            if recipe == "bert":
                out.append(Entry(run, None, (N,), head=True))
        out += [Entry(comparison.run("bert", mlm_rate=0.40, seed=seed), None, (N,)),
                Entry(comparison.run("t5_span", steps=6000, seed=seed), None, (N,)),
                Entry(comparison.run("t5_span", seed=seed), None, (N,), rates=LOW_RATES)]
    return out + floor_entries() + ul2_entries() + modern_entries() + patch_entries()


def floor_entries() -> list:
    """Section 04's floor, widened: the untrained network of each kind (the two T5 recipes share one) at ten
    more initialisations (FLOOR_SEEDS), fine-tuned like the runs' own step 0, with N labels."""
    return [Entry(comparison.run(recipe, seed=seed), 0, (N,)) for seed in FLOOR_SEEDS
            for recipe in comparison.RECIPES if recipe != "t5_iid"]


def ul2_entries() -> list:
    """Section 06: every run (the controls too) asked in both forms through its own slot, with N labels: the span form (R's, with
    [R] where the recipe trains with mode tokens) and the prefix form (S's, with [S]); the floor, the
    initialisation of each backbone (the R-only recipes' runs at step 0), asked in both forms without a token; and
    the S-only recipes trained for ul2.SHORT steps, in the prefix form."""
    out = []
    for seed in ul2.SEEDS:
        for recipe in [*ul2.RECIPES, *ul2.CONTROLS]:
            tokens = ul2.run_config(recipe)["mode_tokens"]
            out += [Entry(ul2.run(recipe, seed), None, (N,), kind=protocols.ul2_kind(form, mode if tokens else None))
                    for form, mode in (("span", "R"), ("prefix", "S"))]
        out += [Entry(ul2.run(recipe, seed), 0, (N,), kind=protocols.ul2_kind(form))
                for recipe in ("span_decoder", "t5_span") for form in protocols.FORMS]
        # the S-only recipes trained for SHORT steps (as many S targets as the mixture saw), in their own form
        out += [Entry(ul2.run(recipe, seed, ul2.SHORT), None, (N,), kind=protocols.ul2_kind("prefix"))
                for recipe in ("prefix_lm", "prefix_lm_encoder_decoder")]
    return out


def modern_entries() -> list:
    """Section 09: every rung of the ladder (the base model's own runs for "base"), three seeds, read as a
    character-level decoder (`protocols.CHARACTERS`) with N labels; the floor, each seed's initialisation of
    the first and the last rung (the base model's network and the whole modern recipe's)."""
    out = [Entry(modern.run(rung, seed), None, (N,), kind=protocols.CHARACTERS)
           for rung in modern.RUNGS for seed in modern.SEEDS]
    return out + [Entry(modern.run(rung, seed), 0, (N,), kind=protocols.CHARACTERS)
                  for rung in (modern.RUNGS[0], modern.RUNGS[-1]) for seed in modern.SEEDS]


def patch_entries() -> list:
    """Section 08: every run (three seeds; not the optimisation checks) at its final checkpoint with N labels, read as
    its config's kind; and
    the adaptations at step 0, which is section 04's trained GPT read with the new mask before any adaptation."""
    out = [Entry(patches.run(arm, seed), None, (N,)) for arm in patches.ARMS if arm not in patches.OPTIMISATION_CHECKS
           for seed in patches.SEEDS]
    return out + [Entry(patches.run(arm, seed), 0, (N,)) for arm in patches.ARMS if patches.ARMS[arm][4]
                  for seed in patches.SEEDS]


def entry(name: str, step=None, head: bool = False, form: str = None, low: bool = False) -> Entry:
    """The entry of run `name` (at `step`, through a head), asked in `form` (a section-06 run's "span" or "prefix",
    or "unmasked": `Entry.form`); `low`: its sweep at LOW_RATES."""
    found = _by_request().get((name, step, head, form, low))
    if found is not None:
        return found
    raise KeyError(f"no yardstick entry for {name!r} at step {step!r}" + (" with a head" if head else "")
                   + (f" in {form} form" if form else "") + (" at the low rates" if low else ""))


@functools.cache
def _by_request() -> dict:
    """`entries()` by what `entry` asks for (built once: a notebook asks for dozens, and building them all takes
    ~0.1 s)."""
    index = {}
    for e in entries():
        index.setdefault((e.run.name, e.step, e.head, e.form, e.rates is not None), e)
    return index


def key(e: Entry) -> str:
    asked = {} if e.kind is None else {"kind": e.kind}        # the older entries' keys stay as they were
    asked |= {"labels_scored": True} if e.labels_scored else {}
    blob = json.dumps({"backbone": cache.checkpoint_key(e.backbone()), "ns": e.ns, "splits": SPLITS,
                       "learning_rates": e.learning_rates, "steps": finetune.STEPS,
                       "version": finetune.VERSION, "head": e.head, **asked}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def path_of(e: Entry, directory=None):
    return (directory or DIRECTORY) / f"{e.name}.json"


def _read(e: Entry, directory=None):
    try:
        saved = json.loads(path_of(e, directory).read_text())
    except (OSError, ValueError):
        return None
    return saved if saved.get("key") == key(e) else None


def backbone_model(e: Entry) -> tuple:
    """(network, log) that the entry fine-tunes: the committed checkpoint (log None; an ELECTRA's discriminator), or
    for a snapshot the run retrained here from the checkpoints it starts from and stopped after `step` steps."""
    if e.step is None:
        model = processes.get_or_train(e.run)[0]
        return (model.discriminator if isinstance(model, Electra) else model), None   # the generator is thrown away
    parents = tuple(processes.get_or_train(p)[0] for p in e.run.parents)       # an adaptation starts from its parent
    return e.run.train_fn(e.backbone().config, parents=parents, desc=e.name)


def compute(name: str, step, directory: str = None, head: bool = False, form: str = None, low: bool = False) -> None:
    """Fine-tune one entry's backbone over its sweep and save the result (run in a pinned process), with the
    backbone's own zero-shot scores on each split's test reviews and, for a snapshot, its training log (a
    snapshot is retrained on this machine: its trajectory can differ from the committed checkpoint's)."""
    e, directory = entry(name, step, head, form, low), (None if directory is None else Path(directory))
    start = time.perf_counter()
    model, log = backbone_model(e)
    trained = time.perf_counter() - start
    kind = e.model_kind
    zero_shot = None if e.head else [finetune.score(model, kind, finetune.rating_task(s).test) for s in SPLITS]
    with tqdm(total=len(e.ns) * len(SPLITS) * len(e.learning_rates), desc=f"fine-tuning {e.name}",
              file=sys.stderr, mininterval=1.0) as bar:
        rows = finetune.sweep(model, kind, e.ns, SPLITS, e.learning_rates, finetune.STEPS,
                              progress=lambda done, total: bar.update(done - bar.n), head=e.head,
                              score_labels=e.labels_scored)
    saved = {"key": key(e), "name": e.name, "run": e.run.name, "step": e.step, "head": e.head, "ns": list(e.ns),
             "backbone_seconds": round(trained, 1), "cpu": processes.cpu_name(), "zero_shot": zero_shot,
             "log": log, "rows": rows}
    target = path_of(e, directory)
    target.parent.mkdir(parents=True, exist_ok=True)
    cache.write_atomically(target, lambda f: f.write(json.dumps(saved, indent=1) + "\n"), "w")


def missing(directory=None) -> list:
    return [e for e in entries() if _read(e, directory) is None]


def estimated_seconds(e: Entry) -> float:
    """What one entry costs on this project's machine (one core), for the schedule and its progress bar: a
    fine-tune of n reviews took about 0.45 + 0.029 n seconds (0.7 s at n = 8, 4.2 s at 128), a snapshot's
    pretraining about 0.03 s a step, and a measuring process 5 s to start; T5's two stacks about 1.7 times that,
    a character-level model (reviews of about 60 characters instead of about 17 tokens) about 6.5 times."""
    tunes = len(SPLITS) * len(e.learning_rates)
    slower = (1.7 if "encoder-decoder" in (e.model_kind, e.run.config.get("backbone"))
              else 6.5 if e.model_kind == protocols.CHARACTERS else 1.0)
    return 5 + slower * (tunes * sum(0.45 + 0.029 * n for n in e.ns) + 0.03 * (e.step or 0))


def _call(e: Entry, directory=None) -> tuple:
    """The measuring process's call that computes entry `e` (`compute`, into `directory` if given)."""
    return (e.name, compute, {"name": e.run.name, "step": e.step, "head": e.head, "form": e.form,
                              "low": e.rates is not None, "directory": None if directory is None else str(directory)})


def fill(processes_count: int = 2, directory=None, only=None) -> list:
    """Compute the missing or stale entries (or those of the runs named in `only`) in pinned processes,
    most expensive first; returns their names."""
    todo = [e for e in missing(directory) if not only or e.run.name in only]
    cost = {e.name: estimated_seconds(e) for e in todo}
    todo.sort(key=lambda e: -cost[e.name])
    calls = [_call(e, directory) for e in todo]
    failures = processes.call_in_processes(calls, processes_count, cost)
    if failures:
        raise RuntimeError(f"fine-tuning failed for {failures}; the others were saved")
    return [e.name for e in todo]


def result(name: str, step=None, head: bool = False, form: str = None, low: bool = False) -> dict:
    """The saved fine-tunes of one entry (`compute`'s file; `low`: its sweep at LOW_RATES); computed first when
    missing or stale, except where BOOK_NO_TRAINING is set (there: StaleCheckpoint)."""
    e = entry(name, step, head, form, low)
    saved = _read(e)
    if saved is None:
        if os.environ.get("BOOK_NO_TRAINING"):
            raise StaleCheckpoint(f"yardstick {path_of(e).name} is missing or stale; training is off here "
                                  f"(BOOK_NO_TRAINING): compute it with `python -m lib.recipes --yardstick`")
        print(f"yardstick {path_of(e).name}: missing or stale; fine-tuning", file=sys.stderr)
        fill(1, only=[name])
        saved = _read(e)
    return saved


def test_scores(name: str, step=None, n: int = N, group: str = "and", head: bool = False, form: str = None) -> list:
    """One entry's yardstick: the test score on `group` reviews ("and", "but" or "all") of each label split, at
    the learning rate its validation chose (`finetune.chosen`) with n labelled reviews."""
    return [row["test"][group] for row in chosen_rows(name, step, n, head, form)]


def chosen_rows(name: str, step=None, n: int = N, head: bool = False, form: str = None) -> list:
    """The saved fine-tunes at the chosen learning rate, one row per label split (`finetune.chosen`)."""
    return finetune.chosen(result(name, step, head, form)["rows"], n)


def mean_test_score(name: str, step=None, n: int = N, group: str = "and", head: bool = False, form: str = None) -> float:
    """`test_scores` averaged over the label splits: the yardstick's one number for a network."""
    scores = test_scores(name, step, n, group, head, form)
    return sum(scores) / len(scores)


def chosen_rate(name: str, step=None, n: int = N, head: bool = False, form: str = None) -> float:
    """The learning rate the validation reviews chose for one entry at n labelled reviews."""
    return chosen_rows(name, step, n, head, form)[0]["lr"]


def swept_rows(name: str, n: int = N) -> list:
    """The fine-tunes of run `name`'s final checkpoint with n labels over the grid and LOW_RATES together (the
    entries of `entries()` with `rates=LOW_RATES`): `finetune.chosen(swept_rows(name), n)` chooses among all."""
    return [r for low in (False, True) for r in result(name, low=low)["rows"] if r["n"] == n]


def scores_by_rate(name: str, step=None, n: int = N, group: str = "and", form: str = None) -> dict:
    """{learning rate: the test scores on `group` reviews of each label split}, every rate swept (not only the
    chosen one): what the choice on validation reviews selects among."""
    rows = [r for r in result(name, step, form=form)["rows"] if r["n"] == n]
    return {lr: [r["test"][group] for r in sorted(rows, key=lambda r: r["split"]) if r["lr"] == lr]
            for lr in sorted({r["lr"] for r in rows})}


def zero_shot_scores(name: str, step=None, group: str = "and", form: str = None) -> list:
    """The backbone's own score on `group` test reviews of each split before fine-tuning (the shared protocol
    at the rating slot), as saved with the entry: for a snapshot, the network that was fine-tuned."""
    return [score[group] for score in result(name, step, form=form)["zero_shot"]]


def summary(name: str, step=None, form: str = None, n: int = N, group: str = "and") -> dict:
    """One entry on a line, each a mean over the label splits of the test score on `group` reviews: "zero-shot"
    (the backbone as it is), "fine-tuned" (at the learning rate its validation chose, "lr") and "at <rate>" for
    every rate swept (what fine-tuning at that rate does, chosen or not)."""
    mean = lambda scores: sum(scores) / len(scores)
    return {"zero-shot": mean(zero_shot_scores(name, step, group, form)),
            "fine-tuned": mean_test_score(name, step, n, group, form=form), "lr": chosen_rate(name, step, n, form=form),
            **{f"at {lr:g}": mean(scores) for lr, scores in scores_by_rate(name, step, n, group, form).items()}}


def same_result(a: dict, b: dict) -> bool:
    """Whether two saved entries hold the same key and the same scores (wall times aside)."""
    rows = [[{k: v for k, v in row.items() if k != "seconds"} for row in x["rows"]] + [x.get("zero_shot")]
            for x in (a, b)]
    return a["key"] == b["key"] and json.dumps(rows[0]) == json.dumps(rows[1])


def reproduce(directory, sample: int = None, seed: int = 0) -> bool:
    """Recompute the entries (or `sample` of them drawn with `seed`) into `directory` and compare them with the
    committed ones; a difference counts only where the committed entry was computed on this CPU."""
    chosen = entries() if sample is None else random.Random(seed).sample(entries(), min(sample, len(entries())))
    print(f"{len(chosen)} yardstick entries: {', '.join(e.name for e in chosen)}")
    directory = Path(directory)
    todo = [e for e in chosen if _read(e, directory) is None]
    failures = processes.call_in_processes([_call(e, directory) for e in todo], 2)
    if failures:
        raise RuntimeError(f"fine-tuning failed for {failures}")
    here, unexplained = processes.cpu_name(), []
    for e in chosen:
        committed, again = _read(e), _read(e, directory)
        same = committed is not None and same_result(committed, again)
        if not same and (committed or {}).get("cpu") == here:
            unexplained.append(e.name)
        print(f"{'same' if same else 'DIFFERS'} {e.name}" + ("" if same or committed is None or committed['cpu'] == here
              else f" (committed computed on {committed['cpu']}, here {here}: bits are not expected to match)"))
    return not unexplained
