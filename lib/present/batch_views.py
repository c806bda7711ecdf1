"""Training examples and attention masks as text and pictures (sections 03 and 04): token ids as words, rows of
tokens aligned in columns, a mask as a grid of # and . or as a picture.  Token ids are read with the `vocab` (a
list of token strings) the caller passes."""

from lib.present.plots import show_token


def token_words(ids, vocab: list) -> list:
    """Token ids as words, whitespace made visible.

    >>> token_words([2, 0], ["a", "b", "\\n"])
    ['⏎', 'a']
    """
    return [show_token(vocab[int(i)]) for i in ids]


def token_text(ids, vocab: list, prefix: int = None) -> str:
    """Token ids as one line of words; a prefix LM's prefix (its first `prefix` tokens) ends at |.

    >>> token_text([0, 1, 1], ["a", "b"], prefix=1)
    'a | b b'
    """
    shown = token_words(ids, vocab)
    if prefix is not None:
        shown.insert(prefix, "|")
    return " ".join(shown)


def marks(mask, sign: str = "^") -> list:
    """`sign` where a boolean mask is true, "" elsewhere: a row of `aligned_rows`."""
    return [sign if m else "" for m in mask.tolist()]


def aligned_rows(rows: list, label: int = 13) -> str:
    """Rows of (label, cells) as text, the cells in columns each as wide as its widest cell.

    >>> print(aligned_rows([("input", ["the", "soup"]), ("loss", ["", "^"])], label=5))
    input | the soup
    loss  |     ^
    """
    n = max(len(cells) for _, cells in rows)
    widths = [max(len(cells[j]) for _, cells in rows if j < len(cells)) for j in range(n)]
    label = max([label] + [len(name) for name, _ in rows])
    return "\n".join((f"{name:<{label}} | " + " ".join(f"{c:<{w}}" for c, w in zip(cells, widths))).rstrip()
                     for name, cells in rows)


def stack_text(batch, vocab: list, extra: tuple = ()) -> str:
    """The first example of a one-stack batch: input, the `extra` rows, target and loss (^) aligned."""
    return aligned_rows([("input", token_words(batch.inputs[0], vocab)), *extra,
                         ("target", token_words(batch.targets[0], vocab)), ("loss", marks(batch.loss_mask[0]))])


def encoder_decoder_text(batch, vocab: list) -> str:
    """The first example of an encoder-decoder batch: the source (padding left out), then the decoder's input,
    target and loss (s = a sentinel target, ^ = a content target) aligned."""
    n = int(batch.loss_mask[0].sum())
    source = [w for w in token_words(batch.source[0], vocab) if w != "<pad>"]
    loss = ["s" if s else "^" for s in batch.is_sentinel[0, :n].tolist()]
    return (aligned_rows([("source", source)]) + "\n"
            + aligned_rows([("decoder input", token_words(batch.decoder_input[0, :n], vocab)),
                            ("target", token_words(batch.targets[0, :n], vocab)), ("loss", loss)]))


def mask_grid(mask, rows: list, cols: list) -> str:
    """An attention mask as text: rows = querying positions, columns = attended positions, # = may attend.

    >>> import torch; print(mask_grid(torch.tensor([[1, 0], [1, 1]]), ["a", "b"], ["a", "b"]))
      a b
    a # .
    b # #
    """
    width = max(len(show_token(t)) for t in rows + cols)
    lines = [" " * (width + 1) + " ".join(f"{show_token(c):>{width}}" for c in cols)]
    lines += [f"{show_token(r):>{width}} " + " ".join(f"{'#' if v else '.':>{width}}" for v in row)
              for r, row in zip(rows, mask.tolist())]
    return "\n".join(lines)


def draw_mask(ax, mask, rows: list, cols: list, title: str, compact: bool = False):
    """An attention mask as a picture on `ax`, dark = may attend, titled with how many entries are visible.
    compact: no axis labels, a one-line title (small pictures for a slider)."""
    ax.imshow(mask.int(), cmap="Blues", vmin=0, vmax=1.3)
    ax.set_xticks(range(len(cols)), [show_token(c) for c in cols], fontsize=8)
    ax.set_yticks(range(len(rows)), [show_token(r) for r in rows], fontsize=8)
    if not compact:
        ax.set_xlabel("attended position (key)", fontsize=8)
        ax.set_ylabel("position (query)", fontsize=8)
    ax.set_xticks([x - 0.5 for x in range(len(cols) + 1)], minor=True)
    ax.set_yticks([y - 0.5 for y in range(len(rows) + 1)], minor=True)
    ax.grid(which="minor", color="white", linewidth=1)
    ax.tick_params(which="both", length=0)
    visible = f"{int(mask.sum())} of {mask.numel()} visible"
    ax.set_title(f"{title}: {int(mask.sum())} visible" if compact else f"{title}\n{visible}", fontsize=9)
