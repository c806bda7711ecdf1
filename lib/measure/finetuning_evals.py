"""Section 11's readouts of a fine-tuned model: its replies, whether it stops, and what preference tuning moved.

    replies(model, prompts, 12)               # greedy continuations, 12 characters each
    chat_scores(model, pairs)                 # {"accuracy", "stopped"}: right answer line; blank line right after
    sampled_replies(model, prompt, 100, seed=0)   # replies drawn at temperature 1, up to the blank line
    evals.line_quality(first_lines(said))     # the shares of reply lines the world calls well-formed, true
    pair_readout(model, reference, pairs)     # log-probabilities, margin, implicit-reward accuracy of held-out pairs
    kl_estimate(model, reference, prompt, said)  # mean log π/π_ref over the policy's own samples
    accumulated_gradients(model, batches, by_tokens=True)   # gradients over micro-batches, as one batch gives
"""

import math

import torch

from lib.data import chat, world
from lib.measure import evals
from lib.measure.evals import CHARS
from lib.nn import inference
from lib.objectives.preference import answer_log_probs, margins, pair_batch, split_pair_scores
from lib.objectives.sft import IGNORE, masked_sft_loss, sft_batch


@torch.no_grad()
def replies(model, prompts: list, max_new: int, generator=None) -> list:
    """Each prompt's next max_new characters (greedy; sampled at temperature 1 with a generator), prompts of any
    lengths in one left-padded batch, at most as many as fit the context after the longest prompt.  Nothing stops
    early: the text after the reply is kept, to see whether the model stopped."""
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
    where the position has a label) and on its token embedding (nonzero wherever a labelled position reads it
    through attention).  Computed with torch.autograd.grad: no parameter's .grad is touched."""
    seen = {}

    def keep(module, args, out):                # the token embeddings as a leaf of their own, frozen or not
        seen["embedded"] = out.detach().requires_grad_(True)
        return seen["embedded"]

    handle = model.wte.register_forward_hook(keep)
    try:
        with torch.enable_grad():
            logits = model(inputs)
            on_logits, on_inputs = torch.autograd.grad(masked_sft_loss(logits, labels), [logits, seen["embedded"]])
    finally:
        handle.remove()
    return {"logits": on_logits[0].norm(dim=-1), "inputs": on_inputs[0].norm(dim=-1)}


@torch.no_grad()
def answer_bits(model, pairs: list) -> float:
    """Bits per character the model pays on the answers of (prompt, answer) pairs, the reply's end included and the
    prompt not scored: on training pairs and on test pairs, Shi et al.'s readout of overfitting."""
    inputs, labels = sft_batch(pairs)
    return float(masked_sft_loss(model(inputs), labels)) / math.log(2)


def accumulated_gradients(model, batches: list, by_tokens: bool) -> list:
    """Every parameter's gradient after accumulating `masked_sft_loss` over micro-batches of (inputs, labels): with
    by_tokens each micro-batch's summed loss over the answer characters of all of them (what one big batch
    computes), else each micro-batch's mean averaged over the micro-batches.  The model's .grad is left empty."""
    total = sum(int((labels != IGNORE).sum()) for _, labels in batches)
    model.zero_grad()
    with torch.enable_grad():
        for inputs, labels in batches:
            logits = model(inputs)
            loss = (masked_sft_loss(logits, labels, "sum") / total if by_tokens
                    else masked_sft_loss(logits, labels) / len(batches))
            loss.backward()
    found = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return found


def visit_parts(said: list, pairs: list) -> dict:
    """Which parts of `visit` replies (greedy first lines `said` to the (prompt, answer) `pairs`) are right, as
    shares: a bus story at all; its visitor is the prompt's first name; its destination is the home of the prompt's
    second person ("to city"); its host is the prompt's second name; its two cities are the homes of the two people
    it names, whoever they are ("cities fit"); all of it (the answer)."""
    home = world.build_world().home
    counts = {"story": 0, "visitor": 0, "to city": 0, "host": 0, "cities fit": 0, "all": 0}
    for line, (prompt, answer) in zip(said, pairs):
        visitor, host = prompt.split("user: ")[1].split("\n")[0].split(" visits ")
        kind, match = world.classify(line)
        if kind != "bus":
            continue
        wrote = match.groups()                                  # (visitor, from, to, host)
        counts["story"] += 1
        counts["visitor"] += wrote[0] == visitor
        counts["to city"] += wrote[2] == home[host]
        counts["host"] += wrote[3] == host
        counts["cities fit"] += (home[wrote[0]], home[wrote[3]]) == (wrote[1], wrote[2])
        counts["all"] += line == answer.split("\n")[0]
    return {part: n / len(pairs) for part, n in counts.items()}


