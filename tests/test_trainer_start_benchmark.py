"""benchmarks.trainer_start's timer, held against a trainer whose start is known: a tree whose
`survivor.trainers.mlp` sleeps a set time before its start gate and another after `go` before it
reports its first step (the real contract's gate and progress record, no TensorFlow). What the
benchmark reports for the built-in trainers is read off this timer, so it must count the start
from the spawn, and only what follows `go` when the gate is used."""

from __future__ import annotations

import os
import pathlib
import time

import pytest

from benchmarks.trainer_start import first_step_seconds

ROOT = pathlib.Path(__file__).resolve().parents[1]
BEFORE_GATE = 2.0  # the trainer's own start: imports, devices, the trace
AFTER_GO = 0.3  # from `go` to its first step: the job dir read, the first step run

KNOWN_START = f"""
import sys, time
from survivor.trainers.contract import report_progress, wait_at_start_gate

time.sleep({BEFORE_GATE})
if not wait_at_start_gate():
    sys.exit(3)
time.sleep({AFTER_GO})
report_progress(1)
time.sleep(60)  # trains on until the benchmark ends it
"""


@pytest.fixture
def known_tree(tmp_path):
    """A source tree whose survivor.trainers.mlp is the trainer above, beside the real contract."""
    trainers = tmp_path / "tree" / "survivor" / "trainers"
    trainers.mkdir(parents=True)
    (trainers.parent / "__init__.py").write_text("")
    (trainers / "__init__.py").write_text("")
    os.symlink(ROOT / "survivor" / "trainers" / "contract.py", trainers / "contract.py")
    (trainers / "mlp.py").write_text(KNOWN_START)
    return str(tmp_path / "tree")


def test_from_the_spawn_the_timer_counts_the_trainers_whole_start(known_tree):
    began = time.monotonic()
    seconds = first_step_seconds(known_tree, "mlp", timeout=60)
    wall = time.monotonic() - began
    assert BEFORE_GATE + AFTER_GO <= seconds <= wall, (seconds, wall)


def test_with_the_gate_the_timer_counts_from_go_only(known_tree):
    gate_after = BEFORE_GATE + 1.0  # a restore that outlasts the trainer's own start
    began = time.monotonic()
    seconds = first_step_seconds(known_tree, "mlp", timeout=60, gate_after=gate_after)
    wall = time.monotonic() - began
    assert wall >= gate_after + AFTER_GO  # the call did wait for the gate
    # neither the spawn-to-go wait nor the start before the gate counted: at least the step after go,
    # and less than that plus the start the trainer had already done (a loaded machine's slack)
    assert AFTER_GO <= seconds < AFTER_GO + BEFORE_GATE, (seconds, wall)
