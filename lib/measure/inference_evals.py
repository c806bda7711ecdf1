"""Measuring section 10's inference: slips under teacher forcing and in free writing, decode-step time and
FLOPs, the exact likeliest line, and speculative decoding's statistics.

    stay = stay_probabilities(model, lines)                   # per line: P(next char keeps it well-formed)
    ms = decode_step_milliseconds(model32, 64, cached=True)   # one decode step after 64 positions, this machine
    flops = decode_step_flops(model, length=64)               # the FLOPs of that step, counted
    scores = continuation_log_probs(model, "\\nreview:", candidates)   # log P(candidate + newline | prompt)
    rows = speculative_rows(target, draft, prompt, 90, (1, 2, 4), samples=20)

A "slip" is a character that no well-formed line could have at that point (`world.next_characters`): the
templates and word classes, not the truth.  Under teacher forcing the model reads the true line; writing on its
own it reads what it wrote.  `stay_probabilities` gives the exact probability the model puts on staying inside
the templates at each position it reaches with a well-formed prefix, so the two readings can be compared
without sampling noise at each position.
"""

import random
import time
from collections import Counter

import torch
from torch.utils.flop_counter import FlopCounterMode

from lib.data import world
from lib.measure.evals import CHARS, line_batch, token_losses
from lib.measure.flops import ATTENTION
from lib.nn import inference


@torch.no_grad()
def stay_probabilities(model, lines: list) -> list:
    """For each line (read after a newline, its closing newline included): a tensor of the probability the model
    gives the characters that keep the line well-formed (`world.next_characters`) at each position up to and
    including its first slip (`world.first_exit`); every position for a well-formed line."""
    out = []
    for start in range(0, len(lines), 256):
        chunk = lines[start:start + 256]
        ids, _ = line_batch(chunk)
        probs = model(ids[:, :-1]).softmax(-1)                                    # (N, L - 1, V)
        for row, line in zip(probs, chunk):
            text, stay = line + "\n", []
            for i, char in enumerate(text):
                allowed = world.next_characters(text[:i])
                stay.append(float(row[i, CHARS.encode("".join(sorted(allowed)))].sum()))
                if char not in allowed:                # the first slip (world.first_exit): the prefix leaves here
                    break
            out.append(torch.tensor(stay, dtype=torch.float64))
    return out


def slip_summary(stays: list) -> dict:
    """From `stay_probabilities`: the expected slips per 1,000 characters read, and the mean over lines of the
    probability of no slip at any of its positions (each position's draw made from that line's own prefix)."""
    every = torch.cat(stays)
    return {"characters": len(every), "slips per 1,000": float((1 - every).mean()) * 1000,
            "no slip": float(torch.stack([s.prod() for s in stays]).mean())}


def slips_by_kind(lines: list, stays: list, resamples: int = 200) -> list:
    """Rows {kind, lines, slips per 1,000, s.e.}: the expected slips per 1,000 characters of each kind of line (read
    off its first characters, `world.template_of`, so a line that slipped still has one), and a bootstrap standard
    error over its lines (`resamples` draws, seed 0)."""
    by_kind, rows = {}, []
    for line, stay in zip(lines, stays):
        by_kind.setdefault(world.template_of(line), []).append(stay)
    generator = torch.Generator().manual_seed(0)
    for kind in [k for k in world.KINDS if k in by_kind]:
        slips = torch.tensor([float((1 - s).sum()) for s in by_kind[kind]], dtype=torch.float64)
        counts = torch.tensor([len(s) for s in by_kind[kind]], dtype=torch.float64)
        draws = torch.randint(0, len(slips), (resamples, len(slips)), generator=generator)
        rates = slips[draws].sum(1) / counts[draws].sum(1) * 1000
        rows.append({"kind": kind, "lines": len(slips), "slips per 1,000": float(slips.sum() / counts.sum()) * 1000,
                     "s.e.": float(rates.std())})
    return rows


