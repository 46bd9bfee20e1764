"""Every benchmark at a smoke size, as `python -m benchmarks.NAME` is run: a benchmark nobody runs
rots unseen (`benchmarks.time_to_safety` once failed on main: its trainer was started as a module
of a package the agent's working directory does not have). Each must exit 0 and print its table;
the plots go to a scratch folder (SURVIVOR_BENCHMARK_PLOTS), never over the published ones.

Not here (`NOT_SMOKED`): `benchmarks.boot` (it builds survivor's wheel and the VM's lock, minutes
even at its smallest; tests/test_boot_rehearsal.py runs the same boots), `benchmarks.commands`
(its own tests run it small), and `benchmarks.state_trainer` (a trainer the large-state benchmark
starts, no benchmark). A new benchmark joins `SMOKE` (and benchmarks/run_all.sh) or, with its
reason, `NOT_SMOKED`: a module of benchmarks/ with a `main` in neither fails
`test_every_benchmark_is_smoked_or_excused`."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.common import ROOT

SMOKE = {
    "deadline": ["--traces", "2"],
    "large_state": ["--size-mb", "8", "--repeats", "1", "--backend", "memory"],
    "time_to_safety": ["--sizes", "1", "--repeats", "1"],
    "goodput": [
        "--steps",
        "120",
        "--time-scale",
        "200",
        "--checkpoint-steps",
        "40",
        "--epoch-steps",
        "60",
        "--give-up-after",
        "40",
    ],  # a loaded machine's slow starts are no failure of the model
    "chaos": [
        "--kills",
        "0",
        "--manifests",
        "1",
        "--full-disks",
        "0",
        "--slow-metadata",
        "0",
        "--overlapped",
        "0",
        "--damaged-chunks",
        "0",
        "--contract-breakers",
        "0",
        "--state-disks",
        "0",
        "--pid-namespaces",
        "0",
        "--save-orders",
        "0",
        "--cuts",
        "0",
    ],  # every class at its size: tests/test_chaos.py
    "capacity": ["--traces", "benchmarks/traces/preemption-aws-04-22-2023", "--every", "240"],  # 177 h: 2 s
    "time_to_resume": ["--depth", "8", "--repeats", "1"],
    "overhead": [
        "--steps",
        "20",
        "--repeats",
        "1",
        "--stall-depth",
        "8",
        "--stall-steps",
        "40",
        "--stall-repeats",
        "1",
    ],
    "trainer_start": ["--baseline", ROOT, "--pairs", "1"],
    "dashboard": ["--jobs", "6", "--commits", "2", "--repeats", "1"],
}
#: The modules of benchmarks/ with a `main` that are not smoked here, and why (the docstring above).
NOT_SMOKED = {"boot": "minutes at its smallest", "commands": "its own tests", "state_trainer": "a trainer"}
#: TensorFlow trainers, agent boots: tens of seconds each on 2 cores
SLOW = {"time_to_resume", "overhead", "trainer_start", "chaos", "goodput"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in SMOKE])
def test_each_benchmark_runs_at_its_smoke_size(name, tmp_path):
    args = list(SMOKE[name])
    if name == "capacity":
        args += ["--json", str(tmp_path / "capacity.json")]
    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name}", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        env={**os.environ, "SURVIVOR_BENCHMARK_PLOTS": str(tmp_path), "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert done.returncode == 0, f"benchmarks.{name}:\n{(done.stdout + done.stderr)[-3000:]}"
    assert "|---|" in done.stdout, done.stdout[-2000:]  # its table
    assert "docs/benchmarks/" not in done.stdout.replace(str(tmp_path), "")  # no published plot overwritten


def test_every_benchmark_is_smoked_or_excused():
    """A benchmark added without a smoke size would otherwise pass unseen: every module of
    benchmarks/ with a top-level `main` is in `SMOKE` or `NOT_SMOKED` (read, none run)."""
    with_main = {
        path.stem
        for path in Path(ROOT, "benchmarks").glob("*.py")
        if any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in ast.parse(path.read_text()).body)
    }
    assert with_main - SMOKE.keys() - NOT_SMOKED.keys() == set(), "add each to SMOKE, or to NOT_SMOKED with why"
    assert not SMOKE.keys() & NOT_SMOKED.keys()
    assert NOT_SMOKED.keys() <= with_main, "NOT_SMOKED names a module that is gone or has no main"


def test_run_all_runs_every_benchmark_or_says_why_not():
    """benchmarks/run_all.sh's default list and its `not_here` list hold every module of benchmarks/
    with a `main`, once (a benchmark left out of both went unrun when the tables were remade)."""
    script = Path(ROOT, "benchmarks", "run_all.sh").read_text()
    default = re.search(r'benches="\$\{\*:-([^}"]*)\}"', script)
    not_here = re.search(r'^not_here="([^"]*)"', script, re.MULTILINE)
    assert default and not_here, "run_all.sh: its benches= and not_here= lines"
    listed = default.group(1).split() + not_here.group(1).split()
    assert len(listed) == len(set(listed)), listed
    assert set(listed) == set(SMOKE) | set(NOT_SMOKED), set(listed) ^ (set(SMOKE) | set(NOT_SMOKED))


def test_a_failed_run_keeps_its_scratch_dir_and_says_where(tmp_path):
    script = (
        "from benchmarks.common import scratch_dir\n"
        "import os\nroot = scratch_dir('bench-fail-')\nopen(os.path.join(root, 'agent.log'), 'w').write('why')\n"
        "print(root, flush=True)\nraise RuntimeError('the agent exited')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60)
    root = done.stdout.strip()
    assert done.returncode == 1 and os.path.exists(os.path.join(root, "agent.log")), done.stderr
    assert f"kept in {root}" in done.stderr
    ok = subprocess.run(
        [sys.executable, "-c", script.replace("raise RuntimeError('the agent exited')\n", "")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert ok.returncode == 0 and not os.path.exists(ok.stdout.strip())
    import shutil

    shutil.rmtree(root, ignore_errors=True)
