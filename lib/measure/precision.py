"""The book's one rule for printed numbers: they are measured in float64, so no x86-64 CPU prints other digits.

    model, log = recipes.load("base")           # a float64 copy of the float32 checkpoint (`for_measurement`)
    for net in precision.untrained(build, range(40)): ...   # controls: drawn in float32, measured in float64

Training is float32 on pinned kernels, and the checkpoints hold float32 weights. Measuring them in float32
would make the printed digits depend on the CPU: Intel's and AMD's BLAS (and ATen's AVX2 / AVX-512 code)
sum a matrix product in different orders, the results differ in the last of float32's 24 bits (~1e-7), and
a near-tie (an AUC over saturated sigmoids, a probe's boundary case, a top-k router) flips one way on one
machine and the other way on another: §05's swap AUC printed 0.508 on an Intel Xeon and 0.509 on an AMD
EPYC. The same weights, cast exactly to float64, give results that differ between CPUs by ~1e-16, which no
printed digit shows. So every model a notebook gets (`recipes.load`) and every untrained control a
measurement builds (`untrained`) is float64; measurement code needs nothing else, since the tensors it builds
from a model's output follow its dtype.

`scripts/run_checks.py` checks the rule: each notebook's execution records every figure it prints through
`plots.fmt` on the executing machine's own kernels, nbval runs it again on other ones, and the two must agree to
1e-9 (`lib.present.figures`).
"""

import copy
import os

import torch

from lib.data.seeding import seeded_builds

# float64; BOOK_MEASURE_DTYPE=float32 exists for scripts/bench_precision.py alone (what the rule costs), and the
# figure check of `make test` fails on any notebook run with it
DTYPE = getattr(torch, os.environ.get("BOOK_MEASURE_DTYPE", "float64"))


def for_measurement(model: torch.nn.Module, copy_model: bool = True) -> torch.nn.Module:
    """The model in the measuring dtype (float64): the model itself when it is in that dtype already, else a
    copy in eval mode, or with copy_model=False the model converted in place (a freshly loaded one)."""
    floats = [t.dtype for t in [*model.parameters(), *model.buffers()] if t.is_floating_point()]
    if all(dtype == DTYPE for dtype in floats):
        return model
    return (copy.deepcopy(model) if copy_model else model).to(DTYPE).eval()


def untrained(build, seeds):
    """One untrained network per seed, `build()` right after `seed_everything(seed)` (`seeding.seeded_builds`,
    so its first weights are those a training run of that seed starts from), in the measuring dtype."""
    for model in seeded_builds(build, seeds):
        yield for_measurement(model, copy_model=False)
