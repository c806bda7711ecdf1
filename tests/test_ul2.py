"""UL2's data: on 128-token windows the seven denoisers do what lib/ul2.py's docstring says (clamps included),
a language model is one span at the end of the window, and every batch is reproducible.

Statistical checks draw from seeded generators, so they are deterministic.  Their tolerance is 5 standard
errors of the estimate, computed from the per-window counts (a ratio's by the delta method): a correct
implementation fails for fewer than 1 seed in a million, while a wrong rule (mean span 4 for 3, r = 0.2
for 0.15) is many standard errors away.  Where the rule leaves no randomness (r = 0.5 of 128 tokens is
64 noise tokens every time) the standard error is 0 and the check is exact.
"""

import math

import pytest
import torch

from lib.objectives import batches as ob
from lib.objectives import ul2
from lib.nn.models import EncoderDecoder, MaskedTransformer, ModelConfig
from lib.data.tokenizers import BOS, FIRST_ORDINARY, NUM_SENTINELS, SENTINELS

STREAM = ul2.text_stream("train")
N = ul2.WINDOW
COUNT = 600                                   # windows per denoiser for the statistical checks
S = next(d for d in ob.UL2_DENOISERS if d.mode == "S")
SPAN_DENOISERS = [d for d in ob.UL2_DENOISERS if d.mode != "S"]


def windows(count, length=N, seed=0):
    return ob.random_windows(STREAM, length, count, torch.Generator().manual_seed(seed))


def generator(seed):
    return torch.Generator().manual_seed(seed)


@pytest.fixture(scope="module")
def measured():
    """{denoiser: span_statistics of denoiser_batch on COUNT windows, plus each example's first source token}."""
    w, g, out = windows(COUNT), generator(1), {}
    for d in ob.UL2_DENOISERS:
        batch = ul2.denoiser_batch(w, d, g)
        out[d] = {**ul2.span_statistics(batch), "first": batch.source[:, 0], "modes": batch.modes}
    return out


def expected_mean_span(d, n):
    """What the module docstring promises: r*n noise tokens in r*n/mu spans, that count kept between 1 (a span
    is never empty) and NUM_SENTINELS - 1 (a sentinel per span and one to close).  At n = 128 each clamp
    binds for every draw of the noise count or for none, so this is the exact mean.  S: the target is
    the last n - k tokens, k uniform in 1..n-1."""
    if d.mode == "S":
        return n / 2
    spans = min(max(d.noise_density * n / d.mean_span, 1), NUM_SENTINELS - 1)
    return d.noise_density * n / spans


def within_five_standard_errors(numerators, denominators, expected):
    a, b = numerators.double(), denominators.double()
    ratio = a.sum() / b.sum()
    standard_error = math.sqrt(((a - ratio * b) ** 2).sum()) / b.sum()
    return bool(abs(ratio - expected) <= 5 * standard_error + 1e-9), float(ratio), standard_error


@pytest.mark.parametrize("d", ob.UL2_DENOISERS, ids=ul2.label)
def test_each_denoiser_reaches_its_mean_span_and_rate_or_the_documented_clamp(measured, d):
    stats = measured[d]
    ok, mean_span, se = within_five_standard_errors(stats["corrupted"], stats["spans"], expected_mean_span(d, N))
    assert ok, (mean_span, se, expected_mean_span(d, N))
    rate = 0.5 if d.mode == "S" else d.noise_density
    ok, achieved, se = within_five_standard_errors(stats["corrupted"], torch.full((COUNT,), N), rate)
    assert ok, (achieved, se, rate)


