"""The KV cache (models.KVCache, TinyGPT.forward_cached) and lib.nn.inference.generate: decoding with the cache
gives what rerunning the model on the whole sequence gives."""

import math

import pytest
import torch

from lib.measure import evals, precision
from lib.nn import inference
from lib.nn.models import KVCache, ModelConfig, TinyGPT
from lib.nn.moe import MoEConfig, MoEGPT
from lib.nn.post_ln import PostLNGPT

CONFIG = ModelConfig(n_layers=3)


@pytest.mark.parametrize("build", [lambda: TinyGPT(CONFIG), lambda: PostLNGPT(CONFIG)], ids=["pre-LN", "post-LN"])
def test_cached_logits_equal_the_full_forward_pass_in_any_chunking(build):
    """A prefill of any length, then chunks of any size: every position's logits are those of one forward pass
    over the whole sequence, to float64 rounding; the cache ends up holding every position."""
    torch.manual_seed(0)
    model = precision.for_measurement(build(), copy_model=False)
    generator = torch.Generator().manual_seed(1)
    for _ in range(5):
        idx = torch.randint(0, CONFIG.vocab_size, (3, CONFIG.context), generator=generator)
        cuts = sorted(torch.randperm(CONFIG.context - 1, generator=generator)[:4].add(1).tolist()) + [CONFIG.context]
        cache, start, parts = KVCache(CONFIG.n_layers), 0, []
        for cut in cuts:
            parts.append(model.forward_cached(idx[:, start:cut], cache))
            start = cut
        assert len(cache) == CONFIG.context
        assert (torch.cat(parts, dim=1) - model(idx)).abs().max() < 1e-12


def test_cached_greedy_and_sampled_generation_equal_recomputation():
    torch.manual_seed(0)
    model = precision.for_measurement(TinyGPT(CONFIG), copy_model=False)
    prompts = torch.randint(0, CONFIG.vocab_size, (4, 7))
    for make in (lambda: None, lambda: torch.Generator().manual_seed(3)):
        cached = inference.generate(model, prompts, 40, generator=make())
        rerun = inference.generate(model, prompts, 40, use_cache=False, generator=make())
        assert cached.shape == (4, 40) and torch.equal(cached, rerun)


def test_evals_generate_writes_the_same_lines_with_and_without_the_cache(monkeypatch):
    torch.manual_seed(0)
    model = precision.for_measurement(TinyGPT(), copy_model=False)
    with_cache = evals.sample_lines(model, 8, seed=2)
    monkeypatch.setattr(inference, "new_cache", lambda *_: None)
    assert evals.sample_lines(model, 8, seed=2) == with_cache


def test_the_cache_is_used_only_where_it_is_exact():
    """Past the context the window slides (every learned position moves), and capacity-limited MoE routing
    depends on which tokens share a pass: no cache there, and forward_cached says why."""
    model = TinyGPT(CONFIG)
    assert isinstance(inference.new_cache(model, CONFIG.context), KVCache)
    assert inference.new_cache(model, CONFIG.context + 1) is None
    moe = MoEGPT(MoEConfig())
    assert inference.new_cache(moe, 10) is None
    with pytest.raises(ValueError, match="does not decode with a KV cache"):
        moe.forward_cached(torch.zeros(1, 3, dtype=torch.long), KVCache(moe.config.n_layers))
    cache = KVCache(CONFIG.n_layers)
    model.forward_cached(torch.zeros(1, CONFIG.context - 2, dtype=torch.long), cache)
    with pytest.raises(ValueError, match="exceed the model's context"):
        model.forward_cached(torch.zeros(1, 3, dtype=torch.long), cache)


# -- section 10: every attention kind, padding, chunking, decoding rules, beam search, speculative decoding ------

from lib.nn.models import kv_numbers_per_token, parameter_count    # noqa: E402

KINDS = {"learned MHA": ModelConfig(), "RoPE MHA": ModelConfig(position="rope"),
         "RoPE GQA": ModelConfig(position="rope", kv_heads=2), "MQA": ModelConfig(kv_heads=1),
         "RoPE MLA": ModelConfig(position="rope", kv_latent=24), "MLA": ModelConfig(kv_latent=24, bias=False)}


def measured(config, seed=0):
    torch.manual_seed(seed)
    return precision.for_measurement(TinyGPT(config), copy_model=False)


