"""Multi-token prediction (Gloeckle et al. 2024): a shared trunk and one transformer block per future token.

    model = MultiTokenTransformer(MultiTokenConfig(**MODEL.to_dict(), heads=4))
    logits = model(ids, mask)                  # (B, T, V): the next token, exactly as a GPT of the same shape
    every = model.head_logits(ids, mask)       # [head 1 (t+1), head 2 (t+2), ...], each (B, T, V)

The first n_layers - 1 blocks are the trunk; head 1 is the last block, so the
next-token path is a MaskedTransformer of config's shape (every readout of
the book reads it as a causal model); heads 2 .. n are one extra block each on
the trunk's output.  All heads share the final LayerNorm and the tied output
layer.  The trunk and head 1 are initialised as a MaskedTransformer of the
same seed (their draws come first), the extra blocks after them.
"""

from dataclasses import dataclass

import torch.nn as nn

from lib.nn.models import Block, MaskedTransformer, ModelConfig, check_ids, check_mask, init_weights


@dataclass(frozen=True, repr=False)
class MultiTokenConfig(ModelConfig):
    heads: int = 2          # n: the tokens t+1 .. t+n each position predicts

    def __post_init__(self):
        super().__post_init__()
        if not (isinstance(self.heads, int) and self.heads >= 1):
            raise ValueError(f"heads must be a positive integer, got {self.heads!r}")
        if self.n_layers < 2:
            raise ValueError("multi-token prediction needs a trunk: n_layers >= 2 (the last block is head 1)")


class MultiTokenTransformer(MaskedTransformer):
    config_class = MultiTokenConfig

    def __init__(self, config: MultiTokenConfig = MultiTokenConfig()):
        super().__init__(config)
        self.extra_heads = nn.ModuleList(Block(config) for _ in range(config.heads - 1))
        init_weights(self.extra_heads, config.n_layers)

    def head_logits(self, idx, mask) -> list:
        """The logits of every head, [t+1, t+2, ..., t+n], each (B, T, V), from one pass through the trunk."""
        check_ids(idx, self.config)
        mask = check_mask(mask, idx.shape[0], idx.shape[1], idx.shape[1])
        x = self.embed(idx)
        for block in self.blocks[:-1]:
            x, _ = block(x, mask)
        return [self.output(self.ln_f(head(x, mask)[0])) for head in (self.blocks[-1], *self.extra_heads)]
