"""Benchmark: what each lever on the measurements' speed buys, before and after side by side in one process.

    .venv/bin/python scripts/bench_measurement_speed.py [--repeats 3]
    .venv/bin/python scripts/bench_measurement_speed.py --kernels    # one workload on three kernel settings

The levers (each row: seconds before, after, their ratio, the fastest of the repeats; the two results are compared
and must agree to 1e-9):
- questions per forward pass (`protocols.slot_logits`): 4,096 at once, as before, against `evals.rows_at_once`
  (about 4,096 tokens), on BERT's pseudo-log-likelihood candidate scoring (`capabilities.candidate_scoring`);
- lines per forward pass in `evals.bits_per_char` (12,000 training lines): every line of a length at once against
  `rows_at_once`;
- the KV cache: concatenating the whole cache every step, as before, against writing into room to spare
  (`models.LayerCache`), sampling lines (`evals.sample_lines`);
- `world.next_characters` computed for every prefix against cached (cold at the start of each repeat), reading
  sampled lines (`world.first_exit`).

--kernels runs the levers' "after" workload in a fresh process on this machine's kernels, on `figures.OTHER_KERNELS`
(MKL's AVX2 branch) and on MKL's SSE2 branch (MKL_CBWR=COMPATIBLE, the other kernels until 2026-12): what the
nbval run of `make test` costs. Timings depend on what else the machine is doing: run it on a quiet one.
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from lib import recipes  # noqa: E402
from lib.data import world  # noqa: E402
from lib.measure import capabilities, evals, protocols  # noqa: E402
from lib.nn import models  # noqa: E402
from lib.present import figures  # noqa: E402
from lib.recipes import comparison  # noqa: E402
from scripts.bench_bpe import best_time  # noqa: E402  (the fastest of the repeats, and the last result)

torch.set_num_threads(1)     # as every notebook kernel measures (`seeding.seed_everything`)


def concatenating_extend(self, *new):
    """The KV cache before: the whole cache concatenated with the new positions every step."""
    self.tensors = new if not self.tensors else tuple(torch.cat([a, b], 2) for a, b in zip(self.tensors, new))
    return self.tensors


def workloads():
    """{lever: (before, after)}, each a function of no arguments returning a number or a list to compare."""
    bert, _ = recipes.load(comparison.run_name("bert"))
    base, _ = recipes.load("base")
    reviews = protocols.new_reviews(200)[:40]
    lines = list(world.build_world().train)[:12000]
    sampled = evals.sample_lines(base, 400, temperature=1.0, seed=1)

    def scoring(chunk):
        original = protocols.slot_logits.__defaults__
        protocols.slot_logits.__defaults__ = (chunk, False)
        try:
            return capabilities.candidate_scoring(bert, "bidirectional", reviews)
        finally:
            protocols.slot_logits.__defaults__ = original

    def bits(rows):
        original = evals.TOKENS_AT_ONCE
        evals.TOKENS_AT_ONCE = rows
        try:
            return evals.bits_per_char(base, lines)
        finally:
            evals.TOKENS_AT_ONCE = original

    def sampling(extend):
        original = models.LayerCache.extend
        models.LayerCache.extend = extend
        try:
            return evals.sample_lines(base, 2000, temperature=1.0, seed=0)
        finally:
            models.LayerCache.extend = original

    def exits(cached):
        original = world.next_characters
        world.next_characters.cache_clear()
        world.next_characters = original if cached else original.__wrapped__
        try:
            return [world.first_exit(line) for line in sampled]
        finally:
            world.next_characters = original

    return {"slot questions per pass (BERT scoring, 40 reviews)": (lambda: scoring(4096), lambda: scoring(None)),
            "lines per pass (bits/char, 12,000 training lines)": (lambda: bits(10 ** 9), lambda: bits(evals.TOKENS_AT_ONCE)),
            "KV cache (2,000 lines sampled)": (lambda: sampling(concatenating_extend),
                                               lambda: sampling(models.LayerCache.extend)),
            "next_characters (first_exit, 400 lines)": (lambda: exits(False), lambda: exits(True))}


def same(a, b) -> bool:
    if isinstance(a, float):
        return abs(a - b) <= 1e-9 * max(1.0, abs(a))
    return a == b


def levers(repeats: int) -> None:
    print(f"{'lever':<52} {'before (s)':>10} {'after (s)':>9} {'ratio':>6}", flush=True)
    for name, (before, after) in workloads().items():
        (b, first), (a, second) = best_time(before, repeats), best_time(after, repeats)
        if not same(first, second):
            raise SystemExit(f"{name}: the two results differ: {first!r:.80} vs {second!r:.80}")
        print(f"{name:<52} {b:10.2f} {a:9.2f} {b / a:6.2f}", flush=True)


def kernels(repeats: int) -> None:
    settings = {"this machine's kernels": {}, "OTHER_KERNELS (MKL_CBWR=AVX2)": figures.OTHER_KERNELS,
                "MKL_CBWR=COMPATIBLE": dict(figures.OTHER_KERNELS, MKL_CBWR="COMPATIBLE")}
    print(f"{'kernels':<32} {'seconds':>8} {'ratio':>6}", flush=True)
    first = None
    for name, extra in settings.items():
        out = subprocess.run([sys.executable, __file__, "--after-only", "--repeats", str(repeats)], check=True,
                             capture_output=True, text=True, env=dict(os.environ, **extra)).stdout
        seconds = json.loads(out.splitlines()[-1])
        first = first or seconds
        print(f"{name:<32} {seconds:8.2f} {seconds / first:6.2f}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kernels", action="store_true", help="the 'after' workload on three kernel settings")
    parser.add_argument("--after-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.after_only:
        print(json.dumps(sum(best_time(after, args.repeats)[0] for _, after in workloads().values())))
    elif args.kernels:
        kernels(args.repeats)
    else:
        levers(args.repeats)


if __name__ == "__main__":
    main()
