"""Command-line paths not covered elsewhere: the metadata emulator as a process, job-dir status."""

import json
import os
import subprocess
import sys

import pytest
import requests

from survivor.commands import main as cli
from survivor.local.http import free_port
from survivor.jobdir.journal import Journal
from survivor.jobdir.storage import open_storage

SURVIVOR = os.path.join(os.path.dirname(sys.executable), "survivor")


def test_emulate_metadata_serves_the_spec_and_flips_preempted(tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text("job_dir: /tmp/x\ntrain_steps: 3\ntrainer: {builtin: dummy}\n")
    port = free_port()
    proc = subprocess.Popen(
        [SURVIVOR, "emulate", "metadata", "--port", str(port), "--config", str(spec), "--attribute", "momentum=0.9"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert f"GCE_METADATA_HOST=127.0.0.1:{port}" in proc.stdout.readline()
        base = f"http://127.0.0.1:{port}/computeMetadata/v1/instance/"
        headers = {"Metadata-Flavor": "Google"}
        assert requests.get(base + "attributes/survivor-job", headers=headers).text == spec.read_text()
        assert requests.get(base + "attributes/momentum", headers=headers).text == "0.9"
        requests.put(f"http://127.0.0.1:{port}/emulator/v1/instance/preempted", data="TRUE")
        assert requests.get(base + "preempted", headers=headers).text == "TRUE"
    finally:
        proc.terminate()
        proc.wait(10)


def test_status_from_the_job_dir_alone(tmp_path, capsys):
    job_dir = str(tmp_path / "jobdir")
    journal = Journal(open_storage(job_dir))
    first = journal.begin("vm-a")
    journal.end(first, "preempted", end_step=30, reached_step=31, steps_lost=1)
    second = journal.begin("vm-a")
    journal.end(second, "finished", end_step=50, reached_step=50, steps_lost=0)
    journal.mark_done({"step": 50})
    assert cli.main(["status", "--job-dir", job_dir, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["state"] == "DONE" and report["preemptions"] == 1 and report["steps_lost"] == 1
    assert [h["outcome"] for h in report["history"]] == ["preempted", "finished"]
    assert cli.main(["status", "--job-dir", job_dir]) == 0
    assert "DONE" in capsys.readouterr().out


def test_data_from_a_missing_or_damaged_archive_is_one_line(tmp_path):
    garbage = tmp_path / "cifar-10-python.tar.gz"
    garbage.write_bytes(b"not a tar file")
    for archive in (tmp_path / "missing.tar.gz", garbage):
        done = subprocess.run(
            [SURVIVOR, "data", "cifar10", "--from", str(archive), "--out", str(tmp_path / "out")],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 1
        assert "Traceback" not in done.stderr
        assert done.stderr.startswith(f"error: {archive}:") and len(done.stderr.strip().splitlines()) == 1


def test_status_of_a_cloud_storage_job_dir_without_credentials_is_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "STORAGE_EMULATOR_HOST"}
    env["GOOGLE_APPLICATION_CREDENTIALS"] = str(tmp_path / "none.json")
    done = subprocess.run(
        [SURVIVOR, "status", "--job-dir", "gs://some-bucket/job"], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("error: gs://some-bucket/job:") and "credentials" in done.stderr


def test_output_into_a_pipe_is_not_wrapped_mid_path(tmp_path, capsys):
    # a CI log or `| tee` is not a terminal: rich must not wrap at 80 columns inside a path
    job_dir = str(tmp_path / ("a-long-directory-name-that-a-ci-runner-makes-" * 3) / "jobdir")
    journal = Journal(open_storage(job_dir))
    journal.end(journal.begin("vm-a"), "finished", end_step=5, reached_step=5, steps_lost=0)
    journal.mark_done({"step": 5})
    assert cli.main(["status", "--job-dir", job_dir]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert job_dir in first and "DONE" in first, first


def test_status_skips_an_attempt_record_with_negative_counts_with_a_warning_naming_it(tmp_path, capsys, caplog):
    job_dir = str(tmp_path / "jobdir")
    storage = open_storage(job_dir)
    journal = Journal(storage)
    good = journal.begin("vm-a")
    journal.end(good, "preempted", end_step=30, reached_step=31, steps_lost=1)
    storage.write(
        "survivor/attempts/000002.json",
        json.dumps(
            {
                "number": 2,
                "instance": "vm-b",
                "started": "2026-01-01T00:00:00+00:00",
                "ended": "2026-01-01T01:00:00+00:00",
                "outcome": "preempted",
                "end_step": 40,
                "reached_step": 40,
                "steps_lost": -(10**18),
            }
        ).encode(),
    )
    assert cli.main(["status", "--job-dir", job_dir]) == 0
    out = capsys.readouterr().out
    assert "-1000000000000000000" not in out and "1 steps lost" in out, out
    assert "ignoring an unreadable attempt record survivor/attempts/000002.json: steps_lost" in caplog.text


@pytest.mark.parametrize("command", ["status", "report"])
def test_a_local_job_dir_that_does_not_exist_is_one_line_and_exit_1(command, tmp_path, capsys):
    """`status --job-dir /tmp/does-not-exist` said NOT STARTED with exit 0."""
    from survivor.commands import main as cli

    missing = str(tmp_path / "does-not-exist")
    code = cli.main([command, "--job-dir", missing, *(["--out", str(tmp_path / "r")] if command == "report" else [])])
    err = capsys.readouterr().err
    assert code == 1 and err.strip() == f"error: job dir {missing}: no such directory"
    assert not os.path.exists(missing) and not os.path.exists(tmp_path / "r")
