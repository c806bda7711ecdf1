"""Generation one token at a time: the KV cache, prefill and decode, decoding rules, beam search, speculative decoding.

    new_ids = generate(model, prompt_ids, 20)                               # greedy, cached
    new_ids = generate(model, prompt_ids, 20, processors=[temperature(0.8), top_p(0.9)],
                       generator=torch.Generator().manual_seed(0))          # sampled
    ids, real = left_pad([[5, 6, 7], [8]])                                  # prompts of different lengths, one batch
    new_ids = generate(model, ids, 20, real=real)

Training scores every position of a window in one pass (teacher forcing); generation must run the model
once per new token, since each token is the input of the next step.  Rerunning the whole sequence each
step repeats the work of every earlier position: their keys and values do not change, because a causal
model's position never sees what comes after it.  A KV cache keeps them (`models.KVCache`), so a step
computes only the new position.  Reading the prompt into the cache is the prefill (one pass over P tokens,
or several chunks: `prefill`); each later step is a decode step.  The cache holds positions up to the model's
context; past it, the model reruns on the last `context` tokens (the window slides, and every position moves).

Decoding rules are processors, callables (logits (B, V), ids so far (B, t)) -> logits, applied in the order
given; the next token is the argmax of what comes out (generator=None) or a draw from its softmax with the
given torch.Generator.  `temperature`, `top_k`, `top_p`, `min_p` and `repetition_penalty` build them; the
keep-masks behind the three truncations are `top_k_mask`, `top_p_mask` and `min_p_mask`.
"""

import math

import torch

from lib.nn.models import KVCache

NEG_INF = float("-inf")


def new_cache(model, longest_input: int):
    """A KVCache for `model` when it decodes with one and `longest_input` tokens fit its context, else None
    (then `next_logits` reruns the model)."""
    if getattr(model, "supports_kv_cache", False) and longest_input <= model.config.context:
        return KVCache(len(model.blocks))
    return None


def next_logits(model, idx, cache=None):
    """(B, V): the logits of the token after each row of idx (B, t).  With a cache, only the tokens of idx
    that it does not hold yet are computed (and join it); without, the model runs on the last `context`."""
    if cache is None:
        return model(idx[:, -model.config.context:])[:, -1]
    return model.forward_cached(idx[:, len(cache):], cache)[:, -1]


def left_pad(prompts: list, value: int = 0) -> tuple:
    """(ids (B, P), real (B, P)) for prompts (lists of ids) of different lengths, padded on the left so that
    every row's next token comes at the same column; real is False at padding."""
    if not prompts or not all(prompts):
        raise ValueError("left_pad needs at least one prompt, each of at least one token")
    P = max(map(len, prompts))
    ids = torch.tensor([[value] * (P - len(p)) + list(p) for p in prompts])
    return ids, torch.arange(P)[None, :] >= torch.tensor([P - len(p) for p in prompts])[:, None]


def position_ids(real) -> torch.Tensor:
    """Each row's position ids (B, t) from its `real` mask: the first real token is position 0 (padding gets 0
    too; nothing reads it).  Without them a left-padded row would start at the position of its padding."""
    return (real.long().cumsum(1) - 1).clamp(min=0)


def prefill(model, prompt_ids, chunk: int = None, real=None) -> tuple:
    """(cache, logits (B, V) of the token after the prompt): the prompt read into a new cache in one pass,
    or in passes of `chunk` tokens (chunked prefill: each chunk attends to the cache and causally to itself,
    so the result is the same up to float rounding)."""
    P = prompt_ids.shape[1]
    chunk = chunk or P
    if chunk < 1:
        raise ValueError(f"chunk must be at least 1, got {chunk}")
    cache = KVCache(len(model.blocks))
    positions = None if real is None else position_ids(real)
    for start in range(0, P, chunk):
        end = min(P, start + chunk)
        logits = model.forward_cached(prompt_ids[:, start:end], cache,
                                      **({} if real is None else {"positions": positions[:, start:end],
                                                                  "real": real[:, :end]}))
    return cache, logits[:, -1]


@torch.no_grad()
def generate(model, prompt_ids, max_new_tokens: int, *, use_cache: bool = True, processors=(), generator=None,
             real=None):
    """The ids (B, max_new_tokens) that continue prompt_ids (B, P).  Each step, the logits pass through
    `processors` in order; the next token is their argmax when generator is None (greedy), else a draw from
    their softmax with that torch.Generator.  use_cache=False reruns the model on the whole sequence each step
    (the same tokens, up to float rounding in the logits).  real (B, P): a left-padded batch (`left_pad`);
    each row then decodes as it would alone."""
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    if real is not None:
        return _generate_padded(model, prompt_ids, real, max_new_tokens, use_cache, processors, generator)
    idx = prompt_ids
    cache = new_cache(model, idx.shape[1] + max_new_tokens - 1) if use_cache else None
    for _ in range(max_new_tokens):
        idx = torch.cat([idx, choose(next_logits(model, idx, cache), idx, processors, generator)[:, None]], dim=1)
    return idx[:, prompt_ids.shape[1]:]


