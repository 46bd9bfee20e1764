"""The suite's own line coverage (tests/line_coverage.py): measured in this very process, and its line."""

from __future__ import annotations

import os

import pytest

from tests import line_coverage


@pytest.mark.skipif(os.environ.get(line_coverage.OFF_ENV) == "0", reason="SURVIVOR_COVERAGE=0: not measured")
def test_a_line_of_survivor_run_in_a_test_process_counts():
    from survivor import places

    assert places.region_of_zone("us-west1-b") == "us-west1"
    files = line_coverage._measure.get_coverage()["files"]
    (entry,) = [v for path, v in files.items() if path.endswith(os.path.join("survivor", "places.py"))]
    assert entry["executed_lines"], entry
    assert len(files) > 100  # every module of survivor/, imported or not


def test_the_runs_line_says_the_share_and_what_it_counts():
    coverage = {
        "summary": {"covered_lines": 849, "missing_lines": 151, "percent_covered": 84.9},
        "files": {f"f{i}.py": {} for i in range(3)},
    }
    assert line_coverage.summary_line(coverage) == (
        "line coverage of survivor/: 84.9% (849 of 1000 lines in 3 files, the test processes alone; coverage.json)"
    )
