"""Measuring a character-level model on the mini internet.

- `bits_per_char`: validation cross-entropy in bits per character, line by line
  (log2 44 = 5.459 is chance for 44 symbols); `char_bits`: where in a line they go;
  `entropy_floor`: the least any model could pay on the same lines;
- `fact_completion`: `q: where does NAME live? a:` → is the greedy answer the right city?
- `sample_lines` + `line_quality`: sample whole lines and score them with `world.check_line`.
"""

import math

import torch

from lib import world
from lib.tokenizers import CharTokenizer
from lib.train import line_batch, token_losses

CHARS = CharTokenizer()
NEWLINE = CHARS.stoi["\n"]


def batches_by_length(lines: list):
    """Yield `line_batch`es of equal-length lines, so no line is padded.

    A model with a non-causal mask (an ablation in section 02) would otherwise
    see the padding on the right of shorter lines."""
    by_length = {}
    for line in lines:
        by_length.setdefault(len(line), []).append(line)
    for length in sorted(by_length):
        yield line_batch(by_length[length], CHARS)


def bits_per_char(model, lines: list = None) -> float:
    """Mean next-character cross-entropy in bits over lines (default: the validation set), each line
    scored on its own after a newline, its closing newline included."""
    lines = world.load_text("val").splitlines() if lines is None else lines
    nats = count = 0.0
    for ids, weights in batches_by_length(lines):
        nats += float((token_losses(model, ids) * weights).sum())
        count += float(weights.sum())
    return nats / count / math.log(2)


def entropy_floor(lines: list = None) -> dict:
    """`world.entropy_floor` per kind, and for the given lines (default: validation) as a whole.

    The overall floor depends on the mix of kinds: the validation set holds
    every addition with a held-out sum, so it has more (expensive) additions
    than the generator's mix, and its floor is higher than world.entropy_floor()["all"]."""
    lines = world.load_text("val").splitlines() if lines is None else lines
    floor = world.entropy_floor()
    bits = sum(floor[world.kind_of(line)] * (len(line) + 1) for line in lines)
    return {kind: floor[kind] for kind in world.KINDS} | {"all": bits / sum(len(line) + 1 for line in lines)}


def char_bits(model, line: str) -> list:
    """Bits the model pays for each character of `line` and its closing newline."""
    return (token_losses(model, line_batch([line], CHARS)[0])[0] / math.log(2)).tolist()


@torch.no_grad()
def generate(model, prompts: list, max_new: int, temperature: float = 1.0, generator=None) -> list:
    """Continue each prompt (all of equal length) by up to max_new characters, stopping at a newline.

    temperature == 0 means greedy (argmax); otherwise sample from softmax(logits / temperature)
    with the given torch.Generator, so the same seed gives the same text."""
    if len({len(p) for p in prompts}) != 1:
        raise ValueError("generate() needs prompts of equal length; group them or call it once per prompt")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    idx = torch.tensor([CHARS.encode(p) for p in prompts])
    done = torch.zeros(len(prompts), dtype=torch.bool)
    T = model.config.context
    for _ in range(max_new):
        logits = model(idx[:, -T:])[:, -1]                       # (B, V): the next character
        if temperature == 0:
            nxt = logits.argmax(dim=-1)
        else:
            nxt = torch.multinomial((logits / temperature).softmax(dim=-1), 1, generator=generator)[:, 0]
        nxt = torch.where(done, NEWLINE, nxt)
        idx = torch.cat([idx, nxt[:, None]], dim=1)
        done |= nxt == NEWLINE
        if done.all():
            break
    return [CHARS.decode(row[len(prompts[0]):]).split("\n")[0] for row in idx.tolist()]


def fact_completion(model) -> dict:
    """Greedy answers to `q: where does NAME live? a:` for every person; accuracy and answers."""
    w = world.build_world()
    answers = {name: generate(model, [f"\nq: where does {name} live? a:"], max_new=12, temperature=0)[0]
               for name in w.names}
    correct = {name: answers[name] == f" {w.home[name]}." for name in w.names}
    return {"accuracy": sum(correct.values()) / len(correct), "answers": answers, "correct": correct}


def sample_lines(model, n: int, temperature: float = 1.0, seed: int = 0) -> list:
    """n lines sampled from scratch (after a newline), reproducible for a given seed."""
    generator = torch.Generator().manual_seed(seed)
    return generate(model, ["\n"] * n, max_new=model.config.context - 1, temperature=temperature,
                    generator=generator)


def line_quality(lines: list) -> dict:
    """Share of lines that are well-formed (valid) and that are also true, by `world.check_line`."""
    checks = [world.check_line(line) for line in lines]
    return {"valid": sum(v for v, _ in checks) / len(lines), "true": sum(t for _, t in checks) / len(lines)}
