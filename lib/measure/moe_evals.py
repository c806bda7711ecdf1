"""Measuring section 07's mixtures of experts: where tokens go, what capacity drops, what each model knows.

    copy = with_capacity(model, 2.0)                 # the same weights, another capacity factor
    shares = dropped_shares(model, windows, [0.5, 1.0, 1.25, 2.0])
    counts = expert_counts_by_class(model, lines, layer=0)  # {character class: first choices per expert}
    z = router_z_loss(model, windows)                # ST-MoE's router z-loss, mean over the layers
    busiest_expert(log, layer=1)                     # (expert, share of the tokens) at the end of training
    cost = bits_per_char(without_expert(model, 1, e)) - bits_per_char(model)   # what expert e is worth
    dropped_by_expert(model, windows, 1.0)           # whose assignments a capacity factor drops, per layer
    expert_before_answer(model, names, layer=1)      # {name: expert at the position that predicts its city}
    milliseconds = step_milliseconds(untrained_models, windows)   # one training step of each, on this machine

Capacity is a property of a batch: how many tokens an expert may take
depends on how many tokens were sent together, and which.  In a batch of
lines padded to one length the padding (all newlines) crowds one expert and
takes the places of real tokens that queue after it.  So every validation
loss, answer and bits/char number of the section is computed with no capacity
limit (`with_capacity(model, None)`): every token reaches its experts, as at
inference in most MoE systems.  Only training batches (windows of text, no
padding) are cut at the training capacity factor.
"""

import math
import time

import torch

from lib.measure.answers import fact_completion
from lib.nn.moe import MoEGPT, expert_capacity, with_capacity
from lib.objectives.batches import next_token_loss
from lib.train.loop import OPTIMIZATION, make_optimizer, optimizer_step
from lib.data.tokenizers import CHARS

CLASSES = {"letter": str.isalpha, "digit": str.isdigit, "space": lambda c: c == " ", "newline": lambda c: c == "\n",
           "punctuation": lambda c: c in ".?:+=,"}


def char_class(ch: str) -> str:
    """The class of a character of the alphabet.

    >>> [char_class(c) for c in "a7 .\\n"]
    ['letter', 'digit', 'space', 'punctuation', 'newline']
    """
    return next(name for name, test in CLASSES.items() if test(ch))


@torch.no_grad()
def routing(model, ids) -> list:
    """Each routed layer's first-choice expert of every position of ids (B, T): a list of (B, T) tensors."""
    model(ids)
    return [layer.last["chosen"][:, 0].view(ids.shape) for layer in model.moe_layers()]


@torch.no_grad()
def mean_first_gate(model, ids) -> float:
    """The gate of each position's first-choice expert (for top-1, the router's probability itself: what the
    expert's output is multiplied by), mean over the positions of ids (B, T) and the routed layers."""
    model(ids)
    layers = model.moe_layers()
    return sum(float(layer.last["gates"].max(-1).values.mean()) for layer in layers) / len(layers)


@torch.no_grad()
def dropped_shares(model, windows, factors) -> dict:
    """{capacity factor: share of the assignments turned away, mean over the routed layers} when these windows go
    through as one batch at that factor (a forward pass each: what a layer drops changes the next layer's input)."""
    shares = {}
    for factor in factors:
        layers = dropped_by_expert(model, windows, factor)
        shares[factor] = sum(sum(row) / (windows.numel() * model.config.top_k) for row in layers) / len(layers)
    return shares


@torch.no_grad()
def router_z_loss(model, ids) -> float:
    """ST-MoE's router z-loss (`MoELayer.last["z_loss"]`: the mean squared log-sum-exp of the router logits), mean
    over the routed layers, on ids (B, T) read as one batch with no capacity limit."""
    model = with_capacity(model, None)
    model(ids)
    return sum(layer.last["z_loss"].item() for layer in model.moe_layers()) / len(model.moe_layers())


def expert_counts_by_class(model, lines: list, layer: int = 0) -> dict:
    """{character class: [how many characters of that class have expert e as first choice, for each e]}, each
    line read on its own after a newline (that newline included)."""
    counts = {name: [0] * model.config.n_experts for name in CLASSES}
    by_length = {}
    for line in lines:                                    # lines of one length go together: no padding to route
        by_length.setdefault(len(line), []).append("\n" + line)
    unlimited = with_capacity(model, None)                # a token's route then does not depend on its batch
    for texts in by_length.values():
        chosen = routing(unlimited, torch.tensor([CHARS.encode(text) for text in texts]))[layer]
        for text, row in zip(texts, chosen.tolist()):
            for ch, expert in zip(text, row):             # the token at position i is the character text[i]
                counts[char_class(ch)][expert] += 1
    return {name: row for name, row in counts.items() if sum(row)}


