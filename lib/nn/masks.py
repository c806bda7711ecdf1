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

Which mask a kind of model reads with is chosen in one place, `for_kind`.
"""

import torch

# The kinds of model the book compares, by how they read text (section 04).
MODEL_KINDS = ("causal", "prefix", "bidirectional", "encoder-decoder")


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


def prefix_masks(T: int, prefix_lengths) -> torch.Tensor:
    """(B, T, T): one `prefix_mask` per prefix length."""
    return torch.stack([prefix_mask(T, int(k)) for k in prefix_lengths])


def check_kind(kind: str):
    if kind not in MODEL_KINDS:
        raise ValueError(f"unknown kind of model {kind!r}; expected one of {MODEL_KINDS}")


def for_kind(kind: str, T: int, prefix_lengths=None) -> torch.Tensor:
    """The self-attention mask a single-stack model of this kind reads T positions with: (T, T), or
    (B, T, T) for a prefix LM, whose prefix_lengths (B,) say how much of each row is its prefix.

    >>> for_kind("prefix", 3, [2]).int().tolist() == [prefix_mask(3, 2).int().tolist()]
    True
    """
    check_kind(kind)
    if kind == "causal":
        return causal_mask(T)
    if kind == "bidirectional":
        return bidirectional_mask(T)
    if kind == "prefix" and prefix_lengths is not None:
        return prefix_masks(T, prefix_lengths)
    raise ValueError(f"a {kind} model has no single self-attention mask" if kind == "encoder-decoder"
                     else "a prefix LM's mask needs prefix_lengths")


def encoder_decoder_masks(source_len: int, target_len: int, source_pad=None, target_pad=None) -> dict:
    """The three blocks of an encoder-decoder (T5, BART).

    encoder: (S, S) bidirectional self-attention over the input;
    decoder: (T, T) causal self-attention over the output written so far;
    cross:   (T, S) every output position reads every encoder output.

    For a padded batch, source_pad (B, S) hides the source's padding keys from the encoder and from
    cross-attention (`hide_padding`), and target_pad (B, T), when given, the decoder's; each mask is then
    (B, rows, cols).

    >>> {k: tuple(m.shape) + (int(m.sum()),) for k, m in encoder_decoder_masks(5, 3).items()}
    {'encoder': (5, 5, 25), 'decoder': (3, 3, 6), 'cross': (3, 5, 15)}
    >>> padded = encoder_decoder_masks(3, 2, source_pad=torch.tensor([[False, False, True]]))
    >>> {k: (tuple(m.shape), int(m.sum())) for k, m in padded.items()}    # (shape, visible entries)
    {'encoder': ((1, 3, 3), 6), 'decoder': ((1, 2, 2), 3), 'cross': ((1, 2, 3), 4)}
    """
    masks = {"encoder": bidirectional_mask(source_len), "decoder": causal_mask(target_len),
             "cross": torch.ones(target_len, source_len, dtype=torch.bool)}
    if source_pad is None:
        return masks
    decoder = (hide_padding(masks["decoder"], target_pad) if target_pad is not None
               else masks["decoder"].expand(len(source_pad), target_len, target_len).clone())
    return {"encoder": hide_padding(masks["encoder"], source_pad), "decoder": decoder,
            "cross": hide_padding(masks["cross"], source_pad)}


def hide_padding(mask: torch.Tensor, is_pad: torch.Tensor) -> torch.Tensor:
    """(B, rows, cols): the mask with padding keys (is_pad: (B, cols)) hidden from every query.

    For a square (self-attention) mask, a query that would then see nothing
    keeps its own diagonal entry, so no row of the softmax is empty (its output
    is ignored by the loss anyway).  A non-square (cross-attention) mask has no
    diagonal: there every row must keep a real key, so a source must not be all
    padding."""
    B, cols = is_pad.shape
    out = mask.expand(B, *mask.shape[-2:]) & ~is_pad[:, None, :]
    rows = out.shape[1]
    empty = ~out.any(dim=-1)
    if empty.any() and rows == cols:
        out = out | (empty[:, :, None] & torch.eye(rows, dtype=torch.bool))
    return out
