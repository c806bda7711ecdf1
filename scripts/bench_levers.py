"""Benchmark: what each speed lever does to the base model's training step, side by side in one run.

    .venv/bin/python scripts/bench_levers.py [--steps 40] [--rounds 3]

The book's step (`lib.train`: TinyGPT with fused attention, AdamW's for-loop update, gradient clipping;
one thread, the training kernels) against one change at a time:

- explicit attention: the (B, h, T, T) weights materialised, as the drawing code does (what SDPA saves);
- AdamW `foreach=True` and `fused=True`: the update as a few multi-tensor kernels instead of a Python loop;
- three seeds stacked into one model (`torch.func.stack_module_state` + `vmap`): one step trains three
  models, each on its own batch, with each model's own gradient clipping -- compared with three steps;
- `torch.compile` of the model (inductor's generated C++; compile time reported separately).

Each lever runs in alternating rounds with the book's step, so machine noise hits both alike; a round times
`--steps` steps after two untimed ones (first calls, compilation); the time is the fastest round.  Each also says whether `--steps` steps of it leave the weights bit-identical to the book's
step (a lever that does not would make every checkpoint, and so every printed number, change).
"""

import argparse
import copy
import os
import sys
import time

from lib.train.cache import TRAINING_KERNELS

QUIET = dict(TRAINING_KERNELS, TQDM_DISABLE="1")  # read when torch starts: re-run with them set
if any(os.environ.get(k) != v for k, v in QUIET.items()):
    os.execve(sys.executable, [sys.executable] + sys.argv, dict(os.environ, **QUIET))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.func import functional_call, stack_module_state, vmap  # noqa: E402

from lib.nn import models
from lib.data import world  # noqa: E402
from lib.recipes.base import BASE_MODEL  # noqa: E402
from lib.objectives.batches import next_token_loss, random_windows  # noqa: E402
from lib.data.seeding import seed_everything  # noqa: E402
from lib.data.tokenizers import CharTokenizer  # noqa: E402
from lib.train.loop import learning_rate, make_optimizer, optimizer_step  # noqa: E402

torch.backends.mkldnn.enabled = False
torch.set_num_threads(1)  # as in every training process (`seeding.seed_everything`)
SEEDS = (0, 1, 2)
STREAM = torch.tensor(CharTokenizer().encode(world.load_text("train")))[:-1]


def batches(seed: int, steps: int) -> list:
    generator = torch.Generator().manual_seed(seed)
    return [random_windows(STREAM, 97, BASE_MODEL["batch_size"], generator) for _ in range(steps)]


def fresh_model(seed: int):
    seed_everything(seed)
    return models.TinyGPT()


class Book:
    """The book's step (lib.train), optionally with another loss or optimizer."""
    models_per_step = 1

    def __init__(self, seed=0, loss=next_token_loss, **adamw):
        self.model, self.loss = fresh_model(seed), loss
        self.optimizer = make_optimizer(self.model, BASE_MODEL)
        for group in self.optimizer.param_groups:
            group.update(adamw)
        self.optimizer.defaults.update(adamw)

    def step(self, step, batch):
        optimizer_step(self.model, self.optimizer, self.loss(self.model, batch), step, BASE_MODEL)

    def weights(self, index=0):
        return [p.detach().clone() for p in self.model.parameters()]


def explicit_attention_loss(model, windows):
    logits = model.forward_with_attention(windows[:, :-1])[0]
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), windows[:, 1:].reshape(-1))


class Compiled(Book):
    def __init__(self, seed=0):
        super().__init__(seed)
        self.compiled = torch.compile(self.model)
        self.loss = lambda model, windows: next_token_loss(self.compiled, windows)


