"""Section 11's trainers: supervised fine-tuning (full or LoRA) of a trained model, and preference tuning.

    model, log = train_sft({"task": "visit", "examples": 24, "prompt_loss": False, ...}, parents=(base,))
    model, log = train_preference({"loss": "dpo", "beta": 0.1, "pairs": 256, ...}, parents=(reference,))

SFT: each step draws `batch_size` of the run's `examples` training pairs (`chat.examples`, drawn by the run's seed),
pads them (`sft.sft_batch`: prompt_loss, padding) and minimises `masked_sft_loss`; with config["prompt_weight"] = λ,
the answer's mean loss plus λ times the prompt's (GPT-1's task loss + λ·LM loss); config["answer_scale"] multiplies
the answer's loss by a constant (the dilution of the answer in `all`, without the prompt's loss).  config["task"] = "facts" trains
instead on `people` new facts as plain lines (`NAME lives in CITY.`, every character a target), section 11's
knowledge-injection test.  With config["lora_rank"] = r only LoRA adapters train (`nn.lora.with_lora`, alpha
config["lora_alpha"]), and the checkpoint holds the merged model (a plain TinyGPT).

Preference: the policy starts as its parent (the reference, which stays frozen); each step draws pairs and
minimises DPO's or IPO's loss on summed answer log-probabilities, or ("sft") the chosen answers' SFT loss, the
baseline that never sees a rejected answer.

Every `eval_every` steps the log records what section 11 reads (`finetuning_evals`): for SFT the test half's
accuracy and stop rate (or the new and old facts' recall) and the validation text's bits per character (what
pretraining knew, forgotten or not); for preference tuning the held-out pairs' log-probabilities, margin and
implicit-reward accuracy, the true rate of sampled reviews and the KL to the reference.
"""

import copy

import torch

from lib.data import chat, world
from lib.data.seeding import seed_everything
from lib.measure import answers, evals, finetuning_evals
from lib.nn.lora import merge_lora, trainable_parameters, with_lora
from lib.objectives.preference import PREFERENCE_LOSSES, answer_log_probs, pair_batch, split_pair_scores
from lib.objectives.sft import masked_sft_loss, prompt_only, sft_batch, weighted_sft_loss
from lib.train.cache import trainer
from lib.train.loop import fit

TEST_ITEMS = 96          # test questions read at each evaluation (all 24 for `where`)
HELD_OUT_PAIRS = 128     # preference pairs of the test half read at each evaluation
SAMPLES = 96             # reviews sampled at each evaluation of preference tuning


def chat_pairs(config: dict) -> tuple:
    """(training pairs, test pairs) of an SFT run on a chat task: the examples drawn by its seed, and the test
    questions its log's accuracy reads (TEST_ITEMS, or all the task has)."""
    test = chat.examples(config["task"], "test")
    return (chat.examples(config["task"], "train", config["examples"], seed=config["seed"]),
            chat.examples(config["task"], "test", min(TEST_ITEMS, len(test))))


def _draw(pairs: list, count: int, generator) -> list:
    return [pairs[i] for i in torch.randint(len(pairs), (count,), generator=generator).tolist()]


def _evaluated(model, evaluate) -> dict:
    """evaluate(model) in eval mode, the model left in training mode (the log's row at step 0)."""
    model.eval()
    result = evaluate(model)
    model.train()
    return result


