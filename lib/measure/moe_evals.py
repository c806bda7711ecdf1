"""Measuring section 07's mixtures of experts: where tokens go, what capacity drops, what each model knows.

    copy = with_capacity(model, 2.0)                 # the same weights, another capacity factor
    shares = dropped_shares(model, windows, [0.5, 1.0, 1.25, 2.0])
    counts = expert_counts_by_class(model, lines, layer=0)  # {character class: first choices per expert}
    z = router_z_loss(model, windows)                # ST-MoE's router z-loss, mean over the layers

Capacity is a property of a batch: how many tokens an expert may take
depends on how many tokens were sent together, and which.  In a batch of
lines padded to one length the padding (all newlines) crowds one expert and
takes the places of real tokens that queue after it.  So every validation
loss, answer and bits/char number of the section is computed with no capacity
limit (`with_capacity(model, None)`): every token reaches its experts, as at
inference in most MoE systems.  Only training batches (windows of text, no
padding) are cut at the training capacity factor.
"""

from dataclasses import replace

import torch

from lib.measure.answers import fact_completion
from lib.nn.moe import MoEGPT, expert_capacity, queue_positions, with_capacity
from lib.data.tokenizers import CharTokenizer

CHARS = CharTokenizer()
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
def dropped_shares(model, windows, factors) -> dict:
    """{capacity factor: share of assignments over capacity} when these windows go through as one batch.
    The routing itself does not depend on the factor; only who is turned away does."""
    model(windows)
    shares = {}
    for factor in factors:
        layers = []
        for layer in model.moe_layers():
            chosen = layer.last["chosen"]
            capacity = expert_capacity(len(chosen), replace(layer.config, capacity_factor=factor))
            layers.append(float((queue_positions(chosen) >= capacity).float().mean()))
        shares[factor] = sum(layers) / len(layers)
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


def fact_accuracy(model) -> float:
    """`answers.fact_completion`'s accuracy with no capacity limit."""
    return fact_completion(with_capacity(model, None))["accuracy"]


def parameter_counts(model) -> dict:
    """{"total", "active"} parameters; a dense model uses all of its parameters for every token."""
    if isinstance(model, MoEGPT):
        return model.parameter_counts()
    total = sum(p.numel() for p in model.parameters())
    return {"total": total, "active": total}
