"""Section 07's retrieval: the datastore, both retrievers on held-out people, the reader, and batched answers."""

import random

import pytest
import torch

from lib import recipes
from lib.nn.dual_encoder import DualEncoder, contrastive_loss
from lib.recipes import retrieval as retrieval_runs
from lib.trainers import retrieval as retrieval_trainer
from lib.measure import evals, retrieval
from lib.data import world


def test_the_datastore_has_one_line_per_person_and_edits_move_only_the_named():
    store, home = retrieval.datastore(), world.build_world().home
    assert list(store) == list(world.build_world().names)
    assert all(world.check_line(line) == (True, True) for line in store.values())
    name = retrieval.HELD_OUT_NAMES[0]
    other_city = next(c for c in world.CITIES if c != home[name])
    edited = retrieval.datastore({name: other_city})
    assert edited[name] == f"{name} lives in {other_city}." and world.check_line(edited[name]) == (True, False)
    assert {n: line for n, line in edited.items() if n != name} == {n: line for n, line in store.items() if n != name}
    with pytest.raises(ValueError, match="nobody"):
        retrieval.datastore({"nobody": "quila"})
    with pytest.raises(ValueError, match="atlantis"):
        retrieval.datastore({name: "atlantis"})


def test_held_out_people_are_never_trained_on(monkeypatch):
    assert not set(retrieval.HELD_OUT_NAMES) & set(retrieval.TRAIN_NAMES)
    assert len(retrieval.HELD_OUT_NAMES) == 12 and len(retrieval.TRAIN_NAMES) == 36
    asked = set()
    contrastive = contrastive_loss
    monkeypatch.setattr(retrieval_trainer, "contrastive_loss",
                        lambda e, pairs: asked.update(retrieval.words(q)[3] for q, _ in pairs) or contrastive(e, pairs))
    retrieval_trainer.train_dual_encoder({**retrieval_runs.ENCODER, "steps": 20, "eval_every": 20})
    answer_loss = retrieval_trainer.answer_loss
    monkeypatch.setattr(retrieval_trainer, "answer_loss", lambda m, batch: asked.update(
        evals.CHARS.decode(row.tolist()).split("where does ")[1].split()[0] for row in batch[0]) or answer_loss(m, batch))
    retrieval_trainer.train_reader({**retrieval_runs.READER, "steps": 3, "eval_every": 3}, parents=(recipes.load("base")[0],))
    assert asked and asked <= set(retrieval.TRAIN_NAMES)


def test_tf_idf_weighs_words_in_every_line_zero_and_finds_every_person():
    store = retrieval.datastore()
    lexical = retrieval.TfIdfRetriever(store)
    assert lexical.idf["lives"] == 0.0 and lexical.idf["in"] == 0.0
    assert retrieval.retrieval_accuracy(lexical.search, retrieval.HELD_OUT_NAMES, store) == 1.0


def test_the_dual_encoder_learns_and_its_held_out_accuracy_is_measured_on_unseen_people():
    store = retrieval.datastore()
    encoder, log = recipes.load("dual_encoder")
    with torch.random.fork_rng():
        torch.manual_seed(0)
        untrained = DualEncoder()
    accuracy = lambda model, names: retrieval.retrieval_accuracy(lambda q: model.search(q, store), names, store)
    assert accuracy(encoder, retrieval.HELD_OUT_NAMES) == log[-1]["held_out_accuracy"]
    assert accuracy(encoder, retrieval.TRAIN_NAMES) == log[-1]["train_accuracy"] == 1.0
    assert accuracy(encoder, retrieval.HELD_OUT_NAMES) > accuracy(untrained, retrieval.HELD_OUT_NAMES)


def test_the_contrastive_loss_is_log_batch_for_equal_vectors_and_lower_for_the_trained_encoder():
    pairs = [(retrieval.question(n), retrieval.fact(n, "quila")) for n in retrieval.TRAIN_NAMES[:4]]
    blank = DualEncoder()
    with torch.no_grad():
        blank.bag.weight.zero_()
    # every vector is the same (zero): each fact is as likely as every other, the loss is log 4
    assert contrastive_loss(blank, pairs).item() == pytest.approx(torch.log(torch.tensor(4.0)).item())
    encoder, _ = recipes.load("dual_encoder")
    mismatched = [(q, f) for (q, _), (_, f) in zip(pairs, pairs[1:] + pairs[:1])]
    with torch.no_grad():
        assert contrastive_loss(encoder, pairs) < 0.1 < contrastive_loss(encoder, mismatched)


def test_the_reader_copies_the_retrieved_city_for_people_it_never_was_asked_about():
    reader, log = recipes.load("reader")
    assert retrieval.copy_rate(reader, retrieval.HELD_OUT_NAMES) == log[-1]["held_out_copy_rate"] == 1.0


def test_a_reader_batch_marks_only_the_answer():
    ids, answer = retrieval_trainer.reader_batch([(["ab lives in quila."], "ab", "quila")])
    text = evals.CHARS.decode(ids[0].tolist())
    marked = "".join(ch for ch, m in zip(text[1:], answer[0].tolist()) if m)
    assert marked == " quila.\n"


def test_counterfactual_examples_name_the_asked_person():
    passages, city = retrieval.counterfactual_example("base", random.Random(0))
    assert passages == [f"base lives in {city}."] and city in world.CITIES
