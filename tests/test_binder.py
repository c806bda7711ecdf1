"""binder/ (repo2docker's conventions, for Binder or a JupyterHub): postBuild run in a fresh Python gives kernels that
import lib, and working copies that keep a student's edits away from book/.

The fresh environment is a new venv whose packages come from .venv through a plain path entry (repo2docker installs
binder/requirements.txt before postBuild; installing them again here would take minutes); .venv's own book_repo.pth
is not read there, so `import lib` works only if postBuild made it work.
"""

import hashlib
import json
import shutil
import site
import subprocess
import sys
import venv
from pathlib import Path

from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpecManager

ROOT = Path(__file__).resolve().parent.parent


def test_binder_requirements_are_the_book_pins_with_the_cpu_torch():
    lines = [line.strip() for line in (ROOT / "binder" / "requirements.txt").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert lines == ["--extra-index-url https://download.pytorch.org/whl/cpu", "-r ../requirements.txt"]
    assert (ROOT / "binder" / "runtime.txt").read_text().strip() == "python-3.11"


def fresh_repo_and_python(tmp_path):
    """A copy of what postBuild reads (lib linked), and a new venv that sees .venv's packages but not its .pth."""
    repo = tmp_path / "repo"
    for part in ("binder", "scripts"):
        shutil.copytree(ROOT / part, repo / part)
    (repo / "book").mkdir()
    for page in [*(ROOT / "book").glob("*.ipynb"), ROOT / "book" / "intro.md"]:
        shutil.copyfile(page, repo / "book" / page.name)
    (repo / "lib").symlink_to(ROOT / "lib")
    env = tmp_path / "env"
    venv.EnvBuilder(with_pip=False).create(env)
    fresh_site = next(env.glob("lib/python3*/site-packages"))
    (fresh_site / "packages.pth").write_text(site.getsitepackages()[0] + "\n")
    return repo, env


def kernel_says(env: Path, cwd: Path, code: str) -> str:
    """What a kernel of this Python prints for `code`, started in `cwd` (a real Jupyter kernel)."""
    specs = env / "share" / "jupyter" / "kernels"
    (specs / "fresh").mkdir(parents=True)
    (specs / "fresh" / "kernel.json").write_text(json.dumps(
        {"argv": [str(env / "bin" / "python"), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
         "display_name": "fresh", "language": "python"}))
    manager = KernelManager(kernel_name="fresh", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(specs)]))
    manager.start_kernel(cwd=str(cwd))
    client = manager.blocking_client()
    try:
        client.start_channels()
        client.wait_for_ready(timeout=60)
        printed = []
        client.execute_interactive(code, timeout=60, output_hook=lambda message: printed.append(
            message["content"].get("text") or message["content"].get("evalue") or ""))
        return "".join(printed)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_post_build_gives_kernels_that_import_lib_and_copies_that_spare_the_book(tmp_path):
    repo, env = fresh_repo_and_python(tmp_path)
    before = subprocess.run([env / "bin" / "python", "-c", "import lib"], cwd=tmp_path, capture_output=True)
    assert before.returncode != 0, "the fresh Python must not import lib before postBuild"
    subprocess.run(["bash", "binder/postBuild"], cwd=repo, check=True, capture_output=True,
                   env={"PATH": f"{env / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)})
    lab = repo / "_build" / "lab"
    assert (lab / "intro.md").exists() and (lab / "03_objectives.ipynb").exists()
    overrides = json.loads(next(env.glob("share/jupyter/lab/settings/overrides.json")).read_text())
    assert overrides["@jupyterlab/docmanager-extension:plugin"]["defaultViewers"]["markdown"] == "Markdown Preview"

    said = kernel_says(env, lab, "import lib, sys; print(lib.__file__, sys.prefix)")
    assert said.split() == [str(repo / "lib" / "__init__.py"), str(env)], said

    # a student edits the working copy; a rebuild (postBuild again) keeps it and leaves book/ as it was
    committed = digest(repo / "book" / "03_objectives.ipynb")
    student = json.loads((lab / "03_objectives.ipynb").read_text())
    student["cells"].append({"cell_type": "markdown", "id": "notes", "metadata": {}, "source": ["my notes"]})
    (lab / "03_objectives.ipynb").write_text(json.dumps(student))
    subprocess.run([env / "bin" / "python", "scripts/lab.py", "--prepare-only"], cwd=repo, check=True,
                   capture_output=True)
    assert "my notes" in (lab / "03_objectives.ipynb").read_text()
    assert digest(repo / "book" / "03_objectives.ipynb") == committed == digest(ROOT / "book" / "03_objectives.ipynb")
