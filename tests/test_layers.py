"""lib is laid out by layer, one folder each, and its imports run one way: a module imports only from its own
layer or the layers to its left.  `fit` is the only training loop; no module imports another's private names."""

import ast
import shutil
from pathlib import Path

LIB = Path(__file__).resolve().parent.parent / "lib"
# left to right, the data flow of DESIGN.md / CONTRIBUTING.md; present (plots, widgets, exercises) sits apart
LAYERS = ["data", "nn", "objectives", "train", "measure", "trainers", "recipes"]
APART = ["present"]


def module_name(path: Path, lib_dir: Path) -> str:
    """lib/train/cache.py -> "train.cache"; lib/recipes/__init__.py -> "recipes"."""
    parts = path.relative_to(lib_dir).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set:
    """(module, name) for every lib import of a file, modules written as module_name gives them:
    `from lib.train import cache` -> ("train.cache", None) when cache is a module, else ("train", "cache")."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "lib":
            base = node.module.split(".")[1:]
            for alias in node.names:
                candidate = LIB.joinpath(*base, alias.name)
                if candidate.with_suffix(".py").exists() or candidate.is_dir():
                    found.add((".".join(base + [alias.name]), None))
                else:
                    found.add((".".join(base), alias.name))
        elif isinstance(node, ast.Import):
            found |= {(".".join(a.name.split(".")[1:]), None) for a in node.names if a.name.startswith("lib.")}
    return found


def layer(module: str) -> int:
    top = module.split(".")[0]
    return LAYERS.index(top) if top in LAYERS else len(LAYERS) + APART.index(top)


def modules(lib_dir: Path) -> list:
    return sorted(p for p in lib_dir.rglob("*.py") if p.name != "__init__.py" or p.parent != lib_dir)


def climbs(lib_dir: Path) -> list:
    """(module, imported) for every import of a layer to the module's right, or between `present` and the rest."""
    found = []
    for path in modules(lib_dir):
        here = module_name(path, lib_dir)
        for imported, _ in imports(path):
            there = imported.split(".")[0]
            apart = (here.split(".")[0] in APART) != (there in APART)
            if imported and (layer(imported) > layer(here) or apart):
                found.append((here, imported))
    return sorted(found)


def private_imports(lib_dir: Path) -> list:
    return sorted((module_name(p, lib_dir), f"{m}.{n}") for p in modules(lib_dir) for m, n in imports(p)
                  if n and n.startswith("_"))


STEPPING = {"backward", "step", "optimizer_step", "make_optimizer"}


def training_steps(lib_dir: Path) -> list:
    """(module, function) of every function that backpropagates, steps or builds an optimizer."""
    found = []
    for path in modules(lib_dir):
        for function in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            calls = [node.func for node in ast.walk(function) if isinstance(node, ast.Call)]
            names = {getattr(f, "attr", None) or getattr(f, "id", None) for f in calls}
            if isinstance(function, ast.FunctionDef) and names & STEPPING:
                found.append((module_name(path, lib_dir), function.name))
    return sorted(found)


def test_the_folders_are_the_layers():
    folders = sorted(p.name for p in LIB.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert folders == sorted(LAYERS + APART)
    assert [p.name for p in LIB.glob("*.py")] == ["__init__.py"]     # every module sits in its layer's folder


def test_no_import_climbs_a_layer():
    assert climbs(LIB) == []


def test_a_climb_is_caught(tmp_path):
    shutil.copytree(LIB, tmp_path / "lib", ignore=shutil.ignore_patterns("__pycache__"))
    with open(tmp_path / "lib" / "train" / "loop.py", "a") as f:
        f.write("\nfrom lib.measure.evals import validation_loss\nfrom lib.present import plots\n")
    with open(tmp_path / "lib" / "present" / "plots.py", "a") as f:
        f.write("\nfrom lib.recipes import base\n")
    assert climbs(tmp_path / "lib") == [("present.plots", "recipes.base"), ("train.loop", "measure.evals"),
                                        ("train.loop", "present.plots")]


def test_no_module_imports_another_modules_private_names(tmp_path):
    assert private_imports(LIB) == []
    shutil.copytree(LIB, tmp_path / "lib", ignore=shutil.ignore_patterns("__pycache__"))
    with open(tmp_path / "lib" / "measure" / "evals.py", "a") as f:
        f.write("\nfrom lib.train.cache import _load\n")
    assert private_imports(tmp_path / "lib") == [("measure.evals", "train.cache._load")]


def test_fit_is_the_only_training_loop(tmp_path):
    # measure.flops backpropagates to count a step's FLOPs; it updates nothing.  measure.finetune's short
    # full-batch loop updates a copy through train.loop's optimizer_step (the book's optimiser and schedule);
    # measure.moe_evals times training steps of untrained networks through the same optimizer_step (§07's clock);
    # measure.finetuning_evals accumulates gradients over micro-batches to compare them with one batch's (§11); it
    # updates nothing;
    assert training_steps(LIB) == [("measure.finetune", "finetune"),
                                   ("measure.finetuning_evals", "accumulated_gradients"), ("measure.flops", "step_flops"),
                                   ("measure.moe_evals", "step_milliseconds"),
                                   ("train.loop", "fit"), ("train.loop", "optimizer_step")]
    shutil.copytree(LIB, tmp_path / "lib", ignore=shutil.ignore_patterns("__pycache__"))
    with open(tmp_path / "lib" / "trainers" / "comparison.py", "a") as f:
        f.write("\ndef my_loop(model, optimizer, loss):\n    loss.backward()\n    optimizer.step()\n")
    # a second copy of step_flops (§04's and §05's once had one each) is a new entry too, not an allowed one
    with open(tmp_path / "lib" / "trainers" / "electra.py", "a") as f:
        f.write("\ndef step_flops(model, get_batch, loss_fn):\n    loss_fn(model, get_batch()).backward()\n")
    found = training_steps(tmp_path / "lib")
    assert ("trainers.comparison", "my_loop") in found and ("trainers.electra", "step_flops") in found


def test_every_trainer_declares_a_version():
    from lib import recipes
    assert all(isinstance(r.train_fn.trainer_version, int) for r in recipes.all_runs())
    names = {r.train_fn.trainer_name for r in recipes.all_runs()}
    assert names == {"char_lm", "comparison", "electra", "ul2", "dual_encoder", "reader", "sft", "preference", "patches"}


def cycles(lib_dir: Path) -> list:
    """Every import cycle among lib's modules, each as the list of modules it runs through (imports inside
    functions count: they only hide a cycle)."""
    graph = {module_name(p, lib_dir): set() for p in modules(lib_dir)}
    for path in modules(lib_dir):
        graph[module_name(path, lib_dir)] = {m for m, _ in imports(path) if m in graph}
    found, done = set(), set()

    def walk(node, path):
        if node in path:
            loop = path[path.index(node):]
            start = loop.index(min(loop))
            found.add(tuple(loop[start:] + loop[:start]))
            return
        if node in done:
            return
        for nxt in sorted(graph[node]):
            walk(nxt, path + [node])
        done.add(node)

    for node in sorted(graph):
        walk(node, [])
    return sorted(found)


def test_no_import_cycles_in_lib(tmp_path):
    assert cycles(LIB) == []
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "cache.py").write_text("def get():\n    from lib.train import processes\n")
    (tmp_path / "train" / "processes.py").write_text("from lib.train import cache\n")
    assert cycles(tmp_path) == [("train.cache", "train.processes")]
