"""Section 05's measurements (lib.measure.electra_evals): log summaries, the scorer split by connective, the polarity
of a masked LM, swap detection, one review's losses, the table probe."""

import math

import pytest
import torch

from lib.data.tokenizers import TOKENIZER
from lib.measure import electra_evals, evals, protocols
from lib.nn.electra import Electra, ElectraConfig
from lib.objectives.batches import VOCAB_SIZE

LOGS = {("electra", 1): [{"step": 50, "recall": 0.2}, {"step": 100, "recall": float("nan")}],
        ("bert", 0): [{"step": 50, "recall": 9.0}, {"step": 100, "recall": 9.0}],
        ("electra", 0): [{"step": 50, "recall": 0.4}, {"step": 100, "recall": 0.6}],
        ("electra", 2): [{"step": 50, "recall": 0.9}, {"step": 100, "recall": float("nan")}]}


def test_a_logged_value_is_read_per_seed_in_seed_order_and_only_for_its_variant():
    assert evals.row_at(LOGS[("electra", 0)], 100) == {"step": 100, "recall": 0.6}
    assert electra_evals.seed_values(LOGS, "electra", "recall", 50) == [0.4, 0.2, 0.9]
    assert electra_evals.seed_mean(LOGS, "electra", "recall", 50) == pytest.approx(0.5)
    with pytest.raises(KeyError, match=r"no row at step 75; the log has steps \[50, 100\]"):
        evals.row_at(LOGS[("bert", 0)], 75)


def test_the_seed_mean_leaves_out_undefined_values():
    assert electra_evals.seed_mean(LOGS, "electra", "recall", 100) == 0.6          # two of three seeds are nan
    only_nan = {("a", 0): [{"step": 1, "x": float("nan")}]}
    assert math.isnan(electra_evals.seed_mean(only_nan, "a", "x", 1))


def test_knowing_only_that_but_means_ok_gets_every_but_and_half_of_the_and_reviews():
    but, both = "the soup was tasty but the host was rude.", "the soup was tasty and the host was kind."
    assert electra_evals.connective_only_accuracy([but, but, both, both]) == 0.75
    assert electra_evals.connective_only_accuracy([but, both, both, both]) == 0.625


def scorer(favoured):
    """A stand-in discriminator that finds the tokens of `favoured` (B, T) untouched and every other token replaced."""
    class Scorer(torch.nn.Module):
        def replaced_logits(self, inputs, mask):
            return torch.where(inputs == favoured(inputs), -5.0, 5.0)
    return Scorer()


def test_the_scorer_split_by_connective():
    lines = protocols.new_reviews(30)
    truth = torch.tensor([protocols.line_ids(r) for r in lines]).repeat_interleave(3, dim=0)
    assert electra_evals.scorer_accuracy_by_connective(scorer(lambda inputs: truth), lines) == {"and": 1.0, "but": 1.0}
    # a discriminator that likes "ok" best always answers ok: right on every "but" review, wrong on every "and"
    always_ok = scorer(lambda inputs: torch.full_like(inputs, TOKENIZER["ok"]))
    assert electra_evals.scorer_accuracy_by_connective(always_ok, lines) == {"and": 0.0, "but": 1.0}


REVIEWS = protocols.new_reviews(60)


def test_polarity_mass_is_one_for_a_masked_lm_that_knows_polarity_and_a_half_for_a_uniform_one():
    from lib.data import world
    from lib.data.tokenizers import TOKENIZER
    ids = [protocols.line_ids(r) for r in REVIEWS]
    slot = protocols.review_slots(ids[0])["food_adjective"]
    truth = [world.FOOD_ADJECTIVES[TOKENIZER.vocab[i[slot]]] for i in ids]

    def knowing(inputs, mask, where):                 # all its mass on the adjectives of the original's polarity
        logits = torch.full((int(where.sum()), 400), -1e9)[:, :len(TOKENIZER.vocab)]
        for row, polarity in enumerate(truth):
            for a, p in world.FOOD_ADJECTIVES.items():
                logits[row, TOKENIZER[a]] = 0.0 if p == polarity else -1e9
        return logits

    assert electra_evals.polarity_mass(knowing, REVIEWS) == pytest.approx(1.0)
    uniform = lambda inputs, mask, where: torch.zeros(int(where.sum()), len(TOKENIZER.vocab))   # noqa: E731
    assert electra_evals.polarity_mass(uniform, REVIEWS) == pytest.approx(0.5)


