"""Measuring a character-level model on the mini internet.

- `line_batch` + `token_losses`: every document scored on its own; `validation_loss` in nats;
- `bits_per_char`: validation cross-entropy in bits per character, line by line
  (log2 44 = 5.459 is chance for 44 symbols); `char_bits`: where in a line they go;
  `generator_price`: what the generator itself pays on the same lines, line by line, which depends on
  their mix of kinds (`character_share_by_kind`); `excess_by_kind`: which kinds of line the bits above that
  price are paid on; `next_char_probs`: the distribution of one next character;
- `text_windows` + `position_bits`: text cut into windows as training reads it, and the bits paid at each
  position of them;
- `sample_lines` + `line_quality`: sample whole lines and score them with `world.check_line`.
"""

import math
import re

import torch
import torch.nn.functional as F

from lib.data import world
from lib.nn import inference
from lib.nn.models import MaskedTransformer
from lib.objectives.batches import pad
from lib.data.tokenizers import CHARS

NEWLINE_CHAR = CHARS.stoi["\n"]


def line_batch(lines: list, tokenizer=CHARS):
    """Each document on its own: newline + line + newline, right-padded with newlines.

    Returns (ids (N, L), weights (N, L - 1)) where weights are 1 on the real
    predictions (every character of the line and its closing newline).  The
    documents of the world are independent, so a line needs no other context;
    scoring lines one by one matches `generator_price` and avoids charging
    the model for windows that start in the middle of a word."""
    ids, is_pad = pad([tokenizer.encode("\n" + line + "\n") for line in lines], tokenizer.encode("\n")[0])
    return ids, (~is_pad[:, 1:]).float()


TOKENS_AT_ONCE = 4096     # tokens per forward pass where a measurement may split its batch (`rows_at_once`)


