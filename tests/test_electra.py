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
from lib.objectives.electra import electra_losses, unigram_log_probs
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
    model = Electra(CONFIG)
    generator_loss, discriminator_loss, _ = electra_losses(model, masked_batch(), torch.Generator().manual_seed(0))
    discriminator_loss.backward()
    assert all(p.grad is None for p in model.generator.parameters())
    from_discriminator = model.discriminator.wte.weight.grad.clone()
    generator_loss.backward()
    assert all(p.grad is not None for p in model.generator.parameters())
    assert not torch.equal(model.discriminator.wte.weight.grad, from_discriminator)   # the MLM shapes the table too


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
    for g in (0, 16, 32, 64):
        config = ElectraConfig(objectives.VOCAB_SIZE, comparison.POSITIONS, generator_d_model=g)
        model = Electra(config)
        counts = electra_parameter_counts(config)
        assert counts["generator"] == sum(p.numel() for p in model.generator.parameters())
        assert counts["discriminator"] == sum(p.numel() for p in model.parameters()) - counts["generator"]
    bert = comparison_trainer.build_model(comparison.run_config("bert"))
    assert counts["discriminator"] == sum(p.numel() for p in bert.parameters()) + CONFIG.d_model + 1


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
        config = run_config("electra_g16") | {"steps": 5}
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

    def generator_logits(self, inputs, mask, where):
        logits = torch.zeros(int(where.sum()), objectives.VOCAB_SIZE)
        logits[:, self.word] = 100.0
        return logits

    def replaced_logits(self, inputs, mask):
        return torch.where(inputs == self.ids, -10.0, 10.0)


def test_the_diagnosis_counts_what_it_is_shown():
    ids = reviews(100)
    host = TOKENIZER["host"]
    result = replacement_diagnosis(Oracle(ids, host), ids, run_config("electra_g16"))
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


def test_the_generator_scores_the_vocabulary_only_where_asked_and_as_it_would_everywhere():
    torch.manual_seed(0)
    model, masked = Electra(CONFIG), masked_batch()
    everywhere = torch.ones_like(masked.loss_mask)
    full = model.generator_logits(masked.inputs, masked.attention_mask, everywhere).view(*masked.inputs.shape, -1)
    scored = model.generator_logits(masked.inputs, masked.attention_mask, masked.loss_mask)
    assert scored.shape == (int(masked.loss_mask.sum()), objectives.VOCAB_SIZE)
    assert torch.allclose(scored, full[masked.loss_mask], atol=1e-5)


def test_the_unigram_generator_samples_word_frequencies_and_learns_nothing():
    config = run_config("electra_g0")
    model, get_batch, loss_fn = training_parts(config)
    assert not list(model.generator.parameters())
    assert torch.equal(model.generator.log_probs, unigram_log_probs())          # filled by the trainer, saved
    assert "generator.log_probs" in model.state_dict()
    masked = mlm_batch(reviews(400), torch.Generator().manual_seed(0), 0.5, mask_share=1.0, random_share=0.0)
    generator_loss, _, batch = electra_losses(model, masked, torch.Generator().manual_seed(0))
    assert generator_loss.item() == 0.0
    sampled = batch.inputs[batch.selected]
    stream = objectives.review_stream("train")
    for word in ("the", "was", "soup"):       # frequent, frequent, rarer: within 4 standard errors of the stream's share
        share, expected = (sampled == TOKENIZER[word]).float().mean().item(), (stream == TOKENIZER[word]).float().mean().item()
        assert abs(share - expected) < 4 * math.sqrt(expected * (1 - expected) / len(sampled)), word


def test_every_electra_trains_within_the_flops_of_berts_2500_steps():
    from lib.recipes.electra import GENERATORS, STEPS
    from lib.trainers.electra import step_flops_of
    budget = STEPS["bert"] * step_flops_of(run_config("bert"))
    for g in GENERATORS:
        per_step = step_flops_of(run_config(f"electra_g{g}"))
        assert run_config(f"electra_g{g}")["steps"] == STEPS[g] and abs(STEPS[g] * per_step - budget) <= 25 * per_step, g
    assert step_flops_of(run_config("electra_g64")) > 1.8 * step_flops_of(run_config("bert"))   # a full-size generator


def test_the_generators_projections_keep_a_vectors_length_at_initialisation():
    """d -> d_g and d_g -> d start as near-isometries: the N(0, 0.02) of the blocks would shrink a vector 6 to
    12 times on each side, and the generator would start far below a BERT's logits (its unigram stall)."""
    torch.manual_seed(0)
    for width in (16, 64):
        generator = Electra(ElectraConfig(vocab_size=354, context=32, generator_d_model=width)).generator
        x = torch.randn(4096, 64) * 0.02                       # embeddings' scale
        u = torch.randn(4096, width)                           # a LayerNorm's output
        assert 0.8 < float(generator.down(x).std() / x.std()) < 1.2
        assert 0.8 < float(generator.up(u).std() / u.std()) < 1.2


def test_the_initialisation_control_differs_from_its_twin_only_in_the_projections():
    """§05's control (CONTROLS) is electra_g16_alone with the projections at the blocks' N(0, 0.02²): the same
    other weights and batches, the projections its twin's draws rescaled."""
    (twin, twin_batch, _), (control, control_batch, _) = (
        training_parts(run_config(v)) for v in ("electra_g16_alone", "electra_g16_alone_std002"))
    a, b = twin.state_dict(), control.state_dict()
    differ = {name for name in a if not torch.equal(a[name], b[name])}
    assert differ == {"generator.down.weight", "generator.up.weight"}
    std = run_config("electra_g16_alone_std002")["projection_std"]
    for name in differ:
        fan_in = a[name].shape[1]
        assert torch.allclose(b[name], a[name] * std * fan_in ** 0.5)
        assert 0.9 * std < float(b[name].std()) < 1.1 * std
    (_, first), (_, again) = twin_batch(), control_batch()
    assert torch.equal(first.inputs, again.inputs) and torch.equal(first.loss_mask, again.loss_mask)
