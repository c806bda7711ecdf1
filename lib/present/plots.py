"""The book's figures: learning curves, attention heatmaps and bar charts, plus number formatting.

Every printed number goes through `fmt` (fixed decimals), so outputs are
stable and the prose can quote them exactly, and `make test` can compare them
unrounded between two CPUs' kernels (`lib.present.figures`).  Figure text is English: the
machines that build the book have no CJK font, and the prose around each
figure says in Chinese what it shows.
"""

import math
import re

import matplotlib.pyplot as plt
from matplotlib.colors import LinearSegmentedColormap
from matplotlib.patches import Rectangle
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter
import pandas as pd
import torch

from lib.present import figures

BITS_PER_NAT = 1 / math.log(2)
REFERENCE_STYLES = [(0, (1, 1.5)), "--", "-."]     # reference lines: dotted, dashed, dash-dotted


def fmt(x, digits: int = 3) -> str:
    """Fixed-decimal formatting for every number the book prints.

    >>> fmt(0.40912), fmt(2, 1), fmt(109056, 0)
    ('0.409', '2.0', '109,056')
    """
    figures.record(x)      # unrounded, when BOOK_FIGURE_LOG is set: make test compares two CPUs' kernels
    return f"{x:,.{digits}f}"


def mean_range(values) -> tuple:
    """(mean, lowest, highest) of a list of numbers: how the book reports a measure over seeds."""
    values = list(values)
    return sum(values) / len(values), min(values), max(values)


def fmt_mean_range(triple, digits: int = 3) -> str:
    """A `mean_range` as "mean [lowest, highest]".

    >>> fmt_mean_range(mean_range([0.5, 0.25, 0.75]))
    '0.500 [0.250, 0.750]'
    """
    return f"{fmt(triple[0], digits)} [{fmt(triple[1], digits)}, {fmt(triple[2], digits)}]"


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


def plain_log_axis(ax, ticks):
    """A log y axis labelled with plain numbers at `ticks` (not 4×10^0), no minor labels."""
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


CURVE_LABELS = {"train_loss": "training (random windows, mean since the last point)",
                "val_loss": "validation (line by line)"}


def learning_curve(log: list, keys=("train_loss", "val_loss"), scale: float = BITS_PER_NAT,
                   ylabel: str = "bits per character", title: str = "learning curve", reference: dict = None,
                   ticks: list = None, zoom_from: int = None, zoom_ticks: list = None):
    """Plot log entries (dicts with 'step') against step; reference = {label: y} draws gray lines (in the legend).

    With `ticks` the y axis is logarithmic, labelled at those values, so that the end of the curve, where
    losses differ by a few hundredths, is not squashed against the axis. With `zoom_from` a second panel
    shows the steps from there on, on a y range just wide enough for them (labelled at `zoom_ticks`)."""
    panels = 2 if zoom_from is not None else 1
    fig, axes = plt.subplots(1, panels, figsize=(6 + 3.6 * (panels - 1), 3.6), squeeze=False,
                             gridspec_kw={"width_ratios": [1.4, 1][:panels]})
    axes = axes[0]
    for ax, start, shown in zip(axes, [None, zoom_from], [ticks, zoom_ticks]):
        rows = [row for row in log if start is None or row["step"] >= start]
        steps = [row["step"] for row in rows]
        values = []
        for key in keys:
            curve = [row[key] * scale for row in rows]
            ax.plot(steps, curve, label=CURVE_LABELS.get(key, key.replace("_", " ")))
            values += curve
        low, high = min(values), max(values)
        for style, (label, y) in zip(REFERENCE_STYLES, (reference or {}).items()):
            if start is None or low - (high - low) <= y <= high + (high - low):   # the zoom shows only nearby lines
                ax.axhline(y, linestyle=style, linewidth=1.2, color="0.35", label=label)
                low, high = min(low, y), max(high, y)
        if start is None and ticks:
            ax.set_ylim(low / 1.1, high * 1.1)
        elif start is not None:
            ax.set_ylim(low - 0.06 * (high - low), high + 0.06 * (high - low))
        if shown:
            plain_log_axis(ax, shown)
        ax.set_xlabel("training step")
        ax.grid(axis="y", color="0.9", linewidth=0.8)
        ax.set_axisbelow(True)
    axes[0].set_ylabel(ylabel + (" (log scale)" if ticks else ""))
    axes[0].set_title(title, fontsize=11)
    axes[0].legend(loc="center right", fontsize=8)
    if panels == 2:
        axes[1].set_title(f"zoom: step {zoom_from:,} to {log[-1]['step']:,}", fontsize=11)
    fig.tight_layout()
    return fig


