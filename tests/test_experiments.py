"""Section 04: every recipe trains, the evaluation protocols score stand-ins with a known answer exactly (an
oracle 1.0, "ok" every time the share of ok reviews) and never show the answer, the generator returns whole true
lines from a stand-in that writes only those, probes transfer only what the features hold."""

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn

from lib.measure import capabilities, evals, probes, protocols
from lib.data import world
from lib.nn.masks import MODEL_KINDS
from lib.recipes import __main__ as recipes_cli
from lib.recipes import comparison as ex
from lib.trainers import comparison as trainer
from lib.nn.masks import causal_mask
from lib.objectives.batches import SENTINELS, TOKENIZER, review_stream
from lib.data.tokenizers import MASK, NEWLINE_WORD

REVIEWS = protocols.new_reviews(40)
SMALL = dict(vocab_size=len(TOKENIZER), context=32, d_model=32, n_layers=1, n_heads=2)


def tiny_config(recipe, steps=30):
    return dict(ex.run_config(recipe, steps=steps), model=SMALL, warmup=5, eval_every=10, eval_reviews=20)


@pytest.mark.parametrize("recipe", list(ex.RECIPES))
def test_each_objective_lowers_its_loss_in_a_few_steps(recipe):
    model, log = trainer.train_comparison(tiny_config(recipe))
    assert [row["step"] for row in log] == [10, 20, 30]
    assert log[-1]["train_loss"] < 0.8 * log[0]["train_loss"]
    config, reviews = tiny_config(recipe), protocols.new_reviews(tiny_config(recipe)["eval_reviews"])
    assert log[-1]["rating_accuracy"] == protocols.rating_accuracy(model, config["kind"], reviews)   # the final model
    assert log[-1]["training_format_accuracy"] == protocols.training_format_accuracy(model, config, reviews)
    assert ("free_generation_accuracy" in log[-1]) == (ex.RECIPES[recipe].kind == "encoder-decoder")
    # What the trainer logs, on a stand-in whose answer is known: "ok" every time scores the share of ok
    # reviews (0.45 of REVIEWS) by every protocol, free generation included.
    logged = {name: protocols.always_ok_accuracy(REVIEWS) for name in log[-1] if name.endswith("_accuracy")}
    assert trainer.evaluate(AlwaysOk(), config, REVIEWS) == logged


class AlwaysOk(torch.nn.Module):
    """Says "ok" at every position; in a decoder, after "ok" it closes the span with <1> (so T5's free
    generation writes exactly "ok").  Called like a MaskedTransformer or an EncoderDecoder."""

    config = ex.MODEL

    def forward(self, idx, target_or_mask, *masks):
        ids = target_or_mask if masks else idx  # the decoder's input, or the stack's input
        logits = torch.zeros(*ids.shape, len(TOKENIZER))
        logits[..., TOKENIZER["ok"]] = 10.0
        if masks:
            said_ok = ids == TOKENIZER["ok"]
            logits[said_ok] = 0.0
            logits[..., SENTINELS[1]] += 20.0 * said_ok
        return logits


class Oracle(torch.nn.Module):
    """Knows the world's rule and applies it to whatever it can see: with both adjectives visible it
    predicts the rating everywhere; with the food adjective hidden it reads its polarity from the
    connective and the service adjective and predicts every adjective of that polarity; in a decoder,
    after a rating it closes the span with <1>.  Called like a MaskedTransformer or an EncoderDecoder."""

    config = ex.MODEL

    def __init__(self, kind):
        super().__init__()
        self.kind = kind

    @staticmethod
    def guess(visible):
        logits = torch.zeros(len(TOKENIZER))
        words = [TOKENIZER.vocab[i] for i in visible]
        food = [w for w in words if w in world.FOOD_ADJECTIVES]
        service = [w for w in words if w in world.SERVICE_ADJECTIVES]
        if food and service:
            rating = world.review_rating(world.FOOD_ADJECTIVES[food[0]], world.SERVICE_ADJECTIVES[service[0]])
            logits[TOKENIZER[rating]] = 10.0
        elif service and ("and" in words or "but" in words):
            positive = world.SERVICE_ADJECTIVES[service[0]] == ("and" in words)
            for adjective, polarity in world.FOOD_ADJECTIVES.items():
                logits[TOKENIZER[adjective]] = 9.0 * (polarity == positive)
        return logits

    def forward(self, idx, target_or_mask, source_mask=None, target_mask=None, cross_mask=None):
        if self.kind == "encoder-decoder":
            source, target = idx, target_or_mask
            out = torch.stack([self.guess(row) for row in source.tolist()])[:, None].repeat(1, target.shape[1], 1)
            after_rating = torch.isin(target, torch.tensor(protocols.RATING_IDS))
            out[after_rating] = 0.0
            out[..., SENTINELS[1]] += 20.0 * after_rating
            return out
        mask = target_or_mask.expand(idx.shape[0], idx.shape[1], idx.shape[1])
        return torch.stack([torch.stack([self.guess([t for t, seen in zip(row, mask[b, i].tolist()) if seen])
                                         for i in range(len(row))]) for b, row in enumerate(idx.tolist())])


