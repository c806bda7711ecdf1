"""Section 02's measurements of what happens inside a TinyGPT (or a PostLNGPT):

- `leaf_trace`: every leaf module's input and output, in call order (the data flow);
- `block_writes`: per block, the length of the residual stream entering it, of what its attention and MLP
  write into it, and the loss's gradient over its parameters;
- `queries_and_keys`: per layer, the queries and keys the model computes;
- `prediction_confidence`: how often the likeliest next character is right, and how sure the model is;
- `ablated` + `ablation_measurements`: the base model with parts switched off by name (the slider's settings),
  and its bits/char and fact completion, each setting measured once;
- `name_attention`: each head's attention on the person's name where the answer starts, one row per person;
- `city_choice`: the likeliest of the 12 cities as the answer, optionally with one layer kept from reading the name.
- `true_city_rank`: where the true city ranks among the 12 answers (a reading of the output, not of the states).
"""

import torch

from lib.data import world
from lib.data.tokenizers import CHARS
from lib.measure import answers, evals, precision, retrieval
from lib.measure.ablations import ablate
from lib.nn.masks import causal_mask
from lib.nn.models import MaskedTransformer, ModelConfig, TinyGPT, split_heads
from lib.nn.post_ln import PostLNGPT
from lib.objectives.batches import next_token_loss


@torch.no_grad()
def leaf_trace(model, idx) -> list:
    """[(module name, its input, its output)] of every leaf module (no children) of `model` run on `idx`,
    in call order; a module returning a tuple is recorded by its first element.

    >>> from lib.nn.models import TinyGPT
    >>> [(name, tuple(out.shape)) for name, _, out in leaf_trace(TinyGPT(), torch.zeros(1, 5, dtype=torch.long))][:3]
    [('wte', (1, 5, 64)), ('wpe', (5, 64)), ('blocks.0.ln_1', (1, 5, 64))]
    """
    trace = []

    def record(name):
        return lambda module, inputs, output: trace.append(
            (name, inputs[0], output[0] if isinstance(output, tuple) else output))

    hooks = [m.register_forward_hook(record(name)) for name, m in model.named_modules()
             if name and not list(m.children())]
    try:
        model(idx)
    finally:
        for hook in hooks:
            hook.remove()
    return trace


def block_writes(model, batch) -> list:
    """Per block of `model`, a row {"block", "stream in", "attention writes", "MLP writes", "writes / stream",
    "gradient"} on a batch of token windows (B, T + 1): the mean length (L2 norm over the positions) of the
    residual stream entering the block and of what its attention and MLP write, the two writes' sum over the
    stream, and the norm of the next-token loss's gradient over the block's parameters.  Changes no weight
    and no `.grad`."""
    seen, hooks = {}, []
    for i, block in enumerate(model.blocks):
        hooks += [block.register_forward_pre_hook(lambda _, args, i=i: seen.__setitem__((i, "stream in"), args[0])),
                  block.attn.register_forward_hook(lambda _, __, out, i=i: seen.__setitem__((i, "attention"), out[0])),
                  block.mlp.register_forward_hook(lambda _, __, out, i=i: seen.__setitem__((i, "MLP"), out))]
    try:
        loss = next_token_loss(model, batch)
    finally:
        for hook in hooks:
            hook.remove()
    length = {key: float(t.detach().norm(dim=-1).mean()) for key, t in seen.items()}
    per_block = [list(block.parameters()) for block in model.blocks]
    gradients = iter(torch.autograd.grad(loss, [p for params in per_block for p in params]))
    return [{"block": i, "stream in": length[i, "stream in"], "attention writes": length[i, "attention"],
             "MLP writes": length[i, "MLP"],
             "writes / stream": (length[i, "attention"] + length[i, "MLP"]) / length[i, "stream in"],
             "gradient": float(torch.cat([next(gradients).flatten() for _ in params]).norm())}
            for i, params in enumerate(per_block)]


@torch.no_grad()
def queries_and_keys(model, ids) -> list:
    """Per layer of `model`, [q, k], each (windows, heads, T, d_h), as the model computes them on `ids` (windows, T)."""
    outputs = []
    hooks = [block.attn.qkv.register_forward_hook(lambda module, given, out: outputs.append(out))
             for block in model.blocks]
    try:
        model(ids)
    finally:
        for hook in hooks:
            hook.remove()
    return [[split_heads(t, model.config.n_heads) for t in out.split(model.config.d_model, dim=-1)[:2]]
            for out in outputs]


