"""How much room the fingerprint's tolerance leaves: replays on other CPU kernels against real changes.

    .venv/bin/python scripts/fingerprint_margin.py [--all]

Replays the first K steps of one run of every kind (`--all`: every run) in this process on generic kernels
(ATen's default code, MKL's COMPATIBLE branch: other float rounding than the pinned AVX2 kernels that recorded
the fingerprints, as another CPU would give) and prints, per run, the largest deviation as a share of its
tolerance (`fingerprint.deviation`).  Rounding must stay well below 1; a change of behaviour lands far above
it (tests/test_fingerprint.py shows three).  About 10 minutes for the 30 kinds: the generic kernels are slow.
"""

import os
import sys

GENERIC = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "TQDM_DISABLE": "1", "BOOK_NO_TRAINING": "1"}
if any(os.environ.get(k) != v for k, v in GENERIC.items()):  # read when torch starts: re-run with them set
    os.execve(sys.executable, [sys.executable] + sys.argv, dict(os.environ, **GENERIC))

import torch  # noqa: E402

from lib import recipes  # noqa: E402
from lib.recipes.__main__ import one_per_kind  # noqa: E402
from lib.train import cache, fingerprint, processes  # noqa: E402


def main():
    torch.backends.mkldnn.enabled = False
    runs = recipes.all_runs() if "--all" in sys.argv else one_per_kind(recipes.all_runs())
    worst = (0.0, "")
    for run in runs:
        saved = cache.read(cache.path_of(run))["fingerprint"]
        replayed = processes.train_with_fingerprint(run, stop=True)[2]
        ratio, where, raw = fingerprint.deviation(saved, replayed)
        worst = max(worst, (ratio, run.name))
        print(f"{run.name:34s} K={saved['steps']:3d}  {raw:.1e} at {where or '-'}  ({ratio:.2g} of its tolerance)",
              flush=True)
    print(f"largest share of the tolerance on generic kernels: {worst[0]:.2g} ({worst[1]}), {len(runs)} runs")


if __name__ == "__main__":
    main()
