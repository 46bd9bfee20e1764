"""What `survivor status` says a job cost: an offline table labelled as such, or the prices the operator
gives (`--spot-price`, `--on-demand-price`, USD per hour for the whole VM)."""

import json

import pytest

from survivor.commands import main as cli

from survivor.cloud import pricing

PROJECT = "survivor-local"


def test_the_table_estimate_says_where_its_figures_come_from():
    cost = pricing.estimate(2.0, "n1-standard-8", "nvidia-tesla-t4", 1)
    assert (cost.on_demand_rate, cost.spot_rate) == (0.73, 0.22)
    assert cost.on_demand_usd == round(2 * 0.73, 4) and cost.spot_usd == round(2 * 0.22, 4)
    assert cost.basis == pricing.TABLE_BASIS and "2026-11-22" in cost.basis and "offline" in cost.basis
    assert "2026-11-22" in pricing.__doc__ and "https://cloud.google.com/spot-vms/pricing" in pricing.__doc__


def test_given_prices_replace_the_table_for_their_side_only():
    both = pricing.estimate(10.0, "n1-standard-8", "nvidia-tesla-t4", 1, spot_price=0.5, on_demand_price=2.0)
    assert (both.spot_usd, both.on_demand_usd, both.saving) == (5.0, 20.0, 0.75)
    assert both.basis == "Spot and on-demand given on the command line"
    spot_only = pricing.estimate(10.0, "n1-standard-8", "nvidia-tesla-t4", 1, spot_price=0.5)
    assert spot_only.spot_usd == 5.0 and spot_only.on_demand_rate == 0.73
    assert spot_only.basis.startswith("Spot given on the command line, the rest us-central1 list prices")


def test_a_machine_the_table_lacks_costs_what_was_given_and_nothing_else():
    unknown = pricing.estimate(3.0, "n2-standard-8", None, 0)
    assert (unknown.spot_usd, unknown.on_demand_usd, unknown.saving) == (None, None, None)
    given = pricing.estimate(3.0, "n2-standard-8", None, 0, on_demand_price=0.4)
    assert given.on_demand_usd == 1.2 and given.spot_usd is None and given.saving is None
    assert given.basis == "on-demand given on the command line"


@pytest.mark.parametrize("text", ["0", "-1", "free", "nan", "inf"])
def test_a_price_that_is_not_usd_per_hour_is_refused_in_one_line(text, capsys):
    with pytest.raises(SystemExit):
        cli.main(["status", "demo", "--zone", "us-west1-b", "--spot-price", text])
    err = capsys.readouterr().err
    assert f"--spot-price: {text!r}: expected USD per hour for the whole VM" in err


def job_with_one_boot(compute_server, capsys, tmp_path, machine: str, gpu: str) -> None:
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(f"name: demo\njob_dir: {tmp_path / 'jobdir'}\ntrain_steps: 100\ntrainer: {{builtin: dummy}}\n"
                         f"compute: {{machine_type: {machine}, gpu: '{gpu}'}}\n")
    assert cli.main(["make-template", "demo", "--config", str(spec_file), "--project", PROJECT]) == 0
    assert cli.main(["make-group", "demo", "--template", "demo", "--zone", "us-west1-b", "--project", PROJECT]) == 0
    from survivor.jobdir.journal import Journal
    from survivor.jobdir.storage import open_storage

    journal = Journal(open_storage(str(tmp_path / "jobdir")))
    journal.end(journal.begin("demo-x"), "preempted", end_step=40, reached_step=40, steps_lost=0)
    capsys.readouterr()


def test_status_prices_the_job_at_the_given_rates(compute_server, capsys, tmp_path):
    job_with_one_boot(compute_server, capsys, tmp_path, "n1-standard-8", "nvidia-tesla-t4:1")
    where = ["demo", "--zone", "us-west1-b", "--project", PROJECT]
    assert cli.main(["status", *where, "--json"]) == 0
    table = json.loads(capsys.readouterr().out)["cost_usd"]
    assert (table["spot_per_hour"], table["basis"]) == (0.22, pricing.TABLE_BASIS)
    assert cli.main(["status", *where, "--json", "--spot-price", "0.31", "--on-demand-price", "1.1"]) == 0
    given = json.loads(capsys.readouterr().out)["cost_usd"]
    assert (given["spot_per_hour"], given["on_demand_per_hour"], given["saving"]) == (0.31, 1.1, 0.718)
    assert given["basis"] == "Spot and on-demand given on the command line"
    assert cli.main(["status", *where, "--spot-price", "0.31", "--on-demand-price", "1.1"]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "on Spot" in printed and "72% saved; Spot and on-demand given on the command line" in printed


def test_status_of_a_machine_the_table_lacks_shows_only_what_was_given(compute_server, capsys, tmp_path):
    job_with_one_boot(compute_server, capsys, tmp_path, "n2-standard-8", "none")
    where = ["demo", "--zone", "us-west1-b", "--project", PROJECT]
    assert cli.main(["status", *where]) == 0
    assert "on Spot" not in capsys.readouterr().out
    assert cli.main(["status", *where, "--spot-price", "0.05"]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "on Spot (on-demand price unknown; Spot given on the command line)" in printed


def test_prices_without_a_job_name_are_refused(capsys, tmp_path):
    assert cli.main(["status", "--job-dir", str(tmp_path), "--spot-price", "0.3"]) != 0
    assert "name the job too" in capsys.readouterr().err