def number_figure(label: str, fig=None) -> None:
    """Write "Figure N.k" above the top-left corner of a figure (the current one unless given): the number by which
    the prose refers to it (图 N.k).  The inline backend saves a figure with a tight bounding box, so the label
    widens the image upwards and never covers a title or an axis.  Call it before `plt.show()`."""
    if not re.fullmatch(r"\d+\.\d+", label):
        raise ValueError(f"a figure's label is 'section.k', e.g. '2.3'; got {label!r}")
    (fig or plt.gcf()).text(0, 1, f"Figure {label}", ha="left", va="bottom", fontsize=12, fontweight="bold")


def show_token(token: str) -> str:
    """Make whitespace visible in axis labels: space → ␣, newline → ⏎."""
    return token.replace(" ", "␣").replace("\n", "⏎")


def top_attended(weights_row, labels: list, k: int = 3) -> str:
    """The k positions one query attends to most, as "token@position weight, ...".

    >>> top_attended(torch.tensor([0.1, 0.6, 0.3]), ["a", "b", "c"], k=2)
    'b@1 0.60, c@2 0.30'
    """
    top = weights_row.topk(k)
    return ", ".join(f"{show_token(labels[j])}@{j} {fmt(w, 2)}" for w, j in zip(top.values.tolist(), top.indices.tolist()))


def attention_heatmap(weights, labels: list, title: str = "", ax=None, annotate: bool = False,
                      fontsize: float = 8, colorbar: bool = True, positions: bool = False):
    """A (T, T) attention matrix: rows = querying position, columns = attended position.

    Every position is labelled with its character (fontsize ≥ 7 stays legible on the page); `positions`
    adds the position numbers along the top, every 5th, to match the printed 'char@position' lists.
    Without `ax` it makes its own figure, with a colour bar for the weights (0 to 1) unless `colorbar=False`;
    `attention_grid` draws several heads with one shared colour bar."""
    weights = weights.detach().numpy() if hasattr(weights, "detach") else weights
    if weights.shape != (len(labels), len(labels)):
        raise ValueError(f"weights of shape {weights.shape} do not match {len(labels)} labels")
    fig = None
    if ax is None:
        side = 1.2 + 0.15 * len(labels) * fontsize / 8
        fig, ax = plt.subplots(figsize=(side + (1.0 if colorbar else 0), side), layout="constrained")
    image = ax.imshow(weights, cmap="Blues", vmin=0, vmax=1)
    ticks = range(len(labels))
    shown = [show_token(t) for t in labels]
    ax.set_xticks(ticks, shown, fontsize=fontsize)
    ax.set_yticks(ticks, shown, fontsize=fontsize)
    ax.tick_params(length=2, pad=1.5)
    ax.set_xlabel("attended position (key)")
    ax.set_ylabel("position (query)")
    if positions:
        top = ax.secondary_xaxis("top")
        top.set_xticks(range(0, len(labels), 5))
        top.tick_params(labelsize=fontsize - 1, length=2, pad=1, colors="0.4")
    if annotate:
        for i in ticks:
            for j in ticks:
                if weights[i, j] >= 0.005:
                    ax.text(j, i, f"{weights[i, j]:.2f}"[1:], ha="center", va="center", fontsize=5,
                            color="white" if weights[i, j] > 0.5 else "black")
    ax.set_title(title, fontsize=fontsize + 2)
    if fig is not None and colorbar:
        fig.colorbar(image, ax=ax, shrink=0.8, label="attention weight")
    return fig or ax.figure


