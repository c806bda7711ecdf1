"""Section 07's dense retriever: one encoder for questions and passages (DPR's recipe with a single shared
encoder), a mean of hashed character trigrams, unit length, trained with the in-batch softmax.

    encoder = DualEncoder()
    encoder.search("q: where does zukun live? a:", store)    # [(name, score)], best first
    loss = contrastive_loss(encoder, [(question, fact), ...])

Because both sides share the encoder, a trigram of an unseen name maps to the
same vector in question and fact.
"""

import zlib
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

TEMPERATURE = 0.05                 # of the in-batch softmax


def trigrams(text: str, buckets: int) -> list:
    """Hashed character trigrams of " text ", each a bucket id (crc32, the same on every machine).

    >>> len(trigrams("ab", 4096)), trigrams("ab", 4096) == trigrams("ab", 4096)
    (2, True)
    """
    padded = f" {text} "
    return [zlib.crc32(padded[i:i + 3].encode()) % buckets for i in range(len(padded) - 2)]


@dataclass(frozen=True)
class DualEncoderConfig:
    buckets: int = 4096       # hashed trigram buckets
    embedding: int = 32       # width of a text's vector

    def to_dict(self):
        return asdict(self)


class DualEncoder(nn.Module):
    """One encoder for questions and passages: the mean of its texts' trigram embeddings, unit length."""
    config_class = DualEncoderConfig

    def __init__(self, config: DualEncoderConfig = DualEncoderConfig()):
        super().__init__()
        self.config = config
        self.bag = nn.EmbeddingBag(config.buckets, config.embedding, mode="mean")

    def forward(self, texts: list):
        ids = [trigrams(t, self.config.buckets) for t in texts]
        offsets = torch.tensor([0] + [len(i) for i in ids[:-1]]).cumsum(dim=0)
        return F.normalize(self.bag(torch.tensor([x for i in ids for x in i]), offsets), dim=-1)   # (N, EMBEDDING)

    @torch.no_grad()
    def search(self, query: str, store: dict, k: int = 1) -> list:
        keys = list(store)
        scores = (self([query]) @ self([store[key] for key in keys]).T)[0]
        best = scores.topk(k).indices.tolist()
        return [(keys[i], float(scores[i])) for i in best]


def contrastive_loss(encoder, pairs: list):
    """In-batch softmax: each question's own fact is the right class among the batch's facts."""
    questions, facts = encoder([q for q, _ in pairs]), encoder([f for _, f in pairs])
    logits = questions @ facts.T / TEMPERATURE                            # (B, B)
    return F.cross_entropy(logits, torch.arange(len(pairs)))
