"""Objectives: the batch functions do what the papers say, on average and exactly, and are reproducible.

Statistical checks draw many positions from one seeded generator, so they are
deterministic; their tolerance is 5 standard deviations of the estimate
(binomial or rounding noise, computed in each test), so a correct
implementation would fail for fewer than 1 seed in a million, while a wrong
rate (e.g. 0.2 instead of 0.15, 0.7/0.15/0.15 instead of 80/10/10) is many
standard deviations away.
"""

import math

import pytest
import torch

from lib.objectives import batches as ob
from lib.data import world
from lib.nn.masks import encoder_decoder_masks, prefix_mask
from lib.nn.models import EncoderDecoder, MaskedTransformer, ModelConfig
from lib.data.tokenizers import NUM_SENTINELS

STREAM = ob.review_stream("train")


def windows(length, count, seed=0):
    return ob.random_windows(STREAM, length, count, torch.Generator().manual_seed(seed))


def reconstruct(source, target):
    """Put the target's spans back in place of the source's sentinels (T5)."""
    spans, current = {}, None
    for t in target:
        if t in ob.SENTINELS:
            current = t
            spans[current] = []
        else:
            spans[current].append(t)
    out = []
    for t in source:
        out += spans[t] if t in ob.SENTINELS else [t]
    return out


def unpad(row):
    return [t for t in row.tolist() if t != ob.PAD]


def test_review_stream_is_the_training_reviews_in_order():
    text = ob.TOKENIZER.decode(STREAM)
    lines = text.split("\n")[:-1]
    W = world.build_world()
    assert lines == [line for line in W.train if world.kind_of(line) == "review"]


def test_lm_batch_predicts_every_next_token_causally():
    w = windows(33, 4)
    b = ob.lm_batch(w)
    assert torch.equal(b.inputs, w[:, :-1]) and torch.equal(b.targets, w[:, 1:])
    assert b.loss_mask.all() and b.positions == 4 * 32
    assert torch.equal(b.attention_mask, prefix_mask(32, 1).expand(4, 32, 32))


def test_prefix_lm_batch_has_loss_exactly_after_the_prefix():
    w = windows(33, 400)
    b = ob.prefix_lm_batch(w, torch.Generator().manual_seed(1))
    ks = b.prefix_lengths.tolist()
    assert set(ks) == set(range(1, 33))  # 1 (GPT) .. T (bidirectional) all occur
    for i, k in enumerate(ks[:50]):
        assert torch.equal(b.attention_mask[i], prefix_mask(32, k))
        assert b.loss_mask[i].tolist() == [p >= k - 1 for p in range(32)]


def test_mlm_selection_rate_and_the_80_10_10_split():
    w = windows(32, 4000)
    b = ob.mlm_batch(w, torch.Generator().manual_seed(2))
    n, selected = w.numel(), int(b.loss_mask.sum())
    sd = math.sqrt(0.15 * 0.85 / n)
    assert abs(selected / n - 0.15) < 5 * sd, selected / n
    for action, share in ((ob.MASKED, 0.8), (ob.RANDOM, 0.1), (ob.UNCHANGED, 0.1)):
        observed = int((b.actions == action).sum()) / selected
        assert abs(observed - share) < 5 * math.sqrt(share * (1 - share) / selected), (action, observed)
    # The inputs follow the actions; only selected positions carry loss; targets are the originals.
    assert torch.equal(b.loss_mask, b.actions != ob.UNTOUCHED) and torch.equal(b.targets, w)
    assert (b.inputs[b.actions == ob.MASKED] == ob.MASK).all()
    assert (b.inputs[b.actions == ob.RANDOM] >= ob.FIRST_ORDINARY).all()
    keep = (b.actions == ob.UNTOUCHED) | (b.actions == ob.UNCHANGED)
    assert torch.equal(b.inputs[keep], w[keep])
    assert b.attention_mask.all()  # bidirectional


def test_mlm_rate_is_a_parameter():
    w = windows(32, 2000)
    b = ob.mlm_batch(w, torch.Generator().manual_seed(3), rate=0.4)
    assert abs(b.loss_mask.float().mean().item() - 0.4) < 5 * math.sqrt(0.4 * 0.6 / w.numel())


