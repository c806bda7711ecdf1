"""Supervised fine-tuning's batches and loss: labels of -100 on what the model is not asked to predict.

    inputs, labels = sft_batch([(prompt, answer), ...])                 # loss on the answers only
    loss = masked_sft_loss(model(inputs), labels)                       # mean over the labelled positions
    inputs, labels = sft_batch(pairs, prompt_loss=True)                 # loss on every character
    ids, labels, segments, positions = pack(pairs, context=96)          # several examples per row

A label says which character the position must predict; -100 (IGNORE) says "no loss here".  The prompt's labels
are IGNORE, so the prompt's own predictions cost nothing; its positions are still read by every answer position
through attention, and so still receive gradient (section 11 measures both).

Padding fills a row after its example.  Its labels must be IGNORE by *position*: the pad character here is the
newline, which is also the end of the reply, and masking by *id* (every label equal to the pad character)
would also mask the end, so the model is never asked to stop (`padding="by_id"`, the bug section 11 shows).
"""

import torch
import torch.nn.functional as F

from lib.data.tokenizers import CHARS
from lib.nn.masks import hide_padding

IGNORE = -100
PAD = CHARS.encode("\n")[0]


def masked_sft_loss(logits, labels, reduction: str = "mean"):
    """Cross-entropy of logits (..., V) against labels (...), IGNORE skipped: the mean over the labelled positions
    ("mean"), or their sum ("sum", for gradient accumulation normalised by the whole batch's count)."""
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    if not (labels != IGNORE).any():
        raise ValueError("every label is IGNORE: there is nothing to learn from this batch")
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1), ignore_index=IGNORE,
                           reduction=reduction)


def weighted_sft_loss(logits, answer_labels, prompt_labels, prompt_weight: float):
    """GPT-1's form: the answer's mean loss plus prompt_weight times the prompt's mean loss (`prompt_only` labels),
    the answer keeping its weight of 1 however long the prompt is."""
    return masked_sft_loss(logits, answer_labels) + prompt_weight * masked_sft_loss(logits, prompt_labels)


def example_ids(prompt: str, answer: str, prompt_loss: bool = False) -> tuple:
    """(inputs, labels) of one example, lists of ids: inputs the text but its last character, labels the next
    character at each position, IGNORE where the next character is still the prompt's (unless prompt_loss).
    The first prompt character is never a label (nothing comes before it)."""
    if not prompt or not answer:
        raise ValueError("an example needs a prompt (at least the newline that starts it) and an answer")
    ids = CHARS.encode(prompt + answer)
    labels = ids[1:]
    if not prompt_loss:
        labels = [IGNORE] * (len(prompt) - 1) + labels[len(prompt) - 1:]
    return ids[:-1], labels


def sft_batch(pairs: list, prompt_loss: bool = False, padding: str = "by_position", length: int = None) -> tuple:
    """(inputs (B, T), labels (B, T)) of (prompt, answer) pairs, right-padded with PAD to the longest (or to
    `length`).  padding="by_position" ignores the padded positions; "by_id" ignores every label equal to PAD,
    the end of the reply included (a common bug, kept to show what it does)."""
    if padding not in ("by_position", "by_id"):
        raise ValueError(f"padding must be 'by_position' or 'by_id', got {padding!r}")
    rows = [example_ids(p, a, prompt_loss) for p, a in pairs]
    T = length or max(len(x) for x, _ in rows)
    if any(len(x) > T for x, _ in rows):
        raise ValueError(f"an example is longer than length={T}")
    inputs = torch.tensor([x + [PAD] * (T - len(x)) for x, _ in rows])
    labels = torch.tensor([y + [IGNORE] * (T - len(y)) for _, y in rows])
    if padding == "by_id":
        labels = labels.masked_fill(labels == PAD, IGNORE)
    return inputs, labels


def prompt_only(answer_labels, every_labels):
    """The labels of the prompt alone: `every_labels` (prompt_loss=True) with the answer's positions IGNORE."""
    return every_labels.masked_fill(answer_labels != IGNORE, IGNORE)


def pack(pairs: list, context: int, prompt_loss: bool = False) -> tuple:
    """(ids, labels, segments, positions), each (rows, context): examples laid end to end into rows of
    `context` positions (in order; a new row when the next one does not fit: next fit), the rest padded.  segments numbers the examples of a row from 1
    (0: padding); positions restart at 0 at every example.  Read with `packed_mask(segments)`, each example
    sees itself alone, at its own positions: the same losses as reading it alone."""
    rows = [[]]
    for p, a in pairs:
        x, y = example_ids(p, a, prompt_loss)
        if len(x) > context:
            raise ValueError(f"an example of {len(x)} positions does not fit a context of {context}")
        if sum(len(e[0]) for e in rows[-1]) + len(x) > context:
            rows.append([])
        rows[-1].append((x, y))
    ids = torch.full((len(rows), context), PAD)
    labels = torch.full((len(rows), context), IGNORE)
    segments = torch.zeros((len(rows), context), dtype=torch.long)
    positions = torch.zeros((len(rows), context), dtype=torch.long)
    for r, row in enumerate(rows):
        at = 0
        for number, (x, y) in enumerate(row, start=1):
            ids[r, at:at + len(x)], labels[r, at:at + len(x)] = torch.tensor(x), torch.tensor(y)
            segments[r, at:at + len(x)], positions[r, at:at + len(x)] = number, torch.arange(len(x))
            at += len(x)
    return ids, labels, segments, positions


def packed_mask(segments):
    """(rows, T, T) attention mask of packed rows: causal, and only within the same example (block-diagonal).
    A padding position (segment 0) attends to itself alone, so that its softmax exists (nothing reads it)."""
    T = segments.shape[1]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    same = segments[:, :, None] == segments[:, None, :]
    return hide_padding(causal & same, segments == 0)


def packed_logits(model, ids, segments, positions, naive: bool = False):
    """Logits (rows, T, V) of packed rows.  naive=True reads them as one text (causal mask, positions
    0..T-1): each example then sees the ones before it in its row, at positions that are not its own."""
    if naive:
        return model(ids)
    return model.output(model.hidden_states(ids, packed_mask(segments), positions=positions))