@pytest.mark.parametrize("name", KINDS)
def test_every_attention_kind_caches_exactly_and_holds_what_the_formula_says(name):
    config, model = KINDS[name], measured(KINDS[name])
    idx = torch.randint(0, config.vocab_size, (2, 50), generator=torch.Generator().manual_seed(1))
    cache = KVCache(config.n_layers)
    parts = [model.forward_cached(idx[:, a:b], cache) for a, b in ((0, 13), (13, 14), (14, 50))]
    assert (torch.cat(parts, dim=1) - model(idx)).abs().max() < 1e-12
    held = sum(layer.numbers_per_token() for layer in cache.layers)     # read off the allocated tensors
    assert held == kv_numbers_per_token(config)
    assert sum(p.numel() for p in model.parameters()) == parameter_count(config)


@pytest.mark.parametrize("name", ["RoPE MLA", "MLA"])
def test_absorbed_latent_attention_equals_the_naive_path(name):
    model = measured(KINDS[name])
    idx = torch.randint(0, 44, (3, 40), generator=torch.Generator().manual_seed(2))
    naive, naive_weights = model.forward_with_attention(idx)
    for block in model.blocks:
        block.attn.absorbed = True
    absorbed, absorbed_weights = model.forward_with_attention(idx)
    assert (naive - absorbed).abs().max() < 1e-12
    assert all((a - b).abs().max() < 1e-12 for a, b in zip(naive_weights, absorbed_weights))
    cache = KVCache(2)                                  # the fused path, whole and cached, absorbed
    cached = torch.cat([model.forward_cached(idx[:, :25], cache), model.forward_cached(idx[:, 25:], cache)], dim=1)
    assert (model(idx) - naive).abs().max() < 1e-12 and (cached - naive).abs().max() < 1e-12


@pytest.mark.parametrize("name", ["learned MHA", "RoPE GQA", "RoPE MLA"])
def test_a_left_padded_batch_decodes_each_row_as_it_would_alone_and_prefill_may_be_chunked(name):
    model = measured(KINDS[name])
    prompts = [[1, 2, 3, 4, 5, 6], [7], [9, 9, 3]]
    ids, real = inference.left_pad(prompts)
    rules = [inference.repetition_penalty(1.3), inference.temperature(0.7), inference.top_p(0.9)]
    sampled = [inference.generate(model, ids, 15, real=real, processors=rules, use_cache=cached,
                                  generator=torch.Generator().manual_seed(4)) for cached in (True, False)]
    assert torch.equal(*sampled)
    greedy_alone = [inference.generate(model, torch.tensor([p]), 15)[0] for p in prompts]
    assert all(torch.equal(a, b) for a, b in zip(inference.generate(model, ids, 15, real=real), greedy_alone))
    whole = inference.prefill(model, ids, real=real)[1]
    assert all((inference.prefill(model, ids, chunk=c, real=real)[1] - whole).abs().max() < 1e-12 for c in (1, 2, 4))


def test_top_p_keeps_exactly_the_smallest_set_that_reaches_p():
    probs = torch.rand(200, 10, generator=torch.Generator().manual_seed(0), dtype=torch.float64) ** 3
    probs = probs / probs.sum(-1, keepdim=True)
    for p in (0.05, 0.5, 0.9):
        keep = inference.top_p_mask(probs, p)
        for row, kept in zip(probs, keep):
            ranked = sorted(row.tolist(), reverse=True)
            n = next(i + 1 for i in range(10) if sum(ranked[:i + 1]) >= p)     # the smallest prefix reaching p
            assert kept.sum() == n and set(row[kept].tolist()) == set(ranked[:n])
    assert inference.top_p_mask(probs, 1.0).all()
    confident = torch.tensor([[0.7, 0.2, 0.1]], dtype=torch.float64)
    assert inference.top_p_mask(confident, 0.6).tolist() == [[True, False, False]]       # never empty


def test_min_p_keeps_exactly_the_tokens_above_its_share_of_the_top_one():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]], dtype=torch.float64)
    assert inference.min_p_mask(probs, 0.3).tolist() == [[True, True, True, False]]    # cut at 0.15
    assert inference.min_p_mask(probs, 1.0).tolist() == [[True, False, False, False]]


