"""Linear probes: does a frozen model's representation say whether a food adjective is positive,
for adjectives the probe was never given a label for?

The probe reads the opening of a review up to its food adjective,
`review: the soup was tasty`, and nothing after it: the rest of a review
("and/but", the service adjective, the rating) determines the food's polarity
by the world's rule, so a probe given the whole line could learn that rule from
words it has seen labelled instead of reading the adjective.  Here the only
word that carries the answer is the adjective, and the test adjectives never
occur among the labelled examples: to be right, the representation itself must
place unseen positive and negative adjectives apart, which only pre-training
can have taught it.

    features = representations(model, "causal", "last", clause_sequences())   # (128, d)
    probe_accuracy(features, k=32)       # mean test accuracy over 100 draws of labels
    spread(probe_scores(features, k=32)) # (mean, low, high): the middle 90 % of the draws

Controls: the same probe on untrained models (`untrained_scores`: what the
architecture alone gives, one score per initialisation, compared with a
percentile of many), and on the trained model with `shuffled_polarity` labels
(what a probe reads when the labels mean nothing).

The probe is a ridge-regularised least-squares linear classifier (`fit_probe`):
closed form, so it is exact, deterministic and fast enough to repeat 100 times.

Readouts: "mean" / "last" position (single-stack models); for T5 "encoder mean",
"encoder at adjective" and "decoder at <0>" (the source gets a sentinel after the
adjective; the decoder state after `<bos> <0>`, where it starts writing what follows).
"""

import torch

from lib.data import world
from lib.nn.masks import bidirectional_mask, check_kind, for_kind, hide_padding
from lib.objectives.batches import pad
from lib.measure import precision
from lib.measure.protocols import decoder_logits
from lib.data.tokenizers import BOS, NEWLINE_WORD, SENTINELS, TOKENIZER

# a word-class probe: food adjectives (True) vs service adjectives (False)
WORD_CLASS = {**{a: True for a in world.FOOD_ADJECTIVES}, **{a: False for a in world.SERVICE_ADJECTIVES}}
PAIRS = [(food, adjective) for food in world.FOODS for adjective in world.FOOD_ADJECTIVES]
LABELS = torch.tensor([float(world.FOOD_ADJECTIVES[a]) for _, a in PAIRS], dtype=torch.float64)
READOUTS = {"causal": ("mean", "last"), "prefix": ("mean", "last"), "bidirectional": ("mean", "last"),
            "encoder-decoder": ("encoder mean", "encoder at adjective", "decoder at <0>")}


def clause_sequences() -> list:
    """Every (food, food adjective) opening as ids, in PAIRS order: 8 foods x 16 adjectives.

    >>> TOKENIZER.decode(clause_sequences()[0])
    '\\nreview: the soup was tasty'
    """
    return [[NEWLINE_WORD] + TOKENIZER.encode(f"review: the {food} was {adjective}") for food, adjective in PAIRS]


@torch.no_grad()
def representations(model, kind: str, readout: str, sequences: list) -> torch.Tensor:
    """(N, d) float64 features of a frozen model, read at the end of each sequence or averaged over it.

    The forward pass runs on a float64 copy of the model: in float32 the CPU's kernels round differently
    (measured: one T5 probe of section 04 scored 0.4925 with this CPU's kernels and 0.4927 with the generic
    ones, a test prediction near the boundary flipping), in float64 both give the same score."""
    check_kind(kind)
    if readout not in READOUTS[kind]:
        raise ValueError(f"readout {readout!r} does not exist for {kind}; choose one of {READOUTS[kind]}")
    model = precision.for_measurement(model)
    ids, is_pad = pad(sequences)
    T, last = ids.shape[1], torch.tensor([len(s) - 1 for s in sequences])
    real = (~is_pad).double()[..., None]
    rows = torch.arange(len(sequences))
    if kind == "encoder-decoder":
        if readout == "decoder at <0>":
            captured = []
            hook = model.ln_f.register_forward_hook(lambda module, args, out: captured.append(out))
            try:
                decoder_logits(model, [s + [SENTINELS[0]] for s in sequences], [[BOS, SENTINELS[0]]] * len(sequences))
            finally:
                hook.remove()
            return captured[0][:, 1].double()
        h = model.encode(ids, hide_padding(bidirectional_mask(T), is_pad)).double()
    else:
        masks = for_kind(kind, T, [len(s) for s in sequences])   # a prefix LM reads the opening as its prefix
        h = model.hidden_states(ids, hide_padding(masks, is_pad)).double()
    if readout in ("last", "encoder at adjective"):
        return h[rows, last]
    return (h * real).sum(1) / real.sum(1)


def fit_probe(x, y, l2: float = 1.0):
    """A ridge-regularised least-squares linear classifier on standardised features (closed form, so
    exact and instant): returns predict(x) -> True where it says positive.

    >>> predict = fit_probe(torch.tensor([[0.0], [1.0], [2.0], [3.0]]), torch.tensor([0.0, 0.0, 1.0, 1.0]))
    >>> predict(torch.tensor([[0.5], [2.5]])).tolist()
    [False, True]
    """
    x, y = x.double(), y.double() * 2 - 1                  # labels -1 / +1
    mean, std = x.mean(0), x.std(0, unbiased=False) + 1e-6
    z = (x - mean) / std
    bias = y.mean()
    w = torch.linalg.solve(z.T @ z + l2 * torch.eye(x.shape[1], dtype=torch.float64), z.T @ (y - bias))
    return lambda x_new: ((x_new.double() - mean) / std) @ w + bias > 0