@pytest.mark.parametrize("kind", MODEL_KINDS)
def test_the_protocols_score_an_oracle_perfectly(kind):
    oracle = Oracle(kind)
    assert protocols.rating_accuracy(oracle, kind, REVIEWS) == 1.0
    assert capabilities.candidate_scoring(oracle, kind, REVIEWS[:10]) == 1.0
    fill = capabilities.adjective_fill(oracle, kind, REVIEWS)
    # Only a model that reads the right context can know the food's polarity: causal kinds never see it.
    expected = 0.0 if kind in ("causal", "prefix") else 1.0
    assert fill["right_polarity"] == fill["food_adjective"] == expected
    if kind == "encoder-decoder":
        assert protocols.free_spans(oracle, REVIEWS[:3]) == [protocols.true_rating(r) for r in REVIEWS[:3]]
        assert protocols.free_generation_accuracy(oracle, REVIEWS) == 1.0


class Copycat(torch.nn.Module):
    """Predicts, at every position, the token it reads there: scores 1.0 only if the answer is shown."""

    config = ex.MODEL

    def forward(self, idx, target_or_mask, *masks):
        ids = target_or_mask if masks else idx  # the decoder's input, or the stack's input
        return torch.nn.functional.one_hot(ids, len(TOKENIZER)).float() * 10.0


@pytest.mark.parametrize("kind", MODEL_KINDS)
def test_the_slot_protocol_never_shows_the_answer(kind):
    ids = [protocols.line_ids(r) for r in REVIEWS]
    slots = [protocols.review_slots(s)["rating"] for s in ids]
    predicted = protocols.slot_logits(Copycat(), kind, ids, slots).argmax(-1)
    assert not any(p == s[i] for p, s, i in zip(predicted.tolist(), ids, slots))


@pytest.mark.parametrize("recipe", list(ex.RECIPES))
def test_the_training_format_protocol_hides_the_slot_and_nothing_else_at_zero_noise(recipe):
    config, kind = ex.run_config(recipe), ex.RECIPES[recipe].kind
    ids = [protocols.line_ids(r) for r in REVIEWS]
    rating = [protocols.review_slots(s)["rating"] for s in ids]
    predicted = protocols.training_format_logits(Copycat(), config, ids, rating).argmax(-1)
    assert not any(p == s[i] for p, s, i in zip(predicted.tolist(), ids, rating))  # the answer is never shown
    # With (almost) no noise besides the slot, an oracle that sees the context answers everything.
    quiet = dict(config, mlm_rate=1e-9, noise_density=1e-9, mean_span=1.0)
    scores = capabilities.training_format(Oracle(kind), quiet, REVIEWS)
    adjective_seen = 0.0 if kind in ("causal", "prefix") else 1.0
    assert scores == {"rating": 1.0, "fill: food adjective": adjective_seen, "fill: right polarity": adjective_seen}


