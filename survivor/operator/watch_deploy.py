"""`survivor watch JOB --deploy`: the deadline's look from outside the VM, run by Google Cloud itself.

    >>> options = WatchDeployment(job="cifar10", project="my-project", zone="us-west1-b", region="us-west1",
    ...                           service_account="survivor-watch@my-project.iam.gserviceaccount.com")
    >>> deploy(options)      # a Cloud Run job running `survivor watch cifar10 --zone us-west1-b --once`,
    ...                      # and a Cloud Scheduler job that runs it every 15 minutes
    >>> undeploy(options)    # removes both

During a Spot stockout no VM boots, so the agent never decides; something must look from outside.
This module puts that look on Google's own scheduler instead of a VM of survivor's: a Cloud Run
job (google-cloud-run, `run_v2.JobsClient`) whose one task runs `survivor watch ... --once`, and a
Cloud Scheduler job (google-cloud-scheduler, `scheduler_v1.CloudSchedulerClient`) whose HTTP target
is the Cloud Run Admin API's `jobs.run` method, called with an OAuth token of a service account:
the way Google documents executing Cloud Run jobs on a schedule
(https://cloud.google.com/run/docs/execute/jobs-on-schedule; tokens for Google APIs are OAuth,
OIDC is for other endpoints: https://cloud.google.com/scheduler/docs/http-target-auth).

Both are idempotent by name: a second deploy updates the two jobs (a new image, period or service
account) instead of making more. Both clients are imported here, lazily: they belong to the
`operator` extra and never to the VM (survivor/startup/vm-lock.txt).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from survivor import __version__
from survivor.cloud import endpoints
from survivor.spec import SpecError

#: Cloud Run Admin API v2 (what `jobs:run` is called on) and the token scope it accepts.
RUN_API = "https://run.googleapis.com"
TOKEN_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
#: Environment variables naming stand-ins for the two APIs (tests, `survivor emulate`).
RUN_ENDPOINT_ENV = endpoints.RUN.env
SCHEDULER_ENDPOINT_ENV = endpoints.SCHEDULER.env
#: The default image: survivor with the operator extra, built by the user into the project's
#: Artifact Registry (docs/deadline.md gives its Dockerfile); survivor publishes no image of its own.
DEFAULT_IMAGE = "{region}-docker.pkg.dev/{project}/survivor/survivor:{version}"


@dataclass(frozen=True)
class WatchDeployment:
    """Where `survivor watch` is deployed and how.

    Args:
        job: the job's name (its group's).
        project: the project of the group, the Cloud Run job and the Scheduler job.
        region: where the Cloud Run and Scheduler jobs live (a region that offers both).
        zone: the group's zone (a zonal MIG), or
        group_region: the group's region (a regional MIG).
        service_account: the identity of both: the Cloud Run job runs as it (it needs to read the
            group and the job dir and to switch templates) and Scheduler's OAuth token is its (it
            needs `run.jobs.run`).
        image: the container image with survivor in it (DEFAULT_IMAGE when None).
        every_minutes: the period of the look (the deadline policy's `check_every_hours`).
        job_dir: the job dir, when not the one in the group's template.
        goodput_metrics: each look writes the job's goodput to Cloud Monitoring (`watch --goodput-metrics`;
            the service account then needs monitoring.timeSeries.create).
    """

    job: str
    project: str
    region: str
    service_account: str
    zone: str | None = None
    group_region: str | None = None
    image: str | None = None
    every_minutes: int = 15
    job_dir: str | None = None
    goodput_metrics: bool = False

    @property
    def name(self) -> str:
        """The Cloud Run job's and the Scheduler job's id: `survivor-watch-<job>`."""
        return "survivor-watch-" + self.job

    @property
    def parent(self) -> str:
        """`projects/P/locations/R`: where both jobs live."""
        return f"projects/{self.project}/locations/{self.region}"

    def problems(self) -> list[str]:
        """Pure: one line per option the two APIs would refuse, before any call."""
        out = []
        if bool(self.zone) == bool(self.group_region):
            out.append("give exactly one of --zone (zonal MIG) or --region (regional MIG)")
        if not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", self.name):
            out.append(f"job {self.job!r}: a Cloud Run job is named with lowercase letters, digits and hyphens")
        if not 1 <= self.every_minutes <= 59 and self.every_minutes not in (60, 120, 180, 240, 360, 720, 1440):
            out.append(f"--every {self.every_minutes}m: 1-59 minutes, or whole hours dividing a day")
        if "@" not in self.service_account:
            out.append(f"--service-account {self.service_account!r}: expected a service account's email")
        return out


def cron(every_minutes: int) -> str:
    """Pure: the unix-cron schedule for a period: `*/15 * * * *`, `0 */2 * * *`."""
    if every_minutes < 60:
        return f"*/{every_minutes} * * * *"
    hours = every_minutes // 60
    return "0 * * * *" if hours == 1 else f"0 */{hours} * * *"


def watch_args(options: WatchDeployment) -> list[str]:
    """Pure: the container's argv after `survivor`: one look at the job's group."""
    where = ["--zone", options.zone] if options.zone else ["--region", options.group_region]
    # --every is the period the policy's margin assumes; --once: Scheduler, not the container, repeats it
    # --deployed-in: where its Scheduler job lives, which the look deletes once the job ended (`end_schedule`)
    args = [
        "watch",
        options.job,
        "--project",
        options.project,
        *where,
        "--every",
        f"{options.every_minutes}m",
        "--once",
        "--deployed-in",
        options.region,
    ]
    return (
        args
        + (["--job-dir", options.job_dir] if options.job_dir else [])
        + (["--goodput-metrics"] if options.goodput_metrics else [])
    )


def run_job_body(options: WatchDeployment) -> dict:
    """Pure: the Cloud Run job (run_v2.Job as a dict): one task, no retry (the next scheduled look
    is the retry), a timeout well inside the period, running as the service account."""
    image = options.image or DEFAULT_IMAGE.format(region=options.region, project=options.project, version=__version__)
    return {
        "labels": {"survivor-job": options.job},
        "template": {
            "task_count": 1,
            "parallelism": 1,
            "template": {
                "containers": [{"image": image, "command": ["survivor"], "args": watch_args(options)}],
                "max_retries": 0,
                "timeout": f"{min(600, options.every_minutes * 30)}s",
                "service_account": options.service_account,
            },
        },
    }


def scheduler_job_body(options: WatchDeployment) -> dict:
    """Pure: the Scheduler job (scheduler_v1.Job as a dict): POST to the Cloud Run job's `:run`
    with an OAuth token of the service account, every `every_minutes`."""
    return {
        "name": f"{options.parent}/jobs/{options.name}",
        "description": f"survivor: the deadline policy for job {options.job} (runs Cloud Run job {options.name})",
        "schedule": cron(options.every_minutes),
        "time_zone": "Etc/UTC",
        "http_target": {
            "uri": f"{RUN_API}/v2/{options.parent}/jobs/{options.name}:run",
            "http_method": "POST",
            "oauth_token": {"service_account_email": options.service_account, "scope": TOKEN_SCOPE},
        },
    }


def clients(run_endpoint: str | None = None, scheduler_endpoint: str | None = None):
    """(run_v2.JobsClient, scheduler_v1.CloudSchedulerClient) over REST: stand-ins when endpoints are
    given (or named by SURVIVOR_RUN_ENDPOINT / SURVIVOR_SCHEDULER_ENDPOINT), else Google's with
    default credentials. Imported here: the `operator` extra, never the VM's packages."""
    from google.cloud import run_v2, scheduler_v1

    return (
        run_v2.JobsClient(**endpoints.client_kwargs(endpoints.RUN.endpoint(run_endpoint))),
        scheduler_v1.CloudSchedulerClient(**endpoints.client_kwargs(endpoints.SCHEDULER.endpoint(scheduler_endpoint))),
    )


