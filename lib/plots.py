"""The book's figures: learning curves and attention heatmaps, plus number formatting.

Every printed number goes through `fmt` (fixed decimals), so outputs are
stable and the prose can quote them exactly.  Figure text is English: the
machines that build the book have no CJK font, and the prose around each
figure says in Chinese what it shows.
"""

import math

import matplotlib.pyplot as plt
import pandas as pd

BITS_PER_NAT = 1 / math.log(2)


def fmt(x, digits: int = 3) -> str:
    """Fixed-decimal formatting for every number the book prints.

    >>> fmt(0.40912), fmt(2, 1), fmt(109056, 0)
    ('0.409', '2.0', '109,056')
    """
    return f"{x:,.{digits}f}"


def below(x: float, bound: float) -> str:
    """A rounding-noise quantity, printed so that it reads the same on every CPU: "< bound" when it is
    below the bound (its digits depend on which float kernels ran), else its value in full.

    >>> below(8.6e-6, 1e-4), below(3.6e-14, 1e-12), below(0.002, 1e-4)
    ('< 1e-04', '< 1e-12', '2.000e-03 (not below 1e-04)')
    """
    return f"< {bound:.0e}" if abs(x) < bound else f"{x:.3e} (not below {bound:.0e})"


def table(rows: list, digits: int = 3, index: str = None) -> pd.DataFrame:
    """A DataFrame from a list of dicts, floats formatted by `fmt` (so the text is exact)."""
    frame = pd.DataFrame([{k: fmt(v, digits) if isinstance(v, float) else v for k, v in row.items()}
                          for row in rows])
    return frame.set_index(index) if index else frame


def learning_curve(log: list, keys=("train_loss", "val_loss"), scale: float = BITS_PER_NAT,
                   ylabel: str = "bits per character", title: str = "learning curve", reference: dict = None):
    """Plot log entries (dicts with 'step') against step; reference = {label: y} draws dashed lines."""
    fig, ax = plt.subplots(figsize=(6, 3.4))
    steps = [row["step"] for row in log]
    for key in keys:
        ax.plot(steps, [row[key] * scale for row in log], label=key.replace("_", " "))
    for label, y in (reference or {}).items():
        ax.axhline(y, linestyle="--", linewidth=1, color="gray")
        ax.annotate(label, (steps[-1], y), textcoords="offset points", xytext=(0, 3), ha="right", fontsize=8)
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    return fig


def show_token(token: str) -> str:
    """Make whitespace visible in axis labels: space → ␣, newline → ⏎."""
    return token.replace(" ", "␣").replace("\n", "⏎")


def attention_heatmap(weights, labels: list, title: str = "", ax=None, annotate: bool = False):
    """A (T, T) attention matrix: rows = querying position, columns = attended position."""
    weights = weights.detach().numpy() if hasattr(weights, "detach") else weights
    if weights.shape != (len(labels), len(labels)):
        raise ValueError(f"weights of shape {weights.shape} do not match {len(labels)} labels")
    fig = None
    if ax is None:
        size = 1.5 + 0.28 * len(labels)
        fig, ax = plt.subplots(figsize=(size, size))
    ax.imshow(weights, cmap="Blues", vmin=0, vmax=1)
    ticks = range(len(labels))
    shown = [show_token(t) for t in labels]
    ax.set_xticks(ticks, shown, fontsize=7)
    ax.set_yticks(ticks, shown, fontsize=7)
    ax.set_xlabel("attended position (key)")
    ax.set_ylabel("position (query)")
    if annotate:
        for i in ticks:
            for j in ticks:
                if weights[i, j] >= 0.005:
                    ax.text(j, i, f"{weights[i, j]:.2f}"[1:], ha="center", va="center", fontsize=5,
                            color="white" if weights[i, j] > 0.5 else "black")
    ax.set_title(title, fontsize=9)
    if fig is not None:
        fig.tight_layout()
    return fig or ax.figure