def choose(logits, ids, processors=(), generator=None):
    """(B,) the next tokens: the processors applied in order, then argmax or a draw with `generator`."""
    for process in processors:
        logits = process(logits, ids)
    if generator is None:
        return logits.argmax(dim=-1)
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator)[:, 0]


def _generate_padded(model, prompt_ids, real, max_new_tokens, use_cache, processors, generator):
    if max_new_tokens == 0:
        return prompt_ids[:, :0]
    if not getattr(model, "supports_kv_cache", False) or prompt_ids.shape[1] + max_new_tokens - 1 > model.config.context:
        raise ValueError("a left-padded batch is decoded through forward_cached, within the model's context")
    idx = prompt_ids
    cache, logits = prefill(model, idx, real=real)
    for step in range(max_new_tokens):
        if step:
            if not use_cache:                      # recompute every position: a new cache over the whole sequence
                cache, logits = prefill(model, idx, real=real)
            else:
                logits = model.forward_cached(idx[:, -1:], cache, position_ids(real)[:, -1:], real)[:, -1]
        seen = torch.where(real, idx, idx.gather(1, (~real).sum(1, keepdim=True)))   # padding: the first real token
        idx = torch.cat([idx, choose(logits, seen, processors, generator)[:, None]], dim=1)
        real = torch.cat([real, real.new_ones(real.shape[0], 1)], dim=1)
    return idx[:, prompt_ids.shape[1]:]


# -- decoding rules ---------------------------------------------------------------------------------------------

def _descending(x):
    """Indices that sort x's last dimension from largest to smallest, ties by index (a stable sort)."""
    return torch.sort(x, dim=-1, descending=True, stable=True).indices


def top_k_mask(logits, k: int):
    """Boolean keep-mask: the k largest logits of each row (ties: the lower index first)."""
    if not 1 <= k <= logits.shape[-1]:
        raise ValueError(f"k must lie in 1..{logits.shape[-1]}, got {k}")
    keep = torch.zeros_like(logits, dtype=torch.bool)
    return keep.scatter(-1, _descending(logits)[..., :k], True)


def top_p_mask(probs, p: float):
    """Boolean keep-mask: the smallest set of most probable tokens whose probabilities reach p (nucleus sampling,
    Holtzman et al. 2020).  A token is kept when the tokens above it sum to less than p, so the most probable one
    always is: the set is never empty, and is that one token alone when it exceeds p."""
    if not 0 < p <= 1:
        raise ValueError(f"p must lie in (0, 1], got {p}")
    order = _descending(probs)
    sorted_probs = probs.gather(-1, order)
    before = sorted_probs.cumsum(-1) - sorted_probs                # the probability of the tokens above each one
    return torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, before < p)


def min_p_mask(probs, p_min: float):
    """Boolean keep-mask: tokens with probability at least p_min times the most probable one's (min-p sampling,
    Nguyen et al. 2024): the cut scales with the model's confidence."""
    if not 0 <= p_min <= 1:
        raise ValueError(f"p_min must lie in [0, 1], got {p_min}")
    return probs >= p_min * probs.max(dim=-1, keepdim=True).values


def temperature(t: float):
    """logits / t: below 1 sharper, above 1 flatter; t -> 0 is greedy."""
    if t <= 0:
        raise ValueError(f"temperature must be positive (t -> 0 is greedy: pass no generator), got {t}")
    return lambda logits, ids: logits / t


def top_k(k: int):
    return lambda logits, ids: logits.masked_fill(~top_k_mask(logits, k), NEG_INF)


def top_p(p: float):
    return lambda logits, ids: logits.masked_fill(~top_p_mask(logits.softmax(-1), p), NEG_INF)


def min_p(p_min: float):
    return lambda logits, ids: logits.masked_fill(~min_p_mask(logits.softmax(-1), p_min), NEG_INF)


def repetition_penalty(penalty: float, exempt=()):
    """The repetition penalty of CTRL (Keskar et al. 2019) in its sign-aware form (Hugging Face's): the logit of
    every token already in the sequence divided by `penalty` when positive, multiplied by it when negative (either
    way less likely, for penalty > 1; CTRL's formula divides every such logit, which would make a negative one
    more likely).  Tokens in `exempt` (ids) are never penalised."""
    if penalty <= 0:
        raise ValueError(f"penalty must be positive, got {penalty}")
    exempt = torch.tensor(sorted(exempt), dtype=torch.long)

    def process(logits, ids):
        seen = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, ids, True)
        seen[..., exempt] = False
        return torch.where(seen, torch.where(logits > 0, logits / penalty, logits * penalty), logits)
    return process


# -- beam search ------------------------------------------------------------------------------------------------

