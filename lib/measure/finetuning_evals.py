"""Section 11's readouts of a fine-tuned model: its replies, whether it stops, and what preference tuning moved.

    replies(model, prompts, 12)               # greedy continuations, 12 characters each
    chat_scores(model, pairs)                 # {"accuracy", "stopped"}: right answer line; blank line right after
    sampled_replies(model, prompt, 100, seed=0)   # replies drawn at temperature 1, up to the blank line
    true_rate(first_lines(said))              # the share of reply lines the world calls true
    pair_readout(model, reference, pairs)     # log-probabilities, margin, implicit-reward accuracy of held-out pairs
    kl_estimate(model, reference, prompt, said)  # mean log π/π_ref over the policy's own samples
"""

import math

import torch

from lib.data import chat, world
from lib.measure import evals
from lib.measure.evals import CHARS
from lib.nn import inference
from lib.objectives.preference import answer_log_probs, margins, pair_batch, split_pair_scores
from lib.objectives.sft import masked_sft_loss, sft_batch


@torch.no_grad()
def replies(model, prompts: list, max_new: int, generator=None) -> list:
    """Each prompt's next max_new characters (greedy; sampled at temperature 1 with a generator), prompts of any
    lengths in one left-padded batch.  Nothing stops early: the text after the reply is kept, to see whether the
    model stopped."""
    ids, real = inference.left_pad([CHARS.encode(p) for p in prompts])
    max_new = min(max_new, model.config.context - ids.shape[1] + 1)
    new = inference.generate(model, ids, max_new, real=real, generator=generator)
    return [CHARS.decode(row) for row in new.tolist()]


def chat_scores(model, pairs: list) -> dict:
    """Greedy replies to (prompt, answer) pairs: accuracy = the reply's first line is the answer's; stopped = the
    reply's first line is followed by the blank line that ends a reply (whatever the line says)."""
    longest = max(len(a) for _, a in pairs)
    said = replies(model, [p for p, _ in pairs], longest + 2)
    right = [s.split("\n")[0] == a.split("\n")[0] for s, (_, a) in zip(said, pairs)]
    stopped = [s[len(s.split("\n")[0]):].startswith(chat.END) for s in said]
    return {"accuracy": sum(right) / len(pairs), "stopped": sum(stopped) / len(pairs)}


def sampled_replies(model, prompt: str, n: int, seed: int = 0) -> list:
    """n replies to one prompt drawn at temperature 1 (reproducible by seed), as sampled: each up to and with the
    blank line that ends it, or the whole context's worth when it never ends.  `first_lines` gives the lines."""
    generator = torch.Generator().manual_seed(seed)
    said = replies(model, [prompt] * n, model.config.context - len(prompt) + 1, generator=generator)
    return [s[:s.index(chat.END) + len(chat.END)] if chat.END in s else s for s in said]


def first_lines(said: list) -> list:
    return [s.split("\n")[0] for s in said]


def true_rate(lines: list) -> float:
    """The share of lines that `world.check_line` calls true (well-formed and true in the world)."""
    return sum(world.check_line(line)[1] for line in lines) / len(lines)


@torch.no_grad()
def pair_readout(model, reference, pairs: list) -> dict:
    """On (prompt, chosen, rejected) pairs: the mean summed log-probability of the chosen and of the rejected
    answer under the model, the mean margin h against the reference, and the implicit reward's accuracy (the
    share of pairs with h > 0, i.e. the model raised the chosen answer more than the rejected one)."""
    inputs, labels = pair_batch(pairs)
    chosen, rejected = split_pair_scores(answer_log_probs(model, inputs, labels))
    ref_chosen, ref_rejected = split_pair_scores(answer_log_probs(reference, inputs, labels))
    h = margins(chosen, rejected, ref_chosen, ref_rejected)
    return {"chosen": chosen.mean().item(), "rejected": rejected.mean().item(), "margin": h.mean().item(),
            "reward_accuracy": (h > 0).double().mean().item()}


@torch.no_grad()
def kl_estimate(model, reference, prompt: str, said: list) -> float:
    """KL(π ‖ π_ref) in nats per reply, estimated as the mean of log π(y) − log π_ref(y) over replies y sampled from
    π (`sampled_replies`: each as drawn, its end included)."""
    inputs, labels = sft_batch([(prompt, s) for s in said])
    return (answer_log_probs(model, inputs, labels) - answer_log_probs(reference, inputs, labels)).mean().item()


@torch.no_grad()
def bits_by_place(model, lines: list) -> dict:
    """Where in a line a model pays its bits (lines scored one by one, as `evals.bits_per_char` does): the first
    character (after the newline that starts a document), the characters inside, and the closing newline; mean
    bits per character of each, and "all" (= `evals.bits_per_char`)."""
    sums, counts = {"first": 0.0, "inside": 0.0, "end": 0.0}, {"first": 0, "inside": 0, "end": 0}
    for ids, weights in evals.batches_by_length(lines):
        bits = evals.token_losses(model, ids) / math.log(2)            # (N, len(line) + 1): equal lengths here
        parts = {"first": bits[:, :1], "inside": bits[:, 1:-1], "end": bits[:, -1:]}
        for place, values in parts.items():
            sums[place] += float(values.sum())
            counts[place] += values.numel()
    out = {place: sums[place] / counts[place] for place in sums}
    out["all"] = sum(sums.values()) / sum(counts.values())
    return out


def position_gradients(model, inputs, labels) -> dict:
    """The gradient of one `masked_sft_loss` at each position of row 0, as norms: on its logits (nonzero only
    where the position has a label) and on its input embedding (token + position: nonzero wherever a labelled
    position reads it through attention).  The model's own gradients are cleared afterwards."""
    seen = {}

    def keep(module, args, out):
        out.retain_grad()
        seen["embedded"] = out

    handle = model.wte.register_forward_hook(keep)
    try:
        with torch.enable_grad():
            logits = model(inputs)
            logits.retain_grad()
            masked_sft_loss(logits, labels).backward()
    finally:
        handle.remove()
        model.zero_grad(set_to_none=True)
    return {"logits": logits.grad[0].norm(dim=-1), "inputs": seen["embedded"].grad[0].norm(dim=-1)}