def attention_grid(attention, labels: list, title: str = "", fontsize: float = 8):
    """Every head of every layer: attention[layer] is (1, heads, T, T); one row per layer, one shared colour bar.
    Characters label the outer axes only (the same text runs along every panel)."""
    layers, heads = len(attention), attention[0].shape[1]
    panel = 0.4 + 0.11 * len(labels) * fontsize / 8          # inches per panel: a label every ~8 points
    fig, axes = plt.subplots(layers, heads, figsize=(heads * panel + 1.3, layers * panel + 1.2),
                             sharex=True, sharey=True, squeeze=False, layout="constrained")
    for layer in range(layers):
        for head in range(heads):
            attention_heatmap(attention[layer][0, head], labels, title=f"layer {layer}, head {head}",
                              ax=axes[layer, head], fontsize=fontsize)
            axes[layer, head].label_outer()
    fig.colorbar(axes[0, 0].images[0], ax=axes, shrink=0.6, aspect=25, pad=0.01, label="attention weight")
    if title:
        fig.suptitle(title)
    return fig


def bars(ax, categories: list, series: dict, digits: int = 2, horizontal: bool = False, reference: dict = None):
    """Grouped bars on `ax`: series = {label: [value per category]}, each bar labelled with its value
    (`fmt(value, digits)`, as the table next to it prints it); reference = {label: value} draws gray lines.
    Horizontal bars suit long category names (read top to bottom in the table's order)."""
    width = 0.8 / len(series)
    for k, (label, values) in enumerate(series.items()):
        where = [i + (k - (len(series) - 1) / 2) * width for i in range(len(categories))]
        drawn = (ax.barh if horizontal else ax.bar)(where, values, width, label=label)
        ax.bar_label(drawn, labels=[fmt(v, digits) for v in values], padding=2, fontsize=8,
                     bbox={"boxstyle": "square,pad=0.05", "facecolor": "white", "edgecolor": "none"})
    for style, (label, value) in zip(REFERENCE_STYLES, (reference or {}).items()):
        (ax.axvline if horizontal else ax.axhline)(value, linestyle=style, linewidth=1.2, color="0.35", label=label)
    (ax.set_yticks if horizontal else ax.set_xticks)(range(len(categories)), categories)
    if horizontal and not ax.yaxis_inverted():    # an axis shared with a previous call is inverted already
        ax.invert_yaxis()
    ax.margins(**{"x" if horizontal else "y": 0.15})   # room for the value labels
    return ax


def seed_band(ax, steps: list, runs: list, label: str, **style):
    """One learning curve over seeds: runs = a list (one per seed) of values at `steps`; the line is their
    mean, the shaded band spans the lowest and highest seed."""
    values = torch.tensor(runs, dtype=torch.float64)                          # (seeds, steps)
    line, = ax.plot(steps, values.mean(0), label=f"{label} (mean of {len(runs)} seeds)", **style)
    ax.fill_between(steps, values.min(0).values, values.max(0).values, color=line.get_color(), alpha=0.18,
                    linewidth=0)
    return line


def token_columns(columns: dict, values: list, marked: list, value_label: str, title: str = ""):
    """Tokens position by position, top to bottom, one column each (columns = {name: [token, ...]}); the last
    column's cells are coloured by `values` (0 to 1, printed beside them) and outlined in red where `marked`."""
    names, T = list(columns), len(values)
    last = len(names) - 1
    fig, ax = plt.subplots(figsize=(1.1 * len(names) + 1.9, 0.23 * T + 0.9))
    image = ax.imshow([[v] for v in values], cmap=LinearSegmentedColormap.from_list("shown", ["white", "#b2182b"]),
                      vmin=0, vmax=1, extent=(last - 0.45, last + 0.45, T - 0.5, -0.5), aspect="auto")
    for c, name in enumerate(names):
        for i, token in enumerate(columns[name]):
            white = c == last and values[i] > 0.6
            ax.text(c, i, show_token(token), ha="center", va="center", fontsize=9, color="white" if white else "black")
    for i, value in enumerate(values):
        ax.text(last + 0.55, i, fmt(value, 2), ha="left", va="center", fontsize=8, color="0.3")
        if marked[i]:
            ax.add_patch(Rectangle((last - 0.45, i - 0.45), 0.9, 0.9, fill=False, edgecolor="red", linewidth=1.6))
    ax.set_xlim(-0.6, len(names) + 0.1)
    ax.set_ylim(T - 0.5, -0.5)
    ax.set_xticks(range(len(names)), names, fontsize=9)
    ax.xaxis.tick_top()
    ax.set_yticks(range(T), range(T), fontsize=7)
    ax.set_ylabel("position", fontsize=8)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    fig.colorbar(image, ax=ax, shrink=0.6, pad=0.02, label=value_label)
    ax.set_title(title, fontsize=9, pad=16)
    return fig