def test_training_format_draws_follow_the_training_odds_given_the_hidden_slot():
    ids, g = protocols.line_ids(REVIEWS[0]), torch.Generator().manual_seed(0)
    slot = protocols.review_slots(ids)["rating"]
    span = ex.run_config("t5_span")
    sources = [protocols.training_format_example(ids, slot, span, g)[0] for _ in range(200)]
    assert all(TOKENIZER["good"] not in s and TOKENIZER["bad"] not in s and TOKENIZER["ok"] not in s for s in sources)
    iid = ex.run_config("t5_iid")
    hidden_elsewhere = [len(ids) - len(source) for source in
                        (protocols.training_format_example(ids, slot, iid, g)[0] for _ in range(400))]
    # The slot is noise, each other token with p = 0.15; a source loses (noise - spans) tokens, a span starting
    # at each noise token whose left neighbour is not noise.  400 draws: the mean's sd is about 0.04.
    p = [1.0 if i == slot else iid["noise_density"] for i in range(len(ids))]
    expected = sum(p) - sum(p[i] * (1 - (p[i - 1] if i else 0.0)) for i in range(len(ids)))   # 0.64
    assert sum(hidden_elsewhere) / 400 == pytest.approx(expected, abs=0.15)
    prefix = ex.run_config("prefix_lm")
    lengths = [protocols.training_format_example(ids, slot, prefix, g)[1] for _ in range(300)]
    assert min(lengths) == 1 and max(lengths) == slot


@pytest.mark.parametrize("recipe", list(ex.RECIPES))
def test_objective_accuracy_reports_shares(recipe):
    config = tiny_config(recipe)
    scores = capabilities.objective_accuracy(trainer.build_model(config), trainer.batch_function(config), config["window"],
                                             batches=2)
    encoder_decoder = ex.RECIPES[recipe].kind == "encoder-decoder"
    assert set(scores) == ({"accuracy", "sentinels", "content"} if encoder_decoder else {"accuracy"})

    class Always(torch.nn.Module):
        """A stand-in that predicts one token everywhere: its accuracy is that token's share of the targets."""
        def forward(self, *args, **kwargs):
            positions = args[1] if encoder_decoder else args[0]          # the decoder's input, or the stack's
            return torch.nn.functional.one_hot(torch.full(positions.shape, token), len(TOKENIZER)).float()

    from lib.measure.batch_stats import training_batches
    made = list(training_batches(trainer.batch_function(config), review_stream("val"), config["window"], 32, 2))
    targets = torch.cat([b.targets[b.loss_mask] for b in made])
    token = int(targets.mode().values)                                    # the commonest target: a share above 0
    always = capabilities.objective_accuracy(Always(), trainer.batch_function(config), config["window"], batches=2)
    assert always["accuracy"] == pytest.approx(float((targets == token).float().mean())) and always["accuracy"] > 0
    if encoder_decoder:                                  # the same share among sentinel targets and among the others
        sentinel = torch.cat([b.is_sentinel[b.loss_mask] for b in made])
        assert always["sentinels"] == pytest.approx(float((targets[sentinel] == token).float().mean()))
        assert always["content"] == pytest.approx(float((targets[~sentinel] == token).float().mean()))
        assert always["sentinels"] != always["content"]   # one of them is not 0: a swap of the two fails


def test_always_ok_and_new_reviews():
    reviews = protocols.new_reviews(200)
    assert reviews[:40] == REVIEWS and len(set(reviews)) == 200
    assert not set(reviews) & set(world.build_world().train)
    assert all(world.check_line(r) == (True, True) for r in reviews)
    assert protocols.always_ok_accuracy(reviews) == sum(r.endswith("ok.") for r in reviews) / 200


def test_line_likelihood_is_exact_for_causal_models():
    model = trainer.build_model(tiny_config("gpt"))
    seqs = [protocols.line_ids(r) for r in REVIEWS[:3]]
    exact = capabilities.line_log_likelihoods(model, "causal", seqs)
    for seq, value in zip(seqs, exact.tolist()):
        inputs, targets = torch.tensor([seq[:-1]]), torch.tensor(seq[1:])
        with torch.no_grad():
            logp = model(inputs, causal_mask(len(seq) - 1)).log_softmax(-1)[0]
        assert value == pytest.approx(float(logp[torch.arange(len(targets)), targets].sum()), abs=1e-4)


