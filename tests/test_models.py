"""Models: the parameter formula, the two attention paths, masks, and input errors."""

import pytest
import torch

from lib.nn.masks import bidirectional_mask, causal_mask, encoder_decoder_masks, hide_padding, prefix_mask
from lib.nn.models import (EncoderDecoder, MaskedTransformer, ModelConfig, TinyGPT, encoder_decoder_parameter_count,
                        parameter_count)


def count(model):
    return sum(p.numel() for p in model.parameters())


def test_tinygpt_has_109056_parameters_by_formula_and_by_pytorch():
    config = ModelConfig()
    # The formula written out for the defaults: V·d + T·d + L·(12d² + 13d) + 2d.
    V, T, d, L = 44, 96, 64, 2
    assert V * d + T * d + L * (12 * d * d + 13 * d) + 2 * d == 109_056
    assert parameter_count(config) == count(TinyGPT(config)) == 109_056


@pytest.mark.parametrize("config", [ModelConfig(vocab_size=100, context=32, d_model=32, n_layers=3, n_heads=2),
                                    ModelConfig(vocab_size=354, context=32)])
def test_parameter_formula_matches_pytorch_for_other_sizes(config):
    assert parameter_count(config) == count(MaskedTransformer(config))


def test_masked_transformer_loads_tinygpt_and_matches_it_under_the_causal_mask():
    torch.manual_seed(0)
    gpt = TinyGPT()
    masked = MaskedTransformer()
    masked.load_state_dict(gpt.state_dict())  # same parameter names
    idx = torch.randint(44, (2, 40))
    assert torch.equal(gpt(idx), masked(idx, causal_mask(40)))


def test_explicit_attention_path_agrees_with_fused_path():
    torch.manual_seed(0)
    model, idx = TinyGPT(), torch.randint(44, (2, 96))
    with torch.no_grad():
        logits, attention = model.forward_with_attention(idx)
    assert torch.allclose(logits, model(idx), atol=1e-5)
    assert len(attention) == 2 and attention[0].shape == (2, 4, 96, 96)
    assert torch.allclose(attention[1].sum(-1), torch.ones(2, 4, 96))
    assert float(attention[0].triu(1).sum()) == 0.0  # nothing attends to the future


def test_causal_model_ignores_the_future_and_bidirectional_does_not():
    torch.manual_seed(0)
    model = MaskedTransformer()
    a = torch.randint(44, (1, 20))
    b = a.clone()
    b[0, 15:] = (b[0, 15:] + 1) % 44
    assert torch.equal(model(a, causal_mask(20))[0, :15], model(b, causal_mask(20))[0, :15])
    assert not torch.allclose(model(a, bidirectional_mask(20))[0, :15], model(b, bidirectional_mask(20))[0, :15])


def test_prefix_mask_spans_gpt_to_bert():
    assert torch.equal(prefix_mask(6, 1), causal_mask(6))
    assert torch.equal(prefix_mask(6, 6), bidirectional_mask(6))
    assert int(prefix_mask(6, 4).sum()) == 16 + 5 + 6
    with pytest.raises(ValueError, match="prefix length 7 outside 0..6"):
        prefix_mask(6, 7)


@pytest.mark.parametrize("idx, message", [
    (torch.zeros(2, 5), "must be a torch.long tensor"),
    (torch.zeros(5, dtype=torch.long), r"shape \(batch, time\), got \(5,\)"),
    (torch.zeros(1, 97, dtype=torch.long), "sequence length 97 outside 1..96"),
    (torch.full((1, 3), 44), "token ids must lie in 0..43, got 44..44"),
])
def test_bad_token_ids_give_clear_errors(idx, message):
    with pytest.raises(ValueError, match=message):
        TinyGPT()(idx)


def test_bad_mask_gives_clear_error():
    with pytest.raises(ValueError, match=r"mask must be bool of shape \(5, 5\)"):
        MaskedTransformer()(torch.zeros(1, 5, dtype=torch.long), torch.ones(4, 4, dtype=torch.bool))


def test_encoder_decoder_count_masks_and_causality():
    config = ModelConfig(vocab_size=354, context=32)
    model = EncoderDecoder(config)
    assert encoder_decoder_parameter_count(config) == count(model)
    torch.manual_seed(0)
    source, target = torch.randint(354, (2, 7)), torch.randint(354, (2, 5))
    with torch.no_grad():
        logits, attention = model.forward_with_attention(source, target)
        assert torch.allclose(logits, model(source, target), atol=1e-5)
    assert logits.shape == (2, 5, 354) and attention["cross"][0].shape == (2, 4, 5, 7)
    changed = target.clone()
    changed[:, 3:] = (changed[:, 3:] + 1) % 354
    assert torch.equal(model(source, target)[:, :3], model(source, changed)[:, :3])  # the decoder is causal
    with pytest.raises(ValueError, match="source ids must have shape"):
        model(source[0], target)


def test_hide_padding_hides_pad_keys_but_never_empties_a_row():
    is_pad = torch.tensor([[False, False, True]])
    mask = hide_padding(bidirectional_mask(3), is_pad)
    assert mask.tolist() == [[[True, True, False]] * 3]
    assert hide_padding(causal_mask(2), torch.tensor([[True, False]])).tolist() == [[[True, False], [False, True]]]


def test_a_mask_row_that_allows_no_key_is_refused_on_both_attention_paths():
    model = MaskedTransformer(ModelConfig(vocab_size=50, context=8))
    mask = torch.eye(8, dtype=torch.bool)
    mask[3, 3] = False
    ids = torch.zeros(1, 8, dtype=torch.long)
    for forward in (model.forward, model.forward_with_attention):
        with pytest.raises(ValueError, match="query row 3 attend to no position"):
            forward(ids, mask)
