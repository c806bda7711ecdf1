"""Section 07's measurements added for the notebook: the router z-loss of a model, and reading with a retriever."""

import math

import pytest
import torch

from lib.measure import moe_evals, retrieval
from lib.nn.moe import MoEConfig, MoEGPT


def small_moe(capacity_factor=None):
    torch.manual_seed(0)
    return MoEGPT(MoEConfig(d_model=16, n_heads=2, n_experts=4, top_k=2, expert_hidden=16,
                            capacity_factor=capacity_factor))


def test_a_router_that_says_nothing_has_the_z_loss_of_equal_logits():
    model = small_moe()
    for layer in model.moe_layers():
        torch.nn.init.zeros_(layer.router.weight)
    ids = torch.randint(0, 44, (3, 10))
    assert moe_evals.router_z_loss(model, ids) == pytest.approx(math.log(4) ** 2)     # (ln E)^2 for every token


def test_the_z_loss_is_the_mean_over_layers_of_every_token_and_ignores_capacity():
    model, ids = small_moe(capacity_factor=0.5), torch.randint(0, 44, (3, 10))
    unlimited, per_layer = small_moe(), []
    for layer in unlimited.moe_layers():
        layer.register_forward_pre_hook(lambda layer, args: per_layer.append(
            layer.router(args[0].reshape(-1, 16)).logsumexp(dim=-1).square().mean().item()))
    with torch.no_grad():
        unlimited(ids)
    assert len(per_layer) == 2
    assert moe_evals.router_z_loss(model, ids) == pytest.approx(sum(per_layer) / 2)
    with torch.no_grad():
        model(ids)                                      # at its own capacity, layer 1's drops change layer 2's input
    capped = sum(layer.last["z_loss"].item() for layer in model.moe_layers()) / 2
    assert capped != pytest.approx(sum(per_layer) / 2)


def test_read_top1_puts_the_line_the_search_ranks_first_before_each_question(monkeypatch):
    store = retrieval.datastore()
    names = list(store)[:3]
    monkeypatch.setattr(retrieval, "answers", lambda model, prompts: prompts)   # the "answer" is the prompt read
    got = retrieval.read_top1(None, store, names, lambda query: [(names[0], 1.0), (names[1], 0.5)])
    assert got == {name: retrieval.reader_prompt([store[names[0]]], name) for name in names}


def test_answer_accuracy_counts_the_city_answered_as_a_sentence():
    got = {"zukun": " quila.", "ebot": " jelka", "base": " melo."}
    assert retrieval.answer_accuracy(got, {"zukun": "quila", "ebot": "jelka", "base": "fexa"}) == 1 / 3
