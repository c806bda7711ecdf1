"""ELECTRA's training signal (Clark et al. 2020): the generator's MLM loss and the discriminator's
replaced-token detection, read from one masked batch.

    masked = mlm_batch(windows, g, rate=0.15, mask_share=1.0, random_share=0.0)   # selected -> <mask>
    generator_loss, discriminator_loss, batch = electra_losses(model, masked, sampling)
    loss = generator_loss + 50 * discriminator_loss

The word the generator writes at a selected position is *sampled* from its
distribution (`batches.electra_batch`), so no gradient flows from the
discriminator's loss into the generator.  ELECTRA-15 % (`selected_only`) puts
the discriminator's loss on the selected positions only.  A unigram generator
(no parameters) has no loss.  The model is `lib.nn.electra.Electra`.
"""

from collections import Counter

import torch
import torch.nn.functional as F

from lib.nn.electra import Electra
from lib.objectives.batches import FIRST_ORDINARY, VOCAB_SIZE, StackBatch, electra_batch, review_stream


def unigram_log_probs() -> torch.Tensor:
    """(V,) log-frequencies of the words of the training reviews (special tokens: -inf): what the paper's
    unigram generator samples from."""
    counts = Counter(review_stream("train").tolist())
    frequencies = torch.tensor([float(counts[i]) if i >= FIRST_ORDINARY else 0.0 for i in range(VOCAB_SIZE)])
    return (frequencies / frequencies.sum()).log()


def electra_losses(model: Electra, masked: StackBatch, sampling, selected_only: bool = False) -> tuple:
    """(generator MLM loss, discriminator loss, the ElectraBatch it read) for one MLM batch.

    The generator predicts the originals at the selected positions (its logits computed only there) and one
    word is sampled at each (with the `sampling` generator); the discriminator's binary cross-entropy is
    averaged over every real position, or only the selected ones (`selected_only`: ELECTRA-15 %)."""
    where = masked.loss_mask
    generator_logits = model.generator_logits(masked.inputs, masked.attention_mask, where)     # (K, V)
    learns = any(True for _ in model.generator.parameters())       # a unigram generator has nothing to learn
    generator_loss = F.cross_entropy(generator_logits, masked.targets[where]) if learns else torch.zeros(())
    batch = electra_batch(masked, generator_logits, sampling)                       # samples: no gradient
    logits = model.replaced_logits(batch.inputs, batch.attention_mask)               # (B, T)
    scored = batch.selected if selected_only else batch.loss_mask
    discriminator_loss = F.binary_cross_entropy_with_logits(logits[scored], batch.replaced[scored].to(logits.dtype))
    return generator_loss, discriminator_loss, batch
