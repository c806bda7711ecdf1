"""Architecture diagrams drawn with matplotlib: boxes stacked bottom to top, the residual stream beside them.

    fig, axes = plt.subplots(1, 2)
    block_diagram(axes[0], "before", [("LayerNorm", False), ("attention", True), ...], below=[...], above=[...])
    models_diagram(ax, "DPO", [("policy", "trains", True), ("reference", "frozen", False)])   # section 11
    fig = tiny_gpt(model.config)                    # section 02: the base model's data flow, sizes from its config
    fig = architectures(tokens, masked=2, prefix=4, t5_source=..., t5_target=...)   # section 03: where each has a loss
"""

import matplotlib.pyplot as plt
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch, Rectangle

CHANGED = "#f6c85f"     # a part section 09 replaces
SAME = "#dfe7f2"
ATTENTION, MLP, EMBED, FADED = "#dbe9f6", "#fde3c8", "#e3f1df", "#888888"
LOSS, NO_LOSS = "#f4c7c3", "#f2f2f2"     # a position scored by the loss, and one computed but not scored (or unused)


def _box(ax, y, text, changed, x=0.5, width=0.62, height=0.075, color=None, size=8.5):
    ax.add_patch(FancyBboxPatch((x - width / 2, y - height / 2), width, height, boxstyle="round,pad=0.01",
                                facecolor=color or (CHANGED if changed else SAME), edgecolor="#444444", linewidth=1))
    ax.text(x, y, text, ha="center", va="center", fontsize=size)


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



def _add(ax, x, y):
    ax.add_patch(Circle((x, y), 0.17, facecolor="white", edgecolor="#444444", linewidth=1, zorder=3))
    ax.text(x, y, "+", ha="center", va="center", fontsize=11, zorder=4)


def tiny_gpt(config, title: str = "TinyGPT: one forward pass"):
    """The base model's data flow (a pre-LayerNorm GPT): token and position embeddings summed into the residual
    stream; in each block, LayerNorm -> attention -> added back, LayerNorm -> MLP -> added back; the last LayerNorm,
    and the output layer that is the token embedding.  Sizes from `config` (a `ModelConfig`); B = batch,
    T = positions."""
    d, h, V, T, L = config.d_model, config.n_heads, config.vocab_size, config.context, config.n_layers
    fig, ax = plt.subplots(figsize=(7.2, 8.6))
    ax.set_xlim(-1.6, 6.2)
    ax.set_ylim(0.4, 11.1)
    ax.axis("off")
    rx, bx = 0.6, 3.6                                            # x of the residual stream and of the sub-layers
    _box(ax, 10.6, f"token ids  (B, T), T ≤ {T}", False, x=rx, width=3.0, height=0.52, color="white")
    for x, text in ((-0.45, f"wte: {V} × {d}"), (1.65, f"wpe: {T} × {d}")):
        _box(ax, 9.6, text, False, x=x, width=1.9, height=0.52, color=EMBED)
        _arrow(ax, (rx + (x - rx) * 0.4, 10.34), (x + (rx - x) * 0.15, 9.86))
        _arrow(ax, (x, 9.34), (rx + (0.14 if x > rx else -0.14), 9.06))
    _add(ax, rx, 8.95)
    ax.text(rx - 0.3, 7.9, f"residual stream x\n(B, T, {d})", ha="right", va="top", fontsize=8.5, color=FADED)
    ax.add_patch(Rectangle((-1.45, 2.75), 7.5, 5.75, fill=False, linestyle="--", edgecolor=FADED))
    ax.text(6.0, 8.35, f"block × {L}", ha="right", va="top", fontsize=9, color=FADED)
    ax.plot([rx, rx], [8.78, 2.35], color=FADED, linewidth=3, zorder=0)
    sublayers = ((8.1, ["LayerNorm", f"qkv: {d} → {3 * d}", f"{h} heads × {d // h}: softmax(q·kᵀ/√{d // h} + mask)·v",
                        f"proj: {d} → {d}"], ATTENTION, "attention"),
                 (5.35, ["LayerNorm", f"fc: {d} → {config.hidden}, GELU", f"fc2: {config.hidden} → {d}"], MLP, "MLP"))
    for top, rows, color, name in sublayers:
        ys = [top - 0.6 * k for k in range(len(rows))]
        _arrow(ax, (rx, top + 0.1), (bx - 1.35, ys[0]))
        for k, (y, text) in enumerate(zip(ys, rows)):
            _box(ax, y, text, False, x=bx, width=3.9 if "heads" in text else 2.7, height=0.52, color=color)
            if k:
                _arrow(ax, (bx, ys[k - 1] - 0.26), (bx, y + 0.26))
        _add(ax, rx, ys[-1] - 0.45)
        _arrow(ax, (bx, ys[-1] - 0.26), (rx + 0.17, ys[-1] - 0.45))
        ax.text(bx + 2.1, (ys[0] + ys[-1]) / 2, name, rotation=90, ha="center", va="center", fontsize=9)
    _box(ax, 2.1, "LayerNorm (ln_f)", False, x=rx, width=2.4, height=0.52, color="white")
    _box(ax, 1.35, f"logits = x · wteᵀ  (B, T, {V})", False, x=rx, width=3.2, height=0.52, color=EMBED)
    _arrow(ax, (rx, 1.84), (rx, 1.61))
    ax.text(rx + 1.75, 1.35, "the output layer is the\ntoken embedding (tied)", ha="left", va="center", fontsize=8)
    ax.set_title(title, fontsize=11)
    fig.tight_layout()
    return fig



