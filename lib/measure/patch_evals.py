"""Section 08's measurements: held-out losses of the patched decoders, filling in, self-drafting, diffusion writing.

    windows = held_out_windows(33)              # fixed windows of the validation reviews
    next_token_nats(model, windows)             # a causal model's left-to-right loss, nats per token
    head_nats(model, windows)                   # a multi-token model's loss per head (t+1, t+2, ...)
    masked_nats(model, windows[:, :32])         # a bidirectional model's loss on 15 % <mask> (BERT's question)
"""

from collections import Counter

import torch
import torch.nn.functional as F

from lib.data import world
from lib.data.tokenizers import MASK, NEWLINE_WORD, TOKENIZER
from lib.measure import capabilities, protocols
from lib.nn.diffusion import diffusion_generate
from lib.measure.batch_stats import training_batches
from lib.nn.masks import for_kind
from lib.nn.multi_token import MultiTokenTransformer
from lib.objectives import batches
from lib.objectives.patches import fim_arrange, head_losses

EVAL_WINDOWS = 64


def held_out_windows(length: int, count: int = EVAL_WINDOWS, seed: int = 0) -> torch.Tensor:
    """(count, length) windows of the validation reviews at fixed random offsets."""
    return batches.random_windows(batches.review_stream("val"), length, count, torch.Generator().manual_seed(seed))


@torch.no_grad()
def next_token_nats(model, windows, kind: str = "causal") -> float:
    """Mean cross-entropy (nats) of each next token of the windows, read left to right (`kind` "bidirectional": every
    position also sees the tokens after it, one of them its own target: a causal model read with the wrong mask)."""
    T = windows.shape[1] - 1
    logits = model(windows[:, :-1], for_kind(kind, T))
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1)).item()


@torch.no_grad()
def head_nats(model, windows) -> list:
    """A `MultiTokenTransformer`'s mean cross-entropy per head: [t+1, t+2, ..., t+n] (windows of T + n tokens)."""
    return [loss.item() for loss in head_losses(model, windows)]


@torch.no_grad()
def masked_nats(model, windows, rate: float = 0.15, seed: int = 0, kind: str = "bidirectional") -> float:
    """Mean cross-entropy (nats) of the token at each of a fixed `rate` of positions replaced by <mask>, read
    bidirectionally (or `kind` "causal": the same question put to a causal model through its own mask)."""
    chosen = torch.rand(windows.shape, generator=torch.Generator().manual_seed(seed)) < rate
    logits = model(torch.where(chosen, MASK, windows), for_kind(kind, windows.shape[1]))
    return F.cross_entropy(logits[chosen], windows[chosen]).item()


READINGS = ("left", "psm", "spm", "masked")   # how the food adjective is asked: see `fill_logits`
CONTEXTS = ("full", "rating")                  # what stays visible right of it


def hidden_span(ids: list, context: str) -> tuple:
    """(slot, resume) of a review's `line_ids`: the food adjective's position and the first position after it that
    stays visible.  "full": everything after the adjective; "rating": only "rating: <rating>." (the connective,
    the service clause and its period are hidden too: the reversed question, the rating before the adjective)."""
    if context not in CONTEXTS:
        raise ValueError(f"unknown context {context!r}; choose from {CONTEXTS}")
    slots = protocols.review_slots(ids)
    return slots["food_adjective"], slots["food_adjective"] + 1 if context == "full" else slots["rating"] - 2


def fim_question(ids: list, slot: int, resume: int, mode: str) -> list:
    """The prompt that asks a FIM-trained decoder for ids[slot]: the text before it and from `resume` on, in `mode`
    (PSM: <PRE> before <SUF> after <MID>; SPM: <PRE> <SUF> after <MID> before); its next token is the answer."""
    kept = list(ids[:slot]) + list(ids[resume:])          # the hidden part is the middle: everything up to it
    return fim_arrange(kept, slot, slot, mode)[:len(kept) + 3]


