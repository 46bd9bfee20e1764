"""`survivor watch --deploy`: a Cloud Run job and the Cloud Scheduler job that runs it, made through the
real google-cloud-run and google-cloud-scheduler REST clients against survivor's stand-ins."""

import pytest
from google.cloud import scheduler_v1

from survivor.operator import watch_deploy
from survivor.operator.watch_deploy import WatchDeployment, deploy, undeploy
from survivor.local.run_server import RunServer
from survivor.local.scheduler_server import SchedulerServer
from survivor.spec import SpecError

PARENT = "projects/survivor-local/locations/us-west1"
NAME = f"{PARENT}/jobs/survivor-watch-cifar10"
ACCOUNT = "survivor-watch@survivor-local.iam.gserviceaccount.com"


@pytest.fixture
def apis():
    with RunServer() as run, SchedulerServer() as scheduler:
        yield run, scheduler, watch_deploy.clients(run.endpoint, scheduler.endpoint)


def options(**extra):
    return WatchDeployment(
        **{
            "job": "cifar10",
            "project": "survivor-local",
            "region": "us-west1",
            "zone": "us-west1-b",
            "service_account": ACCOUNT,
            **extra,
        }
    )


def test_deploy_creates_a_cloud_run_job_running_one_watch_and_a_scheduler_job_calling_its_run(apis):
    run, scheduler, (run_client, scheduler_client) = apis
    done = deploy(
        options(image="us-docker.pkg.dev/p/survivor/survivor:1"),
        run_client=run_client,
        scheduler_client=scheduler_client,
    )
    assert done == {"run": "created", "scheduler": "created"}
    task = run.jobs[NAME]["template"]["template"]
    assert task["containers"] == [
        {
            "image": "us-docker.pkg.dev/p/survivor/survivor:1",
            "command": ["survivor"],
            "args": [
                "watch",
                "cifar10",
                "--project",
                "survivor-local",
                "--zone",
                "us-west1-b",
                "--every",
                "15m",
                "--once",
                "--deployed-in",
                "us-west1",
            ],
        }
    ]
    assert task["serviceAccount"] == ACCOUNT and task["maxRetries"] == 0
    job = scheduler.jobs[NAME]
    assert job["schedule"] == "*/15 * * * *"
    assert job["httpTarget"] == {
        "uri": f"https://run.googleapis.com/v2/{NAME}:run",
        "httpMethod": scheduler_v1.HttpMethod.POST,  # enums travel as integers
        "oauthToken": {"serviceAccountEmail": ACCOUNT, "scope": "https://www.googleapis.com/auth/cloud-platform"},
    }
    # what Scheduler does at each tick reaches the Cloud Run job's run method
    assert scheduler.fire(NAME, run.endpoint).status_code == 200
    assert [e["job"] for e in run.executions] == ["survivor-watch-cifar10"]


def test_a_second_deploy_updates_both_jobs_instead_of_making_more(apis):
    run, scheduler, (run_client, scheduler_client) = apis
    deploy(options(), run_client=run_client, scheduler_client=scheduler_client)
    done = deploy(options(every_minutes=30, image="other:2"), run_client=run_client, scheduler_client=scheduler_client)
    assert done == {"run": "updated", "scheduler": "updated"}
    assert list(run.jobs) == [NAME] and list(scheduler.jobs) == [NAME]
    assert run.jobs[NAME]["template"]["template"]["containers"][0]["image"] == "other:2"
    assert "30m" in run.jobs[NAME]["template"]["template"]["containers"][0]["args"]
    assert scheduler.jobs[NAME]["schedule"] == "*/30 * * * *"
    assert [m for m, _, _ in run.requests].count("PATCH") == 1


def test_undeploy_removes_both_and_is_harmless_twice(apis):
    run, scheduler, (run_client, scheduler_client) = apis
    deploy(options(), run_client=run_client, scheduler_client=scheduler_client)
    assert undeploy(options(), run_client=run_client, scheduler_client=scheduler_client) == {
        "scheduler": "deleted",
        "run": "deleted",
    }
    assert run.jobs == {} and scheduler.jobs == {}
    assert undeploy(options(), run_client=run_client, scheduler_client=scheduler_client) == {
        "scheduler": "absent",
        "run": "absent",
    }


def test_the_default_image_and_refusals_before_any_call():
    body = watch_deploy.run_job_body(options())
    assert body["template"]["template"]["containers"][0]["image"].startswith(
        "us-west1-docker.pkg.dev/survivor-local/survivor/survivor:"
    )
    assert watch_deploy.cron(120) == "0 */2 * * *"
    with pytest.raises(SpecError, match="exactly one of --zone"):
        deploy(options(group_region="us-west1"))
    assert options(service_account="nobody", every_minutes=90).problems() == [
        "--every 90m: 1-59 minutes, or whole hours dividing a day",
        "--service-account 'nobody': expected a service account's email",
    ]


def test_the_command_deploys_and_undeploys_through_the_endpoints_in_the_environment(
    apis, compute_server, monkeypatch, capsys
):
    from survivor.commands.main import main

    run, scheduler, _ = apis
    monkeypatch.setenv(watch_deploy.RUN_ENDPOINT_ENV, run.endpoint)
    monkeypatch.setenv(watch_deploy.SCHEDULER_ENDPOINT_ENV, scheduler.endpoint)
    base = ["watch", "cifar10", "--project", "survivor-local", "--zone", "us-west1-b"]
    assert main(base + ["--deploy"]) == 1  # no service account: refused before any call
    assert run.requests == [] and "--service-account" in capsys.readouterr().err
    assert main(base + ["--deploy", "--service-account", ACCOUNT, "--every", "10m"]) == 0
    assert f"Cloud Scheduler job {NAME}: created" in capsys.readouterr().out
    assert scheduler.jobs[NAME]["schedule"] == "*/10 * * * *"
    assert main(base + ["--undeploy"]) == 0
    assert run.jobs == {} and scheduler.jobs == {}


