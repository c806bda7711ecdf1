"""Architecture diagrams drawn with matplotlib: boxes stacked bottom to top, the residual stream beside them.

    fig, axes = plt.subplots(1, 2)
    block_diagram(axes[0], "before", [("LayerNorm", False), ("attention", True), ...], below=[...], above=[...])
    models_diagram(ax, "DPO", [("policy", "trains", True), ("reference", "frozen", False)])   # section 11
"""

from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

CHANGED = "#f6c85f"     # a part section 09 replaces
SAME = "#dfe7f2"


def _box(ax, y, text, changed, x=0.5, width=0.62, height=0.075):
    ax.add_patch(FancyBboxPatch((x - width / 2, y - height / 2), width, height, boxstyle="round,pad=0.01",
                                facecolor=CHANGED if changed else SAME, edgecolor="#444444", linewidth=1))
    ax.text(x, y, text, ha="center", va="center", fontsize=8.5)


def _arrow(ax, start, end, **style):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=9, color="#444444", linewidth=1, **style))


def block_diagram(ax, title: str, sublayers: list, below: list, above: list):
    """Draw one decoder: `below` the embeddings [(text, changed)], then the block's two sub-layers, each a
    [(norm, changed), (layer, changed)] pair whose output is added back to the residual stream (the line on the
    right), then `above` the output [(text, changed)].  Changed parts are shaded."""
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.axis("off")
    ax.set_title(title, fontsize=10)
    rows = [*below, *[part for pair in sublayers for part in pair], *above]
    ys = [0.06 + i * 0.88 / (len(rows) - 1) for i in range(len(rows))]
    for (text, changed), y in zip(rows, ys):
        _box(ax, y, text, changed)
    for y0, y1 in zip(ys, ys[1:]):
        _arrow(ax, (0.5, y0 + 0.04), (0.5, y1 - 0.04))
    first = len(below)
    for i in range(len(sublayers)):            # the residual path around each sub-layer: stream in, sum out
        start, end = ys[first + 2 * i - 1] + 0.045, ys[first + 2 * i + 1] + 0.055
        ax.plot([0.5, 0.9, 0.9], [start, start, end], color="#888888", linewidth=1)
        _arrow(ax, (0.9, end), (0.82, end))
        ax.text(0.93, end, "+", fontsize=11, va="center")
    ax.text(0.5, -0.02, "×L blocks: the two middle pairs repeat", ha="center", fontsize=7.5, color="#666666")


def models_diagram(ax, title: str, models: list):
    """Draw the models a training method keeps in memory, side by side: [(name, what it does, trains)]; the ones
    that train are shaded."""
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.axis("off")
    ax.set_title(title, fontsize=10)
    width = 0.9 / len(models)
    for i, (name, role, trains) in enumerate(models):
        x = 0.05 + width * (i + 0.5)
        _box(ax, 0.55, name, trains, x=x, width=width * 0.85, height=0.3)
        ax.text(x, 0.18, role, ha="center", va="center", fontsize=7.5, color="#444444")
    ax.text(0.99, 0.95, "shaded: trains", ha="right", va="top", fontsize=7, color="#666666")
