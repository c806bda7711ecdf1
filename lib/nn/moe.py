"""Mixture of experts: TinyGPT with its MLPs replaced by a router and several smaller or equal MLPs.

    config = MoEConfig(n_experts=8, top_k=2, expert_hidden=128)   # TinyGPT's ModelConfig + the MoE fields
    layer = MoELayer(config)
    y = layer(x)                 # (B, T, d) -> (B, T, d); layer.last holds the routing of this call
    model = MoEGPT(config)

The router is one linear map d -> E followed by a softmax: a probability per
expert for each token.  Only the k largest are kept (`top_k_gates`), so only
k experts compute for that token: the parameters grow with E, the compute
per token with k.  With k > 1 the kept probabilities are renormalised to
sum to 1 (the mixture of the chosen experts); with k = 1 the single gate is
the raw probability, as in the Switch Transformer, because a renormalised
single gate is always 1 and the router would get no gradient from the loss.

Capacity: each expert takes at most ceil(capacity_factor * k * N / E) of the
N tokens of a batch, first choices before second choices, earlier tokens
first.  An assignment over capacity is dropped: that expert adds nothing for
that token (counted in `last`); a token that loses all its assignments keeps
only its residual stream.  Capacity makes a token's output depend on the
rest of the batch, later tokens included: with k = 2 a second choice is kept
or not depending on every first choice of the batch.  This small leak of the
future is in every capacity-based MoE trained on whole batches; evaluation
in this book runs with no capacity limit (`with_capacity(model, None)`).

Balance: `balance_loss` = E * sum_i f_i * P_i, with f_i the share of
assignments routed to expert i and P_i the mean router probability of i.
It is 1.0 when routing is uniform and grows as the load concentrates.  The
router z-loss (mean squared log-sum-exp of the router logits) is measured too.
Shared experts (DeepSeekMoE) are MLPs every token goes through, beside its
routed ones.  A layer with no routed experts and one shared expert is a
plain dense MLP of that width.
"""

import math
from fractions import Fraction
from dataclasses import dataclass, replace

import torch
import torch.nn as nn
import torch.nn.functional as F

from lib.nn import models


@dataclass(frozen=True, repr=False)
class MoEConfig(models.ModelConfig):
    """TinyGPT's configuration plus its feed-forward layers' experts."""
    n_experts: int = 4              # E routed experts
    top_k: int = 1                  # k experts per token
    expert_hidden: int = 256        # width of each expert's hidden layer (the dense MLP's is 4d = 256)
    n_shared: int = 0               # experts every token uses
    capacity_factor: float = None   # None: no expert ever drops a token

    def __post_init__(self):
        super().__post_init__()
        if self.n_experts and not 1 <= self.top_k <= self.n_experts:
            raise ValueError(f"top_k={self.top_k} must lie in 1..n_experts={self.n_experts}")
        if not self.n_experts and not self.n_shared:
            raise ValueError("a layer needs at least one routed or shared expert")
        if self.capacity_factor is not None and self.capacity_factor <= 0:
            raise ValueError(f"capacity_factor must be positive or None, got {self.capacity_factor}")


def top_k_gates(probs, k: int, renormalize: bool = True):
    """Keep the k largest gate values of each row, zero elsewhere; renormalise the kept ones to sum to 1.

    >>> [round(g, 2) for g in top_k_gates(torch.tensor([[0.04, 0.8, 0.01, 0.15]]), k=2)[0].tolist()]
    [0.0, 0.84, 0.0, 0.16]
    """
    values, chosen = probs.topk(k, dim=-1)
    if renormalize:
        values = values / values.sum(dim=-1, keepdim=True)
    return torch.zeros_like(probs).scatter(-1, chosen, values)


def expert_capacity(n_tokens: int, config: MoEConfig) -> int:
    """How many assignments one expert takes per batch: ceil(capacity_factor * k * N / E); all of them without a factor.

    In exact arithmetic (the factor as the decimal it is written as): in floating point 1.1 * 100 / 2 is
    55.000000000000007, whose ceiling would be 56.

    >>> expert_capacity(3072, MoEConfig(n_experts=4, top_k=1, capacity_factor=1.25))
    960
    >>> expert_capacity(100, MoEConfig(n_experts=2, top_k=1, capacity_factor=1.1))
    55
    """
    if config.capacity_factor is None:
        return n_tokens
    share = Fraction(str(config.capacity_factor)) * config.top_k * n_tokens / config.n_experts
    return math.ceil(share)


def queue_positions(chosen) -> torch.Tensor:
    """chosen (N, k) expert ids -> each assignment's place in its expert's queue (N, k), counting from 0.

    First choices of all tokens queue before second choices, and earlier tokens before later ones.

    >>> queue_positions(torch.tensor([[0, 1], [0, 2], [1, 0]])).tolist()
    [[0, 1], [1, 0], [0, 2]]
    """
    N, k = chosen.shape
    order = chosen.T.reshape(-1)                                     # (k*N,) the queueing order
    onehot = F.one_hot(order)
    place = (onehot.cumsum(dim=0) * onehot).sum(dim=-1) - 1
    return place.view(k, N).T


def balance_loss(load, importance) -> torch.Tensor:
    """Switch Transformer's auxiliary loss E * sum_i f_i * P_i (load f: shares of assignments, importance P: mean
    router probabilities, both summing to 1).  Only P carries gradient.

    >>> float(balance_loss(torch.full((4,), 0.25), torch.full((4,), 0.25)))
    1.0
    >>> float(balance_loss(torch.tensor([1.0, 0, 0, 0]), torch.tensor([1.0, 0, 0, 0])))
    4.0
    """
    return len(load) * (load * importance).sum()


