"""Section 07's retrieval runs: the dual encoder, and the base model taught to read what is retrieved.

    encoder, log = load("dual_encoder")
    reader, log = load("reader")

The dual encoder trains on the question/fact pairs of `retrieval.TRAIN_NAMES`
(random batches of 16, the in-batch softmax); its log holds the top-1
retrieval accuracy over all 48 facts for the training people and for the
held-out ones.

The reader starts from the base model and is fine-tuned for READER["steps"]
steps on prompts of one passage and a question (`retrieval.reader_prompt`),
the loss on the answer's characters only.  The passage is made up: the asked
person's line with a random city.  The city the base model remembers is then
right only by chance (1 in 12), so the cheapest way to answer is to copy the
passage's city.  Only TRAIN_NAMES are asked; the log holds how often the
reader copies the passage's city for the held-out people.
"""

import random

import torch
import torch.nn.functional as F

from lib import base_model, retrieval, world
from lib.answers import answers
from lib.checkpoints import Run, get_or_train
from lib.evals import CHARS, NEWLINE_CHAR
from lib.objectives import pad
from lib.seeding import seed_everything
from lib.train import OPTIMIZATION, fit

ENCODER = {"model": retrieval.DualEncoderConfig().to_dict(), "steps": 300, "batch_size": 16, **OPTIMIZATION,
           "warmup": 20, "seed": 0, "eval_every": 25}
READER = {**base_model.BASE_MODEL, "steps": 400, "batch_size": 32, "lr": 1e-3, "min_lr": 1e-4, "warmup": 20,
          "seed": 0, "eval_every": 50}


def train_dual_encoder(config: dict, desc: str = "train"):
    seed_everything(config["seed"])
    rng = random.Random(config["seed"])
    encoder = retrieval.DualEncoder(retrieval.DualEncoderConfig(**config["model"]))
    store = retrieval.datastore()

    def get_batch():
        return [(retrieval.question(n), store[n]) for n in rng.sample(retrieval.TRAIN_NAMES, config["batch_size"])]

    def evaluate(e):
        search = lambda query: e.search(query, store)
        return {name: retrieval.retrieval_accuracy(search, names, store)
                for name, names in (("train_accuracy", retrieval.TRAIN_NAMES),
                                    ("held_out_accuracy", retrieval.HELD_OUT_NAMES))}

    log = fit(encoder, get_batch, retrieval.contrastive_loss, config, evaluate=evaluate, desc=desc)
    return encoder, log


def counterfactual_example(name: str, rng: random.Random) -> tuple:
    """(passages, the city to answer): `name`'s line with a random city."""
    city = rng.choice(world.CITIES)
    return [retrieval.fact(name, city)], city


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


def copy_rate(model, names, seed: int = 1) -> float:
    """Share of `names` the reader answers with the city of their (made-up) passage."""
    rng = random.Random(seed)
    examples = [(name, *counterfactual_example(name, rng)) for name in names]
    got = answers(model, [retrieval.reader_prompt(passages, name) for name, passages, _ in examples])
    return sum(answer == f" {city}." for answer, (_, _, city) in zip(got, examples)) / len(names)


def train_reader(config: dict, desc: str = "train"):
    model, _ = base_model.load_base_model()
    seed_everything(config["seed"])
    rng = random.Random(config["seed"])

    def get_batch():
        examples = []
        for _ in range(config["batch_size"]):
            name = rng.choice(retrieval.TRAIN_NAMES)
            passages, city = counterfactual_example(name, rng)
            examples.append((passages, name, city))
        return reader_batch(examples)

    log = fit(model, get_batch, answer_loss, config,
              evaluate=lambda m: {"held_out_copy_rate": copy_rate(m, retrieval.HELD_OUT_NAMES)}, desc=desc)
    return model, log


def runs() -> list:
    return [Run("dual_encoder", ENCODER, train_dual_encoder), Run("reader", READER, train_reader)]


def load(name: str):
    """(model, log) of "dual_encoder" or "reader", trained first if missing."""
    r = {r.name: r for r in runs()}[name]
    return get_or_train(r.name, r.config, r.train_fn)