@trainer("sft", version=1)
def train_sft(config: dict, parents=(), desc: str = "sft"):
    generator = seed_everything(config["seed"])
    rank = config.get("lora_rank")
    model = with_lora(parents[0], rank, config["lora_alpha"]) if rank else copy.deepcopy(parents[0])
    model.train()
    val = world.load_text("val").splitlines()
    if config["task"] == "facts":
        new, home = chat.new_people(config["people"]), world.build_world().home
        pairs = chat.fact_pairs(new)

        def evaluate(m):
            return {"new_recall": answers.fact_recall(m, new), "old_recall": answers.fact_recall(m, home),
                    "old_questions": answers.fact_completion(m)["accuracy"], "val_bits": evals.bits_per_char(m, val)}
    elif config["task"] == "review":         # one request, many right answers: read the true rate of samples
        pairs = chat.with_wrong_ratings(chat.examples("review", "train", config["examples"], seed=config["seed"]),
                                        config.get("wrong_share", 0.0), seed=config["seed"])

        def evaluate(m):
            said = finetuning_evals.sampled_replies(m, chat.REVIEW_PROMPT, SAMPLES, seed=0)
            return {"true_rate": evals.line_quality(finetuning_evals.first_lines(said))["true"],
                    "stopped": sum(s.endswith(chat.END) for s in said) / len(said), "val_bits": evals.bits_per_char(m, val)}
    else:
        pairs, test = chat_pairs(config)

        def evaluate(m):
            return {**finetuning_evals.chat_scores(m, test), "val_bits": evals.bits_per_char(m, val)}

    weight = config.get("prompt_weight")    # GPT-1's form: the answer's mean loss + weight x the prompt's mean loss
    if weight and config["prompt_loss"]:
        raise ValueError("prompt_weight adds the prompt's loss to the answer's: it needs prompt_loss=False")

    def batch():
        drawn = _draw(pairs, config["batch_size"], generator)
        inputs, labels = sft_batch(drawn, config["prompt_loss"], config["padding"])
        return (inputs, labels) + ((prompt_only(labels, sft_batch(drawn, True, config["padding"])[1]),) if weight else ())

    scale = config.get("answer_scale", 1.0)   # a constant factor on the loss: AdamW's steps hardly depend on it

    def loss_fn(m, b):
        return weighted_sft_loss(m(b[0]), b[1], b[2], weight) if weight else scale * masked_sft_loss(m(b[0]), b[1])

    start = {"step": 0, "trainable": trainable_parameters(model), **_evaluated(model, evaluate)}
    log = [start] + fit(model, batch, loss_fn, config, evaluate=evaluate, desc=desc)
    return (merge_lora(model) if rank else model).eval(), log


@trainer("preference", version=1)
def train_preference(config: dict, parents=(), desc: str = "preference"):
    generator = seed_everything(config["seed"])
    reference = parents[0]                     # loaded in eval mode, read under no_grad only: it never changes
    policy = copy.deepcopy(reference).train()
    pairs = chat.preference_pairs("train", config["pairs"], seed=config["seed"])
    held_out = chat.preference_pairs("test", HELD_OUT_PAIRS, seed=0)
    inputs, labels = pair_batch(pairs)
    with torch.no_grad():
        ref_chosen, ref_rejected = split_pair_scores(answer_log_probs(reference, inputs, labels))
    B = len(pairs)

    def loss_fn(m, drawn):                 # drawn: (batch_size,) pair numbers; row i chosen, row B + i rejected
        if config["loss"] == "sft":        # the baseline: the chosen answers' SFT loss, the rejected never seen
            return masked_sft_loss(m(inputs[drawn]), labels[drawn])
        both = torch.cat([drawn, drawn + B])
        chosen, rejected = split_pair_scores(answer_log_probs(m, inputs[both], labels[both]))
        return PREFERENCE_LOSSES[config["loss"]](chosen, rejected, ref_chosen[drawn], ref_rejected[drawn], config["beta"])

    def evaluate(m):
        said = finetuning_evals.sampled_replies(m, chat.REVIEW_PROMPT, SAMPLES, seed=0)
        return {**finetuning_evals.pair_readout(m, reference, held_out),
                "true_rate": evals.line_quality(finetuning_evals.first_lines(said))["true"],
                "kl": finetuning_evals.kl_estimate(m, reference, chat.REVIEW_PROMPT, said)}

    log = [{"step": 0, **_evaluated(policy, evaluate)}] + fit(policy, lambda: torch.randint(B, (config["batch_size"],), generator=generator), loss_fn, config,
              evaluate=evaluate, desc=desc)
    return policy, log