@torch.no_grad()
def beam_search(model, prompt_ids, max_new_tokens: int, width: int, end: int, length_penalty: float = 1.0) -> list:
    """The `width` best continuations of one prompt (1, P), each [new ids, log-probability, score], best first.
    Each step every live beam is extended by every token; going down the extensions by log-probability, one that
    writes `end` is a finished line (when it ranks among the `width` best extensions), the others become the
    next live beams until there are `width` of them.  The search stops after max_new_tokens, or once `width` lines
    have finished and (length_penalty 0) no live beam is likelier than the width-th of them: a beam's
    log-probability only falls as it grows.  Lines are ranked by log-probability / length ** length_penalty (0:
    the raw log-probability, which favours short ones); unfinished beams follow the finished lines, only to fill
    `width`.  Each step reruns the model on every beam (no cache: beams fork)."""
    if prompt_ids.shape[0] != 1 or width < 1:
        raise ValueError("beam search takes one prompt (1, P) and a width of at least 1")
    beams, finished = [([], 0.0)], []
    for _ in range(max_new_tokens):
        if not beams:
            break
        ids = torch.cat([prompt_ids.expand(len(beams), -1), torch.tensor([b for b, _ in beams], dtype=torch.long)
                         .view(len(beams), -1)], dim=1)
        logp = next_logits(model, ids).log_softmax(-1)                        # (beams, V)
        total = (torch.tensor([s for _, s in beams], dtype=logp.dtype)[:, None] + logp).flatten()
        V, extended, beams = logp.shape[-1], beams, []
        for rank, i in enumerate(_descending(total).tolist()):
            seq, score = extended[i // V][0] + [i % V], total[i].item()
            if seq[-1] != end:
                beams.append((seq, score))
            elif rank < width:
                finished.append((seq, score))
            if len(beams) == width:
                break
        best_finished = sorted(score for _, score in finished)[-width:]
        if len(best_finished) == width and (length_penalty != 0 or not beams or beams[0][1] <= best_finished[0]):
            break
    rank = lambda lines: sorted(([seq, s, s / len(seq) ** length_penalty] for seq, s in lines), key=lambda r: -r[2])
    return (rank(finished) + rank(beams))[:width]


# -- speculative decoding -----------------------------------------------------------------------------------------

def acceptance(p, q):
    """The probability of keeping a draft token x drawn from q: min(1, p(x) / q(x)), for every x."""
    return torch.where(q > 0, (p / q.clamp(min=1e-300)).clamp(max=1.0), torch.ones_like(p))


def residual(p, q):
    """Where a rejected draft is resampled from: max(0, p - q), normalised (p itself where p = q)."""
    r = (p - q).clamp(min=0)
    total = r.sum(-1, keepdim=True)
    return torch.where(total > 0, r / total.clamp(min=1e-300), p)


@torch.no_grad()
def speculative_generate(target, draft, prompt_ids, max_new_tokens: int, draft_length: int, generator,
                         end: int = None) -> tuple:
    """(new ids (1, max_new_tokens), stats): sampling from `target` with a `draft` model's help (Leviathan et al.
    2023; Chen et al. 2023).  Each round the draft samples draft_length tokens from its q; the target scores them
    all in one pass; draft token i is kept with probability min(1, p/q), and at the first rejection a token is
    drawn from max(0, p - q) instead and the round ends; when every draft is kept, one more token comes from p.
    The tokens so made are distributed exactly as the target's own samples.  With `end` (a token id), it stops
    after the first `end` it writes (which ends the ids returned).  stats: {"target_passes", "drafted",
    "accepted"}."""
    if prompt_ids.shape[0] != 1 or draft_length < 1:
        raise ValueError("speculative decoding takes one prompt (1, P) and a draft length of at least 1")
    if prompt_ids.shape[1] + max_new_tokens > target.config.context:
        raise ValueError(f"{prompt_ids.shape[1]} + {max_new_tokens} tokens exceed the target's context "
                         f"{target.config.context}: past it every position would move, and the samples would no "
                         "longer be the target's")
    idx, P = prompt_ids, prompt_ids.shape[1]
    stats = {"target_passes": 0, "drafted": 0, "accepted": 0}
    while idx.shape[1] - P < max_new_tokens:
        k = min(draft_length, max_new_tokens - (idx.shape[1] - P))
        drafted, q = idx, []
        for _ in range(k):
            probs = next_logits(draft, drafted).softmax(-1)[0]
            q.append(probs)
            drafted = torch.cat([drafted, torch.multinomial(probs, 1, generator=generator)[None]], dim=1)
        window = drafted[:, -target.config.context:]
        p = target(window)[0, -(k + 1):].softmax(-1)                       # (k + 1, V): p after each prefix
        stats["target_passes"] += 1
        stats["drafted"] += k
        new = []
        for i in range(k):
            x = drafted[0, idx.shape[1] + i].item()
            if torch.rand((), generator=generator, dtype=torch.float64) < acceptance(p[i], q[i])[x]:
                new.append(x)
                stats["accepted"] += 1
                continue
            new.append(torch.multinomial(residual(p[i], q[i]), 1, generator=generator).item())
            break
        else:
            new.append(torch.multinomial(p[k], 1, generator=generator).item())
        if end is not None and end in new:
            idx = torch.cat([idx, torch.tensor([new[:new.index(end) + 1]])], dim=1)
            break
        idx = torch.cat([idx, torch.tensor([new])], dim=1)
    return idx[:, P:P + max_new_tokens], stats