def test_the_vm_never_installs_or_imports_the_deploy_clients():
    import os
    import subprocess
    import sys

    lock = open(os.path.join(os.path.dirname(watch_deploy.__file__), "..", "startup", "vm-lock.txt")).read()
    assert "google-cloud-run" not in lock and "google-cloud-scheduler" not in lock
    # the agent's whole import graph, and this module itself, load without them
    code = (
        "import sys; import survivor.agent.boot, survivor.operator.watch_deploy, survivor.commands.watch; "
        "print(sorted(m for m in sys.modules if m.startswith(('google.cloud.run', 'google.cloud.scheduler'))))"
    )
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"


def test_a_job_that_may_move_is_deployed_with_its_job_dir(apis, compute_server, monkeypatch, capsys, tmp_path):
    """A look deployed with only the group's zone finds no group there once the job has moved
    (placement:); the deploy reads the group's spec and gives the look the job dir, whose records
    say where the job went. --job-dir given, or a job that stays: what the operator said."""
    from survivor.cloud.compute import Compute
    from survivor.cloud.template import MachineOptions, template_body
    from survivor.commands.main import main
    from survivor.spec import JobSpec

    run, scheduler, _ = apis
    monkeypatch.setenv(watch_deploy.RUN_ENDPOINT_ENV, run.endpoint)
    monkeypatch.setenv(watch_deploy.SCHEDULER_ENDPOINT_ENV, scheduler.endpoint)
    job_dir = str(tmp_path / "job")
    spec = JobSpec.from_yaml(
        f"job_dir: {job_dir}\ntrain_steps: 100\ntrainer: {{builtin: dummy}}\n"
        "placement: {regions: [us-west1, us-central1]}\n"
    )
    compute = Compute("survivor-local", endpoint=compute_server.endpoint)
    compute.insert_template(template_body("cifar10", spec, MachineOptions.from_spec(spec), script="#!/bin/bash\n"))
    compute.create_group("cifar10", "cifar10", zone="us-west1-b", size=0)
    base = [
        "watch",
        "cifar10",
        "--project",
        "survivor-local",
        "--zone",
        "us-west1-b",
        "--deploy",
        "--service-account",
        ACCOUNT,
    ]

    def args():
        return run.jobs[NAME]["template"]["template"]["containers"][0]["args"]

    assert main(base) == 0
    assert f"the look is deployed with --job-dir {job_dir}" in capsys.readouterr().out
    assert args()[-2:] == ["--job-dir", job_dir]
    assert main(base + ["--job-dir", "gs://elsewhere/job"]) == 0  # the operator's word stands
    assert args()[-2:] == ["--job-dir", "gs://elsewhere/job"]
    staying = JobSpec.from_yaml(f"job_dir: {job_dir}\ntrain_steps: 100\ntrainer: {{builtin: dummy}}\n")
    compute.insert_template(template_body("stays", staying, MachineOptions.from_spec(staying), script="#!/bin/bash\n"))
    compute.create_group("stays", "stays", zone="us-west1-b", size=0)
    assert (
        main(
            [
                "watch",
                "stays",
                "--project",
                "survivor-local",
                "--zone",
                "us-west1-b",
                "--deploy",
                "--service-account",
                ACCOUNT,
            ]
        )
        == 0
    )
    assert (
        "--job-dir"
        not in run.jobs[f"{PARENT}/jobs/survivor-watch-stays"]["template"]["template"]["containers"][0]["args"]
    )


def test_the_deployed_look_ends_its_own_schedule_once_the_job_is_done(
    apis, compute_server, monkeypatch, capsys, tmp_path
):
    """A look at a job that is DONE (or FAILED) deletes its own Cloud Scheduler job,
    so Cloud Run is not run every 15 minutes for a job that ended; the Cloud Run job stays (--undeploy)."""
    from survivor.cloud.compute import Compute
    from survivor.cloud.template import MachineOptions, template_body
    from survivor.commands.main import main
    from survivor.jobdir.journal import Journal
    from survivor.jobdir.storage import open_storage
    from survivor.spec import JobSpec

    run, scheduler, _ = apis
    monkeypatch.setenv(watch_deploy.RUN_ENDPOINT_ENV, run.endpoint)
    monkeypatch.setenv(watch_deploy.SCHEDULER_ENDPOINT_ENV, scheduler.endpoint)
    spec = JobSpec.from_yaml(f"job_dir: {tmp_path}/job\ntrain_steps: 10\ntrainer: {{builtin: dummy}}\n")
    compute = Compute("survivor-local")
    compute.insert_template(template_body("cifar10", spec, MachineOptions.from_spec(spec), script="#!/bin/bash\n"))
    compute.create_group("cifar10", "cifar10", zone="us-west1-b", size=1)
    base = ["watch", "cifar10", "--project", "survivor-local", "--zone", "us-west1-b"]
    assert main(base + ["--deploy", "--service-account", ACCOUNT]) == 0
    args = run.jobs[NAME]["template"]["template"]["containers"][0]["args"]
    assert args[-2:] == ["--deployed-in", "us-west1"]
    capsys.readouterr()
    assert main(args) == 0  # what the container runs: the job has not ended, the schedule stays
    assert NAME in scheduler.jobs
    Journal(open_storage(spec.job_dir)).mark_done({"step": 10})
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"Cloud Scheduler job {NAME}: deleted (the job is DONE" in out, out
    assert NAME not in scheduler.jobs and NAME in run.jobs
