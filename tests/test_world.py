"""The mini internet: its alphabet, its rules, its split, and byte-identical regeneration."""

import subprocess
import sys
from collections import Counter

from lib.data import world

W = world.build_world()


def test_exactly_44_distinct_characters_and_all_of_them_are_used():
    assert len(world.ALPHABET) == len(set(world.ALPHABET)) == 44
    assert set(W.text("train")) == set(world.ALPHABET)


def test_regeneration_is_byte_identical_to_committed_data(tmp_path):
    subprocess.run([sys.executable, "-m", "lib.data.world", str(tmp_path)], check=True, capture_output=True)
    for split in ("train", "val"):
        assert (tmp_path / f"{split}.txt").read_bytes() == (world.DATA_DIR / f"{split}.txt").read_bytes()


def test_every_corpus_line_is_well_formed_and_true():
    assert all(world.check_line(line) == (True, True) for line in W.train + W.val)


def test_check_line_rejects_false_and_malformed_lines():
    city = W.home["base"]
    other = next(c for c in world.CITIES if c != city)
    assert world.check_line(f"base lives in {other}.") == (True, False)
    assert world.check_line(f"q: where does base live? a: {other}.") == (True, False)
    assert world.check_line("12+30=43.") == (True, False)
    assert world.check_line("review: the soup was tasty and the host was rude. rating: ok.") == (True, False)
    assert world.check_line("review: the soup was tasty but the host was rude. rating: ok.") == (True, True)
    assert world.check_line("review: the soup was rude but the host was tasty. rating: ok.") == (False, False)
    assert world.check_line("nobody lives in quila.") == (False, False)
    assert world.check_line("base lives in") == (False, False)


def test_review_rule_and_rating_shares():
    ratings = Counter(line.split("rating: ")[1][:-1] for line in W.train if world.kind_of(line) == "review")
    total = sum(ratings.values())
    assert 1800 <= total <= 2000  # "about 1,900 training reviews"
    # Uniform independent adjectives give 1/4 good, 1/2 ok, 1/4 bad; 0.04 is ~4 standard errors at n≈1,900.
    for rating, share in {"good": 0.25, "ok": 0.5, "bad": 0.25}.items():
        assert abs(ratings[rating] / total - share) < 0.04


def test_held_out_sums_appear_only_in_validation():
    def sums(lines):
        return {int(line[line.index("=") + 1:-1]) for line in lines if world.kind_of(line) == "addition"}
    held = set(W.held_out_sums)
    assert held and not (sums(W.train) & held)
    assert held <= sums(W.val)


def test_entropy_floor_is_below_chance_and_consistent():
    floor = world.entropy_floor()
    kinds = [k for k in world.KINDS]
    assert min(floor[k] for k in kinds) < floor["all"] < max(floor[k] for k in kinds)
    assert 0 < floor["all"] < 5.459


def test_invented_names_are_no_other_word_of_the_world():
    words = set(world.CITIES) | set(world.FOODS) | set(world.FOOD_ADJECTIVES) | set(world.SERVICE_ADJECTIVES)
    assert not words & set(world.build_world().names)


def test_the_fact_world_is_another_world_and_its_text_states_every_fact_once_per_shuffle():
    home = world.fact_world(300)
    assert home == world.fact_world(300) and len(home) == 300       # the same people again: cached, seeded
    lines = world.fact_text(home, shuffles=3).splitlines()
    assert len(lines) == 900 and set(lines) == {f"{n} lives in {c}." for n, c in home.items()}
    assert lines[:300] != lines[300:600]                             # each pass in another order
    assert set(world.fact_text(home)) <= set(world.ALPHABET)         # the model's characters


def test_next_characters_follow_every_line_of_the_corpus_and_nothing_else():
    """Every character of every validation line (and its closing newline) is among next_characters of the text
    before it; a newline only after a whole line; first_exit finds a wrong word, a missing period, a leading zero."""
    for line in W.val[:300]:
        text = line + "\n"
        assert all(text[i] in world.next_characters(text[:i]) for i in range(len(text)))
        assert world.first_exit(line) is None
    assert world.next_characters("q: where does ") == {name[0] for name in W.names}
    assert "\n" not in world.next_characters("review: the soup was tasty and the host was kind. rating: good")
    assert world.first_exit("review: the soup was tasy and") == len("review: the soup was tas")
    assert world.first_exit("28+55=83") == len("28+55=83")          # the newline came before the period
    assert world.first_exit("28+55=083.") == len("28+55=0")
    assert world.first_exit("5+3=8.") == 1                     # operands have two digits
    cook = W.names[0]                                              # a story's rule across slots: not a slip
    meal = f"story: {cook} made soup for {cook}, and {cook} said it was tasty."
    assert world.first_exit(meal) is None and world.check_line(meal) == (False, False)
    assert all(world.template_of(line) == world.kind_of(line) for line in W.val)


def test_slips_are_read_from_the_models_probabilities():
    """stay_probabilities: a probability per character up to the first slip; a uniform model's is the share of the
    alphabet that keeps the line well-formed; slip_summary counts 1 - stay."""
    import torch
    from lib.measure import inference_evals
    from lib.nn.models import ModelConfig

    class Uniform(torch.nn.Module):
        config = ModelConfig()

        def forward(self, idx):
            return torch.zeros(*idx.shape, len(world.ALPHABET), dtype=torch.float64)

    lines = ["28+55=83.", "28+55=0x3."]
    stays = inference_evals.stay_probabilities(Uniform(), lines)
    assert [len(s) for s in stays] == [10, 8]          # every character and the newline; up to the slip at "x"
    expected = [len(world.next_characters(("28+55=83.\n")[:i])) / 44 for i in range(10)]
    assert torch.allclose(stays[0], torch.tensor(expected, dtype=torch.float64))
    summary = inference_evals.slip_summary(stays)
    assert summary["characters"] == 18
    assert abs(summary["slips per 1,000"] - 1000 * float((1 - torch.cat(stays)).mean())) < 1e-9


def test_disagreeing_reviews_are_and_reviews_whose_adjectives_disagree():
    items = world.disagreeing_reviews(40)
    for i, (text, food_good) in enumerate(items):
        words = text.replace(".", " .").split()
        food_adjective, service_adjective = words[words.index("and") - 1], words[-3]
        assert " and " in text and text.endswith("rating: ") and food_good == (i % 2 == 0)
        assert world.FOOD_ADJECTIVES[food_adjective] == food_good != world.SERVICE_ADJECTIVES[service_adjective]
    assert items == world.disagreeing_reviews(40) != world.disagreeing_reviews(40, seed=1)
