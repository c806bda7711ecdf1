"""ELECTRA's network (Clark et al. 2020): a small generator fills the masked positions, a discriminator says at
every position whether the word there is the original or a replacement.

    model = Electra(ElectraConfig(vocab_size=VOCAB_SIZE, context=32))
    model.generator_logits(inputs, attention_mask)   # (B, T, V)
    model.replaced_logits(inputs, attention_mask)    # (B, T)

The generator is a masked LM (`MaskedTransformer`, 1 layer, d = 32).  The
discriminator is a BERT-sized `MaskedTransformer` with a linear head that reads
its last hidden state and gives one "replaced" logit per position.  After
pre-training the generator is thrown away.  How the two are trained together
(sampling, the loss, its variants) is `lib.objectives.electra`.
"""

from dataclasses import asdict, dataclass

import torch
import torch.nn as nn

from lib.nn.models import Block, MaskedTransformer, ModelConfig, init_weights, parameter_count


@dataclass(frozen=True)
class ElectraConfig:
    """The discriminator's size (BERT's) and the generator's."""
    vocab_size: int
    context: int
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    generator_d_model: int = 32
    generator_layers: int = 1
    generator_heads: int = 2      # head size 16, as in the discriminator
    shared_embeddings: bool = False   # the paper's setup: the generator reads and writes the discriminator's tables

    def discriminator(self) -> ModelConfig:
        return ModelConfig(self.vocab_size, self.context, self.d_model, self.n_layers, self.n_heads)

    def generator(self) -> ModelConfig:
        return ModelConfig(self.vocab_size, self.context, self.generator_d_model, self.generator_layers,
                           self.generator_heads)

    def to_dict(self):
        return asdict(self)


def electra_parameter_counts(config: ElectraConfig) -> dict:
    """Parameters by formula: the discriminator (a BERT-sized stack plus its head, d + 1) and the generator
    (with shared embeddings: its blocks, final LayerNorm and the two projections d -> d_g -> d).

    >>> electra_parameter_counts(ElectraConfig(vocab_size=354, context=32))
    {'discriminator': 124865, 'generator': 25120}
    >>> electra_parameter_counts(ElectraConfig(vocab_size=354, context=32, shared_embeddings=True))["generator"]
    16960
    """
    generator = parameter_count(config.generator())
    if config.shared_embeddings:
        d, g = config.d_model, config.generator_d_model
        generator -= (config.vocab_size + config.context) * g     # its own tables are gone...
        generator += 2 * d * g + g + d                             # ...two projections take their place
    return {"discriminator": parameter_count(config.discriminator()) + config.d_model + 1, "generator": generator}


class ProjectedGenerator(nn.Module):
    """The generator with the discriminator's embeddings (Clark et al. share them): it reads the token and
    position tables through a d -> d_g projection and scores the vocabulary through d_g -> d and the same
    token table.  The tables are handed in at each call, so they live (and are saved) once, in the discriminator."""

    def __init__(self, config: ElectraConfig):
        super().__init__()
        self.down = nn.Linear(config.d_model, config.generator_d_model)
        self.blocks = nn.ModuleList(Block(config.generator()) for _ in range(config.generator_layers))
        self.ln_f = nn.LayerNorm(config.generator_d_model)
        self.up = nn.Linear(config.generator_d_model, config.d_model)
        init_weights(self, config.generator_layers)

    def forward(self, idx, mask, wte, wpe):
        x = self.down(wte(idx) + wpe(torch.arange(idx.shape[1])))            # (B, T, d_g)
        for block in self.blocks:
            x, _ = block(x, mask)
        return self.up(self.ln_f(x)) @ wte.weight.T                             # (B, T, V)


class Electra(nn.Module):
    """A generator and a discriminator, trained as one module (one optimizer, one checkpoint)."""
    config_class = ElectraConfig

    def __init__(self, config: ElectraConfig):
        super().__init__()
        self.config = config
        # Built first, so its initial weights are exactly those of a BERT built from the same seed.
        self.discriminator = MaskedTransformer(config.discriminator())
        self.generator = (ProjectedGenerator(config) if config.shared_embeddings
                          else MaskedTransformer(config.generator()))
        self.head = nn.Linear(config.d_model, 1)

    def generator_logits(self, inputs, attention_mask):
        """(B, T, V): the generator's prediction of the original word at every position."""
        if self.config.shared_embeddings:
            return self.generator(inputs, attention_mask, self.discriminator.wte, self.discriminator.wpe)
        return self.generator(inputs, attention_mask)

    def replaced_logits(self, inputs, attention_mask):
        """(B, T): the discriminator's logit that the token at each position was replaced."""
        return self.head(self.discriminator.hidden_states(inputs, attention_mask)).squeeze(-1)
