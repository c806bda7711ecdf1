"""The GRU of section 02's opening (lib.recurrent): its size, causality, the rating read-out, determinism."""

import torch

from lib.measure import protocols
from lib import recipes
from lib.measure import evals
from lib.nn import recurrent
from lib.recipes import inside
from lib.trainers.char_lm import train_char_lm
from lib.nn.models import TinyGPT


def test_parameter_count_by_formula_equals_pytorch_and_is_tinygpts_within_100():
    model = recurrent.GRULanguageModel()
    count = sum(p.numel() for p in model.parameters())
    assert count == recurrent.gru_parameter_count(recurrent.GRUConfig())
    assert abs(count - sum(p.numel() for p in TinyGPT().parameters())) <= 100


def test_a_position_never_sees_a_later_character():
    torch.manual_seed(0)
    model = recurrent.GRULanguageModel().eval()
    idx = torch.randint(44, (2, 30))
    changed = idx.clone()
    changed[:, 20:] = (changed[:, 20:] + 1) % 44
    with torch.no_grad():
        a, b = model(idx), model(changed)
    assert torch.equal(a[:, :20], b[:, :20]) and not torch.equal(a[:, 20:], b[:, 20:])


def test_the_rating_read_out_finds_what_a_trained_model_knows():
    # The base model rates new reviews perfectly (section 02 prints it): a wrong slice of the
    # candidates' log-probabilities would not.
    reviews = protocols.new_reviews(40)
    choices = evals.rating_choices(recipes.load("base")[0], reviews)
    assert choices == [protocols.true_rating(r) for r in reviews]


def test_training_is_deterministic():
    config = inside.gru_run().config | {"steps": 3, "eval_every": 3}
    (a, log_a), (b, log_b) = train_char_lm(config), train_char_lm(config)
    assert log_a == log_b and all(torch.equal(a.state_dict()[k], v) for k, v in b.state_dict().items())
