"""The MoE layer: gating, capacity, the balancing loss, gradients, shared experts, determinism."""

import pytest
import torch

from lib.nn import models, moe
from lib.measure import moe_evals
from lib.recipes import moe as moe_runs
from lib.trainers.char_lm import train_char_lm
from lib.nn.moe import MoEConfig, MoEGPT, MoELayer, balance_loss, expert_capacity, queue_positions, top_k_gates


def layer(**fields):
    torch.manual_seed(0)
    return MoELayer(MoEConfig(d_model=8, **fields))


def test_top_k_keeps_the_largest_and_renormalises():
    probs = torch.tensor([[0.04, 0.8, 0.01, 0.15], [0.3, 0.3, 0.1, 0.3]]).softmax(dim=-1)
    gates = top_k_gates(probs, k=2)
    assert (gates > 0).sum(dim=-1).tolist() == [2, 2]
    assert torch.allclose(gates.sum(dim=-1), torch.ones(2))
    kept = gates[0].nonzero()[:, 0].tolist()
    assert kept == [1, 3] and torch.isclose(gates[0, 1] / gates[0, 3], probs[0, 1] / probs[0, 3])
    assert torch.equal(top_k_gates(probs, k=1, renormalize=False).max(dim=-1).values, probs.max(dim=-1).values)


def test_capacity_drops_are_counted_exactly():
    moe = layer(n_experts=4, top_k=2, expert_hidden=16, capacity_factor=0.5)
    x = torch.randn(3, 10, 8)
    y = moe(x)
    chosen, kept = moe.last["chosen"], moe.last["kept"]
    capacity = expert_capacity(30, moe.config)                      # ceil(0.5 * 2 * 30 / 4) = 8
    assert capacity == 8
    per_expert = torch.bincount(chosen.reshape(-1), minlength=4)
    assert moe.last["dropped"] == int((per_expert - capacity).clamp(min=0).sum()) == int((~kept).sum()) > 0
    # a token whose every assignment is dropped leaves the layer as zeros: it keeps only its residual stream
    skipped = ~kept.any(dim=-1)
    assert torch.equal(y.reshape(30, 8)[skipped], torch.zeros(int(skipped.sum()), 8))
    # first choices queue before second choices: a second choice is never kept while a first choice of its expert
    # is dropped
    for e in range(4):
        first_dropped = ((chosen[:, 0] == e) & ~kept[:, 0]).any()
        second_kept = ((chosen[:, 1] == e) & kept[:, 1]).any()
        assert not (first_dropped and second_kept)


def test_no_capacity_factor_drops_nothing():
    moe = layer(n_experts=4, top_k=1, expert_hidden=16)
    moe(torch.randn(2, 16, 8))
    assert moe.last["dropped"] == 0 and moe.last["kept"].all()


def test_queue_positions_order_first_choices_then_tokens():
    chosen = torch.tensor([[2, 0], [2, 1], [0, 2]])
    assert queue_positions(chosen).tolist() == [[0, 1], [1, 0], [0, 2]]


def test_balance_loss_is_its_formula_and_one_when_uniform():
    moe = layer(n_experts=4, top_k=2, expert_hidden=16)
    x = torch.randn(2, 12, 8)
    moe(x)
    f = torch.bincount(moe.last["chosen"].reshape(-1), minlength=4).float() / (24 * 2)   # shares of assignments
    P = moe.router(x.reshape(24, 8)).softmax(dim=-1).mean(dim=0)                        # mean router probabilities
    assert torch.allclose(moe.last["balance"], 4 * (f * P).sum())
    assert float(balance_loss(torch.full((8,), 1 / 8), torch.full((8,), 1 / 8))) == pytest.approx(1.0)
    # all load on one expert with all the probability: the loss is E
    assert float(balance_loss(torch.eye(8)[0], torch.eye(8)[0])) == pytest.approx(8.0)