def slips_after(model, lines: list, edit, part=None, resamples: int = 200) -> dict:
    """Expected slips per 1,000 characters after an edit point, with the true prefix and with an edited one:
    edit(line) -> (edited line, index where the characters compared start).  The same characters are read after
    both prefixes, so only what comes before them differs.  Also the increase (edited - true) with a bootstrap
    standard error over the lines (`resamples` draws, seed 0), the share of the increase that the three lines adding
    the most carry, and with part(line, i) -> a name for character i: {"parts": {name: {"characters", "true prefix",
    "edited prefix"}}}, the same rates part by part."""
    pairs = [(line, *edit(line)) for line in lines]
    true_stays = stay_probabilities(model, [line for line, _, _ in pairs])
    edited_stays = stay_probabilities(model, [edited for _, edited, _ in pairs])
    out = {}
    for name, stays in (("true prefix", true_stays), ("edited prefix", edited_stays)):
        after = torch.cat([s[start:] for s, (_, _, start) in zip(stays, pairs)])
        out[name] = float((1 - after).mean()) * 1000
    out["characters"] = sum(len(line) + 1 - start for line, _, start in pairs)
    added = torch.tensor([float((t[start:] - e[start:]).sum()) for t, e, (_, _, start) in
                          zip(true_stays, edited_stays, pairs)], dtype=torch.float64)       # each line's extra slips
    counts = torch.tensor([len(t) - start for t, (_, _, start) in zip(true_stays, pairs)], dtype=torch.float64)
    draws = torch.randint(0, len(pairs), (resamples, len(pairs)), generator=torch.Generator().manual_seed(0))
    out["increase"] = out["edited prefix"] - out["true prefix"]
    out["increase s.e."] = float((added[draws].sum(1) / counts[draws].sum(1) * 1000).std())
    out["top 3 share"] = float(added.sort(descending=True).values[:3].sum() / added.sum())
    if part is not None:
        parts = {}
        for t, e, (line, _, start) in zip(true_stays, edited_stays, pairs):
            for i in range(start, len(t)):
                row = parts.setdefault(part(line, i), {"characters": 0, "true prefix": 0.0, "edited prefix": 0.0})
                row["characters"] += 1
                row["true prefix"] += float(1 - t[i])
                row["edited prefix"] += float(1 - e[i])
        out["parts"] = {name: {"characters": row["characters"], **{k: row[k] / row["characters"] * 1000 for k in
                                                                   ("true prefix", "edited prefix")}}
                        for name, row in parts.items()}
    return out


def review_part(line: str, i: int) -> str:
    """The part of a review's second half that character i of the line is in (a `slips_after` part): "the <noun>
    was " before the service adjective, the adjective's letters, ". rating: ", or the rating word (with the
    closing period and newline).

    >>> line = "review: the soup was tasty and the host was kind. rating: good."
    >>> [review_part(line, line.index(w)) for w in ("the host", "kind", ". rating", "good")]
    ['the <noun> was', 'service adjective', "'. rating: '", 'rating word']
    """
    rating = line.index(". rating: ")
    adjective = line.rindex(" was ", 0, rating) + len(" was ")
    return ("the <noun> was" if i < adjective else "service adjective" if i < rating
            else "'. rating: '" if i < rating + len(". rating: ") else "rating word")


@torch.no_grad()
def cache_agreement(model, prompt_ids, new_tokens: int) -> tuple:
    """(the greedy tokens decoded with a KV cache equal those decoded by rerunning the model, the largest
    |logit difference| between the cached decode steps and one full pass over the final sequence)."""
    cached = inference.generate(model, prompt_ids, new_tokens)
    rerun = inference.generate(model, prompt_ids, new_tokens, use_cache=False)
    ids, P = torch.cat([prompt_ids, cached], dim=1), prompt_ids.shape[1]
    cache, first = inference.prefill(model, prompt_ids)
    steps = [first] + [model.forward_cached(ids[:, t:t + 1], cache)[:, -1] for t in range(P, P + new_tokens - 1)]
    full = model(ids)[:, P - 1:-1]                                             # (B, new_tokens, V)
    return bool((cached == rerun).all()), float((torch.stack(steps, dim=1) - full).abs().max())


def machine_rates(size: int = 1024, copy_numbers: int = 1 << 25, repeats: int = 5) -> dict:
    """This machine's float32 matrix-product rate (GFLOP/s, one size x size product) and memory bandwidth (GB/s,
    copying copy_numbers float32 numbers: read and written), the best of `repeats`."""
    a = torch.randn(size, size)
    x = torch.randn(copy_numbers)
    y = torch.empty_like(x)
    best_product = best_copy = float("inf")
    for _ in range(repeats):
        begin = time.perf_counter()
        a @ a
        best_product = min(best_product, time.perf_counter() - begin)
        begin = time.perf_counter()
        y.copy_(x)
        best_copy = min(best_copy, time.perf_counter() - begin)
    return {"GFLOP/s": 2 * size ** 3 / best_product / 1e9, "GB/s": 2 * 4 * copy_numbers / best_copy / 1e9}


