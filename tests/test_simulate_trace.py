"""`survivor simulate` replaying a seeded Spot trace (preemptions per hour, stockout gaps) on the
process-level simulator, and the cost of the VM time it used at Spot and on-demand prices."""

from __future__ import annotations

import pytest

from survivor.cloud import catalog, pricing
from survivor.local import simulator
from survivor.local.catalog_server import CatalogServer
from survivor.local.simulator import Event, SimulationOptions, SimulationResult
from survivor.spec import SpecError
from tests.conftest import dummy_spec


def test_vm_time_runs_from_each_boot_to_its_exit_or_leaving_the_group():
    result = SimulationResult(
        events=[
            Event(1.0, "boot", "a"),
            Event(4.0, "notice", "a"),
            Event(5.0, "exit", "a"),
            Event(9.0, "boot", "a"),
            Event(12.0, "left-group", "a"),
        ],
        ended=13.0,
    )
    assert result.vm_seconds() == 4.0 + 3.0
    assert SimulationResult(events=[Event(2.0, "boot", "b")], ended=10.0).vm_seconds() == 8.0


@pytest.mark.slow
def test_a_seeded_trace_preempts_waits_out_its_stockout_and_the_cost_is_priced(tmp_path):
    config = tmp_path / "spec.yaml"
    config.write_text(dummy_spec("jobdir", tmp_path, train_steps=100, step_seconds=0.05, on_finish="auto"))
    # one real second is a simulated hour: seed 0's first outage comes at 3.7 h, a 16-minute stockout
    options = SimulationOptions(
        config=str(config),
        workdir=str(tmp_path / "sim"),
        preemptions_per_hour=0.5,
        stockout_minutes=30,
        stockout_chance=1.0,
        speed=3600,
        seed=0,
        hard_off_after=5,
        recreate_delay=0.2,
        timeout=120,
        online=False,
    )
    run = simulator.simulate(options)
    assert run.succeeded, run.result.table()
    kinds = [e.kind for e in run.result.events]
    assert run.result.preemptions >= 1 and "stockout" in kinds
    spot, on_demand = pricing.hourly("n1-standard-16", "nvidia-tesla-t4", 1)[::-1]
    hours = run.result.vm_seconds() * 3600 / 3600  # real seconds x speed = simulated seconds, / 3600 = hours
    assert run.cost.hours == pytest.approx(hours)
    assert run.cost.spot_usd == pytest.approx(hours * spot, abs=1e-3)
    assert run.cost.on_demand_usd == pytest.approx(hours * on_demand, abs=1e-3)
    assert run.cost_line().startswith(f"cost: {hours:.3f} h of VM time (x3600) on Spot $")


def test_simulate_prices_vm_time_with_the_catalog_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    spec = {
        "job_dir": "/job",
        "train_steps": 10,
        "trainer": {"module": "x"},
        "compute": {"machine_type": "n1-standard-8", "gpu": "nvidia-tesla-t4:1"},
    }
    options = SimulationOptions(config="spec.yaml", workdir=str(tmp_path / "sim"), region="us-central1")
    with CatalogServer() as server:
        monkeypatch.setenv(catalog.ENDPOINT_ENV, server.endpoint)
        cost = simulator.price(spec, 2.0, options)
    on_demand = 8 * 0.031611 + 30 * 0.004237 + 0.35  # the stand-in's vCPU, RAM and T4 SKUs
    assert cost.on_demand_rate == pytest.approx(on_demand, abs=1e-6)
    assert cost.on_demand_usd == pytest.approx(2 * on_demand, abs=1e-3)
    assert cost.basis.startswith("Cloud Billing Catalog list prices, us-central1, fetched ")


def test_simulate_falls_back_to_the_offline_table_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    spec = {
        "job_dir": "/job",
        "train_steps": 10,
        "trainer": {"module": "x"},
        "compute": {"machine_type": "n1-standard-8", "gpu": "nvidia-tesla-t4:1"},
    }
    cost = simulator.price(spec, 1.0, SimulationOptions(config="spec.yaml", workdir=str(tmp_path), online=False))
    assert (cost.on_demand_rate, cost.spot_rate) == pricing.hourly("n1-standard-8", "nvidia-tesla-t4", 1)
    assert cost.basis.startswith(pricing.TABLE_BASIS)


def test_simulate_prices_the_region_its_vms_run_in_and_says_the_table_has_none_there(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    spec = {
        "job_dir": "/job",
        "train_steps": 10,
        "trainer": {"module": "x"},
        "compute": {"machine_type": "n1-standard-8"},
    }  # no zone: the simulated MIG's, us-west1-b
    options = SimulationOptions(config="spec.yaml", workdir=str(tmp_path), online=False)
    cost = simulator.price(spec, 1.0, options)
    assert simulator.ZONE.startswith("us-west1-")
    assert "which has no us-west1 prices" in cost.basis, cost.basis
    zoned = simulator.price(
        {**spec, "compute": {"machine_type": "n1-standard-8", "zone": "us-central1-a"}}, 1.0, options
    )
    assert zoned.basis.startswith(pricing.TABLE_BASIS + ";"), zoned.basis


def test_trace_options_are_checked_before_anything_runs(tmp_path):
    with pytest.raises(SpecError) as raised:
        simulator.simulate(
            SimulationOptions(
                config="nope.yaml", workdir=str(tmp_path / "sim"), preemptions_per_hour=-1, stockout_chance=2, speed=0
            )
        )
    assert raised.value.problems == [
        "--preemptions-per-hour -1: expected more than 0 and at most 60",
        "--stockout-chance 2: expected from 0 to 1",
        "--speed 0: expected more than 0 and at most 3600",
    ]


@pytest.mark.parametrize(
    "rate, speed, flag",
    [
        (1e9, 60, "--preemptions-per-hour"),
        (1e5, 60, "--preemptions-per-hour"),
        (3, 1e9, "--speed"),
        (3, 1e5, "--speed"),
        (3, 3600, "--speed"),
    ],
)
def test_a_trace_faster_than_vms_can_boot_is_refused_in_one_line_naming_the_flag(tmp_path, rate, speed, flag):
    with pytest.raises(SpecError) as raised:
        simulator.simulate(
            SimulationOptions(config="nope.yaml", workdir=str(tmp_path / "sim"), preemptions_per_hour=rate, speed=speed)
        )
    assert len(raised.value.problems) == 1 and raised.value.problems[0].startswith(flag)
    assert "at most" in raised.value.problems[0]
