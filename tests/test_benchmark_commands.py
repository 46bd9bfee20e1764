"""`benchmarks.commands` at its smallest: one counted round of every operator command against the
stand-ins, the metadata address refusing at once, the plot into a scratch folder."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from benchmarks.common import ROOT
from benchmarks.commands import commands


def test_a_round_walks_a_jobs_life_in_order_and_ends_with_its_deletion():
    labels = [label for label, _ in commands("job1a", "/tmp")]
    assert labels.index("make-template") < labels.index("make-group") < labels.index("stop") < labels.index("start")
    assert labels[-1] == "delete" and "--help" in labels and "report (2 machines)" in labels


@pytest.mark.slow
def test_the_benchmark_runs_one_round_and_prints_its_table(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.commands", "--rounds", "1", "--no-warm-up", "--metadata", "refused"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
        env={**os.environ, "SURVIVOR_BENCHMARK_PLOTS": str(tmp_path), "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "| report (2 machines) |" in done.stdout and "| delete |" in done.stdout, done.stdout
    assert (tmp_path / "commands.png").exists()
