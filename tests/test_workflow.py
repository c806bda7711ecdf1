"""The CI workflow (.github/workflows/book.yml) is one GitHub accepts, and it runs only what the README documents.

The schema is check-jsonschema's bundled copy of the GitHub-workflows schema (`--builtin-schema`): no network.
"""

import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "book.yml"


def validate(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
                           str(path)], capture_output=True, text=True)


def test_the_workflow_validates_and_a_broken_copy_does_not(tmp_path):
    result = validate(WORKFLOW)
    assert result.returncode == 0, result.stdout + result.stderr
    # the same workflow with a job that lost its runner and a step misspelled: the schema must reject it
    broken = tmp_path / "broken.yml"
    broken.write_text(WORKFLOW.read_text().replace("runs-on: ubuntu-24.04\n    timeout-minutes", "timeout-minutes", 1)
                      .replace("      - uses: actions/checkout@v4", "      - usses: actions/checkout@v4", 1))
    assert broken.read_text() != WORKFLOW.read_text()
    result = validate(broken)
    assert result.returncode != 0 and "broken.yml" in result.stdout + result.stderr, result.stdout


def documented_commands() -> set:
    """The lines of the README's ```bash blocks, without their comments."""
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    return {line.split("#")[0].strip() for block in blocks for line in block.splitlines() if line.split("#")[0].strip()}


def test_every_run_step_is_a_command_the_readme_documents():
    jobs = yaml.safe_load(WORKFLOW.read_text())["jobs"]
    steps = [step["run"] for job in jobs.values() for step in job["steps"] if "run" in step]
    assert "bash .ci/run" in steps, "the workflow must run what .ci/run runs"
    documented = documented_commands()
    undocumented = [line.strip() for run in steps for line in run.splitlines()
                    if line.strip() and line.strip() not in documented]
    assert not undocumented, f"run steps the README does not show in a ```bash block: {undocumented}"