def test_only_x_3_half_is_clamped_and_the_clamps_are_the_documented_ones(measured):
    changed = [d for d in ob.UL2_DENOISERS if ul2.clamp_denoiser(d, N) != d]
    assert changed == [ob.Denoiser("X", 3, 0.5)]
    x3 = measured[changed[0]]
    assert (x3["corrupted"] == N // 2).all() and (x3["spans"] == NUM_SENTINELS - 1).all()
    x64 = measured[ob.Denoiser("X", 64, 0.15)]   # 19.2 noise tokens: one span, of 19 or 20
    assert (x64["spans"] == 1).all() and set(x64["corrupted"].tolist()) == {19, 20}
    assert (measured[ob.Denoiser("X", 64, 0.5)]["corrupted"] == 64).all()
    assert (measured[ob.Denoiser("X", 64, 0.5)]["spans"] == 1).all()
    # Below 91 tokens nothing needs clamping: 45 noise tokens make at most 15 spans of mean 3.
    assert all(ul2.clamp_denoiser(d, 90) == d for d in ob.UL2_DENOISERS)


def test_the_mode_token_comes_first_and_s_has_no_sentinel(measured):
    for d, stats in measured.items():
        assert set(stats["modes"]) == {d.mode}
        assert (stats["first"] == ob.MODE_TOKENS[d.mode]).all()
        assert (stats["sentinels"] == 0).all() if d.mode == "S" else (stats["sentinels"] == stats["spans"] + 1).all()
    w = windows(140, seed=3)
    b = ul2.mixture_batch(w, generator(3))
    assert set(b.modes) == {"R", "S", "X"}
    for i, mode in enumerate(b.modes):
        assert b.source[i, 0] == ob.MODE_TOKENS[mode]
        assert (mode == "S") == (not b.is_sentinel[i].any())
        words = [t for t in b.source[i].tolist() + b.targets[i].tolist() if t >= FIRST_ORDINARY]
        assert sorted(words) == sorted(w[i].tolist())   # every window token is either read or written, once


def test_sources_and_targets_fit_the_models_learned_positions(measured):
    assert ul2.WINDOW == ul2.longest_window(ul2.CONTEXT)
    for d, stats in measured.items():
        longest = ul2.longest_lengths(d, N)
        assert stats["source"].max() <= longest["source"] <= ul2.CONTEXT
        assert stats["target"].max() <= longest["target"] <= ul2.CONTEXT
    assert ul2.longest_lengths(S, N + 1)["source"] == ul2.CONTEXT + 1   # S sets the bound
    torch.manual_seed(0)
    model = EncoderDecoder(ModelConfig(vocab_size=ob.VOCAB_SIZE, context=ul2.CONTEXT))
    g, threads = generator(4), torch.get_num_threads()
    torch.set_num_threads(1)   # tiny matrices: a second thread only waits for the busy core
    try:
        for d in ob.UL2_DENOISERS:
            loss = ob.batch_loss(model, ul2.denoiser_batch(windows(4, seed=4), d, g))
            assert abs(loss.item() - math.log(ob.VOCAB_SIZE)) < 1.0   # near chance at initialisation
    finally:
        torch.set_num_threads(threads)


def test_ul2_batch_and_mixture_batch_agree_where_ul2_batch_runs():
    w = windows(40, length=64)
    assert same(ul2.mixture_batch(w, generator(5)), ob.ul2_batch(w, generator(5)))
    for d in ob.UL2_DENOISERS:
        assert same(ul2.denoiser_batch(w, d, generator(6)), ob.ul2_batch(w, generator(6), denoisers=[d]))
    with pytest.raises(ValueError, match="sentinels"):   # X(3, 0.5) on 128 tokens needs the clamp
        ob.ul2_batch(windows(2), generator(5))
    for d in SPAN_DENOISERS[:2]:   # on 128 tokens, the denoisers that need no clamp still agree
        assert same(ul2.denoiser_batch(windows(8), d, generator(7)), ob.ul2_batch(windows(8), generator(7), [d]))


def without_sentinel_targets(problems):
    return [[(seen, target) for seen, target in rows if target not in ob.SENTINELS] for rows in problems]


def test_a_plain_lm_is_one_span_covering_the_whole_window():
    w = windows(4, seed=8)
    span = ul2.tail_span_batch(w, 0)
    stats = ul2.span_statistics(span)
    assert stats["spans"].tolist() == [1] * 4 and stats["corrupted"].tolist() == [N] * 4   # mu = T, r = 1
    problems = ul2.prediction_problems(span)
    # lm_batch has no <bos>, so the first token of its window is only read; with <bos> in front, the
    # GPT asks exactly what the span asks, the first token from nothing included.
    gpt = ul2.prediction_problems(ob.lm_batch(torch.cat([torch.full((4, 1), ob.BOS), w], dim=1)))
    assert without_sentinel_targets(problems) == gpt and len(gpt[0]) == N
    # What the span adds is two sentinels: the opening <0> that every span target starts with (it says
    # nothing about the text) and the closing <1> after the whole window (a GPT's window has no end).
    for rows, row in zip(problems, w.tolist()):
        assert [p for p in rows if p[1] in ob.SENTINELS] == [((), ob.SENTINELS[0]), (tuple(row), ob.SENTINELS[1])]
    # And lm_batch on the bare window is the prefix LM with P = 1 (its prefix_lengths are 1).
    one = ul2.prediction_problems(ul2.tail_span_batch(w, 1))
    assert without_sentinel_targets(one) == ul2.prediction_problems(ob.lm_batch(w))


def test_a_prefix_lm_is_one_span_covering_what_follows_the_prefix():
    w = windows(6, seed=9)
    prefix = ob.prefix_lm_batch(w, generator(9))
    span = ul2.tail_span_batch(w, prefix.prefix_lengths)
    stats = ul2.span_statistics(span)
    assert (stats["spans"] == 1).all() and torch.equal(stats["corrupted"], N - prefix.prefix_lengths)  # mu = T - P
    assert without_sentinel_targets(ul2.prediction_problems(span)) == ul2.prediction_problems(prefix)
    # UL2's S denoiser writes the same target without sentinels.
    s = ul2.denoiser_batch(w, S, generator(10))
    k = (s.source != ob.PAD).sum(1) - 1
    assert ul2.prediction_problems(s) == without_sentinel_targets(ul2.prediction_problems(ul2.tail_span_batch(w, k)))
    assert ul2.prediction_problems(s) != ul2.prediction_problems(prefix)   # different prefixes: not vacuous


def test_denoiser_table_counts_what_the_batches_hold():
    rows = ul2.denoiser_table(count=140, batch_size=50)
    assert [row["denoiser"] for row in rows] == [ul2.label(d) for d in ob.UL2_DENOISERS]
    for row, d in zip(rows, ob.UL2_DENOISERS):
        corrupted = row["corruption rate"] * N
        spans = corrupted / row["mean span"]
        sentinels = 0 if d.mode == "S" else spans + 1
        assert row["mode"] == f"[{d.mode}]"
        assert row["sentinels / example"] == pytest.approx(sentinels)
        assert row["target mean"] == pytest.approx(corrupted + sentinels)
        assert row["loss positions / 1k tokens"] == pytest.approx(1000 * row["target mean"] / N)
        assert row["source mean"] == pytest.approx(1 + N - corrupted + (0 if d.mode == "S" else spans))
        longest = ul2.longest_lengths(d, N)
        assert row["source max"] <= longest["source"] and row["target max"] <= longest["target"]
    exact = {ul2.label(d): expected_mean_span(d, N) for d in SPAN_DENOISERS if d.noise_density == 0.5}
    assert {row["denoiser"]: row["mean span"] for row in rows if row["denoiser"] in exact} == pytest.approx(exact)


def fields(batch):
    return [batch] if isinstance(batch, torch.Tensor) else list(vars(batch).values())


def same(a, b):
    return all(torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y for x, y in zip(fields(a), fields(b)))


@pytest.mark.parametrize("make", [
    lambda g: ul2.mixture_batch(windows(16), g),
    lambda g: ul2.denoiser_batch(windows(16), ob.Denoiser("X", 64, 0.15), g),
    lambda g: ul2.denoiser_batch(windows(16), S, g),
], ids=["mixture", "x64", "s"])
def test_same_generator_state_same_batch(make):
    assert same(make(generator(11)), make(generator(11)))
    assert not same(make(generator(11)), make(generator(12)))


def test_denoiser_table_is_reproducible():
    first = ul2.denoiser_table(count=10, seed=1)
    assert ul2.denoiser_table(count=10, seed=1) == first != ul2.denoiser_table(count=10, seed=2)


def test_bad_input_raises_clear_errors():
    w, g = windows(2), generator(0)
    cases = [
        (lambda: ul2.denoiser_batch(w, "X", g), r"unknown denoiser 'X'"),
        (lambda: ul2.denoiser_batch(w, ob.Denoiser("Q", 3, 0.15), g), r"unknown denoiser .*mode R, S or X"),
        (lambda: ul2.denoiser_batch(w, ob.Denoiser("R"), g), r"needs a mean_span and a noise_density"),
        (lambda: ul2.denoiser_batch(w[:, :1], ob.UL2_DENOISERS[0], g), r"too short"),
        (lambda: ul2.denoiser_batch(w.float(), ob.UL2_DENOISERS[0], g), r"torch.long tensor"),
        (lambda: ul2.mixture_batch(w, g, denoisers=[]), r"non-empty list of Denoiser"),
        (lambda: ul2.tail_span_batch(w, N), rf"prefix lengths must lie in 0..{N - 1}"),
        (lambda: ul2.tail_span_batch(w[:, :0], 0), r"too short"),
        (lambda: ul2.longest_window(1), r"no window fits in 1 positions"),
        (lambda: ul2.text_stream("test"), r"unknown split 'test'"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()


# The non-causal decoder (one stack) reads the same examples as the encoder-decoder.

def test_one_stack_poses_exactly_the_encoder_decoders_prediction_problems():
    """Every loss position sees the whole source and the target before it, in either backbone; the
    targets are the same."""
    batch = ul2.mixture_batch(windows(40, seed=3), generator(3))
    stack = ul2.as_stack_batch(batch)
    assert ul2.prediction_problems(stack) == ul2.prediction_problems(batch)
    assert stack.inputs.shape[1] <= ul2.DECODER_CONTEXT


def test_decoder_logits_gathers_the_stacks_own_logits():
    """The decoder backbone's loss read through decoder_logits equals the stack's loss read directly."""
    torch.manual_seed(0)
    model = MaskedTransformer(ModelConfig(ob.VOCAB_SIZE, ul2.DECODER_CONTEXT, 32, 1, 2)).eval()
    batch = ul2.without_mode_tokens(ul2.mixture_batch(windows(12, seed=4), generator(4)))
    stack = ul2.as_stack_batch(batch)
    direct = ob.masked_cross_entropy(ob.batch_logits(model, stack), stack.targets, stack.loss_mask)
    assert torch.allclose(ul2.ul2_loss(model, batch), direct, rtol=1e-5, atol=0)


def test_the_longest_stack_is_reached_and_never_exceeded():
    """X(mu=4.27, r=0.5) always makes 15 spans of 64 tokens: 160 positions, the decoder's context."""
    x = ul2.clamp_denoiser(ob.UL2_DENOISERS[2], N)
    lengths = ul2.as_stack_batch(ul2.denoiser_batch(windows(50, seed=5), x, generator(5))).inputs.ne(0).sum(1)
    assert set(lengths.tolist()) == {ul2.longest_sequence(x, N)} == {ul2.DECODER_CONTEXT}


def test_without_mode_tokens_drops_only_the_first_source_token():
    batch = ul2.mixture_batch(windows(16, seed=6), generator(6))
    plain = ul2.without_mode_tokens(batch)
    assert torch.equal(plain.source, batch.source[:, 1:]) and torch.equal(plain.targets, batch.targets)
    assert torch.equal(plain.cross_mask, batch.cross_mask[:, :, 1:]) and plain.modes is None
    with pytest.raises(ValueError, match="mode token"):
        ul2.without_mode_tokens(plain)


def test_questions_give_the_decoder_exactly_the_rows_asked():
    rows = [[BOS, SENTINELS[0]], [BOS], [BOS, SENTINELS[0], FIRST_ORDINARY + 5]]
    batch = ul2.questions([[FIRST_ORDINARY + 1, FIRST_ORDINARY + 2]] * 3, rows)
    assert [batch.decoder_input[b, :n].tolist() for b, n in enumerate(batch.loss_mask.sum(1).tolist())] == rows
    with pytest.raises(ValueError, match="<bos>"):
        ul2.questions([[FIRST_ORDINARY]], [[SENTINELS[0]]])


@pytest.mark.parametrize("d", ob.UL2_DENOISERS, ids=ul2.label)
def test_expected_targets_is_the_mean_the_batches_reach(measured, d):
    """The computed expectation against COUNT sampled windows, within 5 standard errors; a formula that forgot
    the closing sentinel (1 token) or the clamp of X(64, 0.15) to one span is many standard errors away."""
    target = measured[d]["target"].double()
    error = target.std().item() / math.sqrt(len(target))
    assert abs(ul2.expected_targets(d) - target.mean().item()) <= 5 * error + 1e-9


def test_targets_per_step_shares_the_batch_among_the_recipes_denoisers():
    mixture = ul2.targets_per_step(ob.UL2_DENOISERS, batch_size=8)
    assert mixture["S (prefix LM)"] == pytest.approx(8 / 7 * N / 2)       # S: the target is n - k, k uniform in 1..n-1
    only_r = ul2.targets_per_step([ob.UL2_DENOISERS[0]], batch_size=8)
    assert only_r["R(mu=3, r=0.15)"] == pytest.approx(8 * ul2.expected_targets(ob.UL2_DENOISERS[0]))
    assert sum(v > 0 for v in only_r.values()) == 1


@pytest.mark.parametrize("d", ob.UL2_DENOISERS, ids=ul2.label)
def test_noise_masks_rebuild_the_window_from_source_and_target(d):
    """The kept tokens are the source's words in order, the hidden ones the target's words in order."""
    w = windows(40, seed=3)
    batch = ul2.denoiser_batch(w, d, generator(4))
    masks = ul2.noise_masks(batch)
    for b in range(len(w)):
        source = [t for t in batch.source[b].tolist() if t >= FIRST_ORDINARY]
        target = [t for t in batch.targets[b][batch.loss_mask[b]].tolist() if t >= FIRST_ORDINARY]
        assert w[b][~masks[b]].tolist() == source
        assert w[b][masks[b]].tolist() == target
