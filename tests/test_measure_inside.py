"""lib.measure.inside: section 02's measurements (the data flow, block writes, q and k, confidence, ablations)."""

import math

import torch
import torch.nn as nn

from lib.measure import answers, evals, inside
from lib.nn.models import TinyGPT, split_heads
from lib.objectives.batches import next_token_loss
from lib.data.tokenizers import CharTokenizer

CHARS = CharTokenizer()


def seeded_model(seed=0):
    torch.manual_seed(seed)
    return TinyGPT().eval()


def no_hooks(model) -> bool:
    return all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_leaf_trace_follows_the_data_flow():
    model = seeded_model()
    idx = torch.randint(44, (2, 7))
    trace = inside.leaf_trace(model, idx)
    per_block = ["ln_1", "attn.qkv", "attn.proj", "ln_2", "mlp.fc", "mlp.fc2"]
    assert [name for name, _, _ in trace] == (["wte", "wpe"] + [f"blocks.{layer}.{part}" for layer in range(2)
                                                                for part in per_block] + ["ln_f"])
    out = {name: output for name, _, output in trace}
    given = {name: x for name, x, _ in trace}
    assert torch.equal(given["wte"], idx) and torch.equal(given["wpe"], torch.arange(7))
    assert torch.equal(given["blocks.0.ln_1"], out["wte"] + out["wpe"])           # the residual stream starts here
    with torch.no_grad():
        assert torch.equal(out["ln_f"] @ model.wte.weight.T, model(idx))
    assert no_hooks(model)


def test_block_writes_lengths_and_gradient():
    model = seeded_model()
    with torch.no_grad():
        model.blocks[1].mlp.fc2.weight.zero_()          # block 1's MLP writes nothing
        model.blocks[1].mlp.fc2.bias.zero_()
    batch = torch.randint(44, (3, 11))
    rows = inside.block_writes(model, batch)
    assert [row["block"] for row in rows] == [0, 1]
    with torch.no_grad():
        stream = model.wte(batch[:, :-1]) + model.wpe(torch.arange(10))
        attention = model.blocks[0].attn(model.blocks[0].ln_1(stream), torch.ones(10, 10).tril().bool()[None])[0]
    assert math.isclose(rows[0]["stream in"], float(stream.norm(dim=-1).mean()), rel_tol=1e-6)
    assert math.isclose(rows[0]["attention writes"], float(attention.norm(dim=-1).mean()), rel_tol=1e-5)
    assert rows[1]["MLP writes"] == 0.0 and rows[1]["attention writes"] > 0
    for row in rows:
        assert row["writes / stream"] == (row["attention writes"] + row["MLP writes"]) / row["stream in"]
    assert all(p.grad is None for p in model.parameters()) and no_hooks(model)   # it leaves the model as it was
    next_token_loss(model, batch).backward()         # the same gradient as a plain backward pass
    assert [row["gradient"] for row in rows] == [
        float(torch.cat([p.grad.flatten() for p in block.parameters()]).norm()) for block in model.blocks]


def test_queries_and_keys_of_the_first_layer_by_hand():
    model = seeded_model()
    ids = torch.randint(44, (2, 9))
    per_layer = inside.queries_and_keys(model, ids)
    assert len(per_layer) == 2 and [tuple(t.shape) for t in per_layer[1]] == [(2, 4, 9, 16)] * 2
    with torch.no_grad():
        h = model.blocks[0].ln_1(model.wte(ids) + model.wpe(torch.arange(9)))
        weight, bias = model.blocks[0].attn.qkv.weight, model.blocks[0].attn.qkv.bias
        q = split_heads(h @ weight[:64].T + bias[:64], 4)
        k = split_heads(h @ weight[64:128].T + bias[64:128], 4)
    assert torch.allclose(per_layer[0][0], q, atol=1e-5) and torch.allclose(per_layer[0][1], k, atol=1e-5)
    assert no_hooks(model)


