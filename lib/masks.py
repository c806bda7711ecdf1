"""Attention masks: who may look at whom.

A mask is a bool tensor, rows = querying positions, columns = attended
positions, True = may attend.  The architectures of the book differ mainly
here:

    >>> causal_mask(3).int().tolist()          # GPT: each position sees itself and the past
    [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    >>> prefix_mask(3, 2).int().tolist()       # prefix LM: the prefix sees itself both ways
    [[1, 1, 0], [1, 1, 0], [1, 1, 1]]
    >>> bidirectional_mask(2).int().tolist()   # BERT: everything sees everything
    [[1, 1], [1, 1]]
"""

import torch


def causal_mask(T: int) -> torch.Tensor:
    """(T, T), True on and below the diagonal: position i sees positions 0..i."""
    return torch.ones(T, T, dtype=torch.bool).tril()


def bidirectional_mask(T: int) -> torch.Tensor:
    """(T, T), all True."""
    return torch.ones(T, T, dtype=torch.bool)


def prefix_mask(T: int, prefix: int) -> torch.Tensor:
    """Causal, except that the first `prefix` positions see each other fully.

    prefix=1 (or 0) is the causal mask (GPT); prefix=T is bidirectional (BERT)."""
    if not 0 <= prefix <= T:
        raise ValueError(f"prefix length {prefix} outside 0..{T}")
    mask = causal_mask(T)
    mask[:prefix, :prefix] = True
    return mask


def encoder_decoder_masks(source_len: int, target_len: int) -> dict:
    """The three blocks of an encoder-decoder (T5, BART).

    encoder: (S, S) bidirectional self-attention over the input;
    decoder: (T, T) causal self-attention over the output written so far;
    cross:   (T, S) every output position reads every encoder output.

    >>> {k: tuple(m.shape) + (int(m.sum()),) for k, m in encoder_decoder_masks(5, 3).items()}
    {'encoder': (5, 5, 25), 'decoder': (3, 3, 6), 'cross': (3, 5, 15)}
    """
    return {"encoder": bidirectional_mask(source_len), "decoder": causal_mask(target_len),
            "cross": torch.ones(target_len, source_len, dtype=torch.bool)}


def hide_padding(mask: torch.Tensor, is_pad: torch.Tensor) -> torch.Tensor:
    """(B, rows, cols): the mask with padding keys (is_pad: (B, cols)) hidden from every query.

    A query that would then see nothing keeps its own diagonal entry, so no row
    of the softmax is empty (its output is ignored by the loss anyway)."""
    B, cols = is_pad.shape
    out = mask.expand(B, *mask.shape[-2:]) & ~is_pad[:, None, :]
    rows = out.shape[1]
    empty = ~out.any(dim=-1)
    if empty.any() and rows == cols:
        out = out | (empty[:, :, None] & torch.eye(rows, dtype=torch.bool))
    return out
