"""Section 08: FIM's rearrangement, multi-token targets and heads, the diffusion sampler, the adapted start."""

import pytest
import torch

from lib.data import world
from lib.data.tokenizers import MASK, NEWLINE_WORD, TOKENIZER
from lib.nn.diffusion import diffusion_generate
from lib.nn.masks import causal_mask
from lib.nn.models import MaskedTransformer, ModelConfig
from lib.nn.multi_token import MultiTokenConfig, MultiTokenTransformer
from lib.objectives import batches, patches
from lib.recipes import comparison
from lib.recipes import patches as patch_runs

REVIEW = TOKENIZER.encode("review: the soup was tasty and the host was kind. rating: good.\n")
SMALL = dict(vocab_size=batches.VOCAB_SIZE, context=16, d_model=16, n_layers=2, n_heads=2)


@pytest.mark.parametrize("mode", patches.FIM_MODES)
def test_fim_round_trips_at_every_pair_of_cuts_and_keeps_each_sentinel_one_token(mode):
    n = len(REVIEW)
    for i in range(n + 1):                     # every cut, empty prefix, middle and suffix included
        for j in range(i, n + 1):
            arranged = patches.fim_arrange(REVIEW, i, j, mode)
            assert patches.fim_restore(arranged) == REVIEW and len(arranged) == n + 3
            assert [t for t in arranged if t in patches.FIM_TOKENS] == list(patches.FIM_TOKENS)
            assert [t for t in arranged if t not in patches.FIM_TOKENS] == (   # the text between sentinels is whole
                REVIEW[:i] + REVIEW[j:] + REVIEW[i:j] if mode == "psm" else REVIEW[j:] + REVIEW[:j])
    g = torch.Generator().manual_seed(0)      # the random cuts are among them
    assert all(patches.fim_restore(patches.fim_transform(REVIEW, g, mode)) == REVIEW for _ in range(50))


def test_fim_layouts_and_refusals():
    pre, suf, mid = patches.FIM_TOKENS
    assert patches.fim_arrange([1, 2, 3, 4], 1, 3, "psm") == [pre, 1, suf, 4, mid, 2, 3]
    assert patches.fim_arrange([1, 2, 3, 4], 1, 3, "spm") == [pre, suf, 4, mid, 1, 2, 3]
    with pytest.raises(ValueError, match="already holds"):
        patches.fim_arrange([1, pre, 3], 0, 1, "psm")
    with pytest.raises(ValueError, match="mode"):
        patches.fim_arrange([1, 2], 0, 1, "pms")


def test_fim_batch_rearranges_a_share_and_keeps_the_width():
    windows = batches.random_windows(batches.review_stream("val"), 33, 64, torch.Generator().manual_seed(1))
    b = patches.fim_batch(windows, torch.Generator().manual_seed(2))
    rows = torch.cat([b.inputs, b.targets[:, -1:]], 1)
    changed = [i for i, row in enumerate(rows) if patches.FIM_PRE in row.tolist()]
    assert 16 < len(changed) < 48 and rows.shape == windows.shape and b.loss_mask.all()
    for i in changed:
        assert patches.fim_restore(rows[i].tolist()) == windows[i, :-3].tolist()


def test_multi_token_targets_are_shifted_by_one_to_n():
    ids = torch.arange(40).view(2, 20) + batches.FIRST_ORDINARY
    inputs, targets = patches.multi_token_targets(ids, 4)
    assert inputs.shape == (2, 16) and targets.shape == (2, 4, 16)
    for k in range(1, 5):
        assert torch.equal(targets[:, k - 1], ids[:, k: k + 16])


