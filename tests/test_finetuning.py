"""Section 11: the SFT mask, packing, LoRA and the preference losses (lib.objectives.sft / preference, lib.nn.lora),
and the chat data they read (lib.data.chat)."""

import math

import pytest
import torch
import torch.nn.functional as F

from lib.data import chat, world
from lib.measure import precision
from lib.nn.masks import causal_mask
from lib.nn.lora import LoRALinear, merge_lora, trainable_parameters, with_lora
from lib.nn.models import ModelConfig, TinyGPT
from lib.objectives.preference import answer_log_probs, dpo_loss, ipo_loss
from lib.objectives.sft import CHARS, IGNORE, PAD, masked_sft_loss, pack, packed_logits, sft_batch


def model(seed: int = 0):
    torch.manual_seed(seed)
    return precision.for_measurement(TinyGPT(ModelConfig()), copy_model=False)


PAIRS = chat.examples("where", "train", 5) + chat.examples("visit", "train", 3) + chat.examples("rate", "train", 4)


def test_masked_loss_is_the_mean_over_the_answer_positions_and_ignores_the_prompt_labels():
    m = model()
    inputs, labels = sft_batch(PAIRS)
    logits = m(inputs)
    by_hand = [F.cross_entropy(logits[b, t], labels[b, t]) for b in range(len(PAIRS))
               for t in range(labels.shape[1]) if labels[b, t] != IGNORE]
    assert masked_sft_loss(logits, labels).item() == pytest.approx(torch.stack(by_hand).mean().item(), rel=1e-12)
    answer_chars = sum(len(a) for _, a in PAIRS)
    assert int((labels != IGNORE).sum()) == answer_chars          # every answer character, nothing else
    prompt_end = len(PAIRS[0][0]) - 1
    assert labels[0, prompt_end - 1] == IGNORE and labels[0, prompt_end] != IGNORE
    _, every = sft_batch(PAIRS, prompt_loss=True)                 # the same batch with the prompt's labels
    assert torch.equal(every.masked_fill(labels == IGNORE, IGNORE), labels)
    every[0, 3] = (every[0, 3] + 1) % 44                           # change a prompt label:
    assert masked_sft_loss(logits, every.masked_fill(labels == IGNORE, IGNORE)) == masked_sft_loss(logits, labels)
    with pytest.raises(ValueError):
        masked_sft_loss(logits, torch.full_like(labels, IGNORE))


def test_prompt_logits_get_no_gradient_but_the_prompt_embeddings_do():
    m = model()
    inputs, labels = sft_batch(PAIRS[:1])
    x = m.embed(inputs).detach().requires_grad_(True)
    h = x
    for block in m.blocks:
        h, _ = block(h, causal_mask(inputs.shape[1]).expand(1, -1, -1))
    logits = m.output(m.ln_f(h))
    logits.retain_grad()
    masked_sft_loss(logits, labels).backward()
    prompt = len(PAIRS[0][0]) - 1                                 # positions whose label is IGNORE
    assert logits.grad[0, :prompt].abs().max() == 0
    assert logits.grad[0, prompt:].abs().max() > 0
    assert (x.grad[0, :prompt].norm(dim=-1) > 0).all()            # read by the answer through attention


def test_padding_by_id_also_ignores_the_end_of_the_reply():
    _, by_position = sft_batch(PAIRS)
    _, by_id = sft_batch(PAIRS, padding="by_id")
    assert (by_position == PAD).sum() == 2 * len(PAIRS)           # each reply's two newlines: its line's, the end
    assert (by_id == PAD).sum() == 0


def test_packed_rows_give_the_unpacked_losses_and_naive_packing_does_not():
    m = model(1)
    inputs, labels = sft_batch(PAIRS)
    alone = masked_sft_loss(m(inputs), labels, reduction="sum")
    ids, packed_labels, segments, positions = pack(PAIRS, context=96)
    assert ids.shape[0] < len(PAIRS)                               # it did pack
    packed = masked_sft_loss(packed_logits(m, ids, segments, positions), packed_labels, reduction="sum")
    naive = masked_sft_loss(packed_logits(m, ids, segments, positions, naive=True), packed_labels, reduction="sum")
    assert packed.item() == pytest.approx(alone.item(), rel=1e-10)
    assert abs(naive.item() - alone.item()) > 1e-6 * alone.item()    # (untrained: context matters little)


