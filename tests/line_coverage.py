"""Line coverage of survivor/, measured by every run of the suite and printed above its result line.

The suite measures with SlipCover (https://github.com/plasma-umass/slipcover): it inserts a probe in
a module's bytecode when the module is imported, and each probe takes itself out once its line has
run (`immediate`), so a covered line costs nothing after its first run. On Python 3.11, which this project runs on, that
cost the suite's pure-Python tests about 10% of their CPU time, where coverage.py's line tracer
(the C tracer; its cheaper `sysmon` core needs 3.12) cost the whole suite about 42% of its time.

What it counts: the lines of survivor/ run inside the test processes (pytest and its xdist workers).
The agents, trainers and commands the tests start as processes of their own run unmeasured, so a line
only they run counts as missed: the figure is a floor.

`start` must run before anything imports survivor (the probes go in at import): tests/conftest.py
calls it first. Each xdist worker writes what it saw to a directory the controller made; the
controller merges them with its own, prints one line and writes coverage.json at the checkout's root
(SlipCover's JSON: each file's executed and missing lines). `SURVIVOR_COVERAGE=0` turns it off.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "survivor"
REPORT = ROOT / "coverage.json"
OFF_ENV = "SURVIVOR_COVERAGE"  # "0": not measured
DIR_ENV = "SURVIVOR_COVERAGE_DIR"  # where the workers write theirs (set by the controller)

_measure: Any = None  # the process's slipcover.Slipcover, None when not measuring


def start() -> None:
    """Puts the probes into every module of survivor/ this process imports from now on."""
    global _measure
    if _measure is not None or os.environ.get(OFF_ENV) == "0":
        return  # started: tests/conftest.py is imported again as tests.conftest by tests that import from it
    early = sorted(name for name in sys.modules if name == "survivor" or name.startswith("survivor."))
    if early:
        raise RuntimeError(f"line coverage starts after survivor was imported ({early[0]}): start it first")
    import slipcover

    # immediate: a probe takes itself out of the bytecode on its first run. The default waits for a
    # probe's 50th run, then takes every run probe out from Python, walking every thread's frames while
    # it holds its lock: in an xdist worker with a stand-in's threads that once hung the run for good
    # (its main thread inside that walk, waiting on a lock no thread released)
    _measure = slipcover.Slipcover(source=[str(SOURCE)], immediate=True)
    slipcover.ImportManager(_measure, slipcover.FileMatcher(sources=[str(SOURCE)])).__enter__()


def is_worker() -> bool:
    return "PYTEST_XDIST_WORKER" in os.environ


def configure() -> None:
    """In the controller: the directory the workers (started after this) write to."""
    if _measure is not None and not is_worker():
        os.environ[DIR_ENV] = tempfile.mkdtemp(prefix="survivor-coverage-")


def worker_finish() -> None:
    """In an xdist worker: what it saw, for the controller."""
    directory = os.environ.get(DIR_ENV)
    if _measure is not None and is_worker() and directory:
        worker = os.environ["PYTEST_XDIST_WORKER"]
        Path(directory, f"{worker}.json").write_text(json.dumps(_measure.get_coverage()))


def merged() -> dict | None:
    """In the controller: its own lines and every worker's, merged; None when not measuring."""
    if _measure is None or is_worker():
        return None
    import slipcover

    coverage = _measure.get_coverage()
    directory = os.environ.get(DIR_ENV)
    if directory:
        for path in sorted(Path(directory).glob("*.json")):
            slipcover.merge_coverage(coverage, json.loads(path.read_text()))
    return coverage


def summary_line(coverage: dict) -> str:
    """Pure: the run's one line, from SlipCover's JSON.

    >>> summary_line({"summary": {"covered_lines": 3, "missing_lines": 1, "percent_covered": 75.0},
    ...               "files": {"a.py": {}}})
    'line coverage of survivor/: 75.0% (3 of 4 lines in 1 files, the test processes alone; coverage.json)'
    """
    total = coverage["summary"]
    lines = total["covered_lines"] + total["missing_lines"]
    return (
        f"line coverage of survivor/: {total['percent_covered']:.1f}% ({total['covered_lines']} of {lines} "
        f"lines in {len(coverage['files'])} files, the test processes alone; {REPORT.name})"
    )