def fill_logits(model, reading: str, reviews: list, context: str = "full") -> tuple:
    """(logits (N, V) at each review's food-adjective slot, asked one way, and the polarity (True = positive) the
    visible rest of the review demands: the adjective's own, which for context "rating" (good and bad reviews only)
    is the rating's).  Readings: "left" (a causal model, the text before the slot only), "psm" / "spm" (a FIM prompt,
    `fim_question`), "masked" (a bidirectional model, <mask> at the slot and at every hidden position)."""
    if reading not in READINGS:
        raise ValueError(f"unknown reading {reading!r}; choose from {READINGS}")
    if context == "rating" and any(protocols.true_rating(r) == "ok" for r in reviews):
        raise ValueError("the rating alone settles the adjective's polarity only for good and bad reviews")
    sequences = [protocols.line_ids(r) for r in reviews]
    spans = [hidden_span(ids, context) for ids in sequences]
    wanted = [capabilities.ADJECTIVE_IDS[ids[slot]] for ids, (slot, _) in zip(sequences, spans)]
    if reading == "left":
        return _distinct_slot_logits(model, "causal", sequences, [slot for slot, _ in spans]), wanted
    if reading == "masked":
        queries = [ids[:slot] + [MASK] * (resume - slot) + ids[resume:] for ids, (slot, resume) in zip(sequences, spans)]
        return _distinct_slot_logits(model, "bidirectional", queries, [slot for slot, _ in spans]), wanted
    prompts = [fim_question(ids, slot, resume, reading) for ids, (slot, resume) in zip(sequences, spans)]
    # the slot protocol reads the logits that predict position `slot` of a sequence: one dummy token after the prompt
    return _distinct_slot_logits(model, "causal", [p + [p[-1]] for p in prompts], [len(p) for p in prompts]), wanted


def _distinct_slot_logits(model, kind: str, sequences: list, slots: list) -> torch.Tensor:
    """`protocols.slot_logits`, each distinct question asked once (with the rest hidden, hundreds of reviews are a
    few dozen questions) and its row repeated."""
    index = {}
    rows = [index.setdefault((tuple(ids), slot), len(index)) for ids, slot in zip(sequences, slots)]
    distinct = list(index)
    return protocols.slot_logits(model, kind, [list(ids) for ids, _ in distinct], [slot for _, slot in distinct])[rows]


def fill_scores(model, reading: str, reviews: list, context: str = "full") -> dict:
    """The food adjective asked one way (`fill_logits`), read from one forward pass: "argmax", the share of reviews
    whose likeliest food adjective (among the 16) has the polarity the visible rest demands; "mass", of the probability
    on the 16, the share on that polarity, averaged over the reviews (0.5: the visible rest moves nothing; unlike the
    argmax it sees a preference too small to win); "P(adj.)", the probability on the 16 food adjectives at all, mean
    over the reviews (near 0: the prompt is not read as asking for one); "top token" and "top share", the likeliest
    next token over the whole vocabulary that the most reviews share, and that share.  And from a second pass,
    the intervention: "shift", how far the share on the positive adjectives moves when the visible rest is rewritten
    into the true review whose rest demands the other polarity (context "full": the connective and the rating change,
    the service clause stays; "rating": the rating flips between good and bad), signed so that a move toward what
    each rest demands counts positive: 1 follows the rest completely, 0 ignores it.  (A ranking AUC of the margin is
    no use here: with the rest hidden the reviews differ only in the food and the rating, so a shift of 1e-3 ranks
    them perfectly.)"""
    candidates = list(capabilities.ADJECTIVE_IDS)
    positive = torch.tensor([capabilities.ADJECTIVE_IDS[c] for c in candidates])
    logits, wanted = fill_logits(model, reading, reviews, context)
    flipped_logits, flipped_wanted = fill_logits(model, reading, _flipped(reviews, context), context)
    p = logits[:, candidates].softmax(-1)                                          # (N, 16)
    on_positive = p[:, positive].sum(-1)
    toward = torch.tensor(flipped_wanted, dtype=p.dtype) * 2 - 1                  # the flipped rest's demand, +1 positive
    top_token, top_count = Counter(logits.argmax(-1).tolist()).most_common(1)[0]
    wanted = torch.tensor(wanted)
    return {"argmax": (positive[p.argmax(-1)] == wanted).double().mean().item(),
            "mass": torch.where(wanted, on_positive, 1 - on_positive).mean().item(),
            # the shift rounded to 1e-9 (+ 0.0: no -0.0): where the visible rest is not read at all (a causal model asked
            # from the left) it is float64 noise of either sign, and a CPU's kernels would choose the sign printed
            "shift": round(((flipped_logits[:, candidates].softmax(-1)[:, positive].sum(-1) - on_positive)
                            * toward).mean().item(), 9) + 0.0,
            "P(adj.)": logits.softmax(-1)[:, candidates].sum(-1).mean().item(),
            "top token": top_token, "top share": top_count / len(logits)}


def _flipped(reviews: list, context: str) -> list:
    """Each review rewritten into the true review whose visible rest (`hidden_span`) demands the other polarity of
    the food adjective: a food adjective of the other polarity (hidden anyway), and for context "rating" a service
    adjective of the other polarity too, so that the rating flips between good and bad."""
    out = []
    for review in reviews:
        food, adjective, _, noun, service, _ = world.classify(review)[1].groups()
        other = next(a for a, positive in world.FOOD_ADJECTIVES.items() if positive != world.FOOD_ADJECTIVES[adjective])
        if context == "rating":
            service = next(a for a, positive in world.SERVICE_ADJECTIVES.items()
                           if positive != world.SERVICE_ADJECTIVES[service])
        out.append(world.make_review(food, other, noun, service))
    return out


