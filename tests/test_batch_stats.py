"""lib.measure.batch_stats: counts over an objective's training batches, checked on batches small enough to
count by hand."""

import torch

from lib.data.tokenizers import MASK, NEWLINE_WORD, SENTINELS, TOKENIZER
from lib.measure import batch_stats
from lib.objectives import batches as ob

STREAM = ob.review_stream("train")
A, B, C, D, E = (TOKENIZER[w] for w in ("the", "soup", "was", "tasty", "."))


def two_spans(windows, generator):
    """Every window loses tokens 2..3 and 6 (two spans; <0> at source position 2)."""
    return ob.encoder_decoder_batch(*zip(*[ob.corrupt_spans(row, [(2, 4), (6, 7)]) for row in windows.tolist()]))


def test_counts_of_a_stack_batch():
    batch = ob.lm_batch(torch.tensor([[A, B, C, D, E]] * 2))           # 2 windows: 4 positions each, all targets
    assert batch_stats.batch_counts(batch) == {"positions": 8, "loss": 8, "padded": 8, "rating_targets": 0}
    # "rating : good ." : the next token after ":" is a rating, once per window
    R, COLON, GOOD = (TOKENIZER[w] for w in ("rating", ":", "good"))
    batch = ob.lm_batch(torch.tensor([[R, COLON, GOOD, E]] * 3))
    assert batch_stats.batch_counts(batch)["rating_targets"] == 3


def test_counts_of_an_encoder_decoder_batch():
    # source: the <mask> soup ., target: the soup was tasty . (BART: two words hidden behind one <mask>)
    batch = ob.encoder_decoder_batch([[A, MASK, B, E]], [[A, B, C, D, E]], [[False] * 5])
    assert batch_stats.batch_counts(batch) == {"positions": 9, "loss": 5, "padded": 9, "rating_targets": 0, "sentinels": 0,
                                               "content": 5, "source_unmasked": 3}
    # T5: the soup <0> tasty . -> <0> was <1>: two sentinel targets, one hidden word
    batch = ob.encoder_decoder_batch(*zip(ob.corrupt_spans([A, B, C, D, E], [(2, 3)])))
    assert batch_stats.batch_counts(batch) == {"positions": 8, "loss": 3, "padded": 8, "rating_targets": 0,
                                               "sentinels": 2, "content": 1, "source_unmasked": 5}
    # two examples of different lengths: the shorter is padded to the longer on both sides of the model
    batch = ob.encoder_decoder_batch(*zip(ob.corrupt_spans([A, B, C, D, E], [(2, 3)]),
                                          ob.corrupt_spans([A, B, C, D, E, A, B], [(1, 4)])))
    counts = batch_stats.batch_counts(batch)                  # sources 5 and 5, targets 3 and 5 (<0> soup was tasty <1>)
    assert (counts["positions"], counts["padded"]) == (18, 20)


def test_totals_sum_the_training_batches():
    total = batch_stats.totals(ob.lm_batch, STREAM, 9, 4, 3)           # 3 batches of 4 windows of 8 positions
    assert {k: total[k] for k in ("positions", "loss")} == {"positions": 96, "loss": 96}
    assert 0 < total["rating_targets"] < 96          # a rating is one token in 17 of the review stream
    made = list(batch_stats.training_batches(ob.mlm_batch, STREAM, 9, 4, 3, seed=5))
    assert batch_stats.totals(ob.mlm_batch, STREAM, 9, 4, 3, seed=5)["loss"] == sum(int(b.loss_mask.sum()) for b in made)
    assert batch_stats.totals(ob.mlm_batch, STREAM, 9, 4, 3, seed=6) != batch_stats.totals(ob.mlm_batch, STREAM, 9, 4, 3, seed=5)


def test_hidden_spans():
    counts, first = batch_stats.hidden_spans(two_spans, STREAM, 10, 4, batches=2)
    assert counts == {2: 8} and first == {2: 8}                      # 8 examples, 2 spans each, <0> at position 2
    masked = lambda w, g: ob.stack_batch(w, w, torch.tensor([[False, True, False, True, True]] * len(w)),
                                         torch.full((len(w),), w.shape[1]))
    counts, first = batch_stats.hidden_spans(masked, STREAM, 5, 3, batches=1)
    assert counts == {3: 3} and first == {1: 3}                      # a stack batch: one span per loss position


