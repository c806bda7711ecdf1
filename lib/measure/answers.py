"""A char model's greedy answers to many prompts at once, and the world's fact question put to everyone.

    answers(model, ["\\nq: where does base live? a:", "\\n12+30="])   # greedy completions, up to the newline
    fact_completion(model)      # {"accuracy", "answers", "correct"}: every person asked where they live
    addition_completion(model)  # {(a, b): right?}: every pair of operands, greedy after "a+b="
    fact_recalled(model, home)  # {name: right?}: greedy after `NAME lives in`, for {name: city} of a facts-only world
    fact_recall(model, home)    # the share of them recalled
    fact_answer_bits(model, home)  # bits paid in all on the answers " CITY." and the newline after `NAME lives in`

`evals.generate` continues prompts of one length together; `answers` groups
any prompts by their length, so a set of questions costs a few batched passes
instead of one pass per prompt.  `fact_completion` asks every person
`q: where does NAME live? a:` this way and checks the greedy answer against
the world (the same answers as asking one person at a time: a test checks).
"""

from lib.measure import evals
from lib.data import world


def answers(model, prompts: list, max_new: int = 12) -> list:
    """Greedy completions (up to the newline, max_new characters at most) of every prompt, batched by length."""
    by_length = {}
    for i, prompt in enumerate(prompts):
        by_length.setdefault(len(prompt), []).append(i)
    found = {}
    for group in by_length.values():
        found |= dict(zip(group, evals.generate(model, [prompts[i] for i in group], max_new, temperature=0)))
    return [found[i] for i in range(len(prompts))]


def fact_completion(model) -> dict:
    """Greedy answers to `q: where does NAME live? a:` for every person, all at once; accuracy and answers."""
    w = world.build_world()
    got = dict(zip(w.names, answers(model, [f"\nq: where does {name} live? a:" for name in w.names])))
    correct = {name: got[name] == f" {w.home[name]}." for name in w.names}
    return {"accuracy": sum(correct.values()) / len(correct), "answers": got, "correct": correct}


def addition_completion(model, pairs=None) -> dict:
    """{(a, b): whether the greedy completion of `a+b=` is the sum and a full stop}, for every pair of operands
    of the world by default (8,100 of them: seen in training, unseen, or with a sum held out of training)."""
    low, high = world.NUMBER_RANGE
    pairs = [(a, b) for a in range(low, high + 1) for b in range(low, high + 1)] if pairs is None else pairs
    got = answers(model, [f"\n{a}+{b}=" for a, b in pairs], max_new=5)
    return {(a, b): said == f"{a + b}." for (a, b), said in zip(pairs, got)}


def fact_recalled(model, home: dict) -> dict:
    """{name: whether the model completes `NAME lives in`, greedily, with " CITY."} for the people of `home`
    ({name: city}; a facts-only world's question: `world.fact_world`)."""
    got = answers(model, [f"\n{name} lives in" for name in home], max_new=8)
    return {name: said == f" {city}." for said, (name, city) in zip(got, home.items())}


def fact_recall(model, home: dict) -> float:
    """The share of the people of `home` the model recalls (`fact_recalled`)."""
    return sum(fact_recalled(model, home).values()) / len(home)


def fact_answer_bits(model, home: dict) -> float:
    """Bits the model pays in all on the answers of the fact lines of `home` (" CITY." and the closing newline
    after `NAME lives in`): what it knows is what a model that only knows the cities' shares pays, less this."""
    lines = [f"{name} lives in {city}." for name, city in home.items()]
    return evals.bits_per_char(model, lines, after=" lives in") * sum(len(city) + 3 for city in home.values())
