"""What `survivor status` says a job cost: an offline table labelled as such, or the prices the operator
gives (`--spot-price`, `--on-demand-price`, USD per hour for the whole VM)."""

import json

import pytest

from survivor.commands import main as cli

from survivor.cloud import pricing

PROJECT = "survivor-local"


def offline(machine_type, gpu_type=None, gpu_count=0, **given):
    """Prices as status and report take them with no catalog cache and no network: overrides, then the table."""
    from survivor.cloud.catalog import Machine, hourly_prices

    return hourly_prices(Machine(machine_type, gpu_type, gpu_count), "us-central1", online=False, **given)


def test_the_table_says_where_its_figures_come_from(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    prices = offline("n1-standard-8", "nvidia-tesla-t4", 1)
    assert (prices.on_demand, prices.spot) == (0.73, 0.22)
    assert prices.basis.startswith(pricing.TABLE_BASIS) and "2026-11-22" in prices.basis
    assert "2026-11-22" in pricing.__doc__ and "https://cloud.google.com/spot-vms/pricing" in pricing.__doc__


def test_given_prices_replace_the_table_for_their_side_only(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    both = offline("n1-standard-8", "nvidia-tesla-t4", 1, spot_price=0.5, on_demand_price=2.0)
    assert (both.spot, both.on_demand, both.basis) == (0.5, 2.0, "Spot and on-demand given on the command line")
    spot_only = offline("n1-standard-8", "nvidia-tesla-t4", 1, spot_price=0.5)
    assert (spot_only.spot, spot_only.on_demand) == (0.5, 0.73)
    assert spot_only.basis.startswith("Spot given on the command line, the rest us-central1 list prices")


def test_a_machine_the_table_lacks_costs_what_was_given_and_nothing_else(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    unknown = offline("n2-standard-8")
    assert (unknown.spot, unknown.on_demand) == (None, None)
    given = offline("n2-standard-8", on_demand_price=0.4)
    assert (given.on_demand, given.spot) == (0.4, None) and given.basis.startswith(
        "on-demand given on the command line"
    )


@pytest.mark.parametrize("text", ["0", "-1", "free", "nan", "inf"])
def test_a_price_that_is_not_usd_per_hour_is_refused_in_one_line(text, capsys):
    with pytest.raises(SystemExit):
        cli.main(["status", "demo", "--zone", "us-west1-b", "--spot-price", text])
    err = capsys.readouterr().err
    assert f"--spot-price: {text!r}: expected USD per hour for the whole VM" in err


def job_with_one_boot(compute_server, capsys, tmp_path, machine: str, gpu: str) -> None:
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(
        f"name: demo\njob_dir: {tmp_path / 'jobdir'}\ntrain_steps: 100\ntrainer: {{builtin: dummy}}\n"
        f"compute: {{machine_type: {machine}, gpu: '{gpu}'}}\n"
    )
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
    table = json.loads(capsys.readouterr().out)["cost"]
    assert table["spot_per_hour"] == 0.22 and table["basis"].startswith(pricing.TABLE_BASIS)
    assert cli.main(["status", *where, "--json", "--spot-price", "0.31", "--on-demand-price", "1.1"]) == 0
    given = json.loads(capsys.readouterr().out)["cost"]
    assert (given["spot_per_hour"], given["on_demand_per_hour"]) == (0.31, 1.1)
    assert given["so_far"] == pytest.approx(given["vm_hours"] * 0.31, abs=1e-3)
    assert given["basis"] == "Spot and on-demand given on the command line"
    assert cli.main(["status", *where, "--spot-price", "0.31", "--on-demand-price", "1.1"]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert (
        f"${given['so_far']:.2f} so far on Spot" in printed
        and "Spot and on-demand given on the command line" in printed
    )
    assert printed.count("so far") == 1  # one cost figure, the ledger's


def test_status_of_a_machine_the_table_lacks_shows_only_what_was_given(compute_server, capsys, tmp_path):
    job_with_one_boot(compute_server, capsys, tmp_path, "n2-standard-8", "none")
    where = ["demo", "--zone", "us-west1-b", "--project", PROJECT]
    assert cli.main(["status", *where]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "cost unknown" in printed and "so far" not in printed
    assert cli.main(["status", *where, "--spot-price", "0.05"]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "so far on Spot" in printed and "Spot given on the command line" in printed
    assert cli.main(["status", *where, "--spot-price", "0.05", "--json"]) == 0
    cost = json.loads(capsys.readouterr().out)["cost"]
    assert (cost["spot_per_hour"], cost["on_demand_per_hour"]) == (0.05, None)


def test_prices_without_a_job_name_are_refused(capsys, tmp_path):
    assert cli.main(["status", "--job-dir", str(tmp_path), "--spot-price", "0.3"]) != 0
    assert "name the job too" in capsys.readouterr().err


@pytest.mark.parametrize(
    "value,text",
    [
        (-0.0013, "-$0.0013"),
        (0.0013, "$0.0013"),
        (-1234.5, "-$1,234.50"),
        (2.5, "$2.50"),
        (0.0, "$0.0000"),
        (None, "unknown"),
    ],
)
def test_money_is_written_as_people_write_it(value, text):
    assert pricing.money(value) == text


def test_the_offline_table_says_when_it_has_no_prices_for_the_jobs_region(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    from survivor.cloud.catalog import Machine, hourly_prices

    west = hourly_prices(Machine("n1-standard-8", None, 0), "us-west1", online=False)
    assert west.basis.startswith(pricing.TABLE_BASIS) and "no us-west1 prices" in west.basis, west.basis
    assert "no us-central1 prices" not in offline("n1-standard-8").basis


def test_a_catalog_without_credentials_is_two_words_not_the_exceptions_sentence():
    import google.auth.exceptions
    from google.api_core import exceptions as api_exceptions

    from survivor.cloud.catalog import catalog_reason

    sentence = (
        "Your default credentials were not found. To set up Application Default Credentials, see "
        "https://cloud.google.com/docs/authentication/external/set-up-adc for more information."
    )
    assert catalog_reason(google.auth.exceptions.DefaultCredentialsError(sentence)) == "no credentials"
    assert catalog_reason(api_exceptions.PermissionDenied("billing API off")) == "permission denied"
    assert catalog_reason(ConnectionRefusedError(111, "Connection refused")) == "no network"