def test_multi_token_next_token_path_is_a_gpt_of_the_same_seed():
    torch.manual_seed(0)
    gpt = MaskedTransformer(ModelConfig(**SMALL))
    torch.manual_seed(0)
    mtp = MultiTokenTransformer(MultiTokenConfig(**SMALL, heads=3))
    ids = torch.randint(batches.FIRST_ORDINARY, batches.VOCAB_SIZE, (2, 10))
    heads = mtp.head_logits(ids, causal_mask(10))
    assert len(heads) == 3 and torch.equal(heads[0], mtp(ids, causal_mask(10)))
    assert torch.equal(mtp(ids, causal_mask(10)), gpt(ids, causal_mask(10)))
    assert not torch.allclose(heads[1], heads[0])


def test_diffusion_batch_masks_only_what_it_scores():
    windows = batches.random_windows(batches.review_stream("val"), 32, 16, torch.Generator().manual_seed(0))
    d = patches.diffusion_batch(windows, torch.Generator().manual_seed(0))
    assert torch.equal(d.batch.loss_mask, d.batch.inputs == MASK)
    assert torch.equal(d.batch.inputs[~d.batch.loss_mask], windows[~d.batch.loss_mask])
    assert ((d.rates > 0) & (d.rates <= 1)).all()


class Confident(torch.nn.Module):
    """A stub whose every position all but surely draws one token (P = 1 - 353 e^-(30 + t)), surer the further right it
    is: a known confidence, and no other draw in practice."""
    def __init__(self, context=12):
        super().__init__()
        self.config = ModelConfig(**{**SMALL, "context": context})

    def forward(self, ids, mask):
        logits = torch.zeros(*ids.shape, batches.VOCAB_SIZE, dtype=torch.float64)
        logits[..., batches.FIRST_ORDINARY + 5] = 30 + torch.arange(ids.shape[1], dtype=torch.float64)
        return logits


def test_diffusion_sampler_keeps_the_most_confident_or_random_positions():
    trace = []
    diffusion_generate(Confident(), 12, 3, torch.Generator().manual_seed(0), n=2, prefix=[NEWLINE_WORD], trace=trace)
    # confidence rises to the right: the 11 masks go 4, 4, 3, rightmost first
    assert [sorted((state[0] != MASK).nonzero()[:, 0].tolist()) for state in trace] == [
        [0, 8, 9, 10, 11], [0, 4, 5, 6, 7, 8, 9, 10, 11], list(range(12))]
    trace = []
    diffusion_generate(Confident(), 12, 3, torch.Generator().manual_seed(0), n=2, prefix=[NEWLINE_WORD], trace=trace,
                       order="random")
    first = sorted((trace[0][0] != MASK).nonzero()[:, 0].tolist())
    assert len(first) == 5 and first != [0, 8, 9, 10, 11]       # four positions, not the four most confident
    with pytest.raises(ValueError, match="prefix holds"):
        diffusion_generate(Confident(), 12, 3, torch.Generator().manual_seed(0), prefix=[NEWLINE_WORD, MASK])


def test_diffusion_loss_by_hand():
    torch.manual_seed(0)
    model = MaskedTransformer(ModelConfig(**SMALL)).eval()
    windows = batches.random_windows(batches.review_stream("val"), 8, 3, torch.Generator().manual_seed(0))
    d = patches.diffusion_batch(windows, torch.Generator().manual_seed(1))
    logp = model(d.batch.inputs, d.batch.attention_mask).log_softmax(-1)
    by_hand = sum(-logp[b, t, windows[b, t]] / d.rates[b] for b in range(3) for t in range(8) if d.batch.loss_mask[b, t]) / 24
    assert torch.allclose(patches.diffusion_loss(model, d), by_hand)


def test_multi_token_loss_is_the_sum_of_the_heads_losses():
    from lib.measure import patch_evals
    torch.manual_seed(0)
    model = MultiTokenTransformer(MultiTokenConfig(**SMALL, heads=3)).eval()
    windows = batches.random_windows(batches.review_stream("val"), 15, 4, torch.Generator().manual_seed(0))
    assert abs(patches.multi_token_loss(model, windows).item() - sum(patch_evals.head_nats(model, windows))) < 1e-5


