"""Section 06's runs and questions: the recipes are the objectives they claim, training is reproducible,
and the two ways of reading a model's probabilities (scoring a whole line, asking token by token) agree."""

import math

import pytest
import torch

from lib.recipes import comparison as experiments
from lib.recipes import ul2 as ul2_runs
from lib.trainers import ul2 as ul2_trainer
from lib.measure import protocols, ul2_evals
from lib.objectives import ul2
from lib.data import world
from lib.objectives.batches import UL2_DENOISERS, VOCAB_SIZE, Denoiser
from lib.data.tokenizers import BOS, FIRST_ORDINARY, MODE_TOKENS, NEWLINE_WORD, SENTINELS, TOKENIZER


def test_the_baselines_are_section_04s_objectives_and_ul2_is_all_seven():
    t5 = ul2_runs.run_config("t5_span")
    assert ul2_trainer.denoisers_of(t5) == [Denoiser("R", experiments.T5_MEAN_SPAN, experiments.T5_NOISE_DENSITY)]
    assert ul2_trainer.denoisers_of(ul2_runs.run_config("prefix_lm")) == [Denoiser("S")]
    assert ul2_trainer.denoisers_of(ul2_runs.run_config("ul2_decoder")) == [ul2.clamp_denoiser(d, ul2.WINDOW)
                                                                         for d in UL2_DENOISERS]
    configs = [ul2_runs.run_config(r) for r in ul2_runs.RECIPES]
    shared = ("window", "steps", "batch_size", "seed", "lr", "warmup")
    assert len({tuple(c[k] for k in shared) for c in configs}) == 1      # only the objective and backbone differ


def test_every_recipe_is_evaluated_on_the_same_windows():
    batches = [ul2_trainer.evaluation_batches(ul2_runs.run_config(r), count=4) for r in ul2_runs.RECIPES]
    for name in batches[0]:
        assert len({tuple(b[name].targets.flatten().tolist()) for b in batches}) == 1


def test_a_retrain_is_bit_identical():
    config = {**ul2_runs.run_config("ul2_decoder", steps=3), "eval_every": 3, "eval_windows": 2}
    torch.set_num_threads(1)
    (a, log_a), (b, log_b) = ul2_trainer.train_ul2(config), ul2_trainer.train_ul2(config)
    assert log_a == log_b and set(log_a[-1]) == {"step", "train_loss"} | {ul2.label(d) for d in UL2_DENOISERS}
    assert all(torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in a.state_dict())


@pytest.mark.parametrize("recipe", ["ul2_decoder", "ul2_encoder_decoder"])
@pytest.mark.parametrize("form", ul2_evals.FORMS)
def test_a_scored_line_is_the_sum_of_the_tokens_asked_one_by_one(recipe, form):
    torch.manual_seed(0)
    model = ul2_trainer.build_model(ul2_runs.run_config(recipe)).eval()
    line = "base lives in " + world.build_world().home["base"] + "."
    total = ul2_evals.line_log_likelihoods(model, [line], form, "X")[0]
    source, start = ([MODE_TOKENS["X"], NEWLINE_WORD, SENTINELS[0], NEWLINE_WORD], [BOS, SENTINELS[0]]) \
        if form == "span" else ([MODE_TOKENS["X"], NEWLINE_WORD], [BOS])
    rest = TOKENIZER.encode(line) + ([SENTINELS[1]] if form == "span" else [NEWLINE_WORD])
    by_step = sum(ul2_evals.next_logits(model, [source], [start + rest[:i]]).log_softmax(-1)[0, t]
                  for i, t in enumerate(rest))
    assert torch.allclose(total, by_step, rtol=1e-5)


def test_questions_in_both_forms_and_bad_ones():
    review = "review: the soup was tasty and the host was kind. rating: good."
    ids = protocols.line_ids(review)
    slot = protocols.review_slots(ids)["rating"]
    source, start = ul2_evals.ask_slot(ids, slot, "prefix", "S")
    assert source == [MODE_TOKENS["S"]] + ids[:slot] and start == [BOS]
    body_start, body_end = ul2_evals.review_body(review)
    source, start = ul2_evals.ask_slot(ids, body_start, "span", None, body_end)
    assert TOKENIZER.decode(source) == "\nreview: <0> rating: good.\n" and start == [BOS, SENTINELS[0]]
    with pytest.raises(ValueError, match="form"):
        ul2_evals.ask_slot(ids, slot, "middle")
    with pytest.raises(ValueError, match="mode"):
        ul2_evals.ask_slot(ids, slot, "span", "Q")
    with pytest.raises(ValueError, match="inside the line"):
        ul2_evals.ask_slot(ids, 0, "span")


def test_rating_breakdown_scores_only_good_and_bad_reviews_and_counts_every_ok():
    reviews = [f"review: the soup was tasty and the host was kind. rating: {rating}." for rating in
               ("good", "bad", "ok", "ok")]
    assert ul2_evals.rating_breakdown(["good", "good", "ok", "good"], reviews) == (0.5, 0.25)
    assert ul2_evals.rating_breakdown(["ok"] * 4, reviews) == (0.0, 1.0)


class Uniform(torch.nn.Module):
    """A stand-in single stack whose logits are all zero: every loss it gets is the log of a vocabulary size."""

    def forward(self, inputs, attention_mask):
        return torch.zeros(*inputs.shape, VOCAB_SIZE)