@torch.no_grad()
def self_draft(model, prompts, new: int = 24, generator=None) -> dict:
    """A `MultiTokenTransformer` drafting for itself (Stern et al. 2018's blockwise parallel decoding): the model
    continues each prompt (B, P) for `new` tokens with head 1, greedily, or drawn at temperature 1 when a `generator`
    is given; at each position head k's argmax is a draft of the token k places ahead.  Returns each head's
    acceptance (the share of drafts equal to the token written there) and the tokens per forward pass when every
    pass keeps its next token and the drafts after it up to the first wrong one."""
    if not isinstance(model, MultiTokenTransformer):
        raise TypeError(f"self_draft needs a MultiTokenTransformer (its extra heads draft), got {type(model).__name__}")
    ids = prompts
    for _ in range(new):
        last = model(ids, for_kind("causal", ids.shape[1]))[:, -1]
        token = (last.argmax(-1, keepdim=True) if generator is None else
                 torch.multinomial(last.softmax(-1), 1, generator=generator))
        ids = torch.cat([ids, token], 1)
    n, P, L = model.config.heads, prompts.shape[1], ids.shape[1]
    drafts = torch.stack([h.argmax(-1) for h in model.head_logits(ids, for_kind("causal", L))], 1)    # (B, n, L)
    right = torch.zeros(ids.shape[0], n, L, dtype=torch.bool)      # right[:, k-1, t]: draft from t for t + k is right
    for k in range(1, n + 1):
        right[:, k - 1, : L - k] = drafts[:, k - 1, : L - k] == ids[:, k:]
    acceptance = [right[:, k - 1, P - 1: L - k].float().mean().item() for k in range(1, n + 1)]
    passes = 0
    for row in right:
        t = P - 1
        while t < L - 1:                       # one pass at t writes t+1 and every right draft after it in a row
            step = 1
            while step < n and t + step < L - 1 and row[step, t]:
                step += 1
            t, passes = t + step, passes + 1
    return {"acceptance": acceptance, "tokens_per_pass": ids.shape[0] * new / passes}


def diffusion_lines(model, n: int, steps: int, seed: int = 0, trace: list = None) -> list:
    """n lines written by `diffusion_generate` after a newline (as `capabilities.generate_lines` starts), in
    `steps` passes over the model's context: the text up to the first newline.  `trace`: as `diffusion_generate`'s."""
    ids = diffusion_generate(model, model.config.context, steps, torch.Generator().manual_seed(seed), n,
                             prefix=[NEWLINE_WORD], trace=trace)
    return [TOKENIZER.decode(row[1:]).split("\n")[0] for row in ids.tolist()]


def fill_order(lines: list, trace: list) -> dict:
    """In which pass the diffusion sampler fixed each slot of the well-formed reviews among `lines`, written by
    `diffusion_lines` with this `trace`: the mean pass (1, 2, ...) of the four slots of `protocols.review_slots` and of
    the other word tokens, how many reviews, and the share of them whose rating was fixed before both adjectives."""
    passes = torch.stack([t != MASK for t in trace]).int().argmax(0) + 1          # (n, length): first pass not <mask>
    rows = [(passes[k], protocols.review_slots(ids), len(ids) - 1)
            for k, line in enumerate(lines) if world.classify(line)[0] == "review" for ids in [protocols.line_ids(line)]]
    if not rows:
        return {"reviews": 0}
    out = {"reviews": len(rows)}
    for name in ("food_adjective", "connective", "service_adjective", "rating"):
        out[name] = sum(float(p[slots[name]]) for p, slots, _ in rows) / len(rows)
    out["other words"] = sum(float(p[[i for i in range(1, end) if i not in slots.values()]].double().mean())
                             for p, slots, end in rows) / len(rows)
    out["rating first"] = sum(bool(p[slots["rating"]] < min(p[slots["food_adjective"]], p[slots["service_adjective"]]))
                              for p, slots, _ in rows) / len(rows)
    return out


SLOT_KINDS = ("food_adjective", "connective", "service_adjective", "rating", "template", "all")