def test_a_vanishing_temperature_top_k_one_and_beam_width_one_are_greedy():
    model = measured(KINDS["RoPE MHA"])
    prompt = torch.tensor([[3, 1, 4, 1, 5]])
    greedy = inference.generate(model, prompt, 20)
    for rules in ([inference.temperature(1e-6)], [inference.top_k(1)]):
        assert torch.equal(inference.generate(model, prompt, 20, processors=rules,
                                              generator=torch.Generator().manual_seed(0)), greedy)
    best = inference.beam_search(model, prompt, 20, width=1, end=-1)[0]        # end=-1: no beam finishes early
    assert best[0] == greedy[0].tolist()


def test_speculative_sampling_gives_the_targets_distribution_exactly():
    """By enumeration over a small vocabulary: a draft x ~ q kept with probability min(1, p/q), else a token from
    the residual, is a token distributed as p; and a draft that is the target is always accepted."""
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        p, q = (torch.rand(7, generator=g, dtype=torch.float64) ** 4 for _ in range(2))
        p, q = p / p.sum(), q / q.sum()
        keep = q * inference.acceptance(p, q)                  # P(draft x and kept)
        assert torch.allclose(keep + (1 - keep.sum()) * inference.residual(p, q), p, atol=1e-14)
    model = measured(KINDS["RoPE MHA"])
    new, stats = inference.speculative_generate(model, model, torch.tensor([[1, 2]]), 20, 4, torch.Generator().manual_seed(0))
    assert new.shape == (1, 20) and stats["accepted"] == stats["drafted"] == 16 and stats["target_passes"] == 4


class Sharp(torch.nn.Module):
    """A model's logits times 1e4: sampling from it is its greedy decoding."""

    def __init__(self, model):
        super().__init__()
        self.model, self.config = model, model.config

    def forward(self, idx):
        return self.model(idx) * 1e4


def test_speculative_decoding_with_another_draft_samples_what_the_target_would():
    """A target that is effectively greedy, drafted for by a different model: whatever the draft proposes, the
    tokens are the target's greedy ones (each verified p[i], and the bonus token p[k], read at the right place)."""
    target, draft = Sharp(measured(KINDS["RoPE MHA"], seed=0)), measured(KINDS["learned MHA"], seed=1)
    prompt = torch.tensor([[3, 1, 4]])
    greedy = inference.generate(target.model, prompt, 30)
    for length in (1, 3, 5):
        new, stats = inference.speculative_generate(target, draft, prompt, 30, length, torch.Generator().manual_seed(length))
        assert torch.equal(new, greedy) and stats["accepted"] < stats["drafted"]
    with pytest.raises(ValueError, match="exceed the target's context"):
        inference.speculative_generate(target, draft, prompt, CONFIG.context, 2, torch.Generator())
    end = greedy[0, 10].item()                      # stop at the first time the greedy line writes this token
    stopped, _ = inference.speculative_generate(target, draft, prompt, 30, 3, torch.Generator().manual_seed(0), end=end)
    first = greedy[0].tolist().index(end)
    assert stopped.tolist() == [greedy[0, :first + 1].tolist()]


class Toy(torch.nn.Module):
    """Four tokens, the last one ends a line; the next token's probabilities depend on the last token only:
    after the prompt (token 2) 0 has 0.6 and 1 has 0.4; after 0 the end has 0.3, after 1 it has 0.9."""
    config = ModelConfig(vocab_size=4)
    table = {2: [0.6, 0.4, 0.0, 0.0], 0: [0.35, 0.35, 0.0, 0.3], 1: [0.05, 0.05, 0.0, 0.9]}

    def forward(self, idx):
        probs = torch.tensor([self.table[t] for t in idx[:, -1].tolist()], dtype=torch.float64)
        return probs.clamp(min=1e-12).log()[:, None, :].expand(-1, idx.shape[1], -1)


