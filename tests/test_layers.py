"""lib's imports run one way (a module imports only from its own layer or the layers below it), and
`train.fit` is the only training loop."""

import ast
import shutil
from pathlib import Path

LIB = Path(__file__).resolve().parent.parent / "lib"
LAYERS = [  # bottom first; see the data flow in DESIGN.md
    {"world", "seeding", "exercises"},
    {"tokenizers", "bpe", "unigram"},                                # + the vocabulary ids
    {"masks"},
    {"models", "moe"},
    {"objectives", "electra", "ul2"},                                # batches + the forward pass that reads them
    {"train", "checkpoints"},                                        # one fit loop, the checkpoint cache
    {"evals", "answers", "protocols", "probes", "capabilities", "ablations", "ul2_evals", "retrieval",
     "moe_evals"},                                                   # all measurement
    {"base_model", "experiments", "electra_runs", "recurrent", "tinygpt_variants",
     "ul2_runs", "moe_runs", "retrieval_runs"},      # sections' runs: fit + what they log
    {"schedule", "plots", "widgets"},
]


def lib_imports(path: Path) -> set:
    """The lib modules a file imports (any form: `from lib import x`, `from lib.x import y`, `import lib.x`)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == "lib":
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lib."):
            names.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            names |= {alias.name.split(".")[1] for alias in node.names if alias.name.startswith("lib.")}
    return names


def layer(name: str) -> int:
    return next(i for i, members in enumerate(LAYERS) if name in members)


def climbs(lib_dir: Path) -> list:
    """(module, imported) for every import from a lower layer to a higher one."""
    return sorted((path.stem, name) for path in lib_dir.glob("*.py") if path.stem != "__init__"
                  for name in lib_imports(path) if layer(name) > layer(path.stem))


STEPPING = {"backward", "step", "optimizer_step", "make_optimizer"}


def training_steps(lib_dir: Path) -> list:
    """(module, function) of every function that backpropagates, steps or builds an optimizer."""
    found = []
    for path in lib_dir.glob("*.py"):
        for function in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            calls = [node.func for node in ast.walk(function) if isinstance(node, ast.Call)]
            names = {getattr(f, "attr", None) or getattr(f, "id", None) for f in calls}
            if isinstance(function, ast.FunctionDef) and names & STEPPING:
                found.append((path.stem, function.name))
    return sorted(found)


def test_every_module_has_one_layer():
    modules = {p.stem for p in LIB.glob("*.py")} - {"__init__"}
    assert modules == set().union(*LAYERS) and sum(map(len, LAYERS)) == len(modules)


def test_no_import_climbs_a_layer():
    assert climbs(LIB) == []


def test_a_climb_is_caught(tmp_path):
    shutil.copytree(LIB, tmp_path / "lib")
    with open(tmp_path / "lib" / "train.py", "a") as f:
        f.write("\nfrom lib.evals import validation_loss\n")
    assert climbs(tmp_path / "lib") == [("train", "evals")]


def test_fit_is_the_only_training_loop(tmp_path):
    # the step_flops backpropagate to count a step's FLOPs; they update nothing.
    assert training_steps(LIB) == [("electra_runs", "step_flops"), ("experiments", "step_flops"), ("train", "fit"),
                                   ("train", "optimizer_step")]
    shutil.copytree(LIB, tmp_path / "lib")
    with open(tmp_path / "lib" / "experiments.py", "a") as f:
        f.write("\ndef my_loop(model, optimizer, loss):\n    loss.backward()\n    optimizer.step()\n")
    assert ("experiments", "my_loop") in training_steps(tmp_path / "lib")
