"""ELECTRA (lib.nn.electra, lib.objectives.electra, lib.trainers.electra, lib.measure.electra_evals): labels,
gradient isolation, ELECTRA-15 %'s loss, sizes, determinism."""

import math

import pytest
import torch

from lib.recipes import comparison
from lib.trainers import comparison as comparison_trainer
from lib.objectives import batches as objectives
from lib.measure import protocols
from lib.data import world
from lib.measure.electra_evals import replacement_class, replacement_diagnosis, scorer_predictions
from lib.nn.electra import Electra, ElectraConfig, electra_parameter_counts
from lib.objectives.electra import FOOD_ADJECTIVE_IDS, electra_losses, hard_negatives
from lib.recipes.electra import VARIANTS, run_config
from lib.trainers.electra import train_electra as train_variant
from lib.trainers.electra import training_parts
from lib.objectives.batches import electra_batch, mlm_batch
from lib.data.tokenizers import TOKENIZER
from lib.train.loop import fit

CONFIG = ElectraConfig(objectives.VOCAB_SIZE, comparison.POSITIONS)


def reviews(n=8):
    return torch.tensor([protocols.line_ids(r) for r in protocols.new_reviews(n)])


def masked_batch(seed=0):
    return mlm_batch(reviews(), torch.Generator().manual_seed(seed), 0.3, mask_share=1.0, random_share=0.0)


def test_a_sample_equal_to_the_original_is_labelled_original():
    masked = masked_batch()
    other = TOKENIZER["soup"]
    logits = torch.full((*masked.inputs.shape, objectives.VOCAB_SIZE), -1e9)
    logits.scatter_(-1, masked.targets[..., None], 0.0)          # the generator is certain of the original...
    rows, columns = masked.loss_mask.nonzero(as_tuple=True)
    logits[rows[::2], columns[::2]] = -1e9                          # ...except at every other selected position
    logits[rows[::2], columns[::2], other] = 0.0
    batch = electra_batch(masked, logits, torch.Generator().manual_seed(0))
    expected = torch.zeros_like(batch.replaced)
    expected[rows[::2], columns[::2]] = masked.targets[rows[::2], columns[::2]] != other
    assert expected.any() and torch.equal(batch.replaced, expected)
    assert torch.equal(batch.inputs[~masked.loss_mask], masked.targets[~masked.loss_mask])


def test_the_discriminator_loss_never_reaches_the_generator():
    # The generator's samples are integer ids, so no gradient can pass them; this guards against a
    # change that would feed the discriminator something soft (Gumbel samples, logits) or share weights silently.
    torch.manual_seed(0)
    model = Electra(CONFIG)
    generator_loss, discriminator_loss, _ = electra_losses(model, masked_batch(), torch.Generator().manual_seed(0))
    discriminator_loss.backward()
    assert all(p.grad is None for p in model.generator.parameters())
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.head.parameters())
    generator_loss.backward()
    assert all(p.grad is not None for p in model.generator.parameters())


def test_with_shared_embeddings_only_the_tables_get_both_losses():
    torch.manual_seed(0)
    model = Electra(ElectraConfig(objectives.VOCAB_SIZE, comparison.POSITIONS, shared_embeddings=True))
    generator_loss, discriminator_loss, _ = electra_losses(model, masked_batch(), torch.Generator().manual_seed(0))
    discriminator_loss.backward()
    assert all(p.grad is None for p in model.generator.parameters())
    from_discriminator = model.discriminator.wte.weight.grad.clone()
    generator_loss.backward()
    assert all(p.grad is not None for p in model.generator.parameters())
    assert not torch.equal(model.discriminator.wte.weight.grad, from_discriminator)   # the MLM shapes the table too


def test_a_frozen_generator_gets_no_gradient():
    torch.manual_seed(0)
    model = Electra(CONFIG)
    generator_loss, discriminator_loss, _ = electra_losses(model, masked_batch(), torch.Generator().manual_seed(0),
                                                           train_generator=False)
    (generator_loss + 50 * discriminator_loss).backward()
    assert all(p.grad is None for p in model.generator.parameters())


