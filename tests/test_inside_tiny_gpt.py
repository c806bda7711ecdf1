"""Section 02 (inside tiny_gpt): ablations and the notebook's hand-written forward pass."""

import json
import math
from pathlib import Path

import pytest
import torch

from lib.measure import answers, evals
from lib.measure.ablations import WithMask, ablate
from lib.nn.masks import causal_mask
from lib.nn.models import MaskedTransformer, ModelConfig, TinyGPT

NOTEBOOK = Path(__file__).resolve().parent.parent / "book" / "02_inside_tiny_gpt.ipynb"


def trained_looking(config=ModelConfig(), seed=0, std=0.3):
    """A TinyGPT whose weights are far from the tiny init values, so every part matters."""
    torch.manual_seed(seed)
    model = TinyGPT(config)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, std)
    return model.eval()


def test_no_ablation_reproduces_the_model_exactly():
    model = trained_looking()
    copy = ablate(model)
    idx = torch.randint(44, (3, 96))
    with torch.no_grad():
        assert torch.equal(copy(idx), model(idx))
    assert evals.bits_per_char(copy) == evals.bits_per_char(model)
    assert answers.fact_completion(copy)["answers"] == answers.fact_completion(model)["answers"]


def test_ablating_a_copy_leaves_the_original_alone():
    model = trained_looking()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ablated = ablate(model, zero_positions=True, attention_off=[0, 1], mlp_off=[1])
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    inner = ablated.model.state_dict()
    assert float(inner["wpe.weight"].abs().sum()) == 0.0
    assert float(inner["blocks.1.mlp.fc2.weight"].abs().sum()) == 0.0
    assert torch.equal(inner["blocks.0.mlp.fc2.weight"], before["blocks.0.mlp.fc2.weight"])


def test_without_attention_no_position_sees_another():
    model = trained_looking()
    no_attention = ablate(model, attention_off=[0, 1])
    a = torch.randint(44, (1, 12))
    b = a.clone()
    b[0, :5] = (b[0, :5] + 7) % 44  # change the first five tokens
    with torch.no_grad():
        assert torch.equal(no_attention(a)[0, 5:], no_attention(b)[0, 5:])
        assert not torch.allclose(ablate(model)(a)[0, 5:], ablate(model)(b)[0, 5:])


def test_switching_the_mlp_off_equals_skipping_it():
    model = trained_looking()
    idx = torch.randint(44, (2, 20))
    inner = MaskedTransformer(model.config)
    inner.load_state_dict(model.state_dict())
    with torch.no_grad():
        x = inner.wte(idx) + inner.wpe(torch.arange(20))
        for layer, block in enumerate(inner.blocks):
            x = x + block.attn(block.ln_1(x), causal_mask(20).expand(2, 20, 20))[0]
            if layer != 1:
                x = x + block.mlp(block.ln_2(x))
        expected = inner.ln_f(x) @ inner.wte.weight.T
        assert torch.allclose(ablate(model, mlp_off=[1])(idx), expected, atol=1e-5)


def test_bidirectional_mask_lets_positions_see_the_future():
    model = trained_looking()
    a = torch.randint(44, (1, 10))
    b = a.clone()
    b[0, 9] = (b[0, 9] + 1) % 44
    with torch.no_grad():
        assert torch.equal(ablate(model)(a)[0, :9], ablate(model)(b)[0, :9])
        assert not torch.allclose(ablate(model, mask="bidirectional")(a)[0, :9],
                                  ablate(model, mask="bidirectional")(b)[0, :9])


@pytest.mark.parametrize("kwargs, message", [
    ({"attention_off": [2]}, r"attention_off: layers \[2\] do not exist; the model has layers 0..1"),
    ({"mlp_off": [-1]}, r"mlp_off: layers \[-1\] do not exist"),
    ({"mask": "sideways"}, "unknown mask 'sideways'"),
])
def test_bad_ablations_give_clear_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ablate(TinyGPT(), **kwargs)


def test_ablate_needs_a_transformer():
    with pytest.raises(ValueError, match="needs a TinyGPT or MaskedTransformer, got Linear"):
        ablate(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="unknown mask"):
        WithMask(MaskedTransformer(), mask="prefix")


PRIMITIVES = ("layer_norm", "gelu", "softmax")     # the notebook defines these in the cell before forward_by_hand


def notebook_function(name: str):
    """Exec the notebook's code cells that define `name` and the primitives it calls; return the function
    (the reader's copy)."""
    sources = ["".join(c["source"]) for c in json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
               if c["cell_type"] == "code"]
    defining = {n: [s for s in sources if f"def {n}(" in s] for n in (*PRIMITIVES, name)}
    for n, found in defining.items():
        assert len(found) == 1, f"expected one cell defining {n} in {NOTEBOOK.name}, found {len(found)}"
    namespace = {"torch": torch, "math": math}
    for source in dict.fromkeys(found[0] for found in defining.values()):   # each cell once, in this order
        exec(source, namespace)
    return namespace[name]


@pytest.mark.parametrize("config", [ModelConfig(), ModelConfig(vocab_size=30, context=40, d_model=48,
                                                                n_layers=3, n_heads=3)])
def test_the_notebooks_forward_pass_by_hand_matches_the_model(config):
    forward_by_hand = notebook_function("forward_by_hand")
    model = trained_looking(config, std=0.1)
    ids = torch.randint(config.vocab_size, (config.context,)).tolist()
    weights = {k: v.detach() for k, v in model.state_dict().items()}
    logits, writes = forward_by_hand(weights, ids, n_heads=config.n_heads)
    with torch.no_grad():
        reference = model(torch.tensor([ids]))[0]
    assert logits.shape == reference.shape
    assert float((logits - reference).abs().max()) <= 1e-5 * max(1.0, float(reference.abs().max()))
    # The writes into the residual stream add up to the stream the final LayerNorm reads.
    stream = sum(writes.values())
    final = torch.nn.functional.layer_norm(stream, (config.d_model,), weights["ln_f.weight"], weights["ln_f.bias"])
    assert torch.allclose(final @ weights["wte.weight"].T, logits, atol=1e-5)
    assert list(writes) == ["embeddings"] + [f"{part} {layer}" for layer in range(config.n_layers)
                                             for part in ("attention", "MLP")]