class Lookup(nn.Module):
    """Next-character probabilities that depend on the current character only: {current: (best, its p)},
    the rest of each row spread evenly over the other 43 characters."""

    def __init__(self, rows: dict):
        super().__init__()
        self.table = torch.full((44, 44), 1 / 44)
        for current, (best, p) in rows.items():
            self.table[CHARS.stoi[current]] = (1 - p) / 43
            self.table[CHARS.stoi[current], CHARS.stoi[best]] = p

    def forward(self, ids):
        return self.table[ids].log()


def test_prediction_confidence_on_a_lookup_table():
    # "\nab\n": after "\n" it says 'a' (right, 0.9), after 'a' 'c' (wrong, 0.6), after 'b' "\n" (right, 0.8)
    model = Lookup({"\n": ("a", 0.9), "a": ("c", 0.6), "b": ("\n", 0.8)})
    result = inside.prediction_confidence(model, ["ab", "ab"])
    assert math.isclose(result["top-1 accuracy"], 2 / 3)
    assert math.isclose(result["mean top probability"], (0.9 + 0.6 + 0.8) / 3, rel_tol=1e-6)
    assert math.isclose(result["mean top probability when wrong"], 0.6, rel_tol=1e-6)


def test_ablated_switches_off_what_the_names_say():
    assert repr(inside.ablated(TinyGPT())) == "WithMask(causal, zero_positions=False, attention_off=(), mlp_off=())"
    assert repr(inside.ablated(TinyGPT(), "zeroed", "no attention", "no MLP", "bidirectional")) == \
        "WithMask(bidirectional, zero_positions=True, attention_off=(0,), mlp_off=(1,))"
    assert list(inside.LAYER_SETTINGS) == ["attention + MLP", "no attention", "no MLP"]


def test_ablation_measurements_measure_each_setting_once(monkeypatch):
    measured = []
    monkeypatch.setattr(answers, "fact_completion", lambda m: measured.append(repr(m)) or
                        {"accuracy": 0.5, "answers": {"base": " jaipur."}})
    monkeypatch.setattr(evals, "bits_per_char", lambda m: 1.25)
    measure = inside.ablation_measurements(TinyGPT())
    assert measure() == {"bits/char": 1.25, "fact completion": 0.5, "q: where does base live? a:": "' jaipur.'"}
    assert measure(positions="learned", mask="causal") is measure()             # the defaults name the same setting
    measure(layer_1="no MLP")
    measure(layer_1="no MLP")
    assert measured == ["WithMask(causal, zero_positions=False, attention_off=(), mlp_off=())",
                        "WithMask(causal, zero_positions=False, attention_off=(), mlp_off=(1,))"]


