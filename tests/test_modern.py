"""Section 09's switches: each does what its formula says, and every switch off is today's TinyGPT."""

import copy
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from lib.nn.models import KVCache, ModelConfig, TinyGPT, parameter_count, pool_kv_heads
from lib.nn.modern import RMSNorm, SwiGLU, apply_rope, half_to_interleaved
from lib.recipes import modern

torch.manual_seed(0)
MODERN = ModelConfig(norm="rmsnorm", mlp="swiglu", position="rope", kv_heads=2, bias=False, tie_output=False)


def test_rmsnorm_of_a_centred_vector_is_layernorm_without_affine():
    x = torch.randn(5, 16, dtype=torch.float64) * 3 + 1
    centred = x - x.mean(-1, keepdim=True)
    assert torch.allclose(RMSNorm(16, eps=1e-5).double()(centred), F.layer_norm(x, (16,), eps=1e-5), atol=1e-12)


def test_swiglu_parameters_match_the_gelu_mlp_at_8d_over_3():
    d = 48                                             # 8d/3 = 128 exactly
    swiglu = sum(p.numel() for p in SwiGLU(d, 8 * d // 3, bias=False).parameters())
    assert swiglu == 3 * d * (8 * d // 3) == 8 * d * d


def test_rope_preserves_norms_and_scores_depend_only_on_the_offset():
    q, k = torch.randn(1, 16, dtype=torch.float64), torch.randn(1, 16, dtype=torch.float64)
    at = lambda x, m: apply_rope(x, torch.tensor([m]))[0]
    assert torch.allclose(at(q, 37).norm(), q.norm(), atol=1e-12)
    scores = {(m, n): float(at(q, m) @ at(k, n)) for m, n in [(5, 2), (40, 37), (93, 90), (3, 0)]}
    assert max(scores.values()) - min(scores.values()) < 1e-12
    assert abs(float(at(q, 5) @ at(k, 2)) - float(at(q, 5) @ at(k, 3))) > 1e-3     # another offset, another score


def test_interleaved_rope_equals_rotate_half_after_permuting_the_features():
    d_head, positions = 8, torch.arange(6)
    q, k = torch.randn(6, d_head, dtype=torch.float64), torch.randn(6, d_head, dtype=torch.float64)
    half = apply_rope(q, positions) @ apply_rope(k, positions).T
    order = half_to_interleaved(d_head)
    interleaved = apply_rope(q[:, order], positions, interleaved=True) @ apply_rope(k[:, order], positions, interleaved=True).T
    assert torch.allclose(half, interleaved, atol=1e-12)
    wrong = apply_rope(q, positions, interleaved=True) @ apply_rope(k, positions, interleaved=True).T
    assert not torch.allclose(half, wrong, atol=1e-3)  # the porting bug: the same rows in the other layout


def test_every_switch_off_is_todays_tinygpt_bit_for_bit():
    torch.manual_seed(1)
    old = TinyGPT(ModelConfig())
    torch.manual_seed(1)
    new = TinyGPT(ModelConfig(norm="layernorm", mlp="gelu", position="learned", kv_heads=4, bias=True, tie_output=True))
    assert list(old.state_dict()) == list(new.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(old.state_dict().values(), new.state_dict().values()))
    idx = torch.randint(0, 44, (2, 30))
    assert torch.equal(old(idx), new(idx))
    assert ModelConfig(kv_heads=None).to_dict() == {"vocab_size": 44, "context": 96, "d_model": 64, "n_layers": 2,
                                                    "n_heads": 4}


def test_gqa_with_g_heads_equals_multihead_on_repeated_weights_and_g1_is_multiquery():
    torch.manual_seed(2)
    config = ModelConfig(n_heads=4)
    mha = TinyGPT(config)
    idx = torch.randint(0, 44, (2, 20))
    assert torch.equal(pool_kv_heads(mha, 4)(idx), mha(idx))            # g = h: multi-head, the same weights
    mqa = pool_kv_heads(mha, 1)
    # Multi-query: give every head of a multi-head model the one pooled key/value head; the outputs agree.
    expanded = copy.deepcopy(mha)
    for block, pooled in zip(expanded.blocks, mqa.blocks):
        d, d_h = 64, 16
        q, k, v = pooled.attn.qkv.weight.split((d, d_h, d_h))
        qb, kb, vb = pooled.attn.qkv.bias.split((d, d_h, d_h))
        block.attn.qkv.weight.data = torch.cat([q, k.repeat(4, 1), v.repeat(4, 1)])
        block.attn.qkv.bias.data = torch.cat([qb, kb.repeat(4), vb.repeat(4)])
    assert torch.allclose(expanded(idx), mqa(idx), atol=1e-5)
    assert mqa.blocks[0].attn.qkv.weight.shape == (64 + 2 * 16, 64)


def test_kv_cache_of_a_modern_decoder_holds_g_heads_and_equals_the_full_pass():
    torch.manual_seed(3)
    model = TinyGPT(MODERN).double()
    idx = torch.randint(0, 44, (2, 25))
    cache = KVCache(len(model.blocks))
    chunks = [model.forward_cached(idx[:, a:b], cache) for a, b in [(0, 10), (10, 11), (11, 25)]]
    assert torch.allclose(torch.cat(chunks, 1), model(idx), atol=1e-12)
    assert cache.layers[0].k.shape == (2, 2, 25, 16)                     # g = 2 key/value heads are cached


def test_parameter_formula_counts_every_combination_and_the_ladder_is_matched():
    for switches in [{}, {"norm": "rmsnorm"}, {"mlp": "swiglu", "bias": False}, {"position": "rope", "kv_heads": 1},
                     {"tie_output": False, "norm": "rmsnorm", "bias": False}, MODERN.switches()]:
        config = ModelConfig(**switches)
        assert parameter_count(config) == sum(p.numel() for p in TinyGPT(config).parameters()), switches
    for rung in modern.RUNGS:
        count = parameter_count(ModelConfig(**modern.rung_model(rung)))
        assert abs(count / modern.TARGET - 1) < 0.01, (rung, count)


def test_rope_model_runs_past_its_training_length_and_learned_positions_refuse():
    torch.manual_seed(4)
    rope = TinyGPT(replace(MODERN, context=16))
    longer = TinyGPT(replace(rope.config, context=32))
    longer.load_state_dict(rope.state_dict())                             # no weight depends on the length
    assert longer(torch.randint(0, 44, (1, 32))).shape == (1, 32, 44)
    with pytest.raises(ValueError, match="context"):
        TinyGPT(ModelConfig(context=16))(torch.randint(0, 44, (1, 32)))


def test_bad_switches_are_refused():
    for bad in [{"norm": "batchnorm"}, {"mlp": "relu"}, {"position": "alibi"}, {"kv_heads": 3}]:
        with pytest.raises(ValueError):
            ModelConfig(**bad)


def test_a_rope_model_is_blind_to_a_shift_of_every_position_and_a_learned_one_is_not():
    torch.manual_seed(5)
    idx = torch.randint(0, 44, (2, 20))
    rope = TinyGPT(MODERN).double()
    assert torch.allclose(rope(idx), rope(idx, start=50), atol=1e-12)
    learned = TinyGPT(ModelConfig()).double()
    assert not torch.allclose(learned(idx), learned(idx, start=50), atol=1e-3)
    with pytest.raises(ValueError, match="outside the model's context"):
        learned(idx, start=90)


def test_porting_rope_weights_to_the_interleaved_layout_needs_the_row_permutation():
    from lib.measure.modern import ported
    torch.manual_seed(6)
    model = TinyGPT(MODERN).double()
    idx = torch.randint(0, 44, (2, 20))
    assert torch.allclose(ported(model, permute_rows=True)(idx), model(idx), atol=1e-12)
    assert not torch.allclose(ported(model, permute_rows=False)(idx), model(idx), atol=1e-4)


def test_a_band_as_wide_as_the_window_is_the_causal_mask_and_a_narrow_one_changes_far_positions():
    from lib.measure import evals
    from lib.measure.modern import distance_mask, same_line_mask
    torch.manual_seed(7)
    model = TinyGPT(replace(MODERN, context=40)).double()
    windows = torch.randint(0, 44, (3, 41))
    full = evals.position_bits(model, windows)
    assert torch.allclose(evals.position_bits(model, windows, distance_mask(40, range(40))), full, atol=1e-12)
    narrow = evals.position_bits(model, windows, distance_mask(40, range(8)))
    assert torch.allclose(narrow[:8], full[:8], atol=1e-12) and not torch.allclose(narrow[8:], full[8:], atol=1e-6)
    # attention kept inside each line: a RoPE model reads a line in a window as it reads the line alone
    line = evals.CHARS.encode("\nzukun lives in quila.\n")
    window = torch.tensor([evals.CHARS.encode("ab cd") + line])
    inside = evals.position_bits(model, window, same_line_mask(window))[5:]
    alone = evals.position_bits(model, torch.tensor([line]))
    assert torch.allclose(inside, alone, atol=1e-12)