def rows_at_once(model, length: int):
    """How many rows of `length` tokens a measurement that may split its batch passes at once: about
    `TOKENS_AT_ONCE` tokens (activations that stay in the CPU's cache: 1.2-2x faster than thousands of rows at
    once, scripts/bench_measurement_speed.py; each row's numbers are its own either way), or None (all at once)
    for a mixture of experts with a capacity limit, whose routing depends on the whole batch."""
    if getattr(getattr(model, "config", None), "capacity_factor", None):
        return None
    return max(1, TOKENS_AT_ONCE // max(1, length))


@torch.no_grad()
def token_losses(model, ids, rows: int = None) -> torch.Tensor:
    """Cross-entropy (nats) of every next-token prediction, (N, L - 1); causal, so padding on the right is harmless.
    rows: pass the batch `rows` at a time (`rows_at_once`); by default in one forward pass."""
    return torch.cat([F.cross_entropy(model(part[:, :-1]).transpose(1, 2), part[:, 1:], reduction="none")
                      for part in ids.split(rows or max(1, len(ids)))])


def validation_loss(model, batch) -> float:
    """Mean cross-entropy (nats) per real prediction of a `line_batch`."""
    ids, weights = batch
    return float((token_losses(model, ids) * weights).sum() / weights.sum())


def batches_by_length(lines: list):
    """Yield `line_batch`es of equal-length lines, so no line is padded.

    A model with a non-causal mask (an ablation in section 02) would otherwise
    see the padding on the right of shorter lines."""
    by_length = {}
    for line in lines:
        by_length.setdefault(len(line), []).append(line)
    for length in sorted(by_length):
        yield line_batch(by_length[length], CHARS)


def bits_per_char(model, lines: list = None, after: str = None) -> float:
    """Mean next-character cross-entropy in bits over lines (default: the validation set), each line
    scored on its own after a newline, its closing newline included.  With `after` (e.g. "=" for an
    addition), only the characters after its first occurrence in each line count: the answer, not the
    question.

    >>> class Uniform(torch.nn.Module):
    ...     def forward(self, ids): return torch.zeros(*ids.shape, len(CHARS))
    >>> round(bits_per_char(Uniform(), ["12+34=46."], after="="), 3) == round(math.log2(len(CHARS)), 3)
    True
    """
    lines = world.load_text("val").splitlines() if lines is None else lines
    if after is not None and not all(after in line for line in lines):
        raise ValueError(f"every line must contain {after!r} when after={after!r}")
    nats = count = 0.0
    for ids, weights in batches_by_length(lines):
        if after is not None:   # target j is character j of the line (j = len(line): the closing newline)
            texts = [CHARS.decode(row[1:-1].tolist()) for row in ids]
            starts = torch.tensor([text.index(after) + len(after) for text in texts])
            weights = weights * (torch.arange(weights.shape[1])[None] >= starts[:, None])
        nats += float((token_losses(model, ids, rows_at_once(model, ids.shape[1])) * weights).sum())
        count += float(weights.sum())
    return nats / count / math.log(2)


def generator_price(lines: list = None) -> dict:
    """Bits per character that the generator itself pays on these lines (default: validation), scored line
    by line like `bits_per_char` (`world.line_price_bits`), for each kind and for all of them ("all").

    It is the model's yardstick on the same lines, not a bound: a model can pay less on a line it has
    memorised, and a set of lines that is not a sample of the generator (validation holds every
    held-out-sum addition) can cost less than its price.

    >>> generator_price(["poya lives in sorn."])["all"] == world.line_price_bits("poya lives in sorn.") / 20
    True
    """
    lines = world.load_text("val").splitlines() if lines is None else lines
    out = {}
    for kind in world.KINDS + ("all",):
        chosen = [line for line in lines if kind == "all" or world.kind_of(line) == kind]
        if chosen:
            out[kind] = sum(map(world.line_price_bits, chosen)) / sum(len(line) + 1 for line in chosen)
    return out


@torch.no_grad()
def next_char_probs(model, text: str) -> dict:
    """{character: probability} of the character that follows `text` (its last `context` characters)."""
    ids = torch.tensor([CHARS.encode(text)[-model.config.context:]])
    probs = model(ids)[0, -1].softmax(-1).tolist()
    return {CHARS.decode([i]): p for i, p in enumerate(probs)}


def excess_by_kind(model, lines: list = None) -> dict:
    """{kind: its part of the model's bits per character above the generator's price}: on the lines of that kind,
    (`bits_per_char` - `generator_price`) times their share of the characters; the parts of every kind
    sum to the excess on all the lines ("all").  It says which kind of line a model still pays for.

    >>> class Uniform(torch.nn.Module):
    ...     def forward(self, ids): return torch.zeros(*ids.shape, len(CHARS))
    >>> parts = excess_by_kind(Uniform(), ["12+34=46.", "base lives in jelka."])
    >>> round(parts["addition"] + parts["fact"], 9) == round(parts["all"], 9)
    True
    """
    lines = world.load_text("val").splitlines() if lines is None else lines
    shares = character_share_by_kind(lines)
    parts = {}
    for kind in world.KINDS:
        chosen = [line for line in lines if world.kind_of(line) == kind]
        if chosen:
            parts[kind] = shares[kind] * (bits_per_char(model, chosen) - generator_price(chosen)["all"])
    parts["all"] = sum(parts.values())
    return parts


def text_windows(text: str, length: int, count: int = None) -> torch.Tensor:
    """(N, length + 1) windows of `text` as training reads text (they cross line boundaries): with count=None
    every non-overlapping window, else `count` windows at evenly spaced starts."""
    stream = torch.tensor(CHARS.encode(text))
    if count is None:
        n = (len(stream) - 1) // length
        return torch.stack([stream[i * length: i * length + length + 1] for i in range(n)])
    last = len(stream) - length - 1                       # integer steps: no float rounding decides a start
    return torch.stack([stream[s: s + length + 1] for s in (i * last // max(1, count - 1) for i in range(count))])


@torch.no_grad()
def position_bits(model, windows, allowed=None) -> torch.Tensor:
    """(length,) the mean bits paid for the character at each position of `windows` (N, length + 1), every
    window read from its start (position 0 predicts the window's second character).  `allowed`, a causal bool
    mask ((T, T) or (N, T, T), True = may attend), replaces a decoder's causal mask: the same weights, other keys."""
    if allowed is None:
        nats = token_losses(model, windows, rows_at_once(model, windows.shape[1]))
    else:
        logits = MaskedTransformer.forward(model, windows[:, :-1], allowed)
        nats = F.cross_entropy(logits.transpose(1, 2), windows[:, 1:], reduction="none")
    return nats.mean(0) / math.log(2)


def character_share_by_kind(lines: list) -> dict:
    """{kind: share of the lines' characters (closing newlines included) in lines of that kind}, every kind.

    >>> character_share_by_kind(["12+34=46.", "base lives in jelka."])["addition"]   # 10 of 10 + 21
    0.3225806451612903
    """
    total = sum(len(line) + 1 for line in lines)
    return {kind: sum(len(line) + 1 for line in lines if world.kind_of(line) == kind) / total for kind in world.KINDS}


def char_bits(model, line: str) -> list:
    """Bits the model pays for each character of `line` and its closing newline."""
    return (token_losses(model, line_batch([line], CHARS)[0])[0] / math.log(2)).tolist()


@torch.no_grad()
def generate(model, prompts: list, max_new: int, temperature: float = 1.0, generator=None, processors=()) -> list:
    """Continue each prompt (all of equal length) by up to max_new characters, stopping at a newline.

    temperature == 0 means greedy (argmax); otherwise sample from softmax(logits / temperature)
    with the given torch.Generator, so the same seed gives the same text.  `processors` (`inference.top_p(0.9)`,
    ...) follow the temperature, in order."""
    if len({len(p) for p in prompts}) != 1:
        raise ValueError("generate() needs prompts of equal length; group them or call it once per prompt")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if temperature > 0 and generator is None:
        raise ValueError("sampling (temperature > 0) needs a torch.Generator: pass generator=, or temperature=0")
    idx = torch.tensor([CHARS.encode(p) for p in prompts])
    done = torch.zeros(len(prompts), dtype=torch.bool)
    rules = [inference.temperature(temperature), *processors] if temperature > 0 else list(processors)
    cache = inference.new_cache(model, idx.shape[1] + max_new - 1)   # None: the model reruns each step
    computed = torch.arange(len(prompts))      # the rows computed (and in the cache): every row still writing
    for _ in range(max_new):
        # every row draws (a finished row's draw, from zero logits, becomes a newline below), so the text is that
        # of computing every row; finished rows leave the batch at once, or with a cache once they are a quarter
        # of it (leaving copies the cache)
        last = inference.next_logits(model, idx[computed], cache)    # (computed, V): the next character
        writing = ~done[computed]
        logits = last.new_zeros(len(prompts), last.shape[-1]).index_copy_(0, computed[writing], last[writing])
        nxt = inference.choose(logits, idx, rules, generator if temperature > 0 else None)
        nxt = torch.where(done, NEWLINE_CHAR, nxt)
        idx = torch.cat([idx, nxt[:, None]], dim=1)
        done |= nxt == NEWLINE_CHAR
        if done.all():
            break
        writing = ~done[computed]
        if (cache is None and not writing.all()) or writing.sum() < 0.75 * len(computed):
            computed = computed[writing]
            if cache is not None:
                cache.keep_rows(writing)
    return [CHARS.decode(row[len(prompts[0]):]).split("\n")[0] for row in idx.tolist()]


def sample_lines(model, n: int, temperature: float = 1.0, seed: int = 0, processors=()) -> list:
    """n lines sampled from scratch (after a newline), reproducible for a given seed; `processors` as in
    `generate`."""
    generator = torch.Generator().manual_seed(seed)
    return generate(model, ["\n"] * n, max_new=model.config.context - 1, temperature=temperature,
                    generator=generator, processors=processors)


def line_quality(lines: list) -> dict:
    """Share of lines that are well-formed (valid) and that are also true, by `world.check_line`."""
    checks = [world.check_line(line) for line in lines]
    return {"valid": sum(v for v, _ in checks) / len(lines), "true": sum(t for _, t in checks) / len(lines)}


def true_lines_by(lines: list, key) -> dict:
    """{key(line): (true lines, lines)} over the lines whose key is not None (`world.check_line` says true)."""
    counts = {}
    for line in lines:
        group = key(line)
        if group is not None:
            true, seen = counts.get(group, (0, 0))
            counts[group] = (true + world.check_line(line)[1], seen + 1)
    return counts


def additions_by_repeated_digit(lines: list) -> dict:
    """The addition lines (`world.template_of`) split by whether the right sum of their addends repeats a digit of the
    addends (what a repetition penalty on digits would push away from): {split: (true lines, lines)}; a line whose
    addends do not read as a+b= is left out.

    >>> additions_by_repeated_digit(["29+65=94.", "14+25=39.", "14+25=38.", "review: x"])
    {'sum repeats a digit': (1, 1), 'no digit repeated': (1, 2)}
    """
    def split(line):
        addends = re.match(r"(\d+)\+(\d+)=", line) if world.template_of(line) == "addition" else None
        if addends:
            a, b = addends.groups()
            return "sum repeats a digit" if set(str(int(a) + int(b))) & set(a + b) else "no digit repeated"
    found = true_lines_by(lines, split)
    return {name: found.get(name, (0, 0)) for name in ("sum repeats a digit", "no digit repeated")}


def true_by_kind(lines: list) -> dict:
    """{kind: (true lines, lines)} for each kind of line (the kind its first characters choose, `world.template_of`),
    in `world.KINDS` order: `line_quality`'s "true", kind by kind.

    >>> true_by_kind(["29+65=94.", "29+65=95.", "q: where does nobody live? a: here."])
    {'question': (0, 1), 'addition': (1, 2)}
    """
    found = true_lines_by(lines, world.template_of)
    return {kind: found[kind] for kind in world.KINDS if kind in found}


@torch.no_grad()
def rating_choices(model, reviews: list) -> list:
    """For each review, the rating whose characters the model finds most likely after `... rating: `
    (the sum of log-probabilities of `good.`, `ok.` or `bad.` and the closing newline)."""
    chars, choices = CHARS, []
    for review in reviews:
        prefix = "\n" + review[:review.index("rating: ") + len("rating: ")]
        ids = [chars.encode(prefix + rating + ".\n") for rating in world.RATINGS]
        longest = max(map(len, ids))
        batch = torch.tensor([x + [chars.encode("\n")[0]] * (longest - len(x)) for x in ids])
        losses = token_losses(model, batch)                                 # (3, longest - 1)
        scores = [losses[i, len(prefix) - 1:len(x) - 1].sum() for i, x in enumerate(ids)]
        choices.append(world.RATINGS[int(torch.stack(scores).argmin())])
    return choices


def row_at(log: list, step: int) -> dict:
    """The row of a training log written at `step`.

    >>> row_at([{"step": 50, "loss": 0.9}, {"step": 100, "loss": 0.5}], 100)["loss"]
    0.5
    """
    for row in log:
        if row["step"] == step:
            return row
    raise KeyError(f"no row at step {step}; the log has steps {[row['step'] for row in log]}")


def mean_of_last(log: list, key: str, rows: int = 5) -> float:
    """The mean of `key` over the last `rows` log rows that have it (a learning curve's end, smoothed).

    >>> mean_of_last([{"step": 0}, {"loss": 3.0}, {"loss": 1.0}, {"loss": 2.0}], "loss", rows=2)
    1.5
    """
    values = [row[key] for row in log if key in row][-rows:]
    return sum(values) / len(values)


def first_step_reaching(log: list, key: str, level: float, below: bool = False) -> int:
    """The first logged step whose `key` is at least `level` (`below`: at most, for a loss), or None if no row
    reaches it; rows without `key` are skipped.

    >>> first_step_reaching([{"step": 50, "acc": 0.5}, {"step": 100, "acc": 0.96}], "acc", 0.95)
    100
    >>> first_step_reaching([{"step": 0}, {"step": 50, "loss": 2.0}, {"step": 100, "loss": 0.9}], "loss", 1.0, below=True)
    100
    """
    return next((row["step"] for row in log if key in row and (row[key] <= level if below else row[key] >= level)), None)