@torch.no_grad()
def prediction_confidence(model, lines: list) -> dict:
    """How often the model's likeliest next character is right, and how sure it is, over every prediction of
    `lines` (each scored on its own, as `evals.bits_per_char` does): {"top-1 accuracy", "mean top probability",
    "mean top probability when wrong"}, the last over the wrong predictions only."""
    right = top = top_wrong = wrong = count = 0.0
    for ids, real in evals.batches_by_length(lines):                 # equal lengths: no padding to see
        best = model(ids[:, :-1]).softmax(-1).max(-1)
        miss = (best.indices != ids[:, 1:]).float() * real
        right += float(real.sum() - miss.sum())
        top += float((best.values * real).sum())
        top_wrong += float((best.values * miss).sum())
        wrong += float(miss.sum())
        count += float(real.sum())
    return {"top-1 accuracy": right / count, "mean top probability": top / count,
            "mean top probability when wrong": top_wrong / wrong}


FULL = "attention + MLP"
LAYER_SETTINGS = {FULL: (), "no attention": ("attention_off",), "no MLP": ("mlp_off",)}   # what each switches off


POSITIONS = ("learned", "zeroed", "mean")


def ablated(model, positions="learned", layer_0=FULL, layer_1=FULL, mask="causal"):
    """A copy of the two-layer `model` (`ablations.ablate`) with parts switched off by name: positions "learned",
    "zeroed" or "mean" (every row replaced by their mean), each layer one of LAYER_SETTINGS, mask "causal" or
    "bidirectional" (or a tuple of one per layer).

    >>> from lib.nn.models import TinyGPT
    >>> ablated(TinyGPT(), layer_1="no MLP", mask="bidirectional")
    WithMask(bidirectional, zero_positions=False, attention_off=(), mlp_off=(1,))
    """
    off = {"attention_off": [], "mlp_off": []}
    for layer, setting in enumerate([layer_0, layer_1]):
        for what in LAYER_SETTINGS[setting]:
            off[what].append(layer)
    if positions not in POSITIONS:
        raise ValueError(f"unknown positions {positions!r}; choose one of {POSITIONS}")
    return ablate(model, zero_positions=positions == "zeroed", mean_positions=positions == "mean", mask=mask, **off)


def ablation_measurements(model):
    """A function measure(**setting) -> {"bits/char", "fact completion", "q: where does base live? a:"}: the
    validation bits per character, the share of fact questions answered right and base's answer (its repr)
    of `ablated(model, **setting)`; each setting is measured once and remembered."""
    results = {}

    def measure(positions="learned", layer_0=FULL, layer_1=FULL, mask="causal"):
        key = (positions, layer_0, layer_1, mask)
        if key not in results:
            copy = ablated(model, *key)
            facts = answers.fact_completion(copy)
            results[key] = {"bits/char": evals.bits_per_char(copy), "fact completion": facts["accuracy"],
                            "q: where does base live? a:": repr(facts["answers"]["base"])}
        return results[key]

    return measure


# Initialisations for `initial_gradients`: (linear layers, token table std, position table std).  "book" linear
# layers: N(0, 0.02) with the residual projections shrunk by sqrt(2L) (`models.init_weights`); "xavier":
# Xavier-normal, zero bias.  Xiong et al. (2020) analyse Xavier layers with N(0, 1) embeddings; the mixed settings
# tell the layers' part from the embeddings', and the position table's (read only at the input) from the token
# table's (tied: it is also the output layer).
INITS = {"book": ("book", 0.02, 0.02), "book, N(0, 1) embeddings": ("book", 1.0, 1.0),
         "book, N(0, 1) positions": ("book", 0.02, 1.0),
         "xavier, N(0, 0.02) embeddings": ("xavier", 0.02, 0.02), "xavier": ("xavier", 1.0, 1.0)}