class Writer(torch.nn.Module):
    """Writes only lines of the world's training split (all five kinds), each line as likely as any other: at
    the position a generator reads, each token that continues one of those lines gets odds in proportion to the
    lines it continues, the closing newline once a line is whole (in a decoder, the sentinel <1> that closes
    the span), and no other token any.  So whatever the seed, a generator that samples, appends and decodes
    right returns whole lines of the split, every one well-formed and true.  Called like a MaskedTransformer
    or an EncoderDecoder."""

    config = ex.MODEL
    LINES = frozenset(world.build_world().train)

    def __init__(self):
        super().__init__()
        self.next = {}                      # a line's first tokens -> {token that follows: lines it continues}
        for line in self.LINES:
            ids = TOKENIZER.encode(line) + [NEWLINE_WORD]
            for i in range(len(ids)):
                follow = self.next.setdefault(tuple(ids[:i]), {})
                follow[ids[i]] = follow.get(ids[i], 0) + 1

    def forward(self, idx, target_or_mask, *masks):
        ids = target_or_mask if masks else idx                # the decoder's input, or the stack's input
        end = SENTINELS[1] if masks else NEWLINE_WORD
        logits = torch.zeros(*ids.shape, len(TOKENIZER))      # anywhere else: every token alike
        for b, row in enumerate(ids.tolist()):
            # what was written so far: after `<bos> <0>`, or after the opening newline (BERT: before its <mask>)
            written = row[2:] if masks else row[1:-1] if row[-1] == MASK else row[1:]
            done = end in written or NEWLINE_WORD in written
            follow = {end: 1} if done else self.next.get(tuple(written), {})
            if follow:
                logits[b, -1] = float("-inf")
                for token, lines in follow.items():
                    logits[b, -1, end if token == NEWLINE_WORD else token] = math.log(lines)
        return logits


@pytest.fixture(scope="module")
def writer():
    return Writer()


@pytest.mark.parametrize("kind", MODEL_KINDS)
def test_generated_lines_are_reproducible_text(kind, writer):
    lines = capabilities.generate_lines(writer, kind, 8, seed=1)
    assert evals.line_quality(lines) == {"valid": 1.0, "true": 1.0}, lines      # what world.check_line parses
    assert set(lines) <= Writer.LINES, lines                                      # whole lines: nothing cut or added
    assert lines == capabilities.generate_lines(writer, kind, 8, seed=1)
    assert lines != capabilities.generate_lines(writer, kind, 8, seed=2)          # the seed draws the words
    # a real network: the same seed, the same lines
    model = trainer.build_model(dict(tiny_config("t5_span" if kind == "encoder-decoder" else "gpt"), kind=kind))
    assert capabilities.generate_lines(model, kind, 3, seed=1) == capabilities.generate_lines(model, kind, 3, seed=1)