def test_head_and_per_layer_mask_ablations_do_what_they_say():
    from lib.measure.ablations import ablate
    model, idx = seeded_model(), torch.randint(44, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        for p in model.parameters():          # non-zero biases, so a head ablation must not touch them
            p.add_(0.01)
        every_head = ablate(model, heads_off=[(1, h) for h in range(4)])(idx)
        layer_off = ablate(model, attention_off=[1])(idx)
        proj_bias = model.blocks[1].attn.proj.bias
        # all four heads off = the layer's attention off, except its output bias, which is still written
        assert not torch.allclose(every_head, layer_off)
        model.blocks[1].attn.proj.bias.zero_()
        assert torch.allclose(ablate(model, heads_off=[(1, h) for h in range(4)])(idx), ablate(model, attention_off=[1])(idx))
        one = ablate(model, heads_off=[(0, 2)])
        assert not torch.allclose(one(idx), ablate(model)(idx)) and float(model.blocks[0].attn.proj.weight.abs().min()) > 0
        assert torch.equal(ablate(model, mask=("causal", "causal"))(idx), ablate(model)(idx))
        assert torch.equal(ablate(model, mask=("bidirectional",) * 2)(idx), ablate(model, mask="bidirectional")(idx))
        mixed = ablate(model, mask=("bidirectional", "causal"))(idx)
        assert not torch.equal(mixed, ablate(model)(idx)) and not torch.equal(mixed, ablate(model, mask="bidirectional")(idx))
        mean = ablate(model, mean_positions=True).model.wpe.weight
        assert torch.allclose(mean, model.wpe.weight.mean(0).expand_as(mean))
    import pytest
    with pytest.raises(ValueError, match="no head"):
        ablate(model, heads_off=[(2, 0)])
    with pytest.raises(ValueError, match="unknown mask"):
        ablate(model, mask=("causal",) * 3)
    with pytest.raises(ValueError, match="unknown positions"):
        inside.ablated(model, positions="shuffled")


def test_initial_gradients_put_post_ln_below_pre_ln_under_the_books_init_and_above_under_xavier():
    windows = torch.randint(44, (4, 33), generator=torch.Generator().manual_seed(0))
    book, xavier, unit = (inside.initial_gradients(6, init, windows)
                          for init in ("book", "xavier", "book, N(0, 1) embeddings"))
    assert book["post-LN"] < 0.5 * book["pre-LN"] and xavier["post-LN"] > xavier["pre-LN"]
    assert unit["post-LN"] > unit["pre-LN"]          # the embeddings' scale alone turns the order round
    assert inside.initial_gradients(6, "book", windows) == book          # seeded: the same networks again


def test_bits_after_a_marker_count_only_the_answer():
    class KnowsTheQuestion(nn.Module):
        """Certain of every character up to '=' (it has seen the question), uniform after it."""
        def forward(self, ids):
            logits = torch.zeros(*ids.shape, len(CHARS))
            for b, row in enumerate(ids.tolist()):
                text = CHARS.decode(row)
                for t in range(len(row) - 1):
                    if t < text.index("=", 1):
                        logits[b, t, row[t + 1]] = 100.0
            return logits
    lines = ["12+34=46.", "50+50=100."]
    assert abs(evals.bits_per_char(KnowsTheQuestion(), lines, after="=") - math.log2(len(CHARS))) < 1e-6
    assert evals.bits_per_char(KnowsTheQuestion(), lines) < math.log2(len(CHARS)) * 0.6


def test_name_attention_is_the_share_on_the_name_when_attention_is_uniform():
    model = seeded_model()
    with torch.no_grad():
        for block in model.blocks:      # queries and keys zero: every score 0, attention uniform over the past
            block.attn.qkv.weight[: 2 * model.config.d_model] = 0
            block.attn.qkv.bias[: 2 * model.config.d_model] = 0
    names = ["base", "quila"]
    got = inside.name_attention(model, names)
    assert got.shape == (2, model.config.n_layers, model.config.n_heads)
    for row, name in zip(got, names):
        text = f"\nq: where does {name} live? a: "
        assert torch.allclose(row, torch.full_like(row, len(name) / len(text)))
    model = seeded_model()                                        # random queries: not uniform
    text = "\nq: where does base live? a: "                       # the name at positions 15..18
    _, attention = model.forward_with_attention(torch.tensor([CHARS.encode(text)]))
    by_hand = torch.stack([a[0, :, -1, 15:19].sum(-1) for a in attention])
    shifted = torch.stack([a[0, :, -1, 16:20].sum(-1) for a in attention])
    assert torch.allclose(inside.name_attention(model, ["base"])[0], by_hand) and not torch.allclose(by_hand, shifted)



def test_city_choice_blocks_only_the_named_layer_from_the_name():
    from lib import recipes
    from lib.data import world
    model, names = recipes.load("base")[0], world.build_world().names[:12]
    intact = inside.city_choice(model, names)
    assert intact == 1.0 == inside.city_choice(model, names, blocked_layer=None)
    # the base model (seed 0) reads the name in layer 1 (section 02): kept from it there, it loses people;
    # kept from it in layer 0 at the answer rows only, it does not (layer 0 moved it earlier)
    assert inside.city_choice(model, names, blocked_layer=1) < 0.9
    assert inside.city_choice(model, names, blocked_layer=0) == 1.0