def test_split_losses_score_structure_over_the_vocabulary_and_content_over_words():
    """Structure: a sentinel or the first target, scored over every token (log V for a uniform model); content:
    the other targets, over the ordinary tokens only (log of their count).  A split that scored content over
    the whole vocabulary, or put the first target among content, gets other numbers."""
    config = ul2_runs.run_config("ul2_decoder")
    batch = ul2_trainer.evaluation_batches(config, count=8)["R(mu=3, r=0.15)"]
    kinds = ul2_evals.position_kinds(batch)
    assert torch.equal(kinds["structure"] | kinds["content"], batch.loss_mask)
    assert int(kinds["structure"].sum()) == int((batch.loss_mask & batch.is_sentinel).sum())   # R starts with <0>
    s_batch = ul2_trainer.evaluation_batches(config, count=8)["S (prefix LM)"]
    assert int(ul2_evals.position_kinds(s_batch)["structure"].sum()) == 8                        # one per example
    losses = ul2_evals.split_losses(Uniform(), batch)
    assert losses["structure"] == pytest.approx(math.log(VOCAB_SIZE), abs=1e-5)
    assert losses["content"] == pytest.approx(math.log(VOCAB_SIZE - FIRST_ORDINARY), abs=1e-5)
    assert losses["all"] == pytest.approx(math.log(VOCAB_SIZE), abs=1e-5)          # the training loss, ul2_loss


def test_a_section_06_kind_asks_the_slot_in_its_form_and_mode():
    """protocols.slot_logits with a `ul2_kind` (the fine-tuning path) gives exactly the logits that asking the
    same question through ul2_evals gives; a malformed kind is refused."""
    model = ul2_trainer.build_model(ul2_runs.run_config("ul2_decoder")).eval()
    ids = [protocols.line_ids(r) for r in protocols.new_reviews(4)]
    slots = [protocols.review_slots(i)["rating"] for i in ids]
    for form, mode in (("span", "R"), ("prefix", None)):
        asked = [ul2.ask_slot(i, s, form, mode) for i, s in zip(ids, slots)]
        expected = ul2_evals.next_logits(model, [a for a, _ in asked], [b for _, b in asked])
        assert torch.equal(protocols.slot_logits(model, protocols.ul2_kind(form, mode), ids, slots), expected)
    for bad in ("ul2 spans", "ul2 span [Q]", "ul2 span R"):
        with pytest.raises(ValueError, match="unknown kind"):
            protocols.slot_logits(model, bad, ids, slots)


def test_first_token_shares_are_what_generate_lines_draws_first():
    """An untrained UL2 decoder: the share of 2,000 sampled lines whose first token is a sentinel or a newline (the
    line then ends empty) is the probability first_token_shares reads, within four standard errors."""
    torch.manual_seed(0)
    model = ul2_trainer.build_model(ul2_runs.run_config("ul2_decoder")).eval()
    shares = ul2_evals.first_token_shares(model, "R")
    p = shares["sentinel"] + shares["newline"]
    written = ul2_evals.write(model, [ul2.with_mode([NEWLINE_WORD], "R")] * 2000, [[BOS]] * 2000,
                              [NEWLINE_WORD] + SENTINELS, 1, torch.Generator().manual_seed(0))
    empty = sum(not w for w in written) / 2000
    assert 0 < p < 1 and abs(empty - p) < 4 * math.sqrt(p * (1 - p) / 2000)


def test_the_margin_auc_reads_the_rating_slot_of_each_review():
    """A model whose margin at the rating slot is exactly the review's polarity (good +1, bad -1) scores 1, the
    reverse 0; the margin is read where rating_answers reads its argmax."""
    torch.manual_seed(0)
    model = ul2_trainer.build_model(ul2_runs.run_config("ul2_decoder")).eval().double()
    reviews = [world.make_review("soup", a, "host", s) for a, s in (("tasty", "kind"), ("bland", "rude"),
                                                                   ("fresh", "quick"), ("stale", "slow"))]
    logits = ul2_evals.next_logits(model, *zip(*[ul2.ask_slot(protocols.line_ids(r), protocols.review_slots(
        protocols.line_ids(r))["rating"], "prefix", "S") for r in reviews]))
    margins = (logits[:, protocols.RATING_IDS[0]] - logits[:, protocols.RATING_IDS[2]]).tolist()
    expected = protocols.good_above_bad([round(m, 9) for m in margins], reviews)
    assert ul2_evals.rating_margin_auc(model, reviews, "prefix", "S") == expected
    assert protocols.good_above_bad([1, -1, 1, -1], reviews) == 1.0 and protocols.good_above_bad([-1, 1, -1, 1], reviews) == 0.0


def test_held_out_losses_in_parts_are_the_trainers_losses():
    config = ul2_runs.run_config("ul2_encoder_decoder")
    model = ul2_trainer.build_model(config).double().eval()
    batches = ul2_trainer.evaluation_batches(config, count=70)
    trainer_losses, in_parts = ul2_trainer.denoiser_losses(model, batches), ul2_evals.held_out_losses(model, batches)
    batch = next(iter(batches.values()))                    # passed in several parts, not at once
    assert len(batch.targets) > ul2_evals.rows_at_once(model, batch.source.shape[1] + batch.decoder_input.shape[1])
    assert trainer_losses.keys() == in_parts.keys()
    assert all(abs(trainer_losses[k] - in_parts[k]) < 1e-12 for k in trainer_losses)
