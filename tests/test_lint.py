"""The code passes ruff's pycodestyle, pyflakes and bugbear rules as pyproject.toml selects them,
and is as `ruff format` writes it: an unused import, an unused variable, a closure over a loop variable or a bare
`except` fails the suite, not a reviewer's eye. Type checking (mypy) is tests/test_typecheck.py."""

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_ruff_finds_nothing():
    ruff = os.path.join(os.path.dirname(sys.executable), "ruff")
    done = subprocess.run(
        [ruff, "check", "survivor", "harness", "benchmarks", "tests", "examples"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_ruff_format_would_change_nothing():
    ruff = os.path.join(os.path.dirname(sys.executable), "ruff")
    done = subprocess.run(
        [ruff, "format", "--check", "survivor", "harness", "benchmarks", "tests", "examples"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, "run `ruff format survivor harness benchmarks tests examples`:\n" + done.stdout[-4000:]