@pytest.mark.parametrize("top_k", [1, 2])
def test_the_loss_reaches_the_router_through_the_gates(top_k):
    moe = layer(n_experts=4, top_k=top_k, expert_hidden=16)
    moe(torch.randn(2, 12, 8)).square().sum().backward()            # no balancing loss anywhere
    assert moe.router.weight.grad is not None and moe.router.weight.grad.abs().sum() > 0


def test_a_renormalised_single_gate_gives_the_router_no_gradient():
    # why top-1 uses the raw probability: renormalised, the one gate is exactly 1
    logits = torch.randn(5, 4, requires_grad=True)
    top_k_gates(logits.softmax(dim=-1), k=1).sum().backward()
    assert torch.equal(logits.grad, torch.zeros(5, 4))


def test_shared_experts_see_every_token():
    moe = layer(n_experts=4, top_k=1, expert_hidden=16, n_shared=1, capacity_factor=0.25)
    seen = []
    moe.shared[0].register_forward_hook(lambda module, args, out: seen.append(args[0].shape[0]))
    x = torch.randn(2, 10, 8)
    y = moe(x)
    assert seen == [20] and moe.last["dropped"] > 0
    skipped = ~moe.last["kept"].any(dim=-1)
    assert torch.allclose(y.reshape(20, 8)[skipped], moe.shared[0](x.reshape(20, 8)[skipped]))


def test_a_dense_layer_is_one_shared_expert():
    moe = layer(n_experts=0, n_shared=1, expert_hidden=32)
    x = torch.randn(2, 5, 8)
    assert moe.router is None and torch.equal(moe(x), moe.shared[0](x.reshape(10, 8)).view(2, 5, 8))


def test_active_parameters_count_k_of_e_experts():
    counts = MoEGPT(MoEConfig(n_experts=4, top_k=1, expert_hidden=256)).parameter_counts()
    dense = models.parameter_count(models.ModelConfig())
    assert counts["active"] == dense + 2 * 4 * 64                     # the dense model plus two routers
    assert counts["total"] == counts["active"] + 2 * 3 * (2 * 64 * 256 + 256 + 64)


def test_bad_configs_are_refused():
    with pytest.raises(ValueError, match="top_k=3"):
        MoEConfig(n_experts=2, top_k=3)
    with pytest.raises(ValueError, match="at least one"):
        MoEConfig(n_experts=0, n_shared=0)
    with pytest.raises(ValueError, match="capacity_factor"):
        MoEConfig(capacity_factor=0)


def test_training_is_deterministic():
    config = {**moe_runs.run_config("moe_top2"), "steps": 6, "eval_every": 3}
    (a, log_a), (b, log_b) = train_char_lm(config), train_char_lm(config)
    assert log_a == log_b and all(torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in a.state_dict())
    assert len(log_a[-1]["load"]) == 2 and len(log_a[-1]["load"][0]) == 8


def test_dropped_shares_count_what_a_forward_pass_at_that_capacity_drops():
    torch.manual_seed(0)
    model = MoEGPT(MoEConfig(d_model=16, n_heads=2, n_experts=4, top_k=2, expert_hidden=16, capacity_factor=1.0))
    windows = torch.randint(0, 44, (4, 24))
    shares = moe_evals.dropped_shares(model, windows, [0.5, 1.0, 4.0])
    for factor, share in shares.items():
        copy = moe.with_capacity(model, factor)
        copy(windows)
        dropped = [layer.last["dropped"] / layer.last["kept"].numel() for layer in copy.moe_layers()]
        assert share == pytest.approx(sum(dropped) / len(dropped))
    assert shares[0.5] > shares[1.0] > shares[4.0] == 0.0
    unlimited = moe.with_capacity(model, None)
    unlimited(windows)
    assert all(layer.last["dropped"] == 0 for layer in unlimited.moe_layers())


