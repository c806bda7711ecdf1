"""The fine-tuning yardstick: the harness, its task, its choice of learning rate and its cache."""

import json
import math

import pytest
import torch

from lib.data import world
from lib.data.seeding import seed_everything
from lib.data.tokenizers import MASK, TOKENIZER
from lib.measure import finetune, protocols
from lib.measure.protocols import RATING_IDS, true_rating
from lib.recipes import comparison, yardstick
from lib.recipes import ul2 as ul2_runs
from lib.train.cache import StaleCheckpoint
from lib.trainers import ul2 as ul2_trainer
from lib.trainers.comparison import build_model, train_comparison


def untrained(recipe: str, seed: int = 0):
    config = comparison.run_config(recipe, seed=seed)
    seed_everything(seed)
    return build_model(config).eval(), config["kind"]


def same_weights(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


@pytest.mark.parametrize("recipe", ["gpt", "bert", "t5_span"])
def test_finetune_leaves_the_parent_unchanged_and_repeats_bit_for_bit(recipe):
    model, kind = untrained(recipe)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    task = finetune.rating_task(0)
    first = finetune.finetune(model, kind, task.labelled[:8], lr=1e-3, seed=0, steps=5)
    again = finetune.finetune(model, kind, task.labelled[:8], lr=1e-3, seed=0, steps=5)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not same_weights(first, model)          # it did train
    assert same_weights(first, again)


def test_the_task_holds_the_test_adjectives_out_of_the_labels():
    task = finetune.rating_task(1)
    words = lambda reviews: {w for r in reviews for w in r.rstrip(".").replace(".", "").split()}
    adjectives = set(world.FOOD_ADJECTIVES) | set(world.SERVICE_ADJECTIVES)
    assert words(task.labelled) & adjectives == set(task.labelled_adjectives)
    assert not words(task.test + task.validation) & set(task.labelled_adjectives)
    assert not set(task.test) & set(task.validation) and not set(task.test) & set(world.build_world().train)
    # each side keeps half of each polarity: 4 + 4 food adjectives, 3 + 3 service adjectives
    for table, half in ((world.FOOD_ADJECTIVES, 4), (world.SERVICE_ADJECTIVES, 3)):
        for polarity in (True, False):
            assert sum(table[a] == polarity for a in task.labelled_adjectives if a in table) == half


def test_every_first_n_of_the_labelled_pool_holds_the_three_ratings():
    from collections import Counter
    from lib.measure.protocols import true_rating
    for split in yardstick.SPLITS:
        labelled = finetune.rating_task(split).labelled
        for n in yardstick.CURVE:
            counts = Counter(true_rating(r) for r in labelled[:n])
            assert set(counts) == set(world.RATINGS) and max(counts.values()) - min(counts.values()) <= 1, (n, counts)


def test_the_learning_rate_is_chosen_on_validation_not_on_test():
    # at lr 1e-3 the test is better, at 3e-4 the validation: the choice must follow the validation
    rows = [{"n": 8, "split": s, "lr": lr, "validation": {"and": v}, "test": {"and": t}}
            for s in (0, 1) for lr, v, t in ((3e-4, 0.9, 0.5), (1e-3, 0.6, 1.0))]
    assert {r["lr"] for r in finetune.chosen(rows, 8)} == {3e-4}
    assert [r["split"] for r in finetune.chosen(rows, 8)] == [0, 1]


def test_a_snapshot_at_step_zero_is_the_runs_initialisation():
    config = dict(comparison.run_config("prefix_lm", seed=2), stop_after=0)
    model, log = train_comparison(config)
    assert log == [] and same_weights(model, untrained("prefix_lm", seed=2)[0])


def test_an_untrained_network_does_not_solve_the_held_out_task_but_would_solve_a_leaky_one():
    model, kind = untrained("gpt", seed=0)
    task = finetune.rating_task(0)
    lr = yardstick.chosen_rate(comparison.run_name("gpt"), step=0)      # the rate its validation chose
    tuned = finetune.finetune(model, kind, task.labelled[:yardstick.N], lr=lr, seed=0)
    held_out = finetune.score(tuned, kind, task.test)["and"]
    # the same network scored on reviews that use the labelled adjectives: the labels alone solve those
    seen = finetune.score(tuned, kind, task.labelled[yardstick.N:])["and"]
    assert seen >= 0.95 and held_out <= seen - 0.25, (held_out, seen)


def test_results_are_cached_keyed_and_reloaded(tmp_path, monkeypatch):
    monkeypatch.setattr(yardstick, "DIRECTORY", tmp_path)
    monkeypatch.setattr(yardstick, "SPLITS", (0,))
    monkeypatch.setattr(finetune, "LEARNING_RATES", (1e-3,))
    monkeypatch.setattr(finetune, "STEPS", 3)
    name = comparison.run_name("gpt")
    yardstick.compute(name, 0)
    saved = yardstick.result(name, 0)               # loaded, not computed: BOOK_NO_TRAINING is set in tests
    assert [(r["n"], r["split"], r["lr"]) for r in saved["rows"]] == [(n, 0, 1e-3) for n in yardstick.CURVE]
    monkeypatch.setattr(finetune, "STEPS", 4)        # another harness setting: the saved result is stale
    with pytest.raises(StaleCheckpoint, match="compare_gpt_at0.json"):
        yardstick.result(name, 0)
    monkeypatch.setattr(finetune, "STEPS", 3)
    path = tmp_path / "compare_gpt_at0.json"
    path.write_text(json.dumps(dict(json.loads(path.read_text()), key="0" * 16)))
    with pytest.raises(StaleCheckpoint):
        yardstick.result(name, 0)


def test_a_network_without_an_output_over_words_is_fine_tuned_through_a_new_head():
    from lib.nn.electra import Electra, ElectraConfig
    from lib.objectives.batches import VOCAB_SIZE
    seed_everything(0)
    discriminator = Electra(ElectraConfig(vocab_size=VOCAB_SIZE, context=32)).discriminator.eval()
    before = {k: v.clone() for k, v in discriminator.state_dict().items()}
    task = finetune.rating_task(0)
    tuned = finetune.finetune(discriminator, "bidirectional", task.labelled[:32], lr=3e-3, seed=0, steps=40, head=True)
    assert all(torch.equal(before[k], v) for k, v in discriminator.state_dict().items())
    assert not same_weights(tuned.network, discriminator)          # every weight trains, not only the head
    assert finetune.score(tuned, "bidirectional", task.labelled[:32])["all"] > 0.9   # it fits its labels
    with pytest.raises(ValueError, match="bidirectional"):
        finetune.finetune(discriminator, "causal", task.labelled[:8], lr=1e-3, seed=0, head=True)


def test_a_section_06_snapshot_at_step_zero_is_the_runs_initialisation():
    config = dict(ul2_runs.run_config("t5_span", seed=1), stop_after=0)
    model, log = ul2_trainer.train_ul2(config)
    seed_everything(1)
    assert log == [] and same_weights(model, ul2_trainer.build_model(config))


def test_every_yardstick_entry_is_computed_for_its_current_key():
    """The committed fine-tunes are those of today's checkpoints and harness (a changed key, e.g. of the older
    entries when section 06's were added, would leave them stale), and each entry has a file of its own."""
    entries = yardstick.entries()
    assert len({e.name for e in entries}) == len(entries)
    assert [e.name for e in yardstick.missing()] == []
    # `entry` finds each of them by what a notebook asks for (through an index built once)
    assert all(yardstick.entry(e.run.name, e.step, e.head, e.form, e.rates is not None) == e for e in entries)


class _Reader(torch.nn.Module):
    """A stand-in bidirectional network that records the tokens it reads and whose logits at every position put
    logit(good) - logit(bad) at +1 for reviews with a positive food adjective and -1 otherwise (+ an offset)."""

    def __init__(self, offset=0.0, informative=True):
        super().__init__()
        self.config = build_model(comparison.run_config("bert")).config
        self.offset, self.informative, self.seen = offset, informative, []
        self.anchor = torch.nn.Parameter(torch.zeros(()))

    def forward(self, ids, mask):
        self.seen.append(ids)
        positive = [any(TOKENIZER.vocab[t] in world.FOOD_ADJECTIVES and world.FOOD_ADJECTIVES[TOKENIZER.vocab[t]]
                        for t in row) for row in ids.tolist()]
        logits = torch.zeros(*ids.shape, self.config.vocab_size, dtype=torch.float64) + self.anchor
        sign = torch.tensor([1.0 if p else -1.0 for p in positive], dtype=torch.float64)
        logits[..., RATING_IDS[0]] = self.offset + (sign[:, None] if self.informative else 0.0)
        return logits


def test_the_margin_reading_fits_only_a_threshold_on_the_labelled_reviews():
    """A network whose margin carries the food adjective's polarity reads every 'and' test review right, whatever
    its offset (the threshold absorbs it); one whose margin carries nothing reads at most the majority share."""
    tasks = [finetune.rating_task(split) for split in (0, 1)]
    for offset in (-5.0, 0.0, 3.0):
        assert finetune.margin_readout(_Reader(offset), "bidirectional", tasks, 32) == [{"threshold": 1.0, "auc": 1.0}] * 2
    blind = finetune.margin_readout(_Reader(informative=False), "bidirectional", tasks, 32)
    for task, reading in zip(tasks, blind):
        good = [true_rating(r) == "good" for r in task.test if " and " in r]
        assert reading["threshold"] in (sum(good) / len(good), (len(good) - sum(good)) / len(good))
        assert reading["auc"] == 0.5                                            # every margin ties


def test_the_unmasked_reading_puts_a_period_at_the_slot_never_mask():
    reader = _Reader()
    ids = [protocols.line_ids(r) for r in finetune.rating_task(0).test[:4]]
    slots = [protocols.review_slots(s)["rating"] for s in ids]
    protocols.slot_logits(reader, protocols.UNMASKED, ids, slots)
    read = reader.seen[-1]
    assert not (read == MASK).any()
    assert all(read[i, s] == TOKENIZER["."] and ids[i][s] in protocols.RATING_IDS for i, s in enumerate(slots))
    protocols.slot_logits(reader, "bidirectional", ids, slots)
    assert all(reader.seen[-1][i, s] == MASK for i, s in enumerate(slots))


def test_a_character_level_decoder_is_read_at_the_ratings_first_letter_from_the_text_left_of_it():
    """The CHARACTERS reading of a batch of reviews of different lengths (right-padded) gives, for each, the
    logits a TinyGPT gives on that review alone for the character after "rating: ", and g / o / b are the
    columns of good / ok / bad."""
    from lib.nn.models import ModelConfig, TinyGPT
    seed_everything(0)
    model = TinyGPT(ModelConfig()).eval()
    reviews = finetune.rating_task(0).test[:5]
    ids = [protocols.char_line_ids(r) for r in reviews]
    slots = [protocols.char_rating_slot(s) for s in ids]
    assert len({len(s) for s in ids}) > 1                          # the batch does need padding
    read = protocols.slot_logits(model, protocols.CHARACTERS, ids, slots)
    for i, (seq, slot) in enumerate(zip(ids, slots)):
        assert seq[slot] == protocols.CHAR_RATING_IDS[world.RATINGS.index(true_rating(reviews[i]))]
        alone = model(torch.tensor([seq[:slot]]))[0, -1]
        assert torch.allclose(read[i], alone, atol=1e-6)


def test_a_character_level_snapshot_at_step_zero_is_the_runs_initialisation():
    from lib.recipes import modern
    from lib.trainers.char_lm import build_network, train_char_lm
    config = dict(modern.run("untied", 1).config, stop_after=0)
    model, log = train_char_lm(config)
    seed_everything(1)
    assert log == [] and same_weights(model, build_network(config))


def test_answer_bits_is_the_cross_entropy_over_the_three_ratings_in_bits():
    """A stand-in whose logits at every position are 0 for g, 1 for o, 2 for b and 9 elsewhere: the softmax over the
    three gives each review's true rating a known probability, whatever the other letters."""
    class Fixed(torch.nn.Module):
        def forward(self, ids):
            logits = torch.full((*ids.shape, 44), 9.0, dtype=torch.float64)
            logits[..., protocols.CHAR_RATING_IDS] = torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64)
            return logits
    reviews = finetune.rating_task(0).test[:12]
    logp = torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64).log_softmax(-1)
    expected = -sum(logp[world.RATINGS.index(true_rating(r))].item() for r in reviews) / len(reviews) / math.log(2)
    assert len({true_rating(r) for r in reviews}) > 1
    assert abs(finetune.answer_bits(Fixed(), protocols.CHARACTERS, reviews) - expected) < 1e-12
