"""Section 05's log summaries and the discriminator-as-scorer split by connective (lib.measure.electra_evals)."""

import math

import pytest
import torch

from lib.data.tokenizers import TOKENIZER
from lib.measure import electra_evals, evals, protocols

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
