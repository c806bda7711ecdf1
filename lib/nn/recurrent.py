"""Section 02's recurrent language model: one GRU layer with TinyGPT's parameter budget.

    model = GRULanguageModel()       # forward(idx) -> logits, like TinyGPT's

A GRU reads a line one character at a time: its state after character t is a
function of the state after t - 1, so the T positions of a window are T
sequential steps, and whatever the rating needs from an adjective 30
characters back has to survive 30 updates of one 152-number state.  TinyGPT
computes every position of a window at once, and any position reads any
earlier one directly through attention.
"""

from dataclasses import asdict, dataclass

import torch.nn as nn


@dataclass(frozen=True)
class GRUConfig:
    vocab_size: int = 44
    d_embed: int = 64
    hidden: int = 152      # the width that brings the parameter count to TinyGPT's (109,056) within 100
    context: int = 96      # the length of the training windows (TinyGPT's context)

    def to_dict(self):
        return asdict(self)


def gru_parameter_count(config: GRUConfig) -> int:
    """Embedding V·e, the GRU's three gates 3·(e·h + h·h + 2h), the output layer h·V + V.

    >>> gru_parameter_count(GRUConfig())
    108956
    """
    V, e, h = config.vocab_size, config.d_embed, config.hidden
    return V * e + 3 * (e * h + h * h + 2 * h) + h * V + V


class GRULanguageModel(nn.Module):
    """Characters -> embedding -> one GRU layer -> logits for the next character; forward(idx) like TinyGPT's."""
    config_class = GRUConfig

    def __init__(self, config: GRUConfig = GRUConfig()):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.d_embed)
        self.gru = nn.GRU(config.d_embed, config.hidden, batch_first=True)
        self.head = nn.Linear(config.hidden, config.vocab_size)

    def forward(self, idx):
        states, _ = self.gru(self.wte(idx))        # (B, T, h): T sequential updates of one state
        return self.head(states)                    # (B, T, V)
