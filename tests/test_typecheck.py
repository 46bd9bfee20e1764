"""survivor/ passes mypy as pyproject.toml's [tool.mypy] configures it: a None
where a value is needed, an argument of the wrong type or a name the annotation does not have
fails the suite, not a reviewer's eye. Its cache is the worktree's .mypy_cache (gitignored)."""

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


# 28-36 s with no cache (a fresh clone, as CI runs it), 1.5 s with a warm one (2026-11-25, 2 shared cores)
@pytest.mark.slow
def test_mypy_finds_nothing():
    mypy = os.path.join(os.path.dirname(sys.executable), "mypy")
    done = subprocess.run([mypy, "--python-executable", sys.executable], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    findings = [line for line in done.stdout.splitlines() if ": error:" in line]
    clean = done.returncode == 0 and not findings
    assert clean, "\n".join(findings[:100]) or done.stdout[-4000:] + done.stderr[-2000:]
