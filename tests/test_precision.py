"""The rule for printed numbers (lib.measure.precision) and the check that enforces it (lib.present.figures)."""

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import torch

from lib import recipes
from lib.measure import precision
from lib.nn.models import ModelConfig, TinyGPT
from lib.present import figures

ROOT = Path(__file__).resolve().parent.parent

# What a model's forward pass computes, a matrix product through a GELU, a tanh and a softmax, summed, on one
# thread as every notebook measures (`seeding.seed_everything`): on one thread MKL's AVX2 branch and an Intel Xeon's
# native kernels agree on the product, the GELU and the softmax, and differ in the tanh's last bit (2026-12-08).
# Printed in float32 and, as the rule has it, in float64.
PRINTS = """
import torch
from lib.present.plots import fmt
torch.set_num_threads(1)
generator = torch.Generator().manual_seed(0)     # drawn in float64: float32 draws differ in their last bit
a = torch.randn(64, 4096, generator=generator, dtype=torch.float64)    # between kernels (vectorised log, cos)
b = torch.randn(4096, 64, generator=generator, dtype=torch.float64)
for dtype in (torch.float32, torch.float64):
    h = a.to(dtype) @ b.to(dtype) / 64
    y = torch.nn.functional.gelu(h) + torch.tanh(h) + h.softmax(-1)
    print(fmt(y.double().sum().item(), 3))      # each element's last bit counts, as in a mean over many rows
"""


def figure_records(tmp_path, name, extra):
    log = tmp_path / f"{name}.jsonl"
    subprocess.run([sys.executable, "-c", PRINTS], cwd=ROOT, check=True, capture_output=True,
                   env=dict(os.environ, **extra, **{figures.ENV: str(log)}))
    return figures.read(log)


def test_the_check_fails_on_a_float32_figure_and_passes_on_the_same_figure_in_float64(tmp_path):
    """The two kernel settings `make test` compares: float32's digits move between them, float64's do not."""
    native, other = figure_records(tmp_path, "native", {}), figure_records(tmp_path, "other", figures.OTHER_KERNELS)
    assert len(native) == len(other) == 2
    assert figures.differences(native[:1], other[:1]), "float32 agreed: this CPU's native kernels are the generic ones?"
    assert figures.differences(native[1:], other[1:]) == []


def test_every_model_a_measurement_gets_is_float64():
    model, _ = recipes.load("base")
    assert {p.dtype for p in model.parameters()} == {precision.DTYPE}
    controls = list(precision.untrained(lambda: TinyGPT(ModelConfig()), [0, 1]))
    assert all({p.dtype for p in net.parameters()} == {precision.DTYPE} for net in controls)
    trained32 = TinyGPT(ModelConfig())
    copy = precision.for_measurement(trained32)
    assert copy is not trained32 and next(trained32.parameters()).dtype == torch.float32   # the original untouched
    assert precision.for_measurement(copy) is copy


def test_each_notebook_has_a_record_of_its_figures_made_by_its_current_cells():
    """`make test` compares each notebook's figures on other kernels with the record its execution committed
    (tests/figures/): a notebook without one, or whose record came from cells it no longer has (edited, then
    saved from JupyterLab), is named here with the remedy, before an nbval run spends minutes to say the same."""
    notebooks = sorted((ROOT / "book").glob("*.ipynb"))
    stale = []
    for notebook in notebooks:
        record = figures.record_of(notebook)
        cells = {figures.cell_file(cell.source) for cell in nbformat.read(notebook, as_version=4).cells
                 if cell.cell_type == "code"}
        gone = {where.split(":")[0] for where, *_ in figures.read(record)} - cells
        if not record.exists() or gone:
            stale.append(f"{notebook.name}: {'no record' if not record.exists() else f'{len(gone)} cells gone'}")
    assert not stale, ("re-execute with scripts/execute_notebooks.py (it rewrites the outputs and the record): "
                       + "; ".join(stale))
    assert {path.name for path in figures.RECORDS.iterdir()} == {f"{n.stem}.jsonl" for n in notebooks}
