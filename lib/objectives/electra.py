"""ELECTRA's training signal (Clark et al. 2020): the generator's MLM loss and the discriminator's
replaced-token detection, read from one masked batch.

    masked = mlm_batch(windows, g, rate=0.15, mask_share=1.0, random_share=0.0)   # selected -> <mask>
    generator_loss, discriminator_loss, batch = electra_losses(model, masked, sampling)
    loss = generator_loss + 50 * discriminator_loss

The word the generator writes at a selected position is *sampled* from its
distribution (`batches.electra_batch`), so no gradient flows from the
discriminator's loss into the generator.  Variants (ELECTRA-15 %, a frozen
generator, hard negatives) are switches of `electra_losses`; `hard_negatives`
swaps food adjectives for one of the other polarity, so that the replacement
always changes what the review means.  The model is `lib.nn.electra.Electra`.
"""

import torch
import torch.nn.functional as F

from lib.data import world
from lib.data.tokenizers import TOKENIZER
from lib.nn.electra import Electra
from lib.objectives.batches import StackBatch, electra_batch, masked_cross_entropy

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