@torch.no_grad()
def nats_by_slot(model, reviews: list) -> dict:
    """A causal model's mean next-token loss (nats) on whole reviews (`protocols.line_ids`), by what the target is:
    the four slots of `protocols.review_slots`, every other token ("template") and every token ("all")."""
    sequences = [protocols.line_ids(r) for r in reviews]
    if len({len(s) for s in sequences}) != 1:
        raise ValueError("reviews of one length only (every review of the mini internet has one)")
    ids = torch.tensor(sequences)
    logits = model(ids[:, :-1], for_kind("causal", ids.shape[1] - 1))
    nats = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")     # (N, T): target at t + 1
    kind = ["template"] * (ids.shape[1] - 1)
    for name, position in protocols.review_slots(sequences[0]).items():
        kind[position - 1] = name
    return {k: nats[:, [i for i, x in enumerate(kind) if x == k or k == "all"]].mean().item() for k in SLOT_KINDS}


def review_errors(lines: list) -> dict:
    """Of the well-formed reviews among `lines`: how many, and the share whose connective, and whose rating, is the one
    `world.make_review` writes for their four words (a false review has one of them wrong, or both)."""
    parsed = [m.groups() for kind, m in map(world.classify, lines) if kind == "review"]
    truth = [world.make_review(food, adjective, noun, service) for food, adjective, _, noun, service, _ in parsed]
    right = [world.classify(t)[1].groups() for t in truth]
    if not parsed:          # no review to judge: the shares do not exist
        return {"reviews": 0, "connective right": None, "rating right": None}
    return {"reviews": len(parsed), "connective right": sum(p[2] == r[2] for p, r in zip(parsed, right)) / len(parsed),
            "rating right": sum(p[5] == r[5] for p, r in zip(parsed, right)) / len(parsed)}


def reversal_by_scoring(model, reviews: list) -> dict:
    """The reversed question put to a causal model as scoring: each good or bad review with its food adjective,
    connective and service adjective replaced by every combination (16 x 2 x 12 lines; the food, the service noun
    and the rating kept), the lines' log-likelihoods summed over the connective and service adjective.  "argmax" and
    "mass" as in `fill_scores`, over the 16 food adjectives' summed likelihoods."""
    if any(protocols.true_rating(r) == "ok" for r in reviews):
        raise ValueError("the rating alone settles the adjective's polarity only for good and bad reviews")
    adjectives = list(capabilities.ADJECTIVE_IDS)
    filler = [(c, s) for c in ("and", "but") for s in world.SERVICE_ADJECTIVES]
    right, mass = [], []
    for review in reviews:
        ids = protocols.line_ids(review)
        slots = protocols.review_slots(ids)
        lines = []
        for a in adjectives:
            for connective, service in filler:
                line = list(ids)
                line[slots["food_adjective"]], line[slots["connective"]] = a, TOKENIZER[connective]
                line[slots["service_adjective"]] = TOKENIZER[service]
                lines.append(line)
        scores = capabilities.line_log_likelihoods(model, "causal", lines).view(len(adjectives), len(filler)).logsumexp(-1)
        p = scores.softmax(-1)
        positive = protocols.true_rating(review) == "good"
        on = sum(float(p[k]) for k, a in enumerate(adjectives) if capabilities.ADJECTIVE_IDS[a] == positive)
        right.append(capabilities.ADJECTIVE_IDS[adjectives[int(p.argmax())]] == positive)
        mass.append(on)
    return {"argmax": sum(right) / len(right), "mass": sum(mass) / len(mass)}


@torch.no_grad()
def masked_slot_nats(model, reviews: list) -> dict:
    """A bidirectional model's loss (nats) on one slot of whole reviews at a time, <mask> there and everything else
    visible: the four slots of `protocols.review_slots` (the connective and the rating follow from the rest)."""
    sequences = [protocols.line_ids(r) for r in reviews]
    out = {}
    for name in ("food_adjective", "connective", "service_adjective", "rating"):
        slots = [protocols.review_slots(ids)[name] for ids in sequences]
        logp = protocols.slot_logits(model, "bidirectional", sequences, slots).log_softmax(-1)
        out[name] = -logp[torch.arange(len(sequences)), torch.tensor([ids[k] for ids, k in zip(sequences, slots)])].mean().item()
    return out


def gradient_norms(model, make_batch, loss_fn, window: int, count: int = 30, seed: int = 0, batch_size: int = 32) -> list:
    """The gradient norm (all parameters, before any clipping) of `loss_fn(model, batch)` on `count` batches that
    `make_batch(windows, generator)` builds from training windows (`batch_stats.training_batches`): what the training
    loop's clip (`grad_clip`) would see.  Gradients come from `torch.autograd.grad`: no parameter's .grad is touched."""
    parameters = list(model.parameters())
    norms = []
    with torch.enable_grad():
        for batch in training_batches(make_batch, batches.review_stream("train"), window, batch_size, count, seed):
            loss = loss_fn(model, batch)
            grads = torch.autograd.grad(loss, parameters, allow_unused=True)
            norms.append(torch.sqrt(sum((x ** 2).sum() for x in grads if x is not None)).item())
    return norms
