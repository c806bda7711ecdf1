"""Section 07's measurements: the router z-loss, an expert removed, drops per expert, reading with a retriever, the\ndual encoder's skewed sampler."""

import math

import pytest
import torch

from lib.data import world
from lib.measure import moe_evals, retrieval
from lib.nn.moe import MoEConfig, MoEGPT, expert_capacity, with_capacity


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


def test_an_expert_removed_gives_its_tokens_nothing_and_leaves_the_others_as_they_were():
    torch.manual_seed(0)
    top1 = MoEGPT(MoEConfig(d_model=16, n_heads=2, n_experts=4, top_k=1, expert_hidden=16))
    x = torch.randn(1, 30, 16)
    full = top1.moe_layers()[1]
    removed = moe_evals.without_expert(top1, 1, 2).moe_layers()[1]
    with torch.no_grad():
        before, after = full(x)[0], removed(x)[0]
    to_two = full.last["chosen"][:, 0] == 2
    assert to_two.any() and (~to_two).any()
    assert torch.equal(after[to_two], torch.zeros_like(after[to_two]))
    assert torch.equal(after[~to_two], before[~to_two])
    assert top1.moe_layers()[1].experts[2].fc2.weight.abs().sum() > 0       # the model itself is untouched


def test_dropped_by_expert_counts_the_drops_of_each_expert_and_capacity_state_what_it_sent():
    model, windows = small_moe(), torch.randint(0, 44, (4, 24))
    for factor in (0.5, 1.0):
        per_expert = moe_evals.dropped_by_expert(model, windows, factor)
        capped = with_capacity(model, factor)
        with torch.no_grad():
            capped(windows)
        assert [sum(row) for row in per_expert] == [layer.last["dropped"] for layer in capped.moe_layers()]
        state = moe_evals.capacity_state(model, windows, factor)       # windows (B, T + 1): inputs and targets
        with torch.no_grad():
            capped(windows[:, :-1])
        first = capped.moe_layers()[0].last["chosen"]
        assert state["sent"] == torch.bincount(first.reshape(-1), minlength=4).tolist()
        assert sum(state["sent"]) == 2 * windows[:, :-1].numel()           # k = 2 assignments per token
        assert state["capacity"] == expert_capacity(windows[:, :-1].numel(), capped.config)
    assert moe_evals.capacity_state(model, windows, None)["bits"] == moe_evals.capacity_state(model, windows, 8.0)["bits_unlimited"]


def test_the_busiest_expert_is_read_from_the_last_log_row():
    log = [{"load": [[0.5, 0.5], [0.9, 0.1]]}, {"load": [[0.2, 0.8], [0.3, 0.7]]}]
    assert moe_evals.busiest_expert(log, 0) == (1, 0.8) and moe_evals.busiest_expert(log, 1) == (1, 0.7)


def test_two_passages_score_the_own_and_the_other_line_in_both_orders(monkeypatch):
    def first_passage_city(model, prompts):           # a stand-in reader that always copies the first line's city
        return [" " + prompt.split("\n")[1].split(" lives in ")[1] for prompt in prompts]
    monkeypatch.setattr(retrieval, "answers", first_passage_city)
    got = retrieval.two_passages(None)
    home = world.build_world().home
    assert len(set(home.values())) > 1
    people = list(home)
    same = sum(home[a] == home[b] for a, b in zip(people, people[1:] + people[:1])) / len(people)
    assert got["own line first"] == (1.0, same, 0.0) and got["own line second"] == (same, 1.0, 0.0)
    assert got["other line only"] == (same, 1.0, 0.0)


def test_the_skewed_sampler_draws_distinct_people_as_often_as_their_weights_say():
    config = {"seed": 3, "batch_size": 8, "steps": 400, "name_decay": 0.8}
    draw = retrieval.name_sampler(config)
    batch = draw()
    assert len(set(batch)) == 8 and set(batch) <= set(retrieval.TRAIN_NAMES)
    counts, weights = retrieval.pair_counts(config), retrieval.name_weights(0.8, seed=3)
    assert sum(counts.values()) == 400 * 8
    ranked = sorted(retrieval.TRAIN_NAMES, key=lambda n: -weights[n])
    assert counts[ranked[0]] > 300 > counts[ranked[8]] > counts.get(ranked[-1], 0)
    uniform = retrieval.pair_counts({**config, "name_decay": None})
    assert max(uniform.values()) < 2 * min(uniform.values())


def test_the_expert_before_the_answer_is_the_route_of_the_space_after_lives_in():
    from lib.recipes import moe as moe_runs
    from lib.trainers.char_lm import build_network
    torch.manual_seed(0)
    model = build_network(moe_runs.fact_run("facts_experts").config).eval()
    for moe_layer in model.moe_layers():      # untrained routers send every name to one expert: make them sharp
        torch.nn.init.normal_(moe_layer.router.weight, std=30.0)
    names = list(world.fact_world(40))
    for layer in (0, 1):
        found = moe_evals.expert_before_answer(model, names, layer)
        one_by_one = {n: moe_evals.routing(with_capacity(model, None), torch.tensor([moe_evals.CHARS.encode(
            f"\n{n} lives in ")]))[layer][0, -1].item() for n in names}
        assert found == one_by_one and len(set(found.values())) > 1