class Judge(torch.nn.Module):
    """A stand-in discriminator: p(replaced) high where a line is false (knows polarity), or a bias per word."""

    def __init__(self, knows: bool):
        super().__init__()
        self.knows = knows

    def replaced_logits(self, inputs, mask):
        from lib.data import world
        from lib.data.tokenizers import TOKENIZER
        out = torch.zeros(inputs.shape)
        for row, ids in enumerate(inputs.tolist()):
            line = TOKENIZER.decode(ids).strip("\n")
            out[row] = (-3.0 if world.check_line(line)[1] else 3.0) if self.knows else (ids[6] % 7) - 3.0
        return out


def test_swap_detection_tells_a_discriminator_that_knows_polarity_from_one_with_word_biases():
    assert electra_evals.swap_detection(Judge(knows=True), REVIEWS)["auc"] == 1.0
    assert electra_evals.swap_detection(Judge(knows=False), REVIEWS)["auc"] == pytest.approx(0.5, abs=0.02)


def test_one_reviews_losses_add_up_with_lambda():
    from lib.nn.electra import Electra, ElectraConfig
    from lib.nn.models import MaskedTransformer
    from lib.recipes import comparison, electra
    torch.manual_seed(0)
    model, bert = Electra(ElectraConfig(354, 32)), MaskedTransformer(comparison.MODEL)
    ids = torch.tensor([protocols.line_ids(r) for r in REVIEWS])
    row = electra_evals.review_losses(model, bert, ids, electra.run_config("electra_g16"), 3)
    assert row["electra"] == pytest.approx(row["generator"] + 50 * row["discriminator"])
    assert row["positions"] == 18 and row["selected"] >= 1
    assert 4.0 < row["generator"] < 7.0 and 4.0 < row["bert"] < 7.0      # untrained: about ln 354 = 5.87


def test_a_table_probe_reads_a_class_the_embeddings_encode_and_not_one_they_do_not():
    from lib.measure import probes
    from lib.data import world
    from lib.data.tokenizers import TOKENIZER
    table = torch.nn.Embedding(len(TOKENIZER.vocab), 4)
    torch.nn.init.normal_(table.weight, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for a, p in world.FOOD_ADJECTIVES.items():
            table.weight[TOKENIZER[a], 0] = 5.0 if p else -5.0
    model = torch.nn.Module()
    model.wte = table
    assert sum(probes.table_scores(model, world.FOOD_ADJECTIVES)) / 100 > 0.98
    shuffled = probes.table_scores(model, probes.shuffled_polarity(0))
    assert sum(shuffled) / len(shuffled) < 0.75


class _RatingJudge:
    """A stand-in ELECTRA that knows each review's rating: its generator puts logit(good) - logit(bad) at +1 for a
    good review and -1 for a bad one; its discriminator calls the rating slot replaced when the word there is wrong."""

    def __init__(self, reviews):
        self.truth = {tuple(protocols.line_ids(r)[:-3]): protocols.true_rating(r) for r in reviews}

    def _truths(self, inputs):
        return [self.truth[tuple(row[:-3])] for row in inputs.tolist()]

    def generator_logits(self, inputs, mask, where):
        logits = torch.zeros(int(where.sum()), len(TOKENIZER.vocab), dtype=torch.float64)
        logits[:, TOKENIZER["good"]] = torch.tensor([1.0 if t == "good" else -1.0 for t in self._truths(inputs)])
        return logits

    def replaced_logits(self, inputs, mask):
        slot = protocols.review_slots(inputs[0].tolist())["rating"]
        wrong = [TOKENIZER.vocab[row[slot]] != t for row, t in zip(inputs.tolist(), self._truths(inputs))]
        logits = torch.full(inputs.shape, -5.0, dtype=torch.float64)
        logits[:, slot] = torch.tensor([5.0 if w else -5.0 for w in wrong])
        return logits


def test_the_rating_slot_readings_rank_good_above_bad_only_when_the_model_knows():
    reviews = [r for r in protocols.new_reviews(60) if " and " in r]
    judge = _RatingJudge(reviews)
    assert electra_evals.generator_rating_auc(judge, reviews) == 1.0
    assert electra_evals.discriminator_rating_auc(judge, reviews) == 1.0
    torch.manual_seed(0)
    unigram = Electra(ElectraConfig(vocab_size=VOCAB_SIZE, context=32, generator_d_model=0))
    assert electra_evals.generator_rating_auc(unigram, reviews) == 0.5        # its logits ignore the review