@pytest.mark.parametrize("noise_density, mean_span", [(0.15, 1.0), (0.15, 3.0), (0.15, 8.0), (0.5, 3.0)])
def test_span_corruption_noise_density_and_mean_span_match_the_parameters(noise_density, mean_span):
    n, count = 64, 3000
    b = ob.span_corruption_batch(windows(n, count), torch.Generator().manual_seed(4), noise_density, mean_span)
    noise = (b.loss_mask & ~b.is_sentinel).sum(1).float()
    spans = b.is_sentinel.sum(1).float() - 1          # one sentinel per span plus the closing one
    # Stochastic rounding: each window's count is off its mean by a Bernoulli, sd <= 1/2.
    assert abs(noise.mean().item() / n - noise_density) < 5 * 0.5 / math.sqrt(count) / n
    mean = noise.sum().item() / spans.sum().item()
    assert abs(mean - mean_span) < mean_span * 5 * 0.5 * math.sqrt(count) / spans.sum().item(), mean


def test_sentinels_come_in_order_and_the_target_reconstructs_the_window():
    w = windows(40, 300)
    b = ob.span_corruption_batch(w, torch.Generator().manual_seed(5), 0.3, 2.0)
    for i in range(len(w)):
        source, target = unpad(b.source[i]), unpad(b.targets[i])
        used = [t for t in source if t in ob.SENTINELS]
        assert used == ob.SENTINELS[:len(used)]
        assert [t for t in target if t in ob.SENTINELS] == ob.SENTINELS[:len(used) + 1]
        assert target[0] == ob.SENTINELS[0] and target[-1] == ob.SENTINELS[len(used)]
        assert reconstruct(source, target) == w[i].tolist()
        assert b.decoder_input[i, 0] == ob.BOS and b.decoder_input[i, 1:len(target)].tolist() == target[:-1]


def test_span_corruption_fits_the_position_budget_it_promises():
    for mean_span in (1.0, 3.0):
        n = ob.longest_span_window(32, 0.15, mean_span)
        b = ob.span_corruption_batch(windows(n, 500), torch.Generator().manual_seed(6), 0.15, mean_span)
        per_example = (b.source != ob.PAD).sum(1) + b.loss_mask.sum(1)
        assert per_example.max() <= 32 == ob.span_corruption_lengths(n, 0.15, mean_span)["positions"]


def test_iid_denoising_hides_each_token_independently_and_merges_runs():
    n, count, p = 24, 2000, 0.15
    w = windows(n, count)
    b = ob.iid_denoising_batch(w, torch.Generator().manual_seed(7), p)
    noise = int((b.loss_mask & ~b.is_sentinel).sum())
    assert abs(noise / (n * count) - p) < 5 * math.sqrt(p * (1 - p) / (n * count))
    spans = int(b.is_sentinel.sum()) - count          # minus each example's closing sentinel
    expected = count * (p + (n - 1) * p * (1 - p))    # a span starts at a noise token after a kept one
    assert abs(spans - expected) < 5 * math.sqrt(expected)
    for i in range(200):
        source, target = unpad(b.source[i]), unpad(b.targets[i])
        assert reconstruct(source, target) == w[i].tolist()
        assert not any(a in ob.SENTINELS and c in ob.SENTINELS for a, c in zip(source, source[1:]))  # runs merged
    per_example = ((b.source != ob.PAD).sum(1) + b.loss_mask.sum(1)).float().mean().item()
    assert per_example <= 32 and ob.expected_iid_window(32, p) == n