def initial_gradients(n_layers: int, init: str, windows, seed: int = 0) -> dict:
    """{"pre-LN", "post-LN"}: the norm of the next-token loss's gradient over the last block's parameters
    (`block_writes`) at initialisation, for a TinyGPT of `n_layers` layers and its post-LN twin with the very
    same weights, initialised as INITS[init] says."""
    if init not in INITS:
        raise ValueError(f"unknown init {init!r}; choose one of {tuple(INITS)}")
    linear, token_std, position_std = INITS[init]
    config = ModelConfig(n_layers=n_layers)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        pre = TinyGPT(config)
        with torch.no_grad():       # "book" is TinyGPT's own initialisation: nothing to redraw
            for module in (pre.modules() if init != "book" else ()):
                if isinstance(module, torch.nn.Linear) and linear == "xavier":
                    torch.nn.init.xavier_normal_(module.weight)
                    torch.nn.init.zeros_(module.bias)
                elif isinstance(module, torch.nn.Embedding):
                    torch.nn.init.normal_(module.weight, std=token_std if module is pre.wte else position_std)
    post = PostLNGPT(config)
    post.load_state_dict({k: v for k, v in pre.state_dict().items() if not k.startswith("ln_f.")})
    pre, post = (precision.for_measurement(m, copy_model=False) for m in (pre, post))   # drawn in float32
    return {name: last_block_gradient(m, windows) for name, m in (("pre-LN", pre), ("post-LN", post))}


def last_block_gradient(model, batch) -> float:
    """The norm of the next-token loss's gradient over the last block's parameters (`block_writes`' last
    "gradient"), with the backward pass stopped at that block.  Changes no `.grad`."""
    params = list(model.blocks[-1].parameters())
    return float(torch.cat([g.flatten() for g in torch.autograd.grad(next_token_loss(model, batch), params)]).norm())


NAME_AT = len("\n" + retrieval.question("{}").split("{}")[0])   # where the name begins in "\n" + the question


@torch.no_grad()
def name_attention(model, names: list) -> torch.Tensor:
    """Each head's total attention on the person's name at the space before the answer, in
    `q: where does NAME live? a: ` (after a newline) for each name: (names, layers, heads)."""
    out, start = [], NAME_AT
    for name in names:
        text = "\n" + retrieval.question(name) + " "
        _, attention = model.forward_with_attention(torch.tensor([CHARS.encode(text)]))
        out.append(torch.stack([a[0, :, -1, start:start + len(name)].sum(-1) for a in attention]))
    return torch.stack(out)


@torch.no_grad()
def city_scores(model, name: str, blocked_layer: int = None) -> list:
    """The log-probability of ` CITY.` and its newline after `q: where does NAME live? a:`, for each of the 12
    cities (world.CITIES' order).  With `blocked_layer`, that layer's attention may not read the name's characters
    from the answer's first position on (every other position and layer as trained)."""
    prompt, start = "\n" + retrieval.question(name), NAME_AT
    scores = []
    for city in world.CITIES:
        idx = torch.tensor([CHARS.encode(prompt + f" {city}.\n")])
        T = idx.shape[1]
        masks = [causal_mask(T)] * model.config.n_layers
        if blocked_layer is not None:
            cut = causal_mask(T).clone()
            cut[len(prompt) - 1:, start:start + len(name)] = False      # rows that predict the answer
            masks = [cut if layer == blocked_layer else m for layer, m in enumerate(masks)]
        logp = MaskedTransformer.forward(model, idx, masks)[0].log_softmax(-1)
        answer = range(len(prompt) - 1, T - 1)               # the logits that predict ' CITY.\n'
        scores.append(sum(float(logp[i, idx[0, i + 1]]) for i in answer))
    return scores


def city_choice(model, names: list, blocked_layer: int = None) -> float:
    """The share of `names` whose true city is the likeliest answer to `q: where does NAME live? a:` among the
    12 cities (`city_scores`).  With `blocked_layer`: does the name reach the answer through that layer's
    attention to the name itself?"""
    home, right = world.build_world().home, 0
    for name in names:
        scores = city_scores(model, name, blocked_layer)
        right += world.CITIES[max(range(len(scores)), key=scores.__getitem__)] == home[name]
    return right / len(names)


def true_city_rank(model, names: list) -> dict:
    """{"rank": mean rank of each name's true city among the 12 by `city_scores` (1 = likeliest; 6.5 by chance),
    "probability": its mean probability with the 12 scores renormalised (1/12 by chance)}."""
    home, ranks, shares = world.build_world().home, [], []
    for name in names:
        scores = torch.tensor(city_scores(model, name), dtype=torch.float64)
        true = world.CITIES.index(home[name])
        ranks.append(1 + int((scores > scores[true]).sum()))
        shares.append(float(scores.softmax(0)[true]))
    return {"rank": sum(ranks) / len(ranks), "probability": sum(shares) / len(shares)}