def top_expert_share(model, lines: list, char_class: str, layer: int = 0) -> float:
    """The share of a class's characters (first choices, `expert_counts_by_class`) that the expert taking the
    most of them gets: 1 / E when routing ignores the class, 1 when one expert takes all of it."""
    counts = expert_counts_by_class(model, lines, layer)[char_class]
    return max(counts) / sum(counts)


def expert_before_answer(model, names, layer: int) -> dict:
    """{name: the first-choice expert of routed layer `layer` at the position that predicts the first letter of
    the city}, the space of `NAME lives in ` (a facts-only world's fact line), read with no capacity limit."""
    unlimited, by_length, found = with_capacity(model, None), {}, {}
    for name in names:
        by_length.setdefault(len(name), []).append(name)
    for group in by_length.values():
        chosen = routing(unlimited, torch.tensor([CHARS.encode(f"\n{name} lives in ") for name in group]))[layer]
        found |= dict(zip(group, chosen[:, -1].tolist()))
    return {name: found[name] for name in names}


def fact_accuracy(model) -> float:
    """`answers.fact_completion`'s accuracy with no capacity limit."""
    return fact_completion(with_capacity(model, None))["accuracy"]


def parameter_counts(model) -> dict:
    """{"total", "active"} parameters; a dense model uses all of its parameters for every token."""
    if isinstance(model, MoEGPT):
        return model.parameter_counts()
    total = sum(p.numel() for p in model.parameters())
    return {"total": total, "active": total}


def busiest_expert(log: list, layer: int) -> tuple:
    """(expert, its share of the assignments) of the most loaded expert of a routed layer over the last
    logging interval of a training log (`trainers.char_lm` logs each layer's load)."""
    load = log[-1]["load"][layer]
    expert = max(range(len(load)), key=load.__getitem__)
    return expert, load[expert]


def without_expert(model, layer: int, expert: int):
    """A copy with no capacity limit in which routed expert `expert` of layer `layer` outputs zero: the router
    still sends it its tokens, which then get nothing from the routed experts in that layer (with top-1)."""
    copy = with_capacity(model, None)
    down = copy.moe_layers()[layer].experts[expert].fc2
    with torch.no_grad():
        down.weight.zero_()
        down.bias.zero_()
    return copy


@torch.no_grad()
def dropped_by_expert(model, windows, factor) -> list:
    """For each routed layer, [assignments to expert e turned away, for each e] when windows (B, T) go through as
    one batch at this capacity factor."""
    capped = with_capacity(model, factor)
    capped(windows)
    return [torch.bincount(layer.last["chosen"][~layer.last["kept"]], minlength=layer.config.n_experts).tolist()
            for layer in capped.moe_layers()]


@torch.no_grad()
def capacity_state(model, windows, factor) -> dict:
    """What the first routed layer does with windows (B, T) as one batch at a capacity factor: "sent" (assignments
    per expert), "capacity" (per expert), and the bits per character of the batch at that factor and with no limit
    ("bits", "bits_unlimited")."""
    capped = with_capacity(model, factor)
    bits = next_token_loss(capped, windows).item() / math.log(2)
    layer = capped.moe_layers()[0]
    return {"sent": torch.bincount(layer.last["chosen"].reshape(-1), minlength=layer.config.n_experts).tolist(),
            "capacity": expert_capacity(len(layer.last["chosen"]), layer.config), "bits": bits,
            "bits_unlimited": next_token_loss(with_capacity(model, None), windows).item() / math.log(2)}


def step_milliseconds(models: dict, windows, repeats: int = 3) -> dict:
    """{name: milliseconds of one training step (forward, `train.loop.optimizer_step`: backward, clipping, AdamW) on
    windows (B, T + 1), the fastest of `repeats` after one warm-up step}.  Wall-clock time: it depends on the
    machine and its load."""
    config = {**OPTIMIZATION, "steps": repeats + 1}
    out = {}
    for name, model in models.items():
        optimizer = make_optimizer(model, config)
        times = []
        for step in range(repeats + 1):
            start = time.perf_counter()
            optimizer_step(model, optimizer, next_token_loss(model, windows), step, config)
            times.append(time.perf_counter() - start)
        out[name] = min(times[1:]) * 1000
    return out