def test_beam_search_finds_the_line_greedy_decoding_misses():
    """Greedy takes 0 (0.6) and ends with 0.6 x 0.3 = 0.18 at best; the line [1, end] has 0.4 x 0.9 = 0.36."""
    prompt = torch.tensor([[2]])
    assert inference.generate(Toy(), prompt, 1).tolist() == [[0]]
    best, second = inference.beam_search(Toy(), prompt, 4, width=2, end=3)
    assert best[0] == [1, 3] and abs(best[1] - math.log(0.36)) < 1e-9
    # step 2 keeps two live beams beside the finished [1, end]: [0, 0] and [0, 1] (0.21 each; [0, end], 0.18, ranks
    # fourth); step 3 finishes [0, 1, end] (0.189), likelier than anything still live: the search stops
    assert second[0] == [0, 1, 3] and abs(second[1] - math.log(0.6 * 0.35 * 0.9)) < 1e-9
    for penalty in (0.0, 0.7, 1.0):
        ranked = inference.beam_search(Toy(), prompt, 4, width=3, end=3, length_penalty=penalty)
        assert all(abs(score - logp / len(seq) ** penalty) < 1e-12 for seq, logp, score in ranked)
        assert [r[2] for r in ranked] == sorted((r[2] for r in ranked), reverse=True)


def test_a_padded_batch_needs_no_position_ids_and_writes_nothing_when_asked_for_nothing():
    model = measured(KINDS["RoPE GQA"])
    ids, real = inference.left_pad([[1, 2, 3, 4], [5]])
    given = model.forward_cached(ids, KVCache(2), inference.position_ids(real), real)
    assert torch.equal(model.forward_cached(ids, KVCache(2), real=real), given)
    assert inference.generate(model, ids, 0, real=real).shape == (2, 0)


def test_an_mla_head_must_split_into_a_rotary_half_of_even_width():
    with pytest.raises(ValueError, match="multiple of 4"):
        ModelConfig(d_model=24, n_heads=4, position="rope", kv_latent=8)


def test_sampled_lines_take_processors_after_the_temperature():
    """evals.sample_lines with top-k = 1 writes the greedy lines whatever the temperature and seed."""
    model = measured(ModelConfig())
    greedy = evals.generate(model, ["\n"] * 4, max_new=40, temperature=0)
    for t, seed in ((1.0, 0), (2.0, 5)):
        lines = evals.generate(model, ["\n"] * 4, max_new=40, temperature=t, processors=[inference.top_k(1)],
                               generator=torch.Generator().manual_seed(seed))
        assert lines == greedy


def test_cache_agreement_and_the_absorbed_switch():
    """`inference_evals.cache_agreement` on a trained-shape model: the same greedy tokens, logits to float64
    rounding; `latent.absorb` switches every latent layer and back, the logits unchanged."""
    from lib.measure import inference_evals
    from lib.nn import latent
    model = measured(KINDS["RoPE MLA"], seed=0)
    same, gap = inference_evals.cache_agreement(model, torch.tensor([[3, 1, 4], [2, 7, 1]]), 20)
    assert same and gap < 1e-12
    idx = torch.randint(0, CONFIG.vocab_size, (2, 30), generator=torch.Generator().manual_seed(0))
    naive = model(idx)
    assert all(m.absorbed for m in latent.absorb(model).modules() if isinstance(m, latent.LatentAttention))
    assert (model(idx) - naive).abs().max() < 1e-12
    assert not any(m.absorbed for m in latent.absorb(model, False).modules() if isinstance(m, latent.LatentAttention))


def test_simulated_speculation_at_the_extremes():
    """Every draft kept: draft length 4 makes 5 tokens a pass (90 = 18 x 5); none kept: one token a pass."""
    from lib.measure import inference_evals
    assert inference_evals.simulated_tokens_per_pass(1.0, 4, 90, 3, replicates=2) == (5.0, 0.0)
    assert inference_evals.simulated_tokens_per_pass(0.0, 4, 90, 3, replicates=2) == (1.0, 0.0)


def test_repetition_penalty_spares_exempt_tokens_and_simulation_reads_per_position_overlaps():
    logits, ids = torch.tensor([[2.0, -1.0, 3.0, 0.5]]), torch.tensor([[0, 1, 2]])
    assert torch.equal(inference.repetition_penalty(2.0)(logits, ids), torch.tensor([[1.0, -2.0, 1.5, 0.5]]))
    assert torch.equal(inference.repetition_penalty(2.0, exempt=[2])(logits, ids), torch.tensor([[1.0, -2.0, 3.0, 0.5]]))
    from lib.measure import inference_evals
    always = [[1.0] * 90]                  # a sequence along which every draft is kept: as alpha = 1
    assert inference_evals.simulated_tokens_per_pass(always, 4, 90, 3, replicates=2) == (5.0, 0.0)
