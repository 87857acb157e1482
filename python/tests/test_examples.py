"""Runs the examples (examples/python/*.py) and the demo's Python part so they cannot rot."""

import subprocess
import sys
from pathlib import Path

import pytest

from lapilli import Query, Store

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples" / "python").glob("*.py"))


def run(script, *args):
    out = subprocess.run([sys.executable, str(script), *map(str, args)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"{script.name} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def test_there_are_examples():
    assert {p.name for p in EXAMPLES} >= {"course_subscriptions.py", "idempotent_commands.py", "projection.py"}


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(script, tmp_path):
    assert run(script, tmp_path).strip()


def test_demo_python_part(tmp_path):
    out = run(REPO / "examples" / "demo" / "1_python_appends.py", tmp_path / "demo")
    assert "ConflictError" in out and "full" in out
    with Store.open(tmp_path / "demo") as store:
        events = store.read(Query.all()).to_list()
    assert [e.type for e in events] == ["CourseDefined"] + ["StudentRegistered"] * 3 + ["StudentSubscribedToCourse"] * 2


def test_readme_quickstart_runs(tmp_path):
    readme = (REPO / "python" / "README.md").read_text()
    quickstart = readme.split("```python\n", 1)[1].split("```", 1)[0]
    script = tmp_path / "quickstart.py"
    script.write_text(quickstart + "\nwith Store.open('data/courses') as s:\n    assert s.head() == 2, s.head()\n")
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
