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
    done = subprocess.run(
        [mypy, "--python-executable", sys.executable], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    findings = [line for line in done.stdout.splitlines() if ": error:" in line]
    clean = done.returncode == 0 and not findings
    assert clean, "\n".join(findings[:100]) or done.stdout[-4000:] + done.stderr[-2000:]


MISSPELLED = """
from survivor.agent.notice import Notice
from survivor.jobdir.journal import Attempt, Journal
from survivor.jobdir.ledger import Span
from survivor.jobdir.switches import Switch


def close(journal: Journal, attempt: Attempt, span: Span, notice: Notice, switch: Switch) -> bool:
    journal.end(attempt, "preemted")
    Switch(time="2026-11-28T10:00:00Z", to_mode="ondemand")
    return (
        attempt.outcome == "gaveup"
        or span.cause == "reworked"
        or notice.source == "sigterm"
        or switch.from_mode == "flexstart"
    )
"""


@pytest.mark.slow
def test_a_misspelled_outcome_cause_notice_source_or_mode_fails_mypy(tmp_path):
    """The records' vocabulary is typed (Literal types, with `strict_equality`): each misspelling
    below is a finding, where a plain string passed everything but the VM."""
    snippet = tmp_path / "misspelled.py"
    snippet.write_text(MISSPELLED)
    mypy = os.path.join(os.path.dirname(sys.executable), "mypy")
    done = subprocess.run(
        [mypy, "--python-executable", sys.executable, str(snippet)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    findings = [line for line in done.stdout.splitlines() if ": error:" in line]
    for word in ("preemted", "gaveup", "reworked", "sigterm", "ondemand", "flexstart"):
        assert any(word in line for line in findings), (word, done.stdout[-3000:])