def _token_row(ax, xs, y, tokens, losses=None):
    """One row of token boxes; where `losses` is given, a shaded box carries a loss and a pale one does not."""
    for x, token, loss in zip(xs, tokens, losses or [None] * len(tokens)):
        _box(ax, y, token, False, x=x, width=0.86, height=0.5, size=8 if len(token) <= 4 else 6.5,
             color="white" if loss is None else (LOSS if loss else NO_LOSS))


def _stack(ax, x0, x1, y, text, color):
    ax.add_patch(FancyBboxPatch((x0, y - 0.35), x1 - x0, 0.7, boxstyle="round,pad=0.02", facecolor=color,
                                edgecolor="#444444", linewidth=1))
    ax.text((x0 + x1) / 2, y, text, ha="center", va="center", fontsize=8.5)


def architectures(tokens: list, masked: int, prefix: int, t5_source: list, t5_target: list):
    """The four families on one example, where each computes a loss (shaded targets): GPT (one stack, causal: every
    next token), prefix LM (the first `prefix` tokens a bidirectional prefix: the tokens after it), BERT (one stack,
    bidirectional: the token at `masked`, given as <mask>), T5 (an encoder reads `t5_source`, a decoder writes
    `t5_target` after <bos>, reading the encoder through cross-attention: every target token)."""
    fig, axes = plt.subplots(2, 2, figsize=(10.5, 6.2))
    n = len(tokens)
    one_stack = [("GPT: causal mask", tokens[:-1], tokens[1:], [True] * (n - 1), ATTENTION),
                 (f"prefix LM: the first {prefix} tokens see each other", tokens[:-1], tokens[1:],
                  [i >= prefix - 1 for i in range(n - 1)], ATTENTION),
                 ("BERT: bidirectional mask", [t if i != masked else "<mask>" for i, t in enumerate(tokens)], tokens,
                  [i == masked for i in range(n)], MLP)]
    for ax, (title, inputs, targets, losses, color) in zip(axes.flat, one_stack):
        xs = list(range(len(inputs)))
        _token_row(ax, xs, 0.5, inputs)
        _stack(ax, -0.5, len(inputs) - 0.5, 1.6, "one stack of blocks", color)
        _token_row(ax, xs, 2.7, targets, losses)
        for x in xs:
            _arrow(ax, (x, 0.77), (x, 1.23))
            _arrow(ax, (x, 1.97), (x, 2.43))
        ax.set_title(title, fontsize=9.5)
    ax = axes.flat[3]
    src, dec = list(range(len(t5_source))), [len(t5_source) + 0.6 + k for k in range(len(t5_target))]
    _token_row(ax, src, 0.5, t5_source)
    _stack(ax, -0.5, len(t5_source) - 0.5, 1.6, "encoder (bidirectional)", MLP)
    _token_row(ax, dec, 0.5, ["<bos>", *t5_target[:-1]])
    _stack(ax, dec[0] - 0.5, dec[-1] + 0.5, 1.6, "decoder (causal)", ATTENTION)
    _token_row(ax, dec, 2.7, t5_target, [True] * len(t5_target))
    _arrow(ax, (len(t5_source) - 0.5, 1.6), (dec[0] - 0.5, 1.6))
    ax.text((len(t5_source) + dec[0]) / 2 - 0.5, 1.95, "cross-\nattention", ha="center", fontsize=7.5)
    for x in src:
        _arrow(ax, (x, 0.77), (x, 1.23))
    for x in dec:
        _arrow(ax, (x, 0.77), (x, 1.23))
        _arrow(ax, (x, 1.97), (x, 2.43))
    ax.set_title("T5: encoder-decoder, spans replaced by sentinels", fontsize=9.5)
    width = max(len(t5_source) + len(t5_target) + 0.6, n)
    for ax in axes.flat:
        ax.set_xlim(-0.7, width - 0.3)
        ax.set_ylim(0, 3.3)
        ax.axis("off")
        ax.text(-0.65, 0.5, "in", ha="right", va="center", fontsize=8, color=FADED)
        ax.text(-0.65, 2.7, "out", ha="right", va="center", fontsize=8, color=FADED)
    fig.text(0.5, 0.01, "shaded output: a loss is computed there; pale: computed, no loss", ha="center", fontsize=8.5)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig


def moe_layer(model: dict, chosen: tuple):
    """One MoE feed-forward layer for one token, from a config's "model" dict (`n_experts`, `top_k`, `expert_hidden`,
    `n_shared`, `capacity_factor`, `d_model`): the router's softmax over the experts, the top-k kept (`chosen`, an
    example), only those experts computed, their outputs weighted by the gates and summed, added to the residual
    stream; a shared expert, if any, computed for every token."""
    d, E, k, h = model["d_model"], model["n_experts"], model["top_k"], model["expert_hidden"]
    if len(chosen) != k or not all(0 <= i < E for i in chosen):
        raise ValueError(f"chosen must name {k} of the {E} experts, got {chosen}")
    shared = model.get("n_shared", 0)
    columns = E + shared
    fig, ax = plt.subplots(figsize=(max(7.5, 1.05 * columns + 1.5), 5.2))
    ax.set_xlim(-1.2, columns + 0.2)
    ax.set_ylim(-0.2, 5.6)
    ax.axis("off")
    mid = (columns - 1) / 2
    _box(ax, 0.3, f"x: one token's hidden state ({d})", False, x=mid, width=3.4, height=0.45, color="white")
    _box(ax, 1.3, f"router: softmax(W_r x), W_r is {E} × {d}; keep the top {k}", False, x=mid, width=5.2, height=0.45,
         color=ATTENTION)
    _arrow(ax, (mid, 0.53), (mid, 1.07))
    for i in range(columns):
        is_shared = i >= E
        used = is_shared or i in chosen
        name = "shared" if is_shared else f"expert {i}"
        _box(ax, 2.75, f"{name}\n{d}→{h}→{d}", False, x=i, width=0.9, height=0.75, size=7.5,
             color=(MLP if used else NO_LOSS))
        if used:
            _arrow(ax, (mid + (i - mid) * 0.25, 1.53), (i, 2.37))
            _arrow(ax, (i, 3.13), (mid + (i - mid) * 0.15, 3.83))
            ax.text(i, 3.35, "× 1" if is_shared else f"× g{i}", ha="center", fontsize=7.5)
        else:
            ax.text(i, 2.2, "not computed", ha="center", fontsize=6.5, color=FADED)
    _box(ax, 4.05, "y = Σ g_i · expert_i(x)", False, x=mid, width=3.2, height=0.45, color="white")
    _box(ax, 5.0, "x + y  (the residual stream)", False, x=mid, width=3.2, height=0.45, color="white")
    _arrow(ax, (mid, 4.28), (mid, 4.77))
    capacity = model.get("capacity_factor")
    note = (f"capacity: an expert takes at most {capacity} × (tokens × {k} / {E}) assignments per batch; the rest are "
            "dropped" if capacity else "no capacity limit: nothing is dropped")
    ax.text(mid, -0.15, note, ha="center", fontsize=8, color=FADED)
    ax.set_title(f"an MoE layer: {E} experts" + (f" + {shared} shared" if shared else "") + f", top-{k} per token",
                 fontsize=10)
    fig.tight_layout()
    return fig


