"""`survivor report` (issue 17): goodput, badput by cause and cost beside on-demand, as Markdown, a
timeline PNG and JSON, for a job whose records the agent wrote; prices from the catalog stand-in."""

from __future__ import annotations

import datetime as _dt
import json
import os
from dataclasses import asdict

import pytest

from survivor.cloud import catalog
from survivor.commands.main import main
from survivor.jobdir.journal import Journal, _dump
from survivor.jobdir.storage import open_storage
from survivor.local.catalog_server import CatalogServer
from tests.test_ledger import T0, simulated_job


@pytest.fixture
def job(tmp_path, monkeypatch):
    """A finished job's dir (four boots: a preemption, a failure, a killed agent, the finish) and the
    catalog stand-in."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    job_dir = str(tmp_path / "jobdir")
    storage = open_storage(job_dir)
    for attempt in simulated_job():
        storage.write(attempt.name, _dump(asdict(attempt)))
    storage.write("survivor/DONE", _dump({"time": (T0 + _dt.timedelta(seconds=1710)).isoformat(), "step": 200}))
    with CatalogServer() as server:
        monkeypatch.setenv(catalog.ENDPOINT_ENV, server.endpoint)
        yield job_dir


def report(job_dir, out, *extra):
    """Runs `survivor report --job-dir` for an n1-standard-8 with a T4 in us-central1."""
    return main(["report", "--job-dir", job_dir, "--machine-type", "n1-standard-8", "--gpu", "nvidia-tesla-t4:1",
                 "--region", "us-central1", "--train-steps", "200", "--out", str(out), *extra])


def test_report_writes_the_timeline_png_and_the_markdown_with_the_figures(job, tmp_path, capsys):
    assert report(job, tmp_path / "out") == 0
    png = tmp_path / "out" / "timeline.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    md = (tmp_path / "out" / "report.md").read_text()
    assert "Goodput: **51.5%** of 28.5 min wall time" in md  # 880 productive seconds of 1710
    for label in ("waiting for capacity", "VM boot and install", "work re-run after a disruption",
                  "checkpoint stalls", "failed attempts", "trainer start", "restore"):
        assert f"| {label} |" in md
    assert "Cloud Billing Catalog list prices, us-central1" in md
    assert "![timeline](timeline.png)" in md
    assert "written:" in capsys.readouterr().err


def test_report_json_parses_and_its_costs_compare_spot_with_on_demand(job, tmp_path, capsys):
    assert report(job, tmp_path / "out", "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["state"] == "DONE" and data["goodput"] == pytest.approx(880 / 1710, abs=1e-4)
    assert data["badput"]["capacity"]["ml_goodput_measurement"] == "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"
    assert data["badput"]["rework"]["seconds"] == pytest.approx(120)
    spot_rate, od_rate = data["prices"]["spot"], data["prices"]["on_demand"]
    vm_seconds = 1710 - 330  # every second but the capacity gaps ran a VM
    assert data["cost_so_far"]["spot"] == pytest.approx(vm_seconds / 3600 * spot_rate, abs=1e-3)
    # on on-demand: the productive time plus the first boot's start (60 s boot, 5 s restore, 30 s start)
    assert data["cost_so_far"]["on_demand"] == pytest.approx((880 + 95) / 3600 * od_rate, abs=1e-3)
    assert data["saving_so_far"] > 0
    assert sum(s["seconds"] for s in data["badput"].values()) + 880 == pytest.approx(1710)


def test_report_without_a_machine_shows_time_but_no_cost(job, tmp_path, capsys):
    assert main(["report", "--job-dir", job, "--out", str(tmp_path / "o"), "--offline"]) == 0
    assert "No machine known" in capsys.readouterr().out
    assert os.path.getsize(tmp_path / "o" / "timeline.png") > 0


def test_status_of_a_job_dir_shows_its_goodput(job, capsys):
    assert main(["status", "--job-dir", job]) == 0
    assert "goodput 51%" in capsys.readouterr().out
