"""Batched greedy answers are the answers one prompt at a time."""

from lib.measure import answers, evals
from lib.data import world
from lib.measure.ablations import ablate
from lib import recipes


def test_batched_answers_equal_one_at_a_time():
    model, _ = recipes.load("base")
    prompts = [f"\nq: where does {n} live? a:" for n in world.build_world().names[:6]] + ["\n12+30=", "\nreview:"]
    one_by_one = [evals.generate(model, [p], max_new=12, temperature=0)[0] for p in prompts]
    assert answers.answers(model, prompts) == one_by_one


def test_fact_completion_asks_everyone_as_one_at_a_time_would():
    model, _ = recipes.load("base")
    broken = ablate(model, attention_off=[1])          # a model that gets some answers wrong
    w = world.build_world()
    asked = w.names[::4]            # a quarter of the people, one at a time (all 48: a minute of the suite)
    for m in (model, broken):
        one_by_one = {n: evals.generate(m, [f"\nq: where does {n} live? a:"], max_new=12, temperature=0)[0]
                      for n in asked}
        result = answers.fact_completion(m)
        assert {n: result["answers"][n] for n in asked} == one_by_one and len(result["answers"]) == len(w.names)
        assert result["accuracy"] == sum(result["answers"][n] == f" {w.home[n]}." for n in w.names) / len(w.names)
    assert answers.fact_completion(broken)["accuracy"] < 1.0


def test_fact_recall_reads_the_fact_lines_form_and_counts_only_the_right_city():
    model, _ = recipes.load("base")                 # trained on lines "NAME lives in CITY."
    home = world.build_world().home
    assert answers.fact_recall(model, home) == 1.0
    wrong = dict(zip(home, list(home.values())[1:] + list(home.values())[:1]))   # everyone moved to a neighbour's city
    assert answers.fact_recall(model, wrong) == sum(a == b for a, b in zip(home.values(), wrong.values())) / len(home)
