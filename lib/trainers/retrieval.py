"""Section 07's retrieval trainers: the dual encoder, and the base model taught to read what is retrieved.

    encoder, log = train_dual_encoder(config)
    reader, log = train_reader(config, parents=(base_model,))

The dual encoder trains on the question/fact pairs of `retrieval.TRAIN_NAMES`
(random batches, `retrieval.name_sampler`; the in-batch softmax); its log holds the top-1 retrieval
accuracy over all 48 facts for the training people and for the held-out ones.

The reader starts from its parent (the base model) and is fine-tuned on prompts
of one passage and a question (`retrieval.reader_prompt`), the loss on the
answer's characters only.  The passage is made up: the asked person's line
with a random city.  The city the base model remembers is then right only by
chance (1 in 12), so the cheapest way to answer is to copy the passage's city.
Only TRAIN_NAMES are asked; the log holds how often the reader copies the
passage's city for the held-out people (`retrieval.copy_rate`).
"""

import copy
import random

import torch
import torch.nn.functional as F

from lib.data.seeding import seed_everything
from lib.measure import retrieval
from lib.measure.evals import CHARS, NEWLINE_CHAR
from lib.nn.dual_encoder import DualEncoder, DualEncoderConfig, contrastive_loss
from lib.objectives.batches import pad
from lib.train.cache import trainer
from lib.train.loop import fit


@trainer("dual_encoder", version=1)
def train_dual_encoder(config: dict, parents=(), desc: str = "train"):
    seed_everything(config["seed"])
    encoder = DualEncoder(DualEncoderConfig(**config["model"]))
    store = retrieval.datastore()
    draw = retrieval.name_sampler(config)

    def get_batch():
        return [(retrieval.question(n), store[n]) for n in draw()]

    def evaluate(e):
        search = lambda query: e.search(query, store)
        return {name: retrieval.retrieval_accuracy(search, names, store)
                for name, names in (("train_accuracy", retrieval.TRAIN_NAMES),
                                    ("held_out_accuracy", retrieval.HELD_OUT_NAMES))}

    log = fit(encoder, get_batch, contrastive_loss, config, evaluate=evaluate, desc=desc)
    return encoder, log


def reader_batch(examples: list) -> tuple:
    """(ids (B, L), answer mask (B, L - 1)): each prompt + " city.\\n", padded with newlines; the mask marks the
    predictions of the answer's characters."""
    prompts = [CHARS.encode(retrieval.reader_prompt(p, n)) for p, n, _ in examples]
    full = [prompt + CHARS.encode(f" {city}.\n") for prompt, (_, _, city) in zip(prompts, examples)]
    ids, is_pad = pad(full, NEWLINE_CHAR)
    answer = torch.zeros(ids.shape, dtype=torch.bool)
    for row, prompt in enumerate(prompts):
        answer[row, len(prompt):len(full[row])] = True
    return ids, answer[:, 1:]


def answer_loss(model, batch):
    ids, answer = batch
    logits = model(ids[:, :-1])
    losses = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
    return (losses * answer).sum() / answer.sum()


@trainer("reader", version=1)
def train_reader(config: dict, parents=(), desc: str = "train"):
    """Fine-tune a copy of parents[0] (the base model) to answer from the passage it is given."""
    model = copy.deepcopy(parents[0])
    seed_everything(config["seed"])
    rng = random.Random(config["seed"])

    def get_batch():
        examples = []
        for _ in range(config["batch_size"]):
            name = rng.choice(retrieval.TRAIN_NAMES)
            passages, city = retrieval.counterfactual_example(name, rng)
            examples.append((passages, name, city))
        return reader_batch(examples)

    log = fit(model, get_batch, answer_loss, config,
              evaluate=lambda m: {"held_out_copy_rate": retrieval.copy_rate(m, retrieval.HELD_OUT_NAMES)}, desc=desc)
    return model, log