def test_expert_counts_cover_every_character_once():
    torch.manual_seed(0)
    model = MoEGPT(MoEConfig(n_experts=4, top_k=1, expert_hidden=16))
    lines = ["12+30=42.", "base lives in quila."]
    counts = moe_evals.expert_counts_by_class(model, lines)
    assert sum(map(sum, counts.values())) == sum(len(line) + 1 for line in lines)
    assert {name: sum(row) for name, row in counts.items()} == {"newline": 2, "digit": 6, "punctuation": 4,
                                                                   "letter": 16, "space": 3}


def test_forward_flops_count_the_active_matrices_and_attention():
    dense = models.TinyGPT()
    d, V, T, L = 64, 44, 96, 2
    assert moe.forward_flops_per_token(dense) == 2 * (L * 12 * d * d + V * d) + 2 * L * T * d
    top1 = MoEGPT(MoEConfig(n_experts=4, top_k=1, expert_hidden=256))
    assert moe.forward_flops_per_token(top1) == moe.forward_flops_per_token(dense) + 2 * L * 4 * d   # + the routers


def test_no_capacity_limit_computes_what_the_model_computes_when_nothing_is_dropped():
    torch.manual_seed(0)
    model = MoEGPT(MoEConfig(n_experts=4, top_k=2, expert_hidden=16, capacity_factor=4.0)).eval()
    windows = torch.randint(0, 44, (2, 20))
    with torch.no_grad():
        limited = model(windows)
        assert all(layer.last["dropped"] == 0 for layer in model.moe_layers())
        assert torch.equal(moe.with_capacity(model, None)(windows), limited)


def test_the_router_z_loss_is_the_mean_squared_log_sum_exp():
    moe_layer = layer(n_experts=4, top_k=1, expert_hidden=16)
    x = torch.randn(2, 6, 8)
    moe_layer(x)
    logits = moe_layer.router(x.reshape(12, 8))
    assert torch.allclose(moe_layer.last["z_loss"], (logits.exp().sum(dim=-1).log() ** 2).mean())


def test_the_dense_model_trained_for_the_base_models_steps_is_the_base_model():
    from lib.recipes import base
    from lib.train import cache
    assert moe_runs.run("dense", 2, steps=6000).name == "base_seed2"
    assert cache.checkpoint_key(moe_runs.run("dense", 2, steps=6000)) == cache.checkpoint_key(base.run(2))
    longer = moe_runs.run("dense", 1, steps=4000)
    assert longer.name == "dense_steps4000_seed1" and longer.config == {**moe_runs.run_config("dense", 1), "steps": 4000}
    for e, (mixture, dense) in moe_runs.SWEEP.items():       # the sweep: equal active, equal total parameters
        assert moe_runs.feed_forward(mixture)["per token"] == 256
        if dense:
            assert moe_runs.feed_forward(dense)["in all"] == moe_runs.feed_forward(mixture)["in all"] == 256 * e


def test_the_fact_world_runs_pair_equal_active_and_equal_total_parameters():
    from lib.trainers.char_lm import build_network
    count = {v: moe_evals.parameter_counts(build_network(moe_runs.fact_run(v).config)) for v in moe_runs.FACT_VARIANTS}
    experts = moe_runs.fact_run("facts_experts").config["model"]
    layers, d, e = experts["n_layers"], experts["d_model"], experts["n_experts"]
    routers = layers * d * e                 # each layer's router (d x E, no bias)
    assert count["facts_experts"]["active"] == count["facts_dense"]["total"] + routers
    # and each layer's E experts have E output biases where the one wide MLP has one
    assert count["facts_experts"]["total"] == count["facts_wide"]["total"] + routers + layers * (e - 1) * d
    longer = moe_runs.fact_run("facts_dense", 2, moe_runs.FACT_LONGER)
    assert longer.name == "facts_dense_steps32000_seed2"
    assert longer.config == {**moe_runs.fact_run("facts_dense", 2).config, "steps": 2 * moe_runs.FACT_STEPS}
