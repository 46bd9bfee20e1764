"""`survivor report`: goodput, badput by cause and cost beside on-demand, as Markdown, a
timeline PNG and JSON, for a job whose records the agent wrote; prices from the catalog stand-in."""

from __future__ import annotations

import datetime as _dt
import json
import os
from dataclasses import asdict

import pytest

from survivor.cloud import catalog
from survivor.commands.main import main
from survivor.jobdir.journal import _dump
from survivor.jobdir.storage import open_storage
from survivor.jobdir.status import read_job
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
    return main(
        [
            "report",
            "--job-dir",
            job_dir,
            "--machine-type",
            "n1-standard-8",
            "--gpu",
            "nvidia-tesla-t4:1",
            "--region",
            "us-central1",
            "--train-steps",
            "200",
            "--out",
            str(out),
            *extra,
        ]
    )


def test_report_writes_the_timeline_png_and_the_markdown_with_the_figures(job, tmp_path, capsys):
    assert report(job, tmp_path / "out") == 0
    png = tmp_path / "out" / "timeline.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    md = (tmp_path / "out" / "report.md").read_text()
    assert "Goodput: **51.5%** of 28.5 min wall time" in md  # 880 productive seconds of 1710
    for label in (
        "waiting for capacity",
        "VM boot and install",
        "work re-run after a disruption",
        "checkpoint stalls",
        "failed attempts",
        "trainer start",
        "restore",
    ):
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
    assert data["cost_so_far"]["job"] == pytest.approx(vm_seconds / 3600 * spot_rate, abs=1e-3)
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


# -- switches between Spot and on-demand, and the wait before the first VM ----------------------

REASON = "behind: at 52% Spot goodput the remaining 0.20 h of training | misses the deadline"


def write_job(job_dir: str) -> None:
    """The simulated job's records (four boots, DONE at 1710 s) in a job dir."""
    storage = open_storage(job_dir)
    for attempt in simulated_job():
        storage.write(attempt.name, _dump(asdict(attempt)))
    storage.write("survivor/DONE", _dump({"time": (T0 + _dt.timedelta(seconds=1710)).isoformat(), "step": 200}))


def test_report_lists_a_switch_and_prices_the_on_demand_boot_at_the_on_demand_price(tmp_path, capsys):
    from survivor.jobdir.switches import Switch, record_switch

    job_dir = str(tmp_path / "jobdir")
    write_job(job_dir)
    # the watch switched the group at 1200 s, while boot 3 (booted at 1100 s on Spot) ran; boot 4 is on-demand
    record_switch(
        open_storage(job_dir),
        Switch(
            time=(T0 + _dt.timedelta(seconds=1200)).isoformat(),
            to_mode="on-demand",
            from_mode="spot",
            reason=REASON,
            by="watch",
            template="cifar-on-demand",
        ),
    )
    prices = ["--spot-price", "1.0", "--on-demand-price", "3.6"]
    assert report(job_dir, tmp_path / "out", *prices) == 0
    md = (tmp_path / "out" / "report.md").read_text()
    assert (
        "| 2026-03-01 12:20:00 | spot -> on-demand | behind: at 52% Spot goodput the remaining 0.20 h of "
        "training \\| misses the deadline | watch |" in md
    )
    assert "The group runs **on-demand** now." in md
    png = tmp_path / "out" / "timeline.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    capsys.readouterr()

    assert report(job_dir, tmp_path / "out", *prices, "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert [(s["from_mode"], s["to_mode"], s["reason"], s["by"]) for s in data["switches"]] == [
        ("spot", "on-demand", REASON, "watch")
    ]
    assert data["boot_modes"] == {"1": "spot", "2": "spot", "3": "spot", "4": "on-demand"}
    # Spot: boot 1 (0-704 s), boot 2 (984-1050 s), boot 3 (1100-1240 s, killed; it booted before the switch)
    spot_seconds, on_demand_seconds = 704 + 66 + 140, 1705 - 1240  # boot 4 runs from its boot to its record's end
    assert data["vm_hours_by_mode"] == {
        "spot": round(spot_seconds / 3600, 4),
        "on-demand": round(on_demand_seconds / 3600, 4),
        "flex-start": 0.0,
    }
    assert data["cost_by_mode"] == {
        "spot": round(spot_seconds / 3600 * 1.0, 4),  # $0.2528
        "on-demand": round(on_demand_seconds / 3600 * 3.6, 4),  # $0.465
        "flex-start": 0.0,
    }
    assert data["cost_so_far"]["job"] == pytest.approx(0.2528 + 0.465, abs=1e-4)
    # the same job on on-demand is unchanged by the switch: productive time plus the first boot's start
    assert data["cost_so_far"]["on_demand"] == pytest.approx((880 + 95) / 3600 * 3.6, abs=1e-4)
    assert data["cost_projected"]["job"] == data["cost_so_far"]["job"]  # done: nothing left to run
    assert data["saving_so_far"] == pytest.approx(
        data["cost_so_far"]["on_demand"] - data["cost_so_far"]["job"], abs=1e-4
    )


