"""Preference tuning's losses: DPO (Rafailov et al., 2023) and IPO (Azar et al., 2023), on summed log-probabilities.

    logp = answer_log_probs(model, inputs, labels)              # (B,) log π(answer | prompt), summed over characters
    loss = dpo_loss(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta=0.1)

Write h = [log π(y_w) − log π_ref(y_w)] − [log π(y_l) − log π_ref(y_l)]: how much more the policy has raised the
chosen answer y_w than the rejected y_l, each measured against the reference model.  DPO minimises
−log σ(β·h): the loss of a logistic model that reads β·h as the reward margin (the implicit reward of an answer is
β·log π/π_ref).  Its gradient never vanishes while h is finite, so when every pair is always preferred the same way
h grows without bound.  IPO regresses h onto a target instead: (h − 1/(2β))², which stops at h = 1/(2β).
"""

import torch
import torch.nn.functional as F

from lib.objectives.sft import IGNORE, sft_batch


def answer_log_probs(model, inputs, labels):
    """(B,) the log-probability of each row's labelled characters (the answer), summed."""
    logp = model(inputs).log_softmax(dim=-1)                                     # (B, T, V)
    picked = logp.gather(-1, labels.clamp(min=0)[..., None])[..., 0]            # (B, T)
    return torch.where(labels != IGNORE, picked, 0.0).sum(dim=1)


def margins(policy_chosen, policy_rejected, reference_chosen, reference_rejected):
    """h = (log π(y_w) − log π_ref(y_w)) − (log π(y_l) − log π_ref(y_l)), per pair."""
    return (policy_chosen - reference_chosen) - (policy_rejected - reference_rejected)


def dpo_loss(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta: float):
    """The mean of −log σ(β·h) over pairs (inputs: summed sequence log-probabilities, (B,) each).  ln 2 when the
    policy is the reference."""
    if beta <= 0:
        raise ValueError(f"beta must be positive, got {beta}")
    return -F.logsigmoid(beta * margins(policy_chosen, policy_rejected, reference_chosen, reference_rejected)).mean()


def ipo_loss(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta: float):
    """The mean of (h − 1/(2β))² over pairs: IPO's regression of the margin onto a finite target."""
    if beta <= 0:
        raise ValueError(f"beta must be positive, got {beta}")
    h = margins(policy_chosen, policy_rejected, reference_chosen, reference_rejected)
    return ((h - 1 / (2 * beta)) ** 2).mean()


PREFERENCE_LOSSES = {"dpo": dpo_loss, "ipo": ipo_loss}


def pair_batch(pairs: list):
    """(inputs, labels) of the chosen answers followed by the rejected ones (2B rows): (prompt, chosen,
    rejected) triples, loss on the answers only."""
    return sft_batch([(p, c) for p, c, _ in pairs] + [(p, r) for p, _, r in pairs])


def split_pair_scores(scores) -> tuple:
    """(chosen, rejected) halves of scores computed on a `pair_batch`."""
    B = scores.shape[0] // 2
    return scores[:B], scores[B:]