def test_gradient_accumulation_equals_the_full_batch_only_when_normalised_by_token_count():
    m = model(2)
    full_inputs, full_labels = sft_batch(PAIRS)
    masked_sft_loss(m(full_inputs), full_labels).backward()
    full = [p.grad.clone() for p in m.parameters()]
    micro = [PAIRS[:6], PAIRS[6:]]                                 # different numbers of answer characters
    total = sum((sft_batch(part)[1] != IGNORE).sum() for part in micro)
    for by_tokens in (True, False):
        m.zero_grad()
        for part in micro:
            inputs, labels = sft_batch(part, length=full_inputs.shape[1])
            logits = m(inputs)
            loss = (masked_sft_loss(logits, labels, "sum") / total if by_tokens
                    else masked_sft_loss(logits, labels) / len(micro))
            loss.backward()
        gap = max((p.grad - g).abs().max().item() for p, g in zip(m.parameters(), full))
        assert (gap < 1e-12) if by_tokens else (gap > 1e-6)


def test_lora_starts_as_the_base_merges_exactly_and_trains_r_times_d_in_plus_d_out_numbers():
    m = model(3)
    adapted = with_lora(m, r=4, alpha=8)
    idx = torch.randint(0, 44, (2, 30), generator=torch.Generator().manual_seed(0))
    assert torch.equal(adapted(idx), m(idx))
    per_block = 4 * (64 + 192) + 4 * (64 + 64) + 4 * (64 + 256) + 4 * (256 + 64)
    assert trainable_parameters(adapted) == 2 * per_block
    for layer in adapted.modules():                               # move every adapter off zero
        if isinstance(layer, LoRALinear):
            torch.nn.init.normal_(layer.B, std=0.05)
    merged = merge_lora(adapted)
    assert not any(isinstance(x, LoRALinear) for x in merged.modules())
    assert (merged(idx) - adapted(idx)).abs().max() < 1e-12
    assert (merged(idx) - m(idx)).abs().max() > 1e-3
    assert torch.equal(m(idx), model(3)(idx))                     # the base model itself is untouched
    layer = LoRALinear(torch.nn.Linear(5, 3), r=2, alpha=4)
    torch.nn.init.normal_(layer.B)
    x = torch.randn(7, 5)
    assert torch.allclose(layer(x), layer.base(x) + 4 / 2 * x @ layer.A.T @ layer.B.T)   # the scale is alpha / r
    state = torch.get_rng_state()
    assert type(layer.merged()) is torch.nn.Linear
    assert torch.equal(torch.get_rng_state(), state)                                 # merging draws nothing
    with pytest.raises(ValueError):
        LoRALinear(torch.nn.Linear(5, 3), r=0, alpha=1)


def test_dpo_is_its_formula_and_ln2_when_the_policy_is_the_reference():
    g = torch.Generator().manual_seed(0)
    pc, pr, rc, rr = (torch.randn(8, generator=g, dtype=torch.double) * 5 for _ in range(4))
    beta = 0.3
    h = (pc - rc) - (pr - rr)
    assert dpo_loss(pc, pr, rc, rr, beta).item() == pytest.approx(
        torch.mean(torch.log1p(torch.exp(-beta * h))).item(), rel=1e-12)
    assert dpo_loss(pc, pr, pc, pr, beta).item() == pytest.approx(math.log(2), rel=1e-15)
    assert ipo_loss(pc, pr, rc, rr, beta).item() == pytest.approx(((h - 1 / (2 * beta)) ** 2).mean().item())
    with pytest.raises(ValueError):
        dpo_loss(pc, pr, rc, rr, 0.0)


def test_answer_log_probs_sum_the_answer_characters():
    m = model(4)
    inputs, labels = sft_batch(PAIRS[:2])
    logp = answer_log_probs(m, inputs, labels).detach()
    for row, (prompt, answer) in enumerate(PAIRS[:2]):
        text = prompt + answer
        ids = torch.tensor([CHARS.encode(text)])
        lp = m(ids[:, :-1]).log_softmax(-1)[0]
        by_hand = sum(lp[t - 1, ids[0, t]] for t in range(len(prompt), len(text)))
        assert logp[row].item() == pytest.approx(by_hand.item(), rel=1e-12)


def test_chat_splits_are_disjoint_and_every_answer_is_true():
    for task in ("where", "rate", "visit"):
        train, test = chat.examples(task, "train"), chat.examples(task, "test")
        assert not {p for p, _ in train} & {p for p, _ in test}
        assert all(len(p) + len(a) <= 96 + 1 for p, a in train + test)
    for _, answer in chat.examples("visit", "test", 20):
        assert world.check_line(answer.split("\n")[0]) == (True, True)
    for prompt, chosen, rejected in chat.preference_pairs("test", 20):
        assert world.check_line(chosen.split("\n")[0]) == (True, True)
        assert world.check_line(rejected.split("\n")[0]) == (True, False)
    assert not set(chat.new_people(16)) & set(world.build_world().names)
    noisy = chat.with_wrong_ratings(chat.examples("review", "train", 100), 0.4)
    assert sum(not world.check_line(a.split("\n")[0])[1] for _, a in noisy) == 40