def shuffled_polarity(seed: int) -> dict:
    """A control labelling: the 16 food adjectives split 8 / 8 into "positive" and "negative" at random,
    whatever their real polarity.  A probe that scores well on it reads something other than polarity.

    >>> sorted(shuffled_polarity(0).values()).count(True), shuffled_polarity(0) == shuffled_polarity(0)
    (8, True)
    """
    adjectives = list(world.FOOD_ADJECTIVES)
    order = torch.randperm(len(adjectives), generator=torch.Generator().manual_seed(seed)).tolist()
    return {adjectives[i]: rank < len(adjectives) // 2 for rank, i in enumerate(order)}


def probe_scores(features, k: int, repeats: int = 100, seed: int = 0, polarity: dict = None) -> list:
    """Test accuracy of a linear probe in each of `repeats` draws.  Each draw labels 4 positive and
    4 negative food adjectives (chosen at random), gives the probe k examples drawn at random
    from their openings, and tests it on every opening of the 8 other adjectives.  `polarity` replaces
    the world's labels (e.g. `shuffled_polarity`, a control)."""
    if tuple(features.shape[:1]) != (len(PAIRS),):
        raise ValueError(f"features must have one row per opening ({len(PAIRS)}), got {tuple(features.shape)}")
    if k < 2:
        raise ValueError(f"a probe needs at least 2 labelled examples, got k={k}")
    polarity = world.FOOD_ADJECTIVES if polarity is None else polarity
    if sorted(polarity) != sorted(world.FOOD_ADJECTIVES) or sum(map(bool, polarity.values())) * 2 != len(polarity):
        raise ValueError("polarity must label every food adjective, half of them positive")
    return heldout_scores(features, [a for _, a in PAIRS], polarity, k, repeats, seed)


def heldout_scores(features, words: list, labels: dict, k, repeats: int = 100, seed: int = 0) -> list:
    """Test accuracy of a linear probe in each of `repeats` draws, row i of `features` being an example of
    words[i] and labels[word] its class (True / False).  Each draw labels half of the words of each class
    (chosen at random), gives the probe k examples drawn at random from their rows (k=None: every row of
    them once), and tests it on every row of the other words."""
    targets = torch.tensor([float(labels[w]) for w in words], dtype=torch.float64)
    positive = [w for w, p in labels.items() if p]
    negative = [w for w, p in labels.items() if not p]
    g = torch.Generator().manual_seed(seed)
    scores = []
    for _ in range(repeats):
        labelled = {positive[i] for i in torch.randperm(len(positive), generator=g)[:len(positive) // 2]}
        labelled |= {negative[i] for i in torch.randperm(len(negative), generator=g)[:len(negative) // 2]}
        pool = torch.tensor([i for i, w in enumerate(words) if w in labelled])
        test = torch.tensor([i for i, w in enumerate(words) if w not in labelled])
        chosen = pool if k is None else pool[torch.randint(len(pool), (k,), generator=g)]
        predict = fit_probe(features[chosen], targets[chosen])
        scores.append(float((predict(features[test]).double() == targets[test]).double().mean()))
    return scores


def table_scores(model, labels: dict, repeats: int = 100) -> list:
    """`heldout_scores` of the rows of a network's token-embedding table for the words of `labels`: does the
    table itself place the held-out words of the two classes apart?  (`WORD_CLASS` or the food adjectives'
    polarity, `world.FOOD_ADJECTIVES`.)"""
    words = list(labels)
    with torch.no_grad():
        features = model.wte.weight[torch.tensor([TOKENIZER[w] for w in words])].double()
    return heldout_scores(features, words, labels, None, repeats)


def probe_accuracy(features, k: int, repeats: int = 100, seed: int = 0, polarity: dict = None) -> float:
    """Mean test accuracy of a linear probe over `repeats` draws (`probe_scores`)."""
    scores = probe_scores(features, k, repeats, seed, polarity)
    return sum(scores) / len(scores)


def spread(scores: list, share: float = 0.9) -> tuple:
    """(mean, low, high): the mean and the range that holds the middle `share` of the scores.

    >>> spread([1.0, 0.25, 0.5, 0.75, 0.5], share=0.6)
    (0.6, 0.5, 0.75)
    """
    ordered, cut = sorted(scores), (1 - share) / 2
    low, high = ordered[round(cut * (len(ordered) - 1))], ordered[round((1 - cut) * (len(ordered) - 1))]
    return sum(ordered) / len(ordered), low, high


def shuffled_accuracy(features, k: int = 32, shuffles: int = 10) -> float:
    """The probe's mean accuracy over `shuffles` random relabellings of the adjectives (`shuffled_polarity`):
    what it reads from these features when the labels mean nothing."""
    return sum(probe_accuracy(features, k, polarity=shuffled_polarity(seed)) for seed in range(shuffles)) / shuffles


def untrained_scores(build, kind: str, readouts: tuple, inits, k: int = 32) -> dict:
    """{readout: [probe_accuracy at k, one per initialisation]} for untrained networks: `build()` makes one
    (drawing from the global RNG), seeded with each seed in `inits` in turn.  A random network's score is a
    property of that network (where its random embeddings happen to put the 16 adjectives), so the bar a
    trained model must clear is a high percentile of many such networks, not the mean of a few."""
    scores = {readout: [] for readout in readouts}
    for model in precision.untrained(build, inits):
        for readout in readouts:
            scores[readout].append(probe_accuracy(representations(model, kind, readout, clause_sequences()), k))
    return scores
