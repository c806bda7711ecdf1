"""Writing with a masked-diffusion LM: start from all <mask>, unmask the most confident positions step by step.

    ids = diffusion_generate(model, length=32, steps=8, generator=g, n=100, prefix=[NEWLINE_WORD])

Each step reads the whole sequence bidirectionally, draws a token at every
position still masked (at `temperature`), and keeps the k drawn tokens the
model gave the highest probability, k = the masked count / the steps left
(rounded up): after `steps` forward passes nothing is masked (Nie et al.
2025's "low-confidence remasking": the other positions go back to <mask>).
A filled position is never changed again; the prefix is never touched.
"""

import torch

from lib.data.tokenizers import FIRST_ORDINARY, MASK
from lib.nn.masks import bidirectional_mask


@torch.no_grad()
def diffusion_generate(model, length: int, steps: int, generator, n: int = 1, prefix=(), temperature: float = 1.0,
                       trace: list = None, order: str = "confidence") -> torch.Tensor:
    """(n, length) token ids written from `prefix` + <mask> x (length - len(prefix)) in `steps` forward passes.
    Only ordinary tokens are drawn (never <mask>, <pad> or a sentinel).  `trace`, when given a list, gets the ids
    after each forward pass (a copy, (n, length)): one entry per pass.  `order`: which k drawn tokens are kept, the
    most confident ("confidence": LLaDA's low-confidence remasking; the confidence is the probability of the draw at
    `temperature`) or k masked positions drawn at random ("random": LLaDA's random remasking; MDLM's own sampler
    reveals each masked position independently, so its count per step varies)."""
    prefix = [int(t) for t in prefix]
    if MASK in prefix:
        raise ValueError("the prefix holds <mask>: the sampler would write over it")
    masked = length - len(prefix)
    if not 0 < length <= model.config.context or masked < 1:
        raise ValueError(f"length {length} must lie in 1..{model.config.context} and exceed the prefix ({len(prefix)})")
    if not (isinstance(steps, int) and 1 <= steps <= masked):
        raise ValueError(f"steps must be an integer in 1..{masked} (one position at least per step), got {steps!r}")
    if order not in ("confidence", "random"):
        raise ValueError(f"order must be 'confidence' or 'random', got {order!r}")
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    ids = torch.tensor([prefix + [MASK] * masked] * n)
    mask = bidirectional_mask(length)
    for step in range(steps):
        still = ids == MASK                                                  # (n, length): the same count per row
        k = -(-int(still[0].sum()) // (steps - step))                       # ceil: finishes at the last step
        logits = model(ids, mask)[..., FIRST_ORDINARY:] / temperature       # ordinary tokens only
        if order == "random":                # choose the k positions first, then draw only there
            keep = torch.rand(n, length, generator=generator, dtype=logits.dtype).masked_fill(~still, -1.0).topk(k, 1).indices
            probs = logits.gather(1, keep[..., None].expand(-1, -1, logits.shape[-1])).softmax(-1)      # (n, k, V')
            values = torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1, generator=generator).view(n, k)
        else:                                # draw at every masked position, keep the k most probable draws
            rows, cols = still.nonzero(as_tuple=True)
            probs = logits[rows, cols].softmax(-1)                                                     # (masked, V')
            drawn = torch.multinomial(probs, 1, generator=generator)[:, 0]
            confidence = torch.full((n, length), -1.0, dtype=probs.dtype).index_put_((rows, cols), probs[torch.arange(len(drawn)), drawn])
            keep = confidence.topk(k, 1).indices
            values = torch.zeros(n, length, dtype=torch.long).index_put_((rows, cols), drawn).gather(1, keep)
        ids.scatter_(1, keep, values + FIRST_ORDINARY)
        if trace is not None:
            trace.append(ids.clone())
    return ids