class Stacked:
    """Three TinyGPTs as one: parameters stacked on a new first dimension, the forward vmapped over it."""
    models_per_step = len(SEEDS)

    def __init__(self, seed=0):
        members = [fresh_model(s) for s in SEEDS]
        self.params, self.buffers = stack_module_state(members)
        self.skeleton = copy.deepcopy(members[0]).to("meta")
        decay = [p for p in self.params.values() if p.dim() == 3]
        no_decay = [p for p in self.params.values() if p.dim() < 3]
        self.optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": BASE_MODEL["weight_decay"]},
                                            {"params": no_decay, "weight_decay": 0.0}],
                                           lr=BASE_MODEL["lr"], betas=(0.9, 0.95))

    def loss_one(self, params, buffers, windows):
        logits = functional_call(self.skeleton, (params, buffers), (windows[:, :-1],))
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), windows[:, 1:].reshape(-1))

    def step(self, step, stacked_batch):
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate(step, BASE_MODEL)
        self.optimizer.zero_grad(set_to_none=True)
        # check_ids and check_mask branch on the data, which vmap cannot trace: skipped inside the stacked step
        checks = models.check_ids, models.check_mask
        models.check_ids = lambda idx, config: None
        models.check_mask = lambda mask, B, rows, cols, what="": mask.expand(B, rows, cols)
        try:
            vmap(self.loss_one)(self.params, self.buffers, stacked_batch).sum().backward()
        finally:
            models.check_ids, models.check_mask = checks
        grads = [p.grad for p in self.params.values()]
        norms = torch.stack([g.flatten(1).pow(2).sum(1) for g in grads]).sum(0).sqrt()   # one norm per model
        scale = (BASE_MODEL["grad_clip"] / (norms + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(scale.view(-1, *[1] * (g.dim() - 1)))
        self.optimizer.step()

    def weights(self, index=0):
        return [p[index].detach().clone() for p in self.params.values()]


LEVERS = {
    "explicit attention": lambda: Book(loss=explicit_attention_loss),
    "AdamW foreach": lambda: Book(foreach=True),
    "AdamW fused": lambda: Book(fused=True),
    "3 seeds stacked (vmap)": Stacked,
    "torch.compile": Compiled,
}


def run(trainer, steps_batches) -> None:
    for step, batch in enumerate(steps_batches):
        trainer.step(step, batch)


def timed(trainer, steps_batches) -> float:
    """Seconds per model-step, after two untimed steps (first calls, compilation)."""
    run(trainer, steps_batches[:2])
    start = time.perf_counter()
    run(trainer, steps_batches)
    return (time.perf_counter() - start) / len(steps_batches) / trainer.models_per_step


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="steps per round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    args = parser.parse_args()
    plain = batches(0, args.steps)
    stacked = [torch.stack(b) for b in zip(*(batches(s, args.steps) for s in SEEDS))]
    reference = Book()
    run(reference, plain)
    reference_weights = reference.weights()
    print(f"the book's step: TinyGPT {BASE_MODEL['batch_size']}x{models.ModelConfig().context} characters, one "
          f"thread; {args.rounds} alternating rounds of {args.steps} steps, the fastest round; ms per model-step")
    for name, make in LEVERS.items():
        start = time.perf_counter()
        try:
            trainer = make()
            data = stacked if trainer.models_per_step > 1 else plain
            run(trainer, data[:2])  # the first steps (compilation)
        except Exception as error:  # a lever this machine cannot run is reported, not fatal
            print(f"{name:24} failed: {type(error).__name__}: {str(error).splitlines()[0][:120]}")
            continue
        warm_up = time.perf_counter() - start
        book_times, lever_times = [], []
        for _ in range(args.rounds):
            book_times.append(timed(Book(), plain))
            lever_times.append(timed(make(), data))
        check = make()
        run(check, data)
        same = all(torch.equal(a, b) for a, b in zip(check.weights(0), reference_weights))
        print(f"{name:24} {min(lever_times) * 1000:6.1f} ms vs the book's {min(book_times) * 1000:6.1f} ms: "
              f"{min(book_times) / min(lever_times):4.2f}x the speed; weights after {args.steps} steps "
              f"{'bit-identical' if same else 'differ'}" + (f"; set-up {warm_up:.0f} s" if warm_up > 5 else ""),
              flush=True)


if __name__ == "__main__":
    main()