def deploy(options: WatchDeployment, *, run_client=None, scheduler_client=None) -> dict[str, str]:
    """Creates or updates the Cloud Run job and its Scheduler job; returns what was done to each
    ({"run": "created"|"updated", "scheduler": ...}). SpecError (one line per problem) before any call."""
    from google.api_core import exceptions
    from google.cloud import run_v2, scheduler_v1

    problems = options.problems()
    if problems:
        raise SpecError(problems)
    if run_client is None or scheduler_client is None:
        run_client, scheduler_client = clients()
    done = {}
    job = run_v2.Job(run_job_body(options))
    name = f"{options.parent}/jobs/{options.name}"
    try:
        run_client.get_job(name=name)
    except exceptions.NotFound:
        run_client.create_job(parent=options.parent, job=job, job_id=options.name).result()
        done["run"] = "created"
    else:
        job.name = name
        run_client.update_job(job=job).result()
        done["run"] = "updated"
    schedule = scheduler_v1.Job(scheduler_job_body(options))
    try:
        scheduler_client.get_job(name=schedule.name)
    except exceptions.NotFound:
        scheduler_client.create_job(parent=options.parent, job=schedule)
        done["scheduler"] = "created"
    else:
        scheduler_client.update_job(job=schedule)
        done["scheduler"] = "updated"
    return done


def undeploy(options: WatchDeployment, *, run_client=None, scheduler_client=None) -> dict[str, str]:
    """Deletes the Scheduler job, then the Cloud Run job (so nothing triggers a job being deleted);
    returns what was done to each ("deleted" or "absent")."""
    from google.api_core import exceptions

    if run_client is None or scheduler_client is None:
        run_client, scheduler_client = clients()
    done = {}
    try:
        scheduler_client.delete_job(name=f"{options.parent}/jobs/{options.name}")
        done["scheduler"] = "deleted"
    except exceptions.NotFound:
        done["scheduler"] = "absent"
    try:
        run_client.delete_job(name=f"{options.parent}/jobs/{options.name}").result()
        done["run"] = "deleted"
    except exceptions.NotFound:
        done["run"] = "absent"
    return done


def end_schedule(project: str, region: str, job: str, *, scheduler_client=None) -> str:
    """The deployed look ends itself once its job is DONE or FAILED: its Scheduler
    job `survivor-watch-<job>` in `projects/P/locations/R` is deleted ("deleted", or "absent"), so
    nothing runs the Cloud Run job again. The Cloud Run job itself stays (it is running this very
    look, and costs nothing idle): `survivor watch JOB --undeploy` removes it. The look's service
    account needs `cloudscheduler.jobs.delete` (roles/cloudscheduler.admin, docs/deadline.md)."""
    from google.api_core import exceptions

    if scheduler_client is None:
        scheduler_client = clients()[1]
    try:
        scheduler_client.delete_job(name=f"projects/{project}/locations/{region}/jobs/survivor-watch-{job}")
    except exceptions.NotFound:
        return "absent"
    return "deleted"
