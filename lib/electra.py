"""ELECTRA (Clark et al. 2020): a small generator fills the masked positions, a discriminator says at every
position whether the word there is the original or a replacement.

    model = Electra(ElectraConfig(vocab_size=VOCAB_SIZE, context=32))
    masked = mlm_batch(windows, g, rate=0.15, mask_share=1.0, random_share=0.0)   # selected -> <mask>
    generator_loss, discriminator_loss, batch = electra_losses(model, masked, sampling)
    loss = generator_loss + 50 * discriminator_loss

The generator is a masked LM (`MaskedTransformer`, 1 layer, d = 32); the
word it writes at a selected position is *sampled* from its distribution
(`objectives.electra_batch`), so no gradient flows from the discriminator's
loss into the generator: the two are trained together but not adversarially.
A sample that happens to equal the original is labelled "original".  The
discriminator is a BERT-sized `MaskedTransformer` with a linear head that reads
its last hidden state and gives one "replaced" logit per position.  After
pre-training the generator is thrown away.

Variants (`ELECTRA-15 %`, a frozen generator, hard negatives) are switches of
`electra_losses`; `hard_negatives` swaps food adjectives (the selected ones, or
each with a given probability) for one of the other polarity, so that the
replacement always changes what the review means.
"""

from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from lib import world
from lib.models import Block, MaskedTransformer, ModelConfig, init_weights, parameter_count
from lib.objectives import StackBatch, electra_batch, masked_cross_entropy
from lib.tokenizers import TOKENIZER


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


FOOD_ADJECTIVE_IDS = torch.tensor([TOKENIZER[a] for a in world.FOOD_ADJECTIVES])
# row i: the ids of the food adjectives whose polarity is the opposite of FOOD_ADJECTIVE_IDS[i]'s
OPPOSITE_IDS = torch.tensor([[TOKENIZER[b] for b, q in world.FOOD_ADJECTIVES.items() if q != p]
                             for p in world.FOOD_ADJECTIVES.values()])


def hard_negatives(batch, generator, rate: float = None):
    """The same ElectraBatch, except that food adjectives are replaced by a food adjective of the other
    polarity (drawn uniformly), a replacement that always turns a true review false: every *selected* food
    adjective (rate None), or each food adjective with probability `rate`, selected or not."""
    is_adjective = batch.originals[..., None] == FOOD_ADJECTIVE_IDS                 # (B, T, 16)
    chosen = batch.selected if rate is None else torch.rand(batch.inputs.shape, generator=generator) < rate
    where = chosen & is_adjective.any(-1)
    which = is_adjective[where].float().argmax(-1)                                 # index into FOOD_ADJECTIVE_IDS
    choice = torch.randint(OPPOSITE_IDS.shape[1], (len(which),), generator=generator)
    inputs, replaced = batch.inputs.clone(), batch.replaced.clone()
    inputs[where], replaced[where] = OPPOSITE_IDS[which, choice], True
    return type(batch)(inputs, replaced, batch.loss_mask, batch.attention_mask, batch.selected, batch.originals)


def electra_losses(model: Electra, masked: StackBatch, sampling, train_generator: bool = True,
                   selected_only: bool = False, hard: bool = False, hard_rate: float = None) -> tuple:
    """(generator MLM loss, discriminator loss, the ElectraBatch it read) for one MLM batch.

    The generator predicts the originals at the selected positions and one word is sampled there (with
    the `sampling` generator); the discriminator's binary cross-entropy is averaged over every real
    position, or only the selected ones (`selected_only`: ELECTRA-15 %).  `train_generator=False`
    keeps the generator as it is (no loss, no gradient); `hard` applies `hard_negatives` (at `hard_rate`)."""
    with torch.set_grad_enabled(train_generator and torch.is_grad_enabled()):
        generator_logits = model.generator_logits(masked.inputs, masked.attention_mask)   # (B, T, V)
        generator_loss = (masked_cross_entropy(generator_logits, masked.targets, masked.loss_mask)
                          if train_generator else torch.zeros(()))
    batch = electra_batch(masked, generator_logits, sampling)                       # samples: no gradient
    if hard:
        batch = hard_negatives(batch, sampling, hard_rate)
    logits = model.replaced_logits(batch.inputs, batch.attention_mask)               # (B, T)
    where = batch.selected if selected_only else batch.loss_mask
    discriminator_loss = F.binary_cross_entropy_with_logits(logits[where], batch.replaced[where].float())
    return generator_loss, discriminator_loss, batch