@pytest.mark.parametrize("context", ["full", "rating"])
def test_fim_questions_are_the_start_of_a_training_layout_and_slots_align(context):
    from lib.measure import patch_evals, protocols
    ids = protocols.line_ids("review: the soup was tasty and the host was kind. rating: good.")
    slot, resume = patch_evals.hidden_span(ids, context)
    assert ids[slot] == TOKENIZER["tasty"] and ids[resume] == (TOKENIZER["and"] if context == "full" else TOKENIZER["rating"])
    for mode in patches.FIM_MODES:
        layout = patches.fim_arrange(ids, slot, resume, mode)
        question = patch_evals.fim_question(ids, slot, resume, mode)
        assert layout[:len(question)] == question and layout[len(question)] == ids[slot]   # the answer comes next
    # nats_by_slot reads each slot's loss where the slot protocol asks it
    torch.manual_seed(0)
    model = MaskedTransformer(ModelConfig(**{**SMALL, "context": 32})).eval().double()
    review = "review: the soup was tasty and the host was kind. rating: good."
    by_slot = patch_evals.nats_by_slot(model, [review])
    for name, position in protocols.review_slots(ids).items():
        logp = protocols.slot_logits(model, "causal", [ids], [position]).log_softmax(-1)[0, ids[position]]
        assert abs(by_slot[name] + logp.item()) < 1e-9


def test_diffusion_sampler_fills_only_masks_and_stops():
    torch.manual_seed(0)
    model = MaskedTransformer(ModelConfig(**SMALL)).eval()
    trace = []
    out = diffusion_generate(model, 12, 4, torch.Generator().manual_seed(0), n=3, prefix=[NEWLINE_WORD, 30],
                             trace=trace)
    assert out.shape == (3, 12) and (out[:, :2] == torch.tensor([NEWLINE_WORD, 30])).all()
    assert not (out == MASK).any() and (out[:, 2:] >= batches.FIRST_ORDINARY).all()
    # exactly `steps` passes, each filling ceil(left / passes left) of the masks and changing nothing else
    assert [int((state[0] == MASK).sum()) for state in trace] == [7, 4, 2, 0] and torch.equal(trace[-1], out)
    for before, after in zip([torch.tensor([[NEWLINE_WORD, 30] + [MASK] * 10] * 3)] + trace, trace):
        assert torch.equal(after[before != MASK], before[before != MASK])
    with pytest.raises(ValueError, match="steps"):
        diffusion_generate(model, 12, 11, torch.Generator().manual_seed(0), prefix=[NEWLINE_WORD, 30])


def test_adapted_model_starts_from_the_base_bit_for_bit():
    torch.manual_seed(0)
    base = MaskedTransformer(ModelConfig(**comparison.MODEL.to_dict()))
    before = {k: v.clone() for k, v in base.state_dict().items()}
    config = {**patch_runs.run_config("adapt_bidirectional"), "eval_reviews": 4}
    start, log = patch_runs.train_patch({**config, "stop_after": 0}, parents=(base,))
    assert all(torch.equal(v, before[k]) for k, v in start.state_dict().items()) and log[0]["step"] == 0
    trained, _ = patch_runs.train_patch({**config, "stop_after": 2}, parents=(base,))
    assert all(torch.equal(v, before[k]) for k, v in base.state_dict().items())      # the parent untouched
    assert not torch.equal(trained.wte.weight, before["wte.weight"])


def test_adaptation_reads_the_same_batches_as_bert_from_scratch():
    from lib.data.seeding import seed_everything
    from lib.trainers import comparison as comparison_trainer
    from lib.trainers import patches as patch_trainer
    _, bert_batch, _ = comparison_trainer.training_parts(comparison.run_config("bert", seed=1))
    config = patch_runs.run_config("adapt_bidirectional", seed=1)
    generator = seed_everything(1)
    make, _ = patch_trainer.batch_parts(config, generator)
    stream = batches.review_stream("train")
    for _ in range(3):
        ours, theirs = make(batches.random_windows(stream, config["window"], config["batch_size"], generator)), bert_batch()
        assert torch.equal(ours.inputs, theirs.inputs) and torch.equal(ours.loss_mask, theirs.loss_mask)