def test_probe_reads_polarity_only_when_the_features_hold_it():
    polarity = probes.LABELS[:, None] * 2 - 1
    noise = torch.randn(len(probes.PAIRS), 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert probes.probe_accuracy(torch.cat([polarity, noise], 1), k=32) == 1.0
    # One feature per adjective: the test adjectives' features were never labelled, so nothing transfers.
    adjective = torch.tensor([list(world.FOOD_ADJECTIVES).index(a) for _, a in probes.PAIRS])
    identity = torch.nn.functional.one_hot(adjective)
    assert probes.probe_accuracy(identity.double(), k=128) == 0.5
    with pytest.raises(ValueError, match="one row per opening"):
        probes.probe_accuracy(noise[:5], k=32)
    # The shuffled-label control: features that hold the real polarity say little about a random one.
    shuffled = [probes.probe_accuracy(torch.cat([polarity, noise], 1), k=32, polarity=probes.shuffled_polarity(s))
                for s in range(10)]
    assert 0.35 < sum(shuffled) / len(shuffled) < 0.65 and max(shuffled) < 1.0
    with pytest.raises(ValueError, match="half of them positive"):
        probes.probe_scores(noise.repeat(1, 1), k=32, polarity={a: True for a in world.FOOD_ADJECTIVES})


def test_the_shuffled_control_averages_the_probe_over_random_relabellings():
    polarity = probes.LABELS[:, None] * 2 - 1
    noise = torch.randn(len(probes.PAIRS), 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    features = torch.cat([polarity, noise], 1)
    assert probes.probe_accuracy(features, 32) == 1.0
    shuffled = [probes.probe_accuracy(features, 32, polarity=probes.shuffled_polarity(s)) for s in range(3)]
    assert probes.shuffled_accuracy(features, 32, shuffles=3) == sum(shuffled) / 3 < 0.9


def test_untrained_scores_are_one_per_initialisation_and_depend_on_it():
    from lib.recipes import comparison
    from lib.trainers.comparison import build_model
    build = lambda: build_model(comparison.run_config("gpt"))      # the word-level network of section 04
    scores = probes.untrained_scores(build, "causal", ("mean", "last"), range(3), k=8)
    again = probes.untrained_scores(build, "causal", ("last",), [1], k=8)
    assert [len(v) for v in scores.values()] == [3, 3] and again["last"] == scores["last"][1:2]
    assert len(set(scores["last"])) > 1      # another initialisation, another network, another score


def test_ranking_auc_and_its_null_range():
    assert protocols.ranking_auc([2.0, 3.0], [1.0]) == 1.0 and protocols.ranking_auc([1.0], [2.0, 3.0]) == 0.0
    low, high = protocols.auc_null_range(43, 55)
    # without ties the null AUC has mean 1/2 and sd sqrt((43 + 55 + 1) / (12 * 43 * 55)) = 0.059 (Mann-Whitney):
    # the middle 95 % lies 1.96 sd either side, up to the normal approximation (0.002 here) and 2000 draws
    sd = ((43 + 55 + 1) / (12 * 43 * 55)) ** 0.5
    assert (low, high) == pytest.approx((0.5 - 1.96 * sd, 0.5 + 1.96 * sd), abs=0.01)
    assert protocols.auc_null_range(43, 55) == (low, high)
    with pytest.raises(ValueError, match="at least one"):
        protocols.ranking_auc([], [1.0])


def test_untrained_margin_aucs_are_one_per_initialisation():
    build = lambda: trainer.build_model(ex.run_config("t5_span"))
    aucs = protocols.untrained_margin_aucs(build, "encoder-decoder", REVIEWS, range(3))
    assert aucs[1:] == protocols.untrained_margin_aucs(build, "encoder-decoder", REVIEWS, [1, 2])
    assert len(set(aucs)) == 3                       # another initialisation, another network, another ranking
    torch.manual_seed(1)                             # the seed, not the RNG's state, decides the network
    assert protocols.untrained_margin_aucs(build, "encoder-decoder", REVIEWS, [0]) == aucs[:1]


def test_ratings_by_connective_counts_each_review_once(monkeypatch):
    reviews = protocols.new_reviews(12)
    said = ["ok", "good", "bad"] * 4
    monkeypatch.setattr(protocols, "rating_predictions", lambda model, kind, lines: said[:len(lines)])
    counts = protocols.ratings_by_connective(None, "causal", reviews)
    assert counts.total() == 12
    for review, word in zip(reviews, said):
        connective = "and" if " and " in review else "but"
        assert counts[connective, protocols.true_rating(review), word] >= 1
    assert all(c == "but" for c, truth, _ in counts if truth == "ok")    # "but" reviews are the mixed ones


@pytest.mark.parametrize("kind", MODEL_KINDS)
def test_every_readout_gives_one_vector_per_opening(kind):
    model = trainer.build_model(dict(tiny_config("t5_span" if kind == "encoder-decoder" else "gpt"), kind=kind))
    sequences = probes.clause_sequences()[:5]
    for readout in probes.READOUTS[kind]:
        assert probes.representations(model, kind, readout, sequences).shape == (5, SMALL["d_model"])
    with pytest.raises(ValueError, match="does not exist"):
        probes.representations(model, kind, "nowhere", sequences)


def test_bad_requests_say_what_is_wrong():
    with pytest.raises(ValueError, match="unknown recipe"):
        ex.run_config("gpt4")
    with pytest.raises(ValueError, match="mlm_rate"):
        ex.run_config("bert", mlm_rate=1.5)
    with pytest.raises(ValueError, match="unknown kind"):
        protocols.rating_accuracy(Oracle("causal"), "sideways", REVIEWS)
    with pytest.raises(ValueError, match="slot"):
        protocols.slot_logits(Oracle("causal"), "causal", [[1, 2]], [0])
    with pytest.raises(SystemExit, match="no run is called 'compare_gpt4'; did you mean") as error:
        recipes_cli.main(["--only", "compare_gpt4", "--list"])
    from lib import recipes
    assert all(r.name in str(error.value) for r in recipes.all_runs())     # the known names are listed
    for flags in (["--all"], ["--sample", "2"]):                           # a flag without its mode
        with pytest.raises(SystemExit):
            recipes_cli.main(flags)


def test_a_fill_that_ignores_the_context_scores_the_share_of_its_polarity_among_adjectives():
    reviews = protocols.new_reviews(40)
    fixed = TOKENIZER["fresh"]                       # a positive food adjective, whatever the review says
    def ask(ids, slots):
        logits = torch.zeros(len(ids), len(TOKENIZER))
        logits[:, TOKENIZER["review"]] = 9.0         # the whole-vocabulary argmax is not an adjective at all
        logits[:, fixed] = 5.0
        return logits
    fill = capabilities._adjective_fills(reviews, ask)
    positive = sum(world.FOOD_ADJECTIVES[r.split(" was ")[1].split()[0]] for r in reviews) / len(reviews)
    assert fill["right_polarity"] == 0.0 and fill["food_adjective"] == 0.0
    assert fill["right_polarity_among_adjectives"] == positive and fill["fills_among_adjectives"]["fresh"] == 40


def test_masked_lm_errors_are_counted_by_the_corrupted_words(monkeypatch):
    reviews = protocols.new_reviews(30)
    config = ex.run_config("bert")
    monkeypatch.setattr(protocols, "training_format_predictions", lambda model, objective, lines: ["ok"] * len(lines))
    counts = protocols.masked_lm_errors_by_corruption(None, config, reviews)
    assert counts.total() == 30
    assert sum(n for (_, right), n in counts.items() if right) == sum(protocols.true_rating(r) == "ok" for r in reviews)
    assert any(words for words, _ in counts)           # 15 % masking corrupts one of the three words sometimes
    with pytest.raises(ValueError, match="only a masked LM"):
        protocols.masked_lm_errors_by_corruption(None, ex.run_config("t5_span"), reviews)


def test_bert_with_masks_to_the_right_samples_the_first_mask():
    words = [NEWLINE_WORD] + [TOKENIZER[w] for w in ("review", ":", "the", "soup", "was")] + [NEWLINE_WORD] * 2

    class PositionWriter(nn.Module):           # at position j it is sure of words[j]: the line tells which were read
        config = SimpleNamespace(context=len(words))

        def forward(self, ids, mask):
            logits = torch.zeros(*ids.shape, len(TOKENIZER.vocab))
            logits[:, torch.arange(ids.shape[1]), torch.tensor(words[:ids.shape[1]])] = 50.0
            return logits

    for right in (False, True):
        assert capabilities.generate_lines(PositionWriter(), "bidirectional", 2, masks_right=right) == \
            [TOKENIZER.decode(words[1:6])] * 2


def test_bert_writes_with_masks_to_the_right_only_when_asked():
    model = trainer.build_model(dict(tiny_config("bert"), kind="bidirectional"))
    lengths = []
    model.register_forward_pre_hook(lambda module, args: lengths.append(args[0].shape[1]))
    capabilities.generate_lines(model, "bidirectional", 3, seed=1, masks_right=True)
    assert set(lengths) == {model.config.context}          # the whole window every time: masks fill the right
    lengths.clear()
    capabilities.generate_lines(model, "bidirectional", 3, seed=1)
    assert lengths[:3] == [2, 3, 4]                         # what is written so far, plus one <mask>


def test_zero_shot_readouts_are_the_two_readouts_of_one_forward_pass():
    model = trainer.build_model(tiny_config("bert")).double().eval()
    assert protocols.zero_shot_readouts(model, "bidirectional", REVIEWS) == {
        "zero-shot": protocols.rating_accuracy(model, "bidirectional", REVIEWS),
        "AUC": protocols.rating_margin_auc(model, "bidirectional", REVIEWS)}