@torch.no_grad()
def rating_split(model, reference, pairs: list) -> dict:
    """Where preference tuning moved the answers of (prompt, chosen, rejected) review pairs, each answer split at its
    rating word: the mean change (model − reference) of the summed log-probability of the text before the rating
    ("body": the same characters in both answers of a pair, so their changes are equal), and of the rating and what
    follows, chosen and rejected.  "body gap" is the largest difference between a pair's two body changes."""
    inputs, labels = pair_batch(pairs)
    cut = torch.tensor([len(p) - 1 + a.index("rating: ") + len("rating: ") for p, a, _ in pairs] * 2)[:, None]
    before = torch.arange(labels.shape[1])[None, :] < cut
    moved = {}
    for part, keep in (("body", before), ("rating", ~before)):
        part_labels = labels.masked_fill(~keep, IGNORE)
        change = answer_log_probs(model, inputs, part_labels) - answer_log_probs(reference, inputs, part_labels)
        moved[part] = split_pair_scores(change)
    return {"body": moved["body"][0].mean().item(), "chosen rating": moved["rating"][0].mean().item(),
            "rejected rating": moved["rating"][1].mean().item(),
            "body gap": (moved["body"][0] - moved["body"][1]).abs().max().item()}


@torch.no_grad()
def weight_change(model, start) -> float:
    """How far fine-tuning moved the blocks' matrices: the square root of the sum, over every 2-d weight of the blocks,
    of |W - W_start|² (a LoRA run is read merged, as `recipes.load` gives it)."""
    now, then = dict(model.blocks.named_parameters()), dict(start.blocks.named_parameters())
    return math.sqrt(sum(float(((now[k] - then[k]) ** 2).sum()) for k in now if k.endswith("weight") and now[k].dim() == 2))


def rating_given_text(model, pairs: list) -> float:
    """The share of (prompt, chosen, rejected) pairs whose chosen review's rating is the most likely of the three
    after its own text (the same review with good, ok, bad: only the rating differs): what the model knows of the
    rule when the text is given, without sampling."""
    options = [(p, c.replace(f"rating: {world.rating_of(c)}.", f"rating: {r}.")) for p, c, _ in pairs for r in world.RATINGS]
    scores = answer_log_probs(model, *sft_batch(options)).view(len(pairs), len(world.RATINGS))
    best = [world.RATINGS[i] for i in scores.argmax(dim=1).tolist()]
    return sum(b == world.rating_of(c) for b, (_, c, _) in zip(best, pairs)) / len(pairs)


def review_outcomes(lines: list) -> dict:
    """Shares of sampled reply lines that are true reviews; well-formed but false, by a wrong rating or (the rating
    right for the two adjectives) a wrong connective; malformed at or after the rating word (the text up to
    `rating: ` fits the templates); or malformed before it.  A line that is not a review at all counts as malformed."""
    counts = {"true": 0, "wrong rating": 0, "wrong connective": 0, "bad rating word": 0, "malformed before": 0}
    for line in lines:
        kind, match = world.classify(line)
        if kind == "review":                    # well-formed: true, or false by its rating or its connective
            food, food_adjective, _, service, service_adjective, rating = match.groups()
            truth = world.make_review(food, food_adjective, service, service_adjective)
            counts["true" if truth == line else "wrong rating" if world.rating_of(truth) != rating
                   else "wrong connective"] += 1
            continue
        exit_at, rating_at = world.first_exit(line), line.find("rating: ")
        late = (line.startswith("review: ") and rating_at >= 0 and exit_at is not None
                and exit_at >= rating_at + len("rating: "))
        counts["bad rating word" if late else "malformed before"] += 1
    return {kind: n / len(lines) for kind, n in counts.items()}
