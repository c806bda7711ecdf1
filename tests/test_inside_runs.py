"""Section 02's runs (lib.recipes.inside, lib.nn.post_ln): the post-LN block, the grid, the logged step losses."""

import torch

from lib.nn import models
from lib.nn.post_ln import PostLNGPT
from lib.recipes import inside as tv
from lib.recipes.base import SEEDS
from lib.trainers.char_lm import train_char_lm
from lib.nn.masks import causal_mask
from lib.data.seeding import seed_everything


def test_post_ln_starts_from_tinygpts_weights_and_normalises_after_each_sublayer():
    seed_everything(3)
    pre = models.TinyGPT()
    seed_everything(3)
    post = PostLNGPT()
    weights = post.state_dict()
    assert set(pre.state_dict()) - set(weights) == {"ln_f.weight", "ln_f.bias"}
    assert all(torch.equal(pre.state_dict()[name], tensor) for name, tensor in weights.items())
    # Trained-looking LayerNorm gains and biases, so that a LayerNorm left out or applied twice shows.
    with torch.no_grad():
        for name, p in post.named_parameters():
            if ".ln_" in name:
                p.copy_(torch.randn_like(p) * 0.3 + (1.0 if name.endswith("weight") else 0.0))
    idx = torch.randint(44, (2, 20))
    mask = causal_mask(20).expand(2, 20, 20)
    with torch.no_grad():
        x = post.wte(idx) + post.wpe(torch.arange(20))
        for block in post.blocks:
            x = block.ln_1(x + block.attn(x, mask)[0])
            x = block.ln_2(x + block.mlp(x))
        assert torch.allclose(post(idx), x @ post.wte.weight.T, atol=1e-5)
        assert not torch.allclose(post(idx), pre(idx), atol=1e-2)


def test_training_logs_every_steps_loss_and_stream_length_and_is_deterministic():
    config = tv.layernorm_run("post", warmup=0, lr=1e-2, seed=0).config | {"steps": 4, "eval_every": 2}
    (a, log_a), (b, log_b) = train_char_lm(config), train_char_lm(config)
    assert log_a == log_b and all(torch.equal(a.state_dict()[k], v) for k, v in b.state_dict().items())
    assert [len(row["step_losses"]) for row in log_a] == [len(row["stream_lengths"]) for row in log_a] == [2, 2]
    d = config["model"]["d_model"]                        # post-LN, before the first update: length sqrt(d)
    assert abs(log_a[0]["stream_lengths"][0] - d ** 0.5) < 0.01 * d ** 0.5
    assert all(abs(row["train_loss"] - sum(row["step_losses"]) / 2) < 1e-6 for row in log_a)


def test_the_grid_is_complete_and_the_four_head_runs_are_the_base_models():
    names = [r.name for r in tv.runs()]
    grid = len(tv.PLACEMENTS) * len(tv.WARMUPS) * len(tv.LEARNING_RATES) * len(SEEDS)
    # + the GRU, one head and one head for twice the steps, three seeds each
    assert len(names) == len(set(names)) == grid + 3 * len(SEEDS)
    assert tv.heads_run(4, 0).name == "base" and tv.heads_run(4, 2).name == "base_seed2"
    assert tv.heads_run(1, 1).config["model"]["n_heads"] == 1
    long = tv.heads_run(1, 2, steps=12000)
    assert (long.name, long.config["steps"]) == ("heads1_steps12000_seed2", 12000)
    pre, post = tv.layernorm_run("pre", 0, 1e-2, 1), tv.layernorm_run("post", 0, 1e-2, 1)
    assert {k for k in pre.config if pre.config[k] != post.config[k]} == {"network"}
