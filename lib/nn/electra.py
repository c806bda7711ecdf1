"""ELECTRA's network (Clark et al. 2020): a small generator fills the masked positions, a discriminator says at
every position whether the word there is the original or a replacement.

    model = Electra(ElectraConfig(vocab_size=VOCAB_SIZE, context=32, generator_d_model=16))
    model.generator_logits(inputs, attention_mask, where)   # (K, V): only at the K positions `where` selects
    model.replaced_logits(inputs, attention_mask)           # (B, T)

The discriminator is a BERT-sized `MaskedTransformer` with a linear head that
reads its last hidden state and gives one "replaced" logit per position.  The
generator is built as in the paper: it shares the discriminator's token and
position embeddings, has the discriminator's depth and a fraction of its width
(a d -> d_g projection in, d_g -> d out, scored against the same token table),
and computes its vocabulary logits only where they are used (the selected
positions), which is also how the paper counts FLOPs.  `generator_d_model=0`
is the paper's smallest "generator": no network, a fixed unigram distribution
(the trainer fills it from the training reviews).  After pre-training the
generator is thrown away.  How the two are trained together is
`lib.objectives.electra`.
"""

from dataclasses import asdict, dataclass

import torch
import torch.nn as nn

from lib.nn.models import Block, MaskedTransformer, ModelConfig, init_weights, parameter_count

HEAD_SIZE = 16      # the discriminator's head size; the generator keeps it (d_g / 16 heads)


@dataclass(frozen=True)
class ElectraConfig:
    """The discriminator's size (BERT's) and the generator's width and depth (0: a unigram sampler)."""
    vocab_size: int
    context: int
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    generator_d_model: int = 16
    generator_layers: int = 2

    def __post_init__(self):
        if self.generator_d_model < 0 or self.generator_d_model % HEAD_SIZE:
            raise ValueError(f"generator_d_model must be 0 (unigram) or a multiple of {HEAD_SIZE}, "
                             f"got {self.generator_d_model}")

    def discriminator(self) -> ModelConfig:
        return ModelConfig(self.vocab_size, self.context, self.d_model, self.n_layers, self.n_heads)

    def generator(self) -> ModelConfig:
        return ModelConfig(self.vocab_size, self.context, self.generator_d_model, self.generator_layers,
                           self.generator_d_model // HEAD_SIZE)

    def to_dict(self):
        return asdict(self)


def electra_parameter_counts(config: ElectraConfig) -> dict:
    """Parameters by formula: the discriminator (a BERT-sized stack plus its head, d + 1) and the generator
    (its blocks and final LayerNorm, and the two projections d -> d_g -> d; no tables of its own).

    >>> electra_parameter_counts(ElectraConfig(vocab_size=354, context=32))
    {'discriminator': 124865, 'generator': 8720}
    >>> electra_parameter_counts(ElectraConfig(vocab_size=354, context=32, generator_d_model=0))["generator"]
    0
    """
    d, g = config.d_model, config.generator_d_model
    if g == 0:
        return {"discriminator": parameter_count(config.discriminator()) + d + 1, "generator": 0}
    blocks = parameter_count(config.generator()) - (config.vocab_size + config.context) * g
    return {"discriminator": parameter_count(config.discriminator()) + d + 1,
            "generator": blocks + 2 * d * g + g + d}


class ProjectedGenerator(nn.Module):
    """A masked LM of width d_g that reads the discriminator's token and position tables through a d -> d_g
    projection and scores the vocabulary through d_g -> d and the same token table.  The tables are handed
    in at each call, so they live (and are saved) once, in the discriminator.

    The two projections start as near-isometries, N(0, 1/fan_in): a vector keeps its length through them.
    With the blocks' N(0, 0.02) they would shrink it by 0.02 * sqrt(fan_in) each (x0.16 in, x0.08 out at
    d_g = 16), so the generator's logits would start ~10x smaller than a BERT's and the product of two
    small maps can hold it at the unigram level for hundreds of steps (§05's control, trained with
    `rescale_projections`, measures it seed by seed).
    BERT's and ELECTRA's reference code normalise around the projections instead (a LayerNorm on the
    embeddings, one at the end of the generator's head); our pre-LN stacks have neither."""

    def __init__(self, config: ElectraConfig):
        super().__init__()
        self.down = nn.Linear(config.d_model, config.generator_d_model)
        self.blocks = nn.ModuleList(Block(config.generator()) for _ in range(config.generator_layers))
        self.ln_f = nn.LayerNorm(config.generator_d_model)
        self.up = nn.Linear(config.generator_d_model, config.d_model)
        init_weights(self, config.generator_layers)
        for projection in (self.down, self.up):
            nn.init.normal_(projection.weight, std=projection.in_features ** -0.5)

    def rescale_projections(self, std: float) -> None:
        """Make the two projections' weights N(0, std²) by rescaling their N(0, 1/fan_in) draws: no random
        number is drawn, so every other weight, batch and sample of a run stays as it was (§05's control with
        the blocks' std 0.02, the initialisation before the trainer's v2)."""
        with torch.no_grad():
            for projection in (self.down, self.up):
                projection.weight.mul_(std * projection.in_features ** 0.5)

    def forward(self, idx, mask, where, wte, wpe):
        x = self.down(wte(idx) + wpe(torch.arange(idx.shape[1])))            # (B, T, d_g)
        for block in self.blocks:
            x, _ = block(x, mask)
        return self.up(self.ln_f(x[where])) @ wte.weight.T                      # (K, V): only where scored


class UnigramGenerator(nn.Module):
    """No network: every selected position gets a word drawn from a fixed unigram distribution
    (`log_probs`, a buffer the trainer fills and the checkpoint saves)."""

    def __init__(self, config: ElectraConfig):
        super().__init__()
        self.register_buffer("log_probs", torch.zeros(config.vocab_size))

    def forward(self, idx, mask, where, wte, wpe):
        return self.log_probs.expand(int(where.sum()), -1)


class Electra(nn.Module):
    """A generator and a discriminator, trained as one module (one optimizer, one checkpoint)."""
    config_class = ElectraConfig

    def __init__(self, config: ElectraConfig):
        super().__init__()
        self.config = config
        # Built first, so its initial weights are exactly those of a BERT built from the same seed.
        self.discriminator = MaskedTransformer(config.discriminator())
        self.generator = (UnigramGenerator if config.generator_d_model == 0 else ProjectedGenerator)(config)
        self.head = nn.Linear(config.d_model, 1)

    def generator_logits(self, inputs, attention_mask, where):
        """(K, V): the generator's prediction of the original word at the K positions where `where` is True."""
        return self.generator(inputs, attention_mask, where, self.discriminator.wte, self.discriminator.wpe)

    def replaced_logits(self, inputs, attention_mask):
        """(B, T): the discriminator's logit that the token at each position was replaced."""
        return self.head(self.discriminator.hidden_states(inputs, attention_mask)).squeeze(-1)
