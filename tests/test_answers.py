"""Batched greedy answers are the answers one prompt at a time."""

from lib import answers, evals, world
from lib.ablations import ablate
from lib.base_model import load_base_model


def test_batched_answers_equal_one_at_a_time():
    model, _ = load_base_model()
    prompts = [f"\nq: where does {n} live? a:" for n in world.build_world().names[:6]] + ["\n12+30=", "\nreview:"]
    one_by_one = [evals.generate(model, [p], max_new=12, temperature=0)[0] for p in prompts]
    assert answers.answers(model, prompts) == one_by_one


def test_fact_completion_is_evals_fact_completion_at_once():
    model, _ = load_base_model()
    broken = ablate(model, attention_off=[1])          # a model that gets some answers wrong
    for m in (model, broken):
        assert answers.fact_completion(m) == evals.fact_completion(m)
    assert answers.fact_completion(broken)["accuracy"] < 1.0