def test_mask_counts_match_exercise_4():
    # Encoder-decoder, 5 input tokens and 3 output positions; prefix LM over input + <bos> + 2 outputs.
    S, T = 5, 3
    blocks = encoder_decoder_masks(S, T)
    counts = {k: int(m.sum()) for k, m in blocks.items()}
    assert counts == {"encoder": S * S, "decoder": T * (T + 1) // 2, "cross": T * S} == \
        {"encoder": 25, "decoder": 6, "cross": 15}
    P, L = S + 1, S + T
    assert int(prefix_mask(L, P).sum()) == P * P + sum(range(P + 1, L + 1)) == 51
    # The batch structure builds the same blocks.
    b = ob.encoder_decoder_batch([[30, 31, 32, 33, 34]], [[40, 41, 42]], [[False] * 3])
    assert (int(b.source_mask.sum()), int(b.target_mask.sum()), int(b.cross_mask.sum())) == (25, 6, 15)


def test_padding_is_hidden_and_never_carries_loss():
    b = ob.encoder_decoder_batch([[30, 31], [30, 31, 32, 33]], [[40], [40, 41, 42]], [[True], [True, False, True]])
    assert b.source[0].tolist() == [30, 31, ob.PAD, ob.PAD] and b.loss_mask[0].tolist() == [True, False, False]
    assert not b.cross_mask[0, :, 2:].any() and not b.source_mask[0, :2, 2:].any()
    w = torch.tensor([[30, 31, 32, ob.PAD, ob.PAD]])
    for batch in (ob.lm_batch(w), ob.mlm_batch(w, torch.Generator().manual_seed(0), rate=0.99)):
        assert not batch.loss_mask[batch.targets == ob.PAD].any()
        assert not batch.attention_mask[0, :3, 3:].any()


def test_bart_infilling_one_mask_per_span_and_the_target_is_the_window():
    n, count = 64, 1000
    w = windows(n, count)
    b = ob.bart_infilling_batch(w, torch.Generator().manual_seed(7))
    masked_tokens, masks = 0, 0
    for i in range(count):
        source, target = unpad(b.source[i]), unpad(b.targets[i])
        assert target == w[i].tolist() and b.loss_mask[i].sum() == n
        pieces, piece = [], []
        for t in source:
            if t == ob.MASK:
                pieces.append(piece)
                piece = []
            else:
                piece.append(t)
        pieces.append(piece)
        position = 0  # the unmasked pieces appear in the target in order
        for piece in pieces:
            position = next(p for p in range(position, n + 1) if target[p:p + len(piece)] == piece) + len(piece)
        masked_tokens += n - (len(source) - source.count(ob.MASK))
        masks += source.count(ob.MASK)
    assert abs(masked_tokens / (n * count) - 0.3) < 5 * 0.5 / math.sqrt(count) / n
    # Poisson(3) lengths, the last one cut to fit, so the mean span is somewhat below 3.
    assert 2.3 < masked_tokens / masks < 3.0


def test_electra_labels_replaced_unless_the_sample_equals_the_original():
    w = windows(32, 64)
    masked = ob.mlm_batch(w, torch.Generator().manual_seed(8), mask_share=1.0, random_share=0.0)
    assert (masked.inputs[masked.loss_mask] == ob.MASK).all()
    # A generator that always proposes the original: nothing is replaced.
    oracle = torch.full((64, 32, ob.VOCAB_SIZE), -1e9).scatter(2, w[..., None], 0.0)
    b = ob.electra_batch(masked, oracle, torch.Generator().manual_seed(0))
    assert not b.replaced.any() and torch.equal(b.inputs, w) and b.loss_mask.all()
    # A generator that always proposes one fixed word: replaced exactly where it differs from the original.
    word = ob.TOKENIZER["soup"]
    fixed = torch.full((64, 32, ob.VOCAB_SIZE), -1e9)
    fixed[..., word] = 0.0
    b = ob.electra_batch(masked, fixed, torch.Generator().manual_seed(0))
    assert torch.equal(b.replaced, masked.loss_mask & (w != word))
    assert torch.equal(b.inputs[masked.loss_mask], torch.full((int(masked.loss_mask.sum()),), word))
    assert torch.equal(b.inputs[~masked.loss_mask], w[~masked.loss_mask])
    # A uniform generator never proposes special tokens.
    b = ob.electra_batch(masked, torch.zeros(64, 32, ob.VOCAB_SIZE), torch.Generator().manual_seed(0))
    assert (b.inputs >= ob.FIRST_ORDINARY).all()


def test_ul2_tags_every_example_with_its_mode_and_mixes_all_seven_denoisers():
    w = windows(24, 1400)
    b = ob.ul2_batch(w, torch.Generator().manual_seed(9))
    assert len(ob.UL2_DENOISERS) == 7
    counts = {mode: b.modes.count(mode) for mode in "RSX"}
    for mode, share in (("R", 2 / 7), ("X", 4 / 7), ("S", 1 / 7)):
        assert abs(counts[mode] / 1400 - share) < 5 * math.sqrt(share * (1 - share) / 1400)
    for i, mode in enumerate(b.modes):
        source, target = unpad(b.source[i]), unpad(b.targets[i])
        assert source[0] == ob.MODE_TOKENS[mode]
        if mode == "S":
            assert source[1:] + target == w[i].tolist() and not b.is_sentinel[i].any()
        else:
            assert reconstruct(source[1:], target) == w[i].tolist()


def test_ul2_can_be_restricted_to_one_denoiser():
    w = windows(24, 50)
    x = ob.Denoiser("X", 3, 0.5)
    b = ob.ul2_batch(w, torch.Generator().manual_seed(10), denoisers=[x])
    assert set(b.modes) == {"X"}
    noise = (b.loss_mask & ~b.is_sentinel).sum().item()
    assert abs(noise / w.numel() - 0.5) < 5 * 0.5 / math.sqrt(50) / 24


BATCH_FUNCTIONS = [
    ("lm", lambda g: ob.lm_batch(windows(33, 8), g)),
    ("prefix", lambda g: ob.prefix_lm_batch(windows(33, 8), g)),
    ("mlm", lambda g: ob.mlm_batch(windows(32, 8), g)),
    ("span", lambda g: ob.span_corruption_batch(windows(32, 8), g)),
    ("iid", lambda g: ob.iid_denoising_batch(windows(24, 8), g)),
    ("bart", lambda g: ob.bart_infilling_batch(windows(32, 8), g)),
    ("electra", lambda g: ob.electra_batch(ob.mlm_batch(windows(32, 8), g), torch.zeros(8, 32, ob.VOCAB_SIZE), g)),
    ("ul2", lambda g: ob.ul2_batch(windows(32, 8), g)),
    ("windows", lambda g: ob.random_windows(STREAM, 32, 8, g)),
]


def fields(batch):
    return [batch] if isinstance(batch, torch.Tensor) else list(vars(batch).values())


def same(a, b):
    return all(torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y for x, y in zip(fields(a), fields(b)))


@pytest.mark.parametrize("name, make", BATCH_FUNCTIONS, ids=[n for n, _ in BATCH_FUNCTIONS])
def test_every_batch_function_is_deterministic_given_its_generator(name, make):
    assert same(make(torch.Generator().manual_seed(11)), make(torch.Generator().manual_seed(11)))
    if name != "lm":  # the causal LM uses no randomness
        assert not same(make(torch.Generator().manual_seed(11)), make(torch.Generator().manual_seed(12)))


def test_batches_train_the_book_models_directly():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(13)
    config = ModelConfig(vocab_size=ob.VOCAB_SIZE, context=32)
    stack, t5 = MaskedTransformer(config), EncoderDecoder(config)
    for b in (ob.lm_batch(windows(33, 4)), ob.prefix_lm_batch(windows(33, 4), g), ob.mlm_batch(windows(32, 4), g)):
        loss = ob.masked_cross_entropy(stack(b.inputs, b.attention_mask), b.targets, b.loss_mask)
        assert abs(loss.item() - math.log(ob.VOCAB_SIZE)) < 0.5  # near chance at initialisation
    for b in (ob.span_corruption_batch(windows(27, 4), g), ob.bart_infilling_batch(windows(16, 4), g),
              ob.ul2_batch(windows(24, 4), g)):
        logits = t5(b.source, b.decoder_input, b.source_mask, b.target_mask, b.cross_mask)
        loss = ob.masked_cross_entropy(logits, b.targets, b.loss_mask)
        loss.backward()
        assert math.isfinite(loss.item())
    empty = torch.zeros(1, 3, dtype=torch.bool)
    assert ob.masked_cross_entropy(torch.zeros(1, 3, 5), torch.zeros(1, 3, dtype=torch.long), empty).item() == 0.0


def test_bad_parameters_raise_clear_errors():
    g, w = torch.Generator().manual_seed(0), windows(32, 2)
    cases = [
        (lambda: ob.mlm_batch(w, g, rate=0.0), r"rate=0 outside \(0, 1\]"),
        (lambda: ob.mlm_batch(w, g, rate=1.5), r"rate=1.5 outside"),
        (lambda: ob.mlm_batch(w, g, mask_share=0.8, random_share=0.3),
         r"mask_share \+ random_share=1.1 outside \[0, 1\]"),
        (lambda: ob.span_corruption_batch(w, g, noise_density=1.0), r"must be below 1"),
        (lambda: ob.span_corruption_batch(w, g, mean_span=0.5), r"mean_span=0.5 must be at least 1"),
        (lambda: ob.span_corruption_batch(windows(200, 1), g, 0.5, 1.0),
         rf"only {NUM_SENTINELS} sentinels"),
        (lambda: ob.span_corruption_batch(torch.tensor([[ob.PAD, 30, 31]]), g), r"ordinary tokens"),
        (lambda: ob.span_corruption_batch(w.float(), g), r"torch.long tensor"),
        (lambda: ob.lm_batch(w[0]), r"\(batch, length\)"),
        (lambda: ob.lm_batch(w[:, :1]), r"too short"),
        (lambda: ob.bart_infilling_batch(w, g, poisson_lambda=0), r"poisson_lambda > 0"),
        (lambda: ob.electra_batch(ob.mlm_batch(w, g), torch.zeros(2, 32, 5), g), r"generator logits must have shape"),
        (lambda: ob.ul2_batch(w, g, denoisers=[]), r"non-empty list of Denoiser"),
        (lambda: ob.ul2_batch(w, g, denoisers=[ob.Denoiser("Q", 3, 0.15)]), r"mode R, S or X"),
        (lambda: ob.random_windows(STREAM, len(STREAM) + 1, 2, g), r"window length"),
        (lambda: ob.review_stream("test"), r"unknown split 'test'"),
        (lambda: ob.longest_span_window(3, 0.5, 1.0), r"no window fits in 3 positions"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()