def expert_loads(ax, log: list, layer: int, title: str = ""):
    """Each expert's share of a routed layer's assignments over training (a `trainers.char_lm` log of a mixture
    of experts: one line per expert) and the uniform share (dotted)."""
    steps = [row["step"] for row in log]
    load = torch.tensor([row["load"][layer] for row in log])                 # (rows, experts)
    for e in range(load.shape[1]):
        ax.plot(steps, load[:, e], label=f"expert {e}")
    ax.axhline(1 / load.shape[1], color="0.4", linestyle=":", label="uniform")
    ax.set_title(title, fontsize=10)
    ax.set_ylabel("share of tokens")
    return ax


def capacity_bars(ax, sent: list, capacity: int, title: str = ""):
    """Assignments sent to each expert against its capacity (dashed): the part of a bar up to the capacity is
    blue (kept), the part above it red (dropped)."""
    experts = range(len(sent))
    kept = [min(n, capacity) for n in sent]
    ax.bar(experts, kept, color="#4393c3", label="kept")
    ax.bar(experts, [n - k for n, k in zip(sent, kept)], bottom=kept, color="#b2182b", label="dropped")
    ax.axhline(capacity, color="0.3", linestyle="--", label=f"capacity {capacity:,}")
    ax.set_xticks(list(experts))
    ax.set_xlabel("expert")
    ax.set_ylabel("assignments sent")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper right")
    return ax


def log_panels(logs: dict, keys: dict, columns: int = 3):
    """One panel per logged key ({key: title}), one colour per arm ({arm: [a log per seed]}), each seed a line over
    the logged steps; one legend for the figure.  Returns the figure."""
    rows = math.ceil(len(keys) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.7 * columns, 2.6 * rows + 0.4), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (key, title) in zip(axes.flat, keys.items()):
        for (arm, seed_logs), color in zip(logs.items(), colors):
            for seed, log in enumerate(seed_logs):
                ax.plot([r["step"] for r in log], [r[key] for r in log], color=color, alpha=0.75,
                        label=arm if seed == 0 else None)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
    for ax in axes.flat[len(keys):]:
        ax.axis("off")
    fig.legend(*axes.flat[0].get_legend_handles_labels(), loc="upper center", ncol=len(logs), fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return fig


LAYOUT_COLORS = {"read": "#f0f0f0", "target": "#9ecae1", "sentinel": "#fdae6b", "mask": "#bcbddc", "answer": "#a1d99b"}


def token_layout(rows: list, title: str = "", width: float = 0.62):
    """A picture of sequences token by token: rows = [(label, [(token, role), ...]), ...], each box coloured by
    its role (LAYOUT_COLORS: read, target, sentinel, mask, answer; a role may be None: no box), the
    row's label on the left.  For the input/target layouts of an objective, before its code."""
    longest = max(len(tokens) for _, tokens in rows)
    fig, ax = plt.subplots(figsize=(width * longest + 2.2, 0.42 * len(rows) + 0.7))
    used = []
    for r, (label, tokens) in enumerate(rows):
        ax.text(-0.7, r, label, ha="right", va="center", fontsize=8)
        for c, (token, role) in enumerate(tokens):
            if role is not None:
                ax.add_patch(Rectangle((c - 0.47, r - 0.38), 0.94, 0.76, facecolor=LAYOUT_COLORS[role],
                                       edgecolor="0.6", linewidth=0.6))
                used += [role] if role not in used else []
            ax.text(c, r, show_token(token), ha="center", va="center", fontsize=7.5)
    ax.set_xlim(-0.6, longest - 0.4)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.axis("off")
    handles = [Rectangle((0, 0), 1, 1, facecolor=LAYOUT_COLORS[role], edgecolor="0.6") for role in used]
    ax.legend(handles, used, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=len(used), fontsize=8, frameon=False)
    ax.set_title(title, fontsize=9)
    return fig