class Expert(models.MLP):
    """models.MLP (up, GELU, down) with a hidden width of its own."""

    def __init__(self, d_model: int, hidden: int):
        nn.Module.__init__(self)
        self.fc = nn.Linear(d_model, hidden)
        self.fc2 = nn.Linear(hidden, d_model)


class MoELayer(nn.Module):
    """Router + routed experts + shared experts; drop-in for a block's MLP.  After each call `last` holds:
    chosen (N, k) expert ids, kept (N, k) bools, gates (N, E), load (E,) and importance (E,), balance and z_loss
    (scalars with gradient), dropped (assignments over capacity)."""

    def __init__(self, config: MoEConfig):
        super().__init__()
        self.config = config
        d = config.d_model
        self.router = nn.Linear(d, config.n_experts, bias=False) if config.n_experts else None
        self.experts = nn.ModuleList(Expert(d, config.expert_hidden) for _ in range(config.n_experts))
        self.shared = nn.ModuleList(Expert(d, config.expert_hidden) for _ in range(config.n_shared))
        self.last = {}

    def forward(self, x):
        B, T, d = x.shape
        flat = x.reshape(B * T, d)                                        # (N, d)
        out = sum((expert(flat) for expert in self.shared), torch.zeros_like(flat))
        if self.router is not None:
            out = out + self.routed(flat)
        return out.view(B, T, d)

    def routed(self, flat):
        E, k = self.config.n_experts, self.config.top_k
        logits = self.router(flat)                                        # (N, E)
        probs = logits.softmax(dim=-1)
        gates = top_k_gates(probs, k, renormalize=k > 1)                  # (N, E), k non-zero per row
        chosen = probs.topk(k, dim=-1).indices                            # (N, k)
        kept = queue_positions(chosen) < expert_capacity(len(flat), self.config)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            tokens = ((chosen == e) & kept).any(dim=-1).nonzero()[:, 0]
            if len(tokens):
                out = out.index_add(0, tokens, gates[tokens, e, None] * expert(flat[tokens]))
        load = torch.bincount(chosen.reshape(-1), minlength=E).float() / chosen.numel()
        importance = probs.mean(dim=0)
        self.last = {"chosen": chosen, "kept": kept, "gates": gates, "load": load, "importance": importance,
                     "balance": balance_loss(load, importance), "z_loss": logits.logsumexp(dim=-1).square().mean(),
                     "dropped": int((~kept).sum())}
        return out


def expert_parameters(config: MoEConfig) -> int:
    """Parameters of one expert: up d*h + h, down h*d + d."""
    return 2 * config.d_model * config.expert_hidden + config.expert_hidden + config.d_model


class MoEGPT(models.TinyGPT):
    """TinyGPT whose every block's MLP is a `MoELayer`; initialised as TinyGPT is (GPT-2's scheme, each
    expert's down-projection shrunk like the MLP's)."""

    config_class = MoEConfig
    supports_kv_cache = False   # capacity-limited routing depends on which tokens share a forward pass

    def __init__(self, config: MoEConfig = MoEConfig()):
        super().__init__(config)
        for block in self.blocks:
            block.mlp = MoELayer(config)
            for name, module in block.mlp.named_modules():
                if isinstance(module, nn.Linear):
                    std = 0.02 / math.sqrt(2 * config.n_layers) if name.endswith("fc2") else 0.02
                    nn.init.normal_(module.weight, std=std)
                    if module.bias is not None:
                        nn.init.zeros_(module.bias)

    def moe_layers(self) -> list:
        return [block.mlp for block in self.blocks]

    def balance(self) -> torch.Tensor:
        """The mean balance loss of the last forward pass over the routed layers."""
        return torch.stack([layer.last["balance"] for layer in self.moe_layers()]).mean()

    def parameter_counts(self) -> dict:
        """total parameters, and active ones: those a single token's forward pass uses (k of E routed experts)."""
        total = sum(p.numel() for p in self.parameters())
        c = self.config
        idle = (c.n_experts - c.top_k) * expert_parameters(c) if c.n_experts else 0
        return {"total": total, "active": total - len(self.blocks) * idle}


def forward_flops_per_token(model) -> int:
    """Forward FLOPs for one token, after Kaplan et al. (2020)'s table: 2 per weight of every matrix the token is
    multiplied by (k of E routed experts, the router, and the tied output layer V x d, which their table lists
    and their C = 2N leaves out) plus their attention term 2 * L * n_ctx * d (one of scores or weighted sum at
    full context; the causal mean is about that for both).  Works for TinyGPT and MoEGPT alike."""
    config = model.config
    matrices = sum(m.weight.numel() for m in model.blocks.modules() if isinstance(m, nn.Linear))
    if isinstance(config, MoEConfig) and config.n_experts:
        matrices -= len(model.blocks) * (config.n_experts - config.top_k) * 2 * config.d_model * config.expert_hidden
    return 2 * (matrices + config.vocab_size * config.d_model) + 2 * config.n_layers * config.context * config.d_model


def with_capacity(model, capacity_factor):
    """A copy of an MoEGPT with another capacity factor (None: no limit); other models are returned as they are."""
    if not isinstance(model, MoEGPT):
        return model
    with torch.random.fork_rng(devices=[]):      # building a model draws from the global RNG; a copy must not
        copy = MoEGPT(replace(model.config, capacity_factor=capacity_factor))
    copy.load_state_dict(model.state_dict())
    return copy.to(next(model.parameters()).dtype).eval()     # a float64 model's copy measures in float64 too
