"""Generation one token at a time, with a KV cache (section 10 builds on it).

    new_ids = generate(model, prompt_ids, 20)                               # greedy, cached
    new_ids = generate(model, prompt_ids, 20, generator=torch.Generator().manual_seed(0))   # sampled

Training scores every position of a window in one pass (teacher forcing); generation must run the model
once per new token, since each token is the input of the next step.  Rerunning the whole sequence each
step repeats the work of every earlier position: their keys and values do not change, because a causal
model's position never sees what comes after it.  A KV cache keeps them (`models.KVCache`), so a step
computes only the new position.  The cache holds learned positions, so it serves sequences that fit the
model's context; past it, the model reruns on the last `context` tokens (the window slides, and every
position moves).
"""

import torch

from lib.nn.models import KVCache


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


@torch.no_grad()
def generate(model, prompt_ids, max_new_tokens: int, *, use_cache: bool = True, processors=(), generator=None):
    """The ids (B, max_new_tokens) that continue prompt_ids (B, P).  Each step, the logits pass through
    `processors` in order (callables logits -> logits); the next token is their argmax when generator is None
    (greedy), else a draw from their softmax with that torch.Generator.  use_cache=False reruns the model on
    the whole sequence each step (the same tokens, up to float rounding in the logits)."""
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    idx = prompt_ids
    cache = new_cache(model, idx.shape[1] + max_new_tokens - 1) if use_cache else None
    for _ in range(max_new_tokens):
        logits = next_logits(model, idx, cache)
        for process in processors:
            logits = process(logits)
        if generator is None:
            nxt = logits.argmax(dim=-1)
        else:
            nxt = torch.multinomial(logits.softmax(dim=-1), 1, generator=generator)[:, 0]
        idx = torch.cat([idx, nxt[:, None]], dim=1)
    return idx[:, prompt_ids.shape[1]:]