def test_electra_15_puts_the_discriminator_loss_on_the_selected_positions_only():
    torch.manual_seed(0)
    model, captured = Electra(CONFIG), []
    original = model.replaced_logits

    def keep(*args):
        logits = original(*args)
        logits.retain_grad()
        captured.append(logits)
        return logits

    model.replaced_logits = keep
    masked = masked_batch()
    _, loss, batch = electra_losses(model, masked, torch.Generator().manual_seed(0), selected_only=True)
    loss.backward()
    gradient = captured[0].grad
    assert (gradient[~batch.selected] == 0).all() and (gradient[batch.selected] != 0).all()
    expected = torch.nn.functional.binary_cross_entropy_with_logits(captured[0][batch.selected],
                                                                    batch.replaced[batch.selected].float())
    assert torch.equal(loss, expected)
    _, everywhere, _ = electra_losses(model, masked, torch.Generator().manual_seed(0))
    everywhere.backward()
    assert (captured[1].grad[~batch.selected] != 0).all()


def test_parameter_counts_by_formula_equal_pytorch():
    for config in (CONFIG, ElectraConfig(objectives.VOCAB_SIZE, comparison.POSITIONS, shared_embeddings=True)):
        model = Electra(config)
        counts = electra_parameter_counts(config)
        assert counts["generator"] == sum(p.numel() for p in model.generator.parameters())
        assert counts["discriminator"] == sum(p.numel() for p in model.parameters()) - counts["generator"]
    bert = comparison_trainer.build_model(comparison.run_config("bert"))
    assert counts["discriminator"] == sum(p.numel() for p in bert.parameters()) + CONFIG.d_model + 1


def test_hard_negatives_turn_every_selected_food_adjective_to_the_other_polarity():
    masked = mlm_batch(reviews(64), torch.Generator().manual_seed(1), 0.5, mask_share=1.0, random_share=0.0)
    logits = torch.zeros(*masked.inputs.shape, objectives.VOCAB_SIZE)
    batch = hard_negatives(electra_batch(masked, logits, torch.Generator().manual_seed(0)),
                           torch.Generator().manual_seed(0))
    polarity = {TOKENIZER[a]: p for a, p in world.FOOD_ADJECTIVES.items()}
    where = batch.selected & (batch.originals[..., None] == FOOD_ADJECTIVE_IDS).any(-1)
    assert where.sum() >= 10
    for r, c in where.nonzero().tolist():
        new, old = int(batch.inputs[r, c]), int(batch.originals[r, c])
        assert batch.replaced[r, c] and polarity[new] != polarity[old]
        assert replacement_class(tuple(batch.originals[r].tolist()), c, new) == "changing"


def test_hard_negatives_at_a_rate_reach_unselected_adjectives_too():
    masked = mlm_batch(reviews(64), torch.Generator().manual_seed(1), 0.15, mask_share=1.0, random_share=0.0)
    batch = electra_batch(masked, torch.zeros(*masked.inputs.shape, objectives.VOCAB_SIZE), torch.Generator().manual_seed(0))
    is_adjective = (batch.originals[..., None] == FOOD_ADJECTIVE_IDS).any(-1)
    every = hard_negatives(batch, torch.Generator().manual_seed(0), rate=1.0)
    assert every.replaced[is_adjective].all() and (~batch.selected & is_adjective).any()
    half = hard_negatives(batch, torch.Generator().manual_seed(0), rate=0.5)
    swapped = (half.inputs != batch.inputs)[is_adjective & ~batch.selected].float().mean()
    assert 0.3 < swapped < 0.7