def electra(tokens: list, samples: dict, generator_width: int, width: int):
    """ELECTRA on one example: `tokens` (the original), `samples` {position: the generator's draw there} (an
    example; a draw equal to the original is labelled original).  The generator (a small masked LM, `generator_width`)
    reads the tokens with <mask> at those positions and is scored there; the discriminator (`width`, as BERT) reads the
    corrupted tokens and is scored at every position: replaced or original."""
    n = len(tokens)
    corrupted = [samples.get(i, t) for i, t in enumerate(tokens)]
    fig, ax = plt.subplots(figsize=(max(8.0, 0.95 * n + 2.2), 6.0))
    ax.set_xlim(-2.4, n - 0.3)
    ax.set_ylim(-0.3, 6.9)
    ax.axis("off")
    rows = [(0.3, "original", tokens, None),
            (1.3, "generator reads", ["<mask>" if i in samples else t for i, t in enumerate(tokens)], None),
            (3.3, "generator writes", corrupted, [i in samples for i in range(n)]),
            (5.3, "discriminator says", ["replaced" if c != t else "original" for c, t in zip(corrupted, tokens)],
             [True] * n)]
    for y, label, row, losses in rows:
        _token_row(ax, range(n), y, row, losses)
        ax.text(-0.6, y, label, ha="right", va="center", fontsize=8.5)
    _stack(ax, -0.5, n - 0.5, 2.3, f"generator: a small masked LM (width {generator_width}); a draw from its softmax "
           "fills each <mask>", MLP)
    _stack(ax, -0.5, n - 0.5, 4.3, f"discriminator: as wide as BERT ({width}), bidirectional; one logit per position",
           ATTENTION)
    for i in range(n):
        _arrow(ax, (i, 0.57), (i, 1.03))
        _arrow(ax, (i, 3.57), (i, 3.95))
        _arrow(ax, (i, 4.65), (i, 5.03))
        _arrow(ax, (i, 1.57), (i, 1.95))                  # the generator reads every position
        if i in samples:                                  # and writes only at its <mask>s (the rest are copied)
            _arrow(ax, (i, 2.65), (i, 3.03))
    ax.text((n - 1) / 2, 6.55, "shaded: a loss is computed there (the generator's at its <mask>s, the discriminator's "
            "everywhere); the draw cannot be differentiated, so the discriminator's loss never reaches the generator",
            ha="center", fontsize=7.5, wrap=True)
    fig.tight_layout()
    return fig