def test_prompt_only_labels_are_the_prompt_half_of_every_label():
    from lib.objectives.sft import prompt_only
    _, answer = sft_batch(PAIRS)
    _, every = sft_batch(PAIRS, prompt_loss=True)
    prompt = prompt_only(answer, every)
    assert not ((prompt != IGNORE) & (answer != IGNORE)).any()                 # disjoint
    assert torch.equal(torch.where(answer != IGNORE, answer, prompt), every)  # together: every label


def test_review_outcomes_sort_sampled_lines_by_what_is_wrong_with_them():
    from lib.measure.finetuning_evals import review_outcomes
    good = world.make_review("soup", "tasty", "host", "kind")
    lines = [good, good.replace("rating: good.", "rating: ok."), good.replace(" and ", " but "),
             good.replace("rating: good.", "rating: gok."), good.replace("the host", "the hoxt"),
             "base lives in " + world.build_world().home["base"] + "."]          # true, but not a review
    assert review_outcomes(lines) == {"true": 1 / 6, "wrong rating": 1 / 6, "wrong connective": 1 / 6,
                                      "bad rating word": 1 / 6, "malformed before": 2 / 6}


def test_positions_must_be_integer_ids_inside_the_context_and_replace_start():
    m = model()
    idx = torch.zeros(1, 4, dtype=torch.long)
    for bad in (torch.arange(4.0)[None], torch.arange(4)[None] + 95, torch.arange(3)[None]):
        with pytest.raises(ValueError):
            m.hidden_states(idx, causal_mask(4).expand(1, -1, -1), positions=bad)
    with pytest.raises(ValueError):
        m.hidden_states(idx, causal_mask(4).expand(1, -1, -1), start=2, positions=torch.arange(4)[None])


def test_weighted_sft_loss_keeps_the_answer_at_weight_one():
    from lib.objectives.sft import prompt_only, weighted_sft_loss
    m = model()
    inputs, answer = sft_batch(PAIRS)
    prompt = prompt_only(answer, sft_batch(PAIRS, prompt_loss=True)[1])
    logits = m(inputs)
    assert weighted_sft_loss(logits, answer, prompt, 0.0) == masked_sft_loss(logits, answer)
    both = weighted_sft_loss(logits, answer, prompt, 0.5)
    assert both.item() == pytest.approx(masked_sft_loss(logits, answer).item() + 0.5 * masked_sft_loss(logits, prompt).item())


def test_the_readouts_on_a_model_against_itself():
    from lib.measure import evals, finetuning_evals
    m = model(5)
    pairs = chat.preference_pairs("test", 6)
    split = finetuning_evals.rating_split(m, m, pairs)
    assert all(abs(v) < 1e-12 for v in split.values())
    said = finetuning_evals.sampled_replies(m, chat.REVIEW_PROMPT, 4)
    assert finetuning_evals.kl_estimate(m, m, chat.REVIEW_PROMPT, said) == 0
    lines = world.load_text("val").splitlines()[:40]
    assert finetuning_evals.bits_by_place(m, lines)["all"] == pytest.approx(evals.bits_per_char(m, lines), rel=1e-12)
    prompts = [p for p, _ in PAIRS[:4]]
    together = finetuning_evals.replies(m, prompts, 10)
    assert together == [finetuning_evals.replies(m, [p], 10)[0] for p in prompts]   # left padding changes nothing
    inputs, labels = sft_batch(PAIRS[:1])
    finetuning_evals.position_gradients(m, inputs, labels)
    assert all(p.grad is None for p in m.parameters())


def test_the_sft_trainer_leaves_its_parent_alone_is_deterministic_and_saves_lora_merged():
    from lib.recipes.base import BASE_MODEL
    from lib.recipes.finetuning import FINETUNE
    from lib.trainers.finetuning import train_sft
    parent = TinyGPT(ModelConfig())
    before = {k: v.clone() for k, v in parent.state_dict().items()}
    config = {**BASE_MODEL, **FINETUNE, "task": "where", "examples": 8, "steps": 2, "eval_every": 2,
              "prompt_loss": False, "prompt_weight": 0.5, "lora_rank": 2, "lora_alpha": 4}
    (a, log_a), (b, log_b) = train_sft(config, (parent,)), train_sft(config, (parent,))
    assert all(torch.equal(v, parent.state_dict()[k]) for k, v in before.items())
    assert log_a == log_b and all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert [row["step"] for row in log_a] == [0, 2] and log_a[0]["trainable"] == 2 * 2 * (256 + 128 + 320 + 320)
    assert type(a) is TinyGPT and not any(isinstance(x, LoRALinear) for x in a.modules())
    with pytest.raises(ValueError):
        train_sft({**config, "prompt_loss": True}, (parent,))