def test_a_snapshot_of_an_adaptation_starts_from_its_parent():
    from lib import recipes
    from lib.recipes import yardstick
    from lib.train import processes
    backbone, _ = yardstick.backbone_model(yardstick.entry("adapt_prefix", step=0))
    parent = processes.get_or_train(recipes.run("compare_gpt"))[0]
    assert all(torch.equal(v, parent.state_dict()[k]) for k, v in backbone.state_dict().items())
    with pytest.raises(ValueError, match="pass its parent"):
        patch_runs.train_patch({**patch_runs.run_config("adapt_prefix"), "stop_after": 0})


def test_fill_scores_shift_reads_the_rest_and_distinct_questions_change_nothing():
    from lib.measure import patch_evals, protocols
    reviews = protocols.new_reviews(40)
    decided = [r for r in reviews if protocols.true_rating(r) != "ok"]
    torch.manual_seed(0)
    model = MaskedTransformer(ModelConfig(**{**SMALL, "context": 32})).eval().double()
    # a causal model asked from the left never sees the rest: rewriting it moves nothing, to the last bit
    assert patch_evals.fill_scores(model, "left", reviews)["shift"] == 0.0
    # the flipped rest is a true review that demands the other polarity (the rating flips for context "rating")
    for context, chosen in (("full", reviews), ("rating", decided)):
        for before, after in zip(chosen, patch_evals._flipped(chosen, context)):
            _, adjective, connective, _, _, rating = world.classify(before)[1].groups()
            _, other, connective2, _, _, rating2 = world.classify(after)[1].groups()
            assert world.FOOD_ADJECTIVES[adjective] != world.FOOD_ADJECTIVES[other] and (connective != connective2 if context == "full" else
                                                      {rating, rating2} == {"good", "bad"})
    # asking each distinct question once gives the rows that asking every review gives (to float64's last bits:
    # a batch of another size may round differently)
    queries = [protocols.line_ids(r) for r in decided]
    slots = [protocols.review_slots(q)["food_adjective"] for q in queries]
    hidden = [q[:s] + [MASK] * 4 + q[s + 4:] for q, s in zip(queries, slots)]
    distinct = patch_evals._distinct_slot_logits(model, "bidirectional", hidden, slots)
    assert len({tuple(h) for h in hidden}) < len(hidden)          # the case it exists for: repeated questions
    assert torch.allclose(distinct, protocols.slot_logits(model, "bidirectional", hidden, slots), rtol=0, atol=1e-12)


def test_fill_order_reads_the_pass_that_fixed_each_slot():
    from lib.measure import patch_evals, protocols
    line = "review: the soup was tasty and the host was kind. rating: good."
    ids = protocols.line_ids(line)
    slots = protocols.review_slots(ids)
    order = {slots["rating"]: 1, slots["connective"]: 2, slots["service_adjective"]: 3, slots["food_adjective"]: 4}
    passes = [1 if i == 0 else order.get(i, 1) for i in range(len(ids))]        # every other word in pass 1
    trace = [torch.tensor([[t if passes[i] <= k else MASK for i, t in enumerate(ids)]]) for k in range(1, 5)]
    got = patch_evals.fill_order([line], trace)
    assert got == {"reviews": 1, "food_adjective": 4.0, "connective": 2.0, "service_adjective": 3.0, "rating": 1.0,
                   "other words": 1.0, "rating first": 1.0}
    assert patch_evals.fill_order(["not a review"], trace[:1]) == {"reviews": 0}