def cached_heads(configs: dict):
    """What a decoder caches per token and layer, for each {name: (ModelConfig, numbers cached per token and layer)}:
    the query heads (top) and the key/value heads they read (bottom: one pair per head in MHA, one per group in GQA,
    one in MQA); MLA caches one latent vector (and a shared RoPE key) from which every head's key and value are
    expanded.  The sizes are the config's; the count is the caller's (§10: `models.kv_numbers_per_token`)."""
    fig, axes = plt.subplots(1, len(configs), figsize=(3.1 * len(configs), 3.4))
    for ax, (name, (config, per_layer)) in zip(axes, configs.items()):
        h, d_h = config.n_heads, config.d_model // config.n_heads
        ax.set_xlim(-0.6, h - 0.4)
        ax.set_ylim(-0.9, 3.0)
        ax.axis("off")
        for i in range(h):
            _box(ax, 2.3, f"q{i}", False, x=i, width=0.7, height=0.4, color=ATTENTION, size=8)
        if config.kv_latent:
            c = config.kv_latent
            _box(ax, 0.0, f"c ({c}) + RoPE key ({config.rope_key})", False, x=(h - 1) / 2, width=h - 0.2, height=0.42,
                 color=EMBED, size=8)
            for i in range(h):
                _box(ax, 1.15, f"k{i} v{i}", False, x=i, width=0.7, height=0.4, color=NO_LOSS, size=7)
                _arrow(ax, ((h - 1) / 2 + (i - (h - 1) / 2) * 0.5, 0.21), (i, 0.95))
                _arrow(ax, (i, 1.35), (i, 2.1))
            ax.text((h - 1) / 2, 0.6, "expanded per head (not cached)", ha="center", fontsize=7, color=FADED,
                    bbox=dict(facecolor="white", edgecolor="none", pad=0.5))
        else:
            g = config.groups
            kv_x = [(j + 0.5) * h / g - 0.5 for j in range(g)]
            for j, x in enumerate(kv_x):
                _box(ax, 0.0, f"k{j} v{j}", False, x=x, width=0.7, height=0.42, color=EMBED, size=8)
            for i in range(h):
                x = kv_x[i * g // h]
                _arrow(ax, (x, 0.21), (i, 2.1))
        ax.text((h - 1) / 2, -0.65, f"cached per token and layer: {per_layer}", ha="center", fontsize=8.5)
        ax.set_title(name, fontsize=10)
    first = next(iter(configs.values()))[0]
    fig.text(0.5, 0.99, f"query heads (top) and what they read from the cache (shaded: cached); d_h = "
             f"{first.d_model // first.n_heads}", ha="center", va="top", fontsize=8.5)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return fig


def retrieval_pipeline(question: str, datastore_size: int, retrieved: str, prompt: str, answer: str):
    """Retrieval-augmented answering as §07 builds it: the question goes to a retriever over the datastore, the line
    it returns is put before the question, and the reader writes the answer from that prompt.  The strings are the
    example's own (computed by the notebook); the boxes say which part is a model and which is data."""
    fig, ax = plt.subplots(figsize=(10.5, 3.6))
    ax.set_xlim(0, 10.5)
    ax.set_ylim(0, 3.6)
    ax.axis("off")
    _box(ax, 3.0, f"question  {question!r}", False, x=1.9, width=3.5, height=0.5, color="white", size=8.5)
    _box(ax, 1.6, "retriever\n(TF-IDF or a dual encoder)", False, x=1.9, width=3.0, height=0.75, color=ATTENTION)
    _box(ax, 0.4, f"datastore: {datastore_size} lines, one per person", False, x=1.9, width=3.5, height=0.5,
         color=EMBED, size=8.5)
    _arrow(ax, (1.9, 2.75), (1.9, 1.98))
    _arrow(ax, (1.9, 0.65), (1.9, 1.22))
    _box(ax, 1.6, f"top line  {retrieved!r}", False, x=5.2, width=2.9, height=0.5, color=EMBED, size=8.5)
    _arrow(ax, (3.4, 1.6), (3.75, 1.6))
    _box(ax, 3.0, "the reader's prompt:\n" + prompt.replace("\n", "\\n\n"), False, x=8.4, width=3.6, height=0.95,
         color="white", size=8)
    _arrow(ax, (6.65, 1.75), (6.95, 2.6))
    _arrow(ax, (3.65, 3.0), (6.6, 3.0))
    _box(ax, 1.35, "reader: the base model fine-tuned\nto answer from the line before the question", False,
         x=8.4, width=3.3, height=0.75, color=MLP)
    _arrow(ax, (8.4, 2.52), (8.4, 1.73))
    _box(ax, 0.35, f"answer  {answer!r}", False, x=8.4, width=2.6, height=0.45, color=LOSS, size=8.5)
    _arrow(ax, (8.4, 0.97), (8.4, 0.58))
    ax.text(5.2, 0.35, "change a line of the datastore:\nthe answer changes, no training", ha="center", fontsize=8,
            color=FADED)
    fig.tight_layout()
    return fig


def lora(d_in: int, d_out: int, r: int, alpha: float):
    """One LoRA layer: the frozen W (d_out x d_in) beside the trained low-rank path, A (r x d_in) then B (d_out x r),
    scaled by alpha / r and added to W x; with the numbers each side trains."""
    fig, ax = plt.subplots(figsize=(8.0, 3.8))
    ax.set_xlim(0, 8.4)
    ax.set_ylim(0, 3.9)
    ax.axis("off")
    _box(ax, 0.35, f"x  ({d_in})", False, x=4.0, width=1.8, height=0.45, color="white")
    _box(ax, 1.9, f"W: {d_out} × {d_in}\nfrozen ({d_out * d_in:,} numbers)", False, x=2.0, width=2.8, height=0.85,
         color=NO_LOSS)
    _box(ax, 1.35, f"A: {r} × {d_in}  (random init)", False, x=6.0, width=2.6, height=0.5, color=MLP, size=8.5)
    _box(ax, 2.3, f"B: {d_out} × {r}  (zeros at first)", False, x=6.0, width=2.6, height=0.5, color=MLP, size=8.5)
    _box(ax, 3.45, f"y = W x + b + ({alpha:g}/{r}) · B A x   ({d_out})", False, x=4.0, width=4.6, height=0.45,
         color="white")
    _arrow(ax, (3.6, 0.58), (2.4, 1.47))
    _arrow(ax, (4.4, 0.58), (5.6, 1.1))
    _arrow(ax, (6.0, 1.6), (6.0, 2.05))
    _arrow(ax, (2.0, 2.33), (3.4, 3.22))
    _arrow(ax, (6.0, 2.55), (4.6, 3.22))
    ax.text(7.45, 1.85, f"trained:\n{r * (d_in + d_out):,} numbers", ha="center", va="center", fontsize=8)
    ax.set_title("LoRA on one matrix: the change B A has rank r and starts at zero", fontsize=10)
    fig.tight_layout()
    return fig