def decode_step_milliseconds(model, length: int, cached: bool, batch: int = 1, repeats: int = 30) -> float:
    """Milliseconds of the decode step that writes token `length + 1` of `batch` rows: with a KV cache holding the
    first `length` positions (only the new one computed), or rerunning the model on all length + 1 (no cache).
    The median of `repeats` on this machine; pass a float32 copy to time what a float32 model costs."""
    ids = torch.randint(0, model.config.vocab_size, (batch, length + 1), generator=torch.Generator().manual_seed(0))
    times = []
    with torch.no_grad():
        for _ in range(repeats + 1):
            cache = None
            if cached:
                cache, _ = inference.prefill(model, ids[:, :length])
            begin = time.perf_counter()
            inference.next_logits(model, ids, cache)
            times.append(time.perf_counter() - begin)
    return sorted(times[1:])[repeats // 2] * 1000


def decode_step_flops(model, length: int, cached: bool = True) -> int:
    """FLOPs of the decode step after `length` positions (batch 1), counted with FlopCounterMode (the fused
    attention kernel given its formula, `flops.ATTENTION`)."""
    ids = torch.zeros(1, length + 1, dtype=torch.long)
    with torch.no_grad():
        cache = inference.prefill(model, ids[:, :length])[0] if cached else None
        with FlopCounterMode(display=False, custom_mapping=ATTENTION) as counter:
            inference.next_logits(model, ids, cache)
    return counter.get_total_flops()


@torch.no_grad()
def continuation_log_probs(model, prompt: str, continuations: list) -> torch.Tensor:
    """log P(continuation + newline | prompt) for each continuation, in nats: every continuation's characters
    and its closing newline, read after `prompt` (which starts with a newline, as a line does)."""
    lines = [prompt[1:] + c for c in continuations]
    out = torch.empty(len(lines), dtype=torch.float64)
    by_length = {}
    for i, line in enumerate(lines):
        by_length.setdefault(len(line), []).append(i)
    for indices in by_length.values():
        ids, _ = line_batch([lines[i] for i in indices])
        losses = token_losses(model, ids)[:, len(prompt) - 1:]                 # the predictions after the prompt
        out[indices] = -losses.sum(1).to(out.dtype)
    return out


def overlap(target, draft, lines: list) -> float:
    """The mean over the positions of `lines` (each read after a newline) of sum_x min(p(x), q(x)), p the
    target's next-token distribution and q the draft's: the chance that one draft token is kept, alpha in
    Leviathan et al. (2023), for text like these lines."""
    ids, weights = line_batch(lines)
    with torch.no_grad():
        p, q = target(ids[:, :-1]).softmax(-1), draft(ids[:, :-1]).softmax(-1)
    return float((torch.minimum(p, q).sum(-1) * weights).sum() / weights.sum())


def speculative_rows(target, draft, prompt_ids, new_tokens: int, draft_lengths, samples: int) -> list:
    """For each draft length: "kept", the share of drafted tokens the target kept (drafts after a round's first
    rejection are never checked: they count as not kept), and "per pass", the tokens made per target pass, over
    `samples` sampled continuations (generator seeds 0 .. samples - 1)."""
    rows = []
    for k in draft_lengths:
        total = Counter()
        for seed in range(samples):
            new, stats = inference.speculative_generate(target, draft, prompt_ids, new_tokens, k,
                                                        torch.Generator().manual_seed(seed))
            total.update({**stats, "tokens": new.shape[1]})
        rows.append({"draft length": k, "kept": total["accepted"] / total["drafted"],
                     "per pass": total["tokens"] / total["target_passes"]})
    return rows


def line_outcome(line: str) -> str:
    """A written line's kind and truth ("review, true"), or "not well-formed": what `total_variation` compares."""
    valid, true = world.check_line(line)
    return (world.kind_of(line) if valid else "not well-formed") + (", true" if true else "")


def position_overlaps(target, draft, sequences) -> list:
    """For each sequence (1-D ids, its first token the prompt): sum_x min(p(x), q(x)) at each position after the
    first, read along that sequence, p the target's and q the draft's next-token distribution."""
    ids = torch.stack(list(sequences))
    with torch.no_grad():
        p, q = target(ids[:, :-1]).softmax(-1), draft(ids[:, :-1]).softmax(-1)
    return torch.minimum(p, q).sum(-1).tolist()


def simulated_tokens_per_pass(alpha, draft_length: int, new_tokens: int, samples: int,
                              replicates: int = 200, seed: int = 0) -> tuple:
    """(mean, standard deviation) over `replicates` sets of `samples` sequences of the tokens per target pass, if
    every draft token were kept independently with probability alpha (a number), or with the overlap at its
    position along a sequence the target wrote (alpha: `position_overlaps`, one list per sequence, each sample
    taking the next list in turn), each sequence stopping at new_tokens as `speculative_generate` does (its last
    round drafts only what is left)."""
    rng, ratios, turn = random.Random(seed), [], 0
    for _ in range(replicates):
        passes = 0
        for _ in range(samples):
            made = 0
            at = (lambda i: alpha) if isinstance(alpha, (int, float)) else alpha[turn % len(alpha)].__getitem__
            turn += 1
            while made < new_tokens:
                k, kept = min(draft_length, new_tokens - made), 0
                while kept < k and rng.random() < at(made + kept):
                    kept += 1
                made, passes = made + kept + 1, passes + 1       # the kept drafts and one token from the target
        ratios.append(samples * new_tokens / passes)
    mean = sum(ratios) / replicates
    return mean, (sum((r - mean) ** 2 for r in ratios) / (replicates - 1)) ** 0.5


def total_variation(a: list, b: list) -> float:
    """Total-variation distance between the empirical distributions of two lists of outcomes."""
    ca, cb = Counter(a), Counter(b)
    return 0.5 * sum(abs(ca[x] / len(a) - cb[x] / len(b)) for x in set(ca) | set(cb))
