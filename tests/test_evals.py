"""The evaluation protocols score known models correctly."""

import math

import pytest
import re

import torch

from lib.measure import answers, evals
from lib.data import world
from lib import recipes
from lib.nn.models import ModelConfig

W = world.build_world()


class ScriptedModel:
    """A stand-in model whose next-character logits come from a rule instead of weights."""

    config = ModelConfig()

    def __init__(self, next_char):
        self.next_char = next_char  # text so far -> the character to predict (or None: uniform)

    def eval(self):
        return self

    def train(self, mode=True):
        return self

    def __call__(self, idx):
        logits = torch.zeros(*idx.shape, 44)
        for b, row in enumerate(idx.tolist()):
            char = self.next_char(evals.CHARS.decode(row))
            if char is not None:
                logits[b, -1, evals.CHARS.stoi[char]] = 10.0
        return logits


def oracle(text):
    """Knows where everybody lives (and, its answer written, writes newlines: a batch goes on until every row
    has ended its line)."""
    m = re.search(r"q: where does ([a-z]+) live\? a:(.*)$", text)
    if m is None:
        return "\n"
    answer = f" {W.home[m.group(1)]}.\n"
    return answer[len(m.group(2))]


def test_uniform_model_scores_log2_44_bits_per_char():
    assert math.isclose(evals.bits_per_char(ScriptedModel(lambda text: None)), math.log2(44), rel_tol=1e-6)


def test_fact_completion_gives_an_oracle_1_and_a_constant_guesser_its_share():
    assert answers.fact_completion(ScriptedModel(oracle))["accuracy"] == 1.0
    guess = " quila.\n"
    result = answers.fact_completion(ScriptedModel(lambda text: (guess + "\n" * 99)[len(text.split("a:")[-1])]))
    assert result["accuracy"] == sum(city == "quila" for city in W.home.values()) / len(W.names)


def test_sampling_is_reproducible_and_line_quality_scores_corpus_lines_as_true():
    model = ScriptedModel(lambda text: None)
    a, b = evals.sample_lines(model, 4, seed=1), evals.sample_lines(model, 4, seed=1)
    assert a == b and a != evals.sample_lines(model, 4, seed=2)
    assert evals.line_quality(list(W.val[:50])) == {"valid": 1.0, "true": 1.0}
    assert evals.line_quality(["base lives in", "12+30=42."]) == {"valid": 0.5, "true": 0.5}


def test_the_generator_price_is_per_line_and_follows_the_mix_of_the_lines():
    # every review costs the same bits, so its price per character is the generator's review entropy
    # spread over these reviews' own characters (not over all reviews' mean length)
    reviews = [line for line in W.val if world.kind_of(line) == "review"]
    per_line = world.line_price_bits(reviews[0])
    assert all(world.line_price_bits(r) == per_line for r in reviews)
    assert math.isclose(evals.generator_price(reviews)["all"], per_line * len(reviews) / sum(len(r) + 1 for r in reviews))
    # a meal story has a food and an adjective to choose, a bus story does not
    bus, meal = (next(line for line in W.val if world.classify(line)[0] == t) for t in ("bus", "meal"))
    assert math.isclose(world.line_price_bits(meal) - world.line_price_bits(bus),
                        math.log2(len(world.FOODS) * len(world.FOOD_ADJECTIVES)))
    # the validation set holds every held-out-sum addition, so it is richer in additions than the generator's mix
    assert evals.generator_price()["all"] > world.entropy_floor()["all"]
    with pytest.raises(ValueError, match="not a line"):
        world.line_price_bits("zzz lives in quila.")


def test_batches_by_length_never_pads():
    batches = list(evals.batches_by_length(["ab", "xyz", "cd"]))
    assert [tuple(ids.shape) for ids, _ in batches] == [(2, 4), (1, 5)]
    assert all(bool(weights.all()) for _, weights in batches)


def test_character_share_by_kind_weighs_lines_by_their_characters_and_newlines():
    shares = evals.character_share_by_kind(["12+34=46.", "base lives in jelka.", "12+34=46.", "zzz"])
    assert shares["addition"] == 20 / 45 and shares["fact"] == 21 / 45     # the malformed line's 4 count in no kind
    assert set(shares) == set(world.KINDS) and shares["review"] == 0.0
    assert math.isclose(sum(evals.character_share_by_kind(list(W.val)).values()), 1.0)


def test_addition_completion_scores_an_adder_right_and_an_off_by_one_adder_wrong():
    def adder(offset):
        def next_char(text):
            question = text.split("\n")[-1]
            if "=" not in question:             # the line has ended: newlines until every row has
                return "\n"
            a, rest = question.split("+")
            b, written = rest.split("=")
            return (f"{int(a) + int(b) + offset}." + "\n" * 99)[len(written)]
        return ScriptedModel(next_char)
    pairs = [(10, 10), (45, 55), (99, 99)]
    assert answers.addition_completion(adder(0), pairs) == {pair: True for pair in pairs}
    assert answers.addition_completion(adder(1), pairs) == {pair: False for pair in pairs}


def test_next_char_probs_is_the_softmax_of_the_last_position():
    probs = evals.next_char_probs(ScriptedModel(lambda text: "r" if text.endswith("\n") else None), "ab\n")
    assert max(probs, key=probs.get) == "r" and math.isclose(sum(probs.values()), 1.0, rel_tol=1e-6)


def test_the_parts_of_the_excess_by_kind_add_up_to_the_excess_over_the_generators_price():
    model, _ = recipes.load("base")
    parts = evals.excess_by_kind(model)
    assert set(parts) == set(world.KINDS) | {"all"}
    assert parts["all"] == pytest.approx(evals.bits_per_char(model) - evals.generator_price()["all"], abs=1e-6)
    assert parts["addition"] > sum(parts[k] for k in world.KINDS if k != "addition")   # what the base model still pays


def test_text_windows_cut_non_overlapping_or_evenly_spaced_windows():
    text = "abcdefghij\n" * 5
    every = evals.text_windows(text, 10)
    assert every.shape == (5, 11) and evals.CHARS.decode(every[1].tolist()) == text[10:21]
    spaced = evals.text_windows(text, 20, count=3)
    assert spaced.shape == (3, 21) and evals.CHARS.decode(spaced[-1].tolist()) == text[-21:]


def test_a_batch_passed_in_parts_scores_as_one_and_a_capped_mixture_reads_its_batch_whole():
    from lib.nn.moe import MoEConfig, MoEGPT, with_capacity
    model, _ = recipes.load("base")
    ids = evals.line_batch(list(world.build_world().train)[:50])[0]
    whole, parts = evals.token_losses(model, ids), evals.token_losses(model, ids, rows=7)
    assert (whole - parts).abs().max() < 1e-12
    assert evals.rows_at_once(model, 64) == evals.TOKENS_AT_ONCE // 64
    capped = MoEGPT(MoEConfig(capacity_factor=1.25))
    assert evals.rows_at_once(capped, 64) is None and evals.rows_at_once(with_capacity(capped, None), 64)
