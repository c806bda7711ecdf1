"""The KV cache (models.KVCache, TinyGPT.forward_cached) and lib.nn.inference.generate: decoding with the cache
gives what rerunning the model on the whole sequence gives."""

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