def test_every_variant_reads_the_batches_of_bert_and_the_bert_variant_is_section_04s_bert():
    batches, bert_init = {}, comparison_trainer.build_model(comparison.run_config("bert")).state_dict()  # seeded below
    for variant in VARIANTS:
        model, get_batch, _ = training_parts(run_config(variant))
        batches[variant] = [get_batch()[1] for _ in range(3)]
        discriminator = model if variant == "bert" else model.discriminator
        if variant == "bert":
            bert_init = {k: v.clone() for k, v in discriminator.state_dict().items()}
        assert all(torch.equal(bert_init[k], v) for k, v in discriminator.state_dict().items())  # BERT's first weights
    for variant in VARIANTS:
        for a, b in zip(batches["bert"], batches[variant]):
            assert torch.equal(a.targets, b.targets) and torch.equal(a.loss_mask, b.loss_mask)
            if variant != "bert":
                assert (b.inputs[b.loss_mask] == objectives.MASK).all()   # ELECTRA's generator: every one <mask>
    config = run_config("bert") | {"steps": 20}
    ours, _ = train_variant(config)
    theirs, _ = comparison_trainer.train_comparison(comparison.run_config("bert", steps=20))
    assert all(torch.equal(ours.state_dict()[k], v) for k, v in theirs.state_dict().items())


def test_training_is_deterministic():
    states = []
    for _ in range(2):
        config = run_config("electra") | {"steps": 5}
        model, get_batch, loss_fn = training_parts(config)
        log = fit(model, get_batch, loss_fn, config)
        states.append(model.state_dict())
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])
    assert math.isfinite(log[-1]["train_loss"])


class Oracle(torch.nn.Module):
    """A stand-in ELECTRA: its generator always writes `word`; its discriminator knows exactly what changed."""

    def __init__(self, ids, word):
        super().__init__()
        self.ids, self.word = ids, word

    def generator_logits(self, inputs, mask):
        logits = torch.zeros(*inputs.shape, objectives.VOCAB_SIZE)
        logits[..., self.word] = 100.0
        return logits

    def replaced_logits(self, inputs, mask):
        return torch.where(inputs == self.ids, -10.0, 10.0)


def test_the_diagnosis_counts_what_it_is_shown():
    ids = reviews(100)
    host = TOKENIZER["host"]
    result = replacement_diagnosis(Oracle(ids, host), ids, run_config("electra"))
    selected = mlm_batch(ids, torch.Generator().manual_seed(protocols.EVAL_SEED), 0.15, 1.0, 0.0).loss_mask
    originals = ids[selected]
    assert result["generator_accuracy"] == pytest.approx((originals == host).sum().item() / len(originals))
    assert result["replaced_share"] == (originals != host).sum().item() / len(originals)
    assert result["false_alarm"] == 0.0 and result["recall_obvious"] == 1.0 and result["recall_preserving"] == 1.0
    # "host" in a service noun's slot keeps the meaning; anywhere else it is the wrong kind of word
    nouns = torch.isin(originals, torch.tensor([TOKENIZER[w] for w in world.SERVICE_NOUNS if w != "host"]))
    assert result["count_preserving"] == int(nouns.sum()) > 0
    assert result["count_obvious"] == int((originals != host).sum() - nouns.sum())


def test_the_scorer_picks_the_rating_its_discriminator_finds_untouched():
    lines = protocols.new_reviews(30)
    truth = torch.tensor([protocols.line_ids(r) for r in lines])

    class Scorer(torch.nn.Module):
        def replaced_logits(self, inputs, mask):
            return torch.where(inputs == truth.repeat_interleave(3, dim=0), -5.0, 5.0)

    assert scorer_predictions(Scorer(), lines) == [protocols.true_rating(r) for r in lines]


def test_the_frozen_generator_stops_learning_exactly_at_generator_steps():
    """What the fingerprint's 50 steps cannot see: electra_frozen's switch at step 600, here at step 2."""
    config = dict(run_config("electra_frozen"), generator_steps=2, batch_size=4)
    model, get_batch, loss_fn = training_parts(config)
    learns = []
    for _ in range(4):
        model.zero_grad(set_to_none=True)
        loss_fn(model, get_batch()).backward()
        learns.append(any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in model.generator.parameters()))
    assert learns == [True, True, False, False]
    assert run_config("electra_frozen")["generator_steps"] < run_config("electra_frozen")["steps"]