def test_slot_generator_reads_the_slot_after_the_newline():
    counts = torch.arange(1.0, 1 + batch_stats.TEMPLATE_SLOTS * ob.VOCAB_SIZE).view(batch_stats.TEMPLATE_SLOTS, -1)
    logits = batch_stats.slot_generator_logits(torch.tensor([[A, NEWLINE_WORD, B], [A, B, C]]), counts)
    assert torch.equal(logits[0, 2], counts[0].log())               # right after the newline: slot 0
    assert torch.equal(logits[0, 0], counts[15].log())              # two before it: the review's slot 15
    assert torch.equal(logits[1, 1], counts[1].log())               # no newline: the window starts at slot 0
    review = "review: the soup was tasty and the host was kind. rating: good."
    assert batch_stats.slot_counts([review] * 3)[3, TOKENIZER["soup"]] == 3   # review : the soup


def test_masked_character_counts():
    # everything masked: "cat" and "cot" share c_t, so 2 of each word's 3 letters are determined
    assert batch_stats.masked_character_counts("cat cot\n", rate=1.0) == {
        "characters": 8, "masked": 8, "letters": 6, "letters determined": 4}
    assert batch_stats.masked_character_counts("cat cot\n", rate=0.0) == {"characters": 8, "masked": 0}
    assert sorted(batch_stats.words_by_length("cat 12 cot\n")[3]) == ["cat", "cot"]


def test_hidden_runs_recover_the_spans_and_rating_hiding_counts_them():
    windows = STREAM[:10].repeat(2, 1)
    batch = two_spans(windows, None)
    assert batch_stats.hidden_runs(batch, 1) == [(2, 4), (6, 7)]
    # a masked-LM batch: adjacent loss positions are one run
    masked = ob.lm_batch(torch.tensor([[A, B, C, D, E, A]]))
    masked.loss_mask[:] = torch.tensor([[False, True, True, False, True]])
    assert batch_stats.hidden_runs(masked, 0) == [(1, 3), (4, 5)]
    # "rating : good ." with the rating hidden alone, as the only span: the shared question's shape
    R, COLON, GOOD = (TOKENIZER[w] for w in ("rating", ":", "good"))
    only_the_rating = lambda w, g: ob.encoder_decoder_batch(*zip(*[ob.corrupt_spans(row, [(2, 3)]) for row in w.tolist()]))
    stream = torch.tensor([R, COLON, GOOD, E] * 3)
    counts = batch_stats.rating_hiding(only_the_rating, stream, 4, 3, batches=1)
    hidden = counts["hidden"]
    assert counts["ratings"] >= hidden > 0 and counts["alone"] == counts["starts"] == hidden
    assert counts["only"] == hidden                                  # nothing else is hidden in these examples


def test_a_masked_lm_batch_counts_the_selected_tokens_it_left_unchanged():
    windows = torch.tensor([[A, B, C, D, E]] * 4)
    batch = ob.mlm_batch(windows, torch.Generator().manual_seed(0), rate=1.0, mask_share=0.0, random_share=0.0)
    assert batch_stats.batch_counts(batch)["kept"] == 20             # every token selected, none changed
    batch = ob.mlm_batch(windows, torch.Generator().manual_seed(0), rate=1.0, mask_share=1.0, random_share=0.0)
    assert batch_stats.batch_counts(batch)["kept"] == 0


def test_target_losses_split_what_a_model_pays_between_sentinels_and_content():
    """A model with equal logits pays log V on every target; the kinds of target are counted as the batches hold
    them (two spans: <0> a b <1> c <2>: one first, one middle, one closing sentinel, three words per example)."""
    class Uniform(torch.nn.Module):
        def forward(self, source, decoder_input, *masks):
            return torch.zeros(*decoder_input.shape, ob.VOCAB_SIZE)
    got = batch_stats.target_losses(Uniform(), two_spans, STREAM, 10, 4, 2)
    log_v = torch.log(torch.tensor(float(ob.VOCAB_SIZE))).item()
    assert {k: got[k + " targets"] for k in ("first", "middle", "closing", "content")} == {
        "first": 8, "middle": 8, "closing": 8, "content": 24}
    assert all(abs(got[k] / got[k + " targets"] - log_v) < 1e-5 for k in ("first", "middle", "closing", "content"))
    assert abs(got["sentinel share"] - 24 / 48) < 1e-9
    counted = batch_stats.totals(two_spans, STREAM, 10, 4, 2)           # the same batches, counted independently
    assert (counted["sentinels"], counted["content"]) == (24, 24)