def test_a_job_without_switches_says_every_vm_ran_on_spot(job, tmp_path):
    assert report(job, tmp_path / "out", "--offline") == 0
    md = (tmp_path / "out" / "report.md").read_text()
    assert "None: every VM ran on Spot." in md
    assert "| on on-demand (after a switch) | 0.0 s |" in md


def test_the_groups_creation_shows_as_waiting_for_capacity_before_the_first_boot(
    compute_server, tmp_path, monkeypatch, capsys
):
    from survivor.cloud.compute import Compute, GroupRef
    from survivor.cloud.template import MachineOptions, template_body
    from survivor.jobdir.switches import parse_time
    from survivor.jobdir.switches import Switch, record_switch
    from survivor.spec import JobSpec
    from tests.test_ledger import attempt

    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "survivor-local")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    spec = JobSpec.from_yaml(
        f"job_dir: {tmp_path}/job\ntrain_steps: 200\ntrainer: {{builtin: dummy}}\n"
        "compute: {machine_type: n1-standard-8, gpu: 'nvidia-tesla-t4:1'}\n"
    )
    compute = Compute("survivor-local", endpoint=compute_server.endpoint)
    compute.insert_template(template_body("cifar", spec, MachineOptions.from_spec(spec), script="#!/bin/bash\n"))
    compute.create_group("cifar", "cifar", zone="us-west1-b", size=1)
    created = parse_time(compute.get_group(GroupRef("survivor-local", "cifar", zone="us-west1-b"))["creationTimestamp"])
    # the records' times are T0-relative: put T0 45 s after the group's creation (a Spot stockout at first)
    offset = created + _dt.timedelta(seconds=45) - T0
    storage = open_storage(spec.job_dir)
    for record in (
        attempt(
            1,
            0,
            60,
            60 + 2 + 5 + 300 + 3,
            "preempted",
            end_step=100,
            reached=100,
            lost=0,
            restore=2.0,
            setup=5.0,
            train=300.0,
            trainer_save=3.0,
        ),
        attempt(
            2,
            400,
            440,
            440 + 2 + 5 + 300 + 1,
            "finished",
            restored=100,
            end_step=200,
            reached=200,
            lost=0,
            restore=2.0,
            setup=5.0,
            train=300.0,
            final_commit=1.0,
        ),
    ):
        for field_name in ("booted", "started", "ended"):
            setattr(record, field_name, (parse_time(getattr(record, field_name)) + offset).isoformat())
        storage.write(record.name, _dump(asdict(record)))
    storage.write("survivor/DONE", _dump({"time": (T0 + offset + _dt.timedelta(seconds=748)).isoformat()}))
    record_switch(
        storage,
        Switch(
            time=(T0 + offset + _dt.timedelta(seconds=380)).isoformat(),
            to_mode="on-demand",
            from_mode="spot",
            reason="safety net",
            by="watch",
        ),
    )

    assert (
        main(
            [
                "report",
                "cifar",
                "--zone",
                "us-west1-b",
                "--spot-price",
                "0.5",
                "--on-demand-price",
                "2.0",
                "--out",
                str(tmp_path / "out"),
                "--json",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    first = data["timeline"][0]
    assert (first["cause"], parse_time(first["start"]), parse_time(first["end"])) == (
        "capacity",
        created,
        created + _dt.timedelta(seconds=45),
    )
    assert data["badput"]["capacity"]["seconds"] == pytest.approx(45 + 30)  # before boot 1, and 370-400 s
    assert data["wall_hours"] == round((45 + 748) / 3600, 4)
    assert data["vm_hours_by_mode"] == {
        "spot": round(370 / 3600, 4),
        "on-demand": round(348 / 3600, 4),
        "flex-start": 0.0,
    }
    assert data["cost_so_far"]["job"] == pytest.approx(370 / 3600 * 0.5 + 348 / 3600 * 2.0, abs=1e-4)
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| waiting for capacity | INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION | 75.0 s |" in md
    assert "| spot -> on-demand | safety net | watch |" in md

    # with --job-dir alone the job starts at its first boot: no wait before it
    assert report(spec.job_dir, tmp_path / "alone", "--json", "--offline") == 0
    alone = json.loads(capsys.readouterr().out)
    assert alone["timeline"][0]["cause"] == "vm_boot" and alone["badput"]["capacity"]["seconds"] == pytest.approx(30)


def test_report_of_a_job_whose_group_is_gone_says_so_not_that_its_template_names_no_job_dir(
    compute_server, monkeypatch, capsys
):
    # README's `stop|start|delete|logs` then docs/costs.md's `report cifar10`: the group was deleted
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "survivor-local")
    assert main(["report", "gone", "--zone", "us-west1-b", "--offline"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: job gone: no group gone in survivor-local/zone us-west1-b (deleted, or another zone or region?); "
        "for a deleted job's report give --job-dir"
    ]


# -- what a hostile job dir or --out gets: one line naming the problem, exit 1 ---------------------


def test_report_of_a_missing_or_non_directory_job_dir_is_one_error_and_creates_nothing(tmp_path, capsys):
    missing, a_file = tmp_path / "no" / "jobdir", tmp_path / "afile"
    a_file.write_text("x")
    for job_dir in (missing, a_file):
        assert main(["report", "--job-dir", str(job_dir), "--out", str(tmp_path / "out"), "--offline"]) == 1
        assert capsys.readouterr().err.strip().splitlines() == [
            f"error: job dir {job_dir}: " + ("no such directory" if job_dir == missing else "not a directory")
        ]
    assert not (tmp_path / "no").exists() and not (tmp_path / "out").exists()


def test_report_into_an_out_that_is_a_file_is_one_error_naming_out(job, tmp_path, capsys):
    out = tmp_path / "afile"
    out.write_text("x")
    assert report(job, out, "--offline") == 1
    assert (
        capsys.readouterr().err.strip().splitlines()[-1] == f"error: --out {out}: cannot write the report "
        "there: not a directory"
    )


def test_a_switch_dated_in_the_future_or_unreadable_is_ignored_with_a_warning_naming_its_file(tmp_path, caplog):
    import warnings

    from survivor.operator.report import build_report, draw_timeline
    from survivor.policy.cost import ReportOptions

    job_dir = str(tmp_path / "jobdir")
    write_job(job_dir)
    storage = open_storage(job_dir)
    storage.write(
        "survivor/switches/a-on-demand.json",
        _dump({"time": "9999-01-01T00:00:00+00:00", "from_mode": "spot", "to_mode": "on-demand"}),
    )
    storage.write("survivor/switches/b-on-demand.json", b'{"time": "2026')
    storage.write("survivor/switches/c-on-demand.json", _dump({"time": "yesterday", "to_mode": "on-demand"}))
    made = build_report(read_job(job_dir, now=T0 + _dt.timedelta(hours=1)), ReportOptions(online=False))
    assert made.mode == "spot" and made.ledger.switches == []
    assert "survivor/switches/a-on-demand.json" in caplog.text and "survivor/switches/b-on-demand.json" in caplog.text
    assert "ignoring an unreadable switch record survivor/switches/c-on-demand.json: time: 'yesterday'" in caplog.text
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an empty timeline draws without "No artists with labels"
        made.ledger.spans = []
        draw_timeline(made, str(tmp_path / "t.png"))


def test_a_negative_saving_reads_minus_dollars_not_dollars_minus(job):
    from dataclasses import replace

    from survivor.operator.report import build_report, markdown
    from survivor.policy.cost import ReportOptions

    built = build_report(
        read_job(job, train_steps=200),
        ReportOptions(machine=catalog.Machine("n1-standard-8", None, 0), region="us-central1", train_steps=200),
    )
    # a saving below zero: this job cost more than the same progress on on-demand
    md = markdown(replace(built, cost_so_far={"job": 0.0113, "on_demand": 0.01}))
    assert "| -$0.0013 |" in md and "$-" not in md, md


def test_checkpoint_stalls_of_a_trainer_that_did_not_save_on_the_notice_are_explained(tmp_path, monkeypatch):
    from dataclasses import replace

    from survivor.operator.report import build_report, markdown
    from survivor.policy.cost import ReportOptions

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    job_dir = str(tmp_path / "jobdir")
    storage = open_storage(job_dir)
    for attempt in simulated_job():
        if attempt.number == 1:
            attempt = replace(
                attempt,
                reason="the trainer did not save on the notice: still running 4.0 s after "
                "SIGTERM, killed; its last checkpoint (step 80) stands",
            )
        storage.write(attempt.name, _dump(asdict(attempt)))
    built = build_report(read_job(job_dir, train_steps=200), ReportOptions(train_steps=200, online=False))
    md = markdown(built)
    assert "the trainer did not save on the notice in boot 1" in md, md
    assert built.to_json()["unsaved_boots"] == [1]


def test_report_prices_a_flex_start_boot_from_the_catalogs_dws_defined_duration_skus(tmp_path, monkeypatch, capsys):
    """docs/flex-start.md: a switch to flex-start is a third mode; its VM time is priced at the
    catalog's flex-start price for the machine, shown as a row of its own."""
    from survivor.jobdir.switches import Switch, record_switch

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    job_dir = str(tmp_path / "jobdir")
    write_job(job_dir)
    record_switch(
        open_storage(job_dir),
        Switch(
            time=(T0 + _dt.timedelta(seconds=1200)).isoformat(),
            to_mode="flex-start",
            from_mode="spot",
            reason=REASON,
            by="watch",
        ),
    )
    with CatalogServer() as server:
        monkeypatch.setenv(catalog.ENDPOINT_ENV, server.endpoint)
        args = [
            "report",
            "--job-dir",
            job_dir,
            "--machine-type",
            "a2-highgpu-1g",
            "--region",
            "us-central1",
            "--train-steps",
            "200",
            "--out",
            str(tmp_path / "out"),
        ]
        assert main([*args, "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert main(args) == 0
    flex = 12 * 0.01739 + 85 * 0.00233 + 1.61365  # the stand-in's DWS Defined Duration A2 SKUs
    assert data["prices"]["flex_start"] == pytest.approx(flex, abs=1e-6)
    flex_seconds = 1705 - 1240  # boot 4, after the switch
    assert data["vm_hours_by_mode"]["flex-start"] == round(flex_seconds / 3600, 4)
    assert data["vm_hours_by_mode"]["on-demand"] == 0.0
    assert data["cost_by_mode"]["flex-start"] == pytest.approx(flex_seconds / 3600 * flex, abs=1e-4)
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| on flex-start (after a switch) | 7.8 min |" in md and "spot -> flex-start" in md
