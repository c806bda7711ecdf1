"""Counts over the real training batches of an objective (sections 03 and 04): what a batch function makes of
random windows of the review stream, drawn as training draws them.

- `training_batches`: the batches themselves; `totals`: positions, loss positions, sentinels, ... summed over them;
- `hidden_spans`: how many spans each example hides and where the first one starts;
- `target_losses`: what a trained model pays on the sentinel targets and on the content targets;
- `slot_counts` / `slot_generator_logits`: a stand-in ELECTRA generator (template-slot frequencies), so that
  ELECTRA's batches can be counted without a trained generator;
- `masked_character_counts`: masking characters instead of words, how many masked characters the rest of
  their word already determines.
"""

import re
from collections import Counter

import torch

from lib.data.tokenizers import MASK, NEWLINE_WORD, PAD, SENTINELS, TOKENIZER
from lib.measure.protocols import RATING_IDS
from lib.objectives.batches import UNCHANGED, VOCAB_SIZE, batch_logits, electra_batch, mlm_batch, random_windows

TEMPLATE_SLOTS = 17   # a review and its newline: 17 word tokens


def windows_and_batches(make_batch, stream, window: int, batch_size: int, batches: int, seed: int = 0):
    """(windows, batch) for the first `batches` batches that make_batch(windows, generator) builds from random
    `window`-token windows of `stream`, one generator seeded `seed` drawing both the windows and the corruption
    (as in training)."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(batches):
        windows = random_windows(stream, window, batch_size, g)
        yield windows, make_batch(windows, g)


def training_batches(make_batch, stream, window: int, batch_size: int, batches: int, seed: int = 0):
    """The batches of `windows_and_batches`."""
    for _, batch in windows_and_batches(make_batch, stream, window, batch_size, batches, seed):
        yield batch


def hidden_runs(batch, b: int) -> list:
    """[(start, end)] of the runs of window positions that example b of a batch hides: the spans of an
    encoder-decoder batch (each sentinel of the source stands for the tokens the target gives it), or the
    runs of adjacent loss positions of a masked-LM batch (BERT: the positions its objective selects, kept,
    replaced or masked).  T5-style batches only: UL2's mode token and BART's sentinel-free targets do not map
    back to window positions this way."""
    if hasattr(batch, "is_sentinel"):
        if getattr(batch, "modes", None) is not None or not bool(batch.is_sentinel[b].any()):
            raise ValueError("hidden_runs reads T5 span-corruption batches (sentinels, no mode token) and "
                             "masked-LM batches only")
        sentinels = set(SENTINELS)
        lengths = []
        for token in batch.targets[b][batch.loss_mask[b]].tolist():
            if token in sentinels:
                lengths.append(0)
            else:
                lengths[-1] += 1
        runs, position = [], 0
        for token in batch.source[b][batch.source[b] != PAD].tolist():
            if token in sentinels:
                runs.append((position, position + lengths[len(runs)]))
                position += lengths[len(runs) - 1]
            else:
                position += 1
        return runs
    masked, runs = batch.loss_mask[b].tolist(), []
    for i, hidden in enumerate(masked):
        if hidden and (i == 0 or not masked[i - 1]):
            runs.append([i, i + 1])
        elif hidden:
            runs[-1][1] = i + 1
    return [tuple(r) for r in runs]


def rating_hiding(make_batch, stream, window: int, batch_size: int, batches: int = 50, seed: int = 0) -> Counter:
    """How the training examples hide a review's rating, counted in the window's own coordinates (a window
    starts anywhere in the stream, so the rating can be at any position): "ratings" in the windows, "hidden"
    ones, and among those "alone" (the hidden run is the rating and nothing else), "starts" (a run starts at
    the rating) and "only" (the example hides that one token and nothing else: the shared question's shape).
    Masked-LM batches hide single positions; a run is adjacent masked positions."""
    counts, ratings = Counter(), set(RATING_IDS)
    for windows, batch in windows_and_batches(make_batch, stream, window, batch_size, batches, seed):
        for b, row in enumerate(windows.tolist()):
            runs = hidden_runs(batch, b)
            for position, token in enumerate(row):
                if token not in ratings:
                    continue
                counts["ratings"] += 1
                run = next((r for r in runs if r[0] <= position < r[1]), None)
                if run is None:
                    continue
                counts.update(hidden=1, alone=run == (position, position + 1), starts=run[0] == position,
                              only=runs == [(position, position + 1)])
    return counts


def batch_counts(batch) -> Counter:
    """One batch's counts: positions processed (padding excluded), the padded tensor positions the model runs
    (`padded`: source plus decoder input for an encoder-decoder), loss positions, and where the batch has them,
    rating targets (loss positions whose target is good, ok or bad: a prediction of a review's rating),
    sentinel and content targets, ELECTRA's selected and replaced positions, and the source tokens that are
    neither padding nor <mask> (BART: the loss positions minus these are the words the encoder cannot see), and
    a masked LM's `kept` loss positions (selected and left unchanged: the input shows the answer; a random
    replacement that happens to draw the original shows it too, about rate x 0.1 / V of them, not counted)."""
    counts = Counter(positions=batch.positions if hasattr(batch, "positions") else int(batch.loss_mask.numel()),
                     loss=int(batch.loss_mask.sum()),
                     padded=int(batch.source.numel() + batch.decoder_input.numel()) if hasattr(batch, "source")
                     else int(batch.loss_mask.numel()))
    if hasattr(batch, "targets"):
        counts.update(rating_targets=int((batch.loss_mask & torch.isin(batch.targets, torch.tensor(RATING_IDS))).sum()))
    if hasattr(batch, "is_sentinel"):
        counts.update(sentinels=int(batch.is_sentinel.sum()), content=int((batch.loss_mask & ~batch.is_sentinel).sum()),
                      source_unmasked=int(((batch.source != PAD) & (batch.source != MASK)).sum()))
    if hasattr(batch, "replaced"):
        counts.update(selected=int(batch.selected.sum()), replaced=int(batch.replaced.sum()))
    if getattr(batch, "actions", None) is not None:
        counts.update(kept=int((batch.loss_mask & (batch.actions == UNCHANGED)).sum()))
    return counts


def totals(make_batch, stream, window: int, batch_size: int, batches: int, seed: int = 0) -> Counter:
    """`batch_counts` summed over the `training_batches` (integers: divide by batches or by positions yourself)."""
    total = Counter()
    for batch in training_batches(make_batch, stream, window, batch_size, batches, seed):
        total.update(batch_counts(batch))
    return total


@torch.no_grad()
def target_losses(model, make_batch, stream, window: int, batch_size: int, batches: int, seed: int = 0) -> dict:
    """What an encoder-decoder pays on its own objective's targets, over the `training_batches`: the summed
    cross-entropy (nats) and the count of each kind of target — "first" (the sentinel every target opens with,
    `<0>`), "closing" (each target's last sentinel), "middle" (the sentinels between: where a span ends), "content"
    (the hidden words) — and the sentinels' share of the whole loss."""
    total = Counter()
    for batch in training_batches(make_batch, stream, window, batch_size, batches, seed):
        nats = torch.nn.functional.cross_entropy(batch_logits(model, batch).transpose(1, 2), batch.targets,
                                                 reduction="none")
        sentinel = batch.loss_mask & batch.is_sentinel
        position = torch.arange(sentinel.shape[1])
        last = torch.where(sentinel, position, -1).max(1, keepdim=True).values         # each row's closing sentinel
        kinds = {"first": sentinel & (position == 0), "closing": sentinel & (position == last) & (position > 0),
                 "content": batch.loss_mask & ~batch.is_sentinel}
        kinds["middle"] = sentinel & ~kinds["first"] & ~kinds["closing"]
        for name, where in kinds.items():
            total[name] += float(nats[where].sum())
            total[name + " targets"] += int(where.sum())
    sentinels = total["first"] + total["middle"] + total["closing"]
    return {**total, "sentinel share": sentinels / (sentinels + total["content"])}


def hidden_spans(make_batch, stream, window: int, batch_size: int, batches: int = 50, seed: int = 0) -> tuple:
    """(Counter {hidden spans in an example: examples}, Counter {where its first span starts: examples with one})
    over the `training_batches`.  Encoder-decoder batches: a span is a sentinel of the target (the closing one
    not counted), its start the position of <0> in the source; stack batches (BERT): every loss position is a
    span of one, the first one the start."""
    counts, first = Counter(), Counter()
    for b in training_batches(make_batch, stream, window, batch_size, batches, seed):
        if hasattr(b, "is_sentinel"):
            n = b.is_sentinel.sum(1) - 1
            start = (b.source == SENTINELS[0]).int().argmax(1)
        else:
            n = b.loss_mask.sum(1)
            start = b.loss_mask.int().argmax(1)
        counts.update(n.tolist())
        first.update(start[n > 0].tolist())
    return counts, first


def slot_counts(lines: list) -> torch.Tensor:
    """(TEMPLATE_SLOTS, vocabulary) counts: how often each token fills each slot of the review template, over
    `lines` (reviews, each read with its closing newline)."""
    counts = torch.zeros(TEMPLATE_SLOTS, VOCAB_SIZE)
    for line in lines:
        for slot, i in enumerate(TOKENIZER.encode(line + "\n")):
            counts[slot, i] += 1
    return counts


def slot_generator_logits(windows, counts) -> torch.Tensor:
    """A stand-in generator's logits (B, T, vocabulary): at each position, the log of how often each word fills
    that template slot (`slot_counts`).  It knows the slot (from where the newlines are), no other context."""
    logits = torch.empty(*windows.shape, VOCAB_SIZE)
    for row, w in enumerate(windows):
        newlines = (w == NEWLINE_WORD).nonzero().flatten().tolist()
        offset = newlines[0] + 1 if newlines else 0
        logits[row] = counts[(torch.arange(w.shape[0]) - offset) % TEMPLATE_SLOTS].log()
    return logits


def words_by_length(text: str) -> dict:
    """{length: [every distinct word (a run of letters or digits) of that length in `text`]}.

    >>> sorted(words_by_length("the soup, 12 and 7")[3])
    ['and', 'the']
    """
    words = {}
    for word in set(re.findall(r"[a-z0-9]+", text)):
        words.setdefault(len(word), []).append(word)
    return words


def stand_in_electra_batch(windows, counts, generator) -> tuple:
    """(the generator's input, ELECTRA's batch) for `windows` with the stand-in generator (`slot_generator_logits`
    over `slot_counts`): every selected position is <mask> for the generator, as the paper masks."""
    masked = mlm_batch(windows, generator, mask_share=1.0, random_share=0.0)
    return masked, electra_batch(masked, slot_generator_logits(windows, counts), generator)


def masked_character_counts(text: str, rate: float = 0.15, seed: int = 0) -> Counter:
    """Mask each character of `text` with probability `rate` (a generator seeded `seed`) and count: "characters",
    "masked", and for masked letters and digits inside a word, "letters" / "digits" and "letters determined" /
    "digits determined": those that only one word of `text` of the same length fits, given the word's unmasked
    characters."""
    vocabulary = words_by_length(text)
    masked = (torch.rand(len(text), generator=torch.Generator().manual_seed(seed)) < rate).tolist()
    counts = Counter(characters=len(text), masked=sum(masked))
    for m in re.finditer(r"[a-z0-9]+", text):
        word, hidden = m.group(), masked[m.start():m.end()]
        if not any(hidden):
            continue
        fits = [w for w in vocabulary[len(word)] if all(h or a == b for a, b, h in zip(w, word, hidden))]
        kind = "digits" if word.isdigit() else "letters"
        for i, h in enumerate(hidden):
            if h:
                counts[kind] += 1
                counts[kind + " determined"] += len({w[i] for w in fits}) == 1
    return counts
