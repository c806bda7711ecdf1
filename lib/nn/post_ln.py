"""Post-LN TinyGPT (the original Transformer's placement): x <- LN(x + f(x)) after each sub-layer.

    model = PostLNGPT()      # the same parameters as TinyGPT but for the final LayerNorm (128 fewer)

It starts from the very same weights TinyGPT gets at the same seed and only
moves the LayerNorms, so section 02 compares placements and nothing else.
"""

import torch.nn as nn

from lib.nn import models


class PostLNBlock(models.Block):
    """Post-LN: x <- LN(x + attn(x)), then x <- LN(x + mlp(x)); the same parameters as the pre-LN `Block`."""

    def forward(self, x, mask, return_weights=False, past=None):
        a, weights = self.attn(x, mask, return_weights, past)
        x = self.ln_1(x + a)
        return self.ln_2(x + self.mlp(x)), weights


class PostLNGPT(models.TinyGPT):
    """TinyGPT with post-LN blocks, initialised with exactly the weights TinyGPT gets at the same seed."""

    def __init__(self, config: models.ModelConfig = models.ModelConfig()):
        super().__init__(config)
        blocks = nn.ModuleList(PostLNBlock(config) for _ in range(config.n_layers))
        blocks.load_state_dict(self.blocks.state_dict())
        self.blocks = blocks
        self.ln_f = nn.Identity()      # the stream already leaves the last block normalised
