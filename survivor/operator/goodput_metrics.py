"""A job's goodput in Cloud Monitoring, written by `survivor watch --goodput-metrics` from the job's ledger.

    >>> goodput_series(ledger, job="cifar10", location="us-central1-a", accelerator="NVIDIA-L4")
    [Series(metric='compute.googleapis.com/workload/goodput_time', labels={'goodput_source': 'TOTAL', ...}, ...), ...]
    >>> publish(spec, storage, project="my-project", location="us-central1-a")    # one look's write

What Google's goodput library writes for a job (survivor/cloud/monitoring.py names the metrics and the
API's rules), made from what survivor measured: `goodput_time` is the ledger's productive seconds;
`badput_time` one series per badput source, each the sum of survivor's causes whose bucket in
ml-goodput-measurement's `BadputType` is that source (`CAUSE[...].google_term` in
survivor/jobdir/ledger.py: `capacity` is INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION, `vm_boot`
TPU_INITIALIZATION, `restore` UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME, `trainer_start` PROGRAM_STARTUP,
`rework` WASTED_PROGRESS_FROM_DISRUPTION, `checkpoint` UNPRODUCTIVE_CHECKPOINT_SAVE_TIME, `failed` and
`other` OTHER); `disruptions` the boots after the first (the library counts a restart as one
interruption: src/goodput.py, `_number_of_interruptions`); `total_elapsed_time` the ledger's wall
seconds. The values are cumulative, as the library's are: each look writes the job so far. The labels
stay those of the job's start (its first place, its spec's machine), so a move never splits a series.

The watch writes them, not the VM: the watch already reads the job dir each look, runs while no VM
does (a stockout is badput too), and keeps google-cloud-monitoring off the VM's install. A write
Cloud Monitoring refuses is said in one line and costs the look nothing else.
"""

from __future__ import annotations

import datetime as _dt

from survivor.cloud import monitoring
from survivor.cloud.monitoring import (
    BADPUT_TIME,
    CUMULATIVE,
    DISRUPTIONS,
    GOODPUT_TIME,
    GOODPUT_TOTAL,
    TOTAL_ELAPSED_TIME,
    Series,
)
from survivor.jobdir.ledger import CAUSE, TABLE, Ledger
from survivor.jobdir.moves import Move
from survivor.spec import JobSpec


def badput_by_source(ledger: Ledger) -> dict[str, float]:
    """Pure: seconds per ml-goodput-measurement badput source, each source survivor measures present
    (0.0 when it never happened), summed over survivor's causes in that bucket."""
    out: dict[str, float] = {}
    for cause, seconds in ledger.seconds_by_cause().items():
        source = CAUSE[cause].google_term
        if source is not None:
            out[source] = out.get(source, 0.0) + seconds
    return out


def sources() -> list[str]:
    """The badput sources survivor writes, in the ledger's order."""
    return list(dict.fromkeys(c.google_term for c in TABLE if c.google_term is not None))


def goodput_series(ledger: Ledger, *, job: str, location: str, accelerator: str, replica: str = "0") -> list[Series]:
    """Pure: the series one look writes for a job: goodput, badput by source, disruptions, elapsed time."""
    resource = monitoring.workload(location, job, replica)
    out = [
        Series(
            GOODPUT_TIME,
            {"goodput_source": GOODPUT_TOTAL, "accelerator_type": accelerator},
            resource,
            round(ledger.productive_seconds, 3),
        )
    ]
    out += [
        Series(BADPUT_TIME, {"badput_source": source, "accelerator_type": accelerator}, resource, round(seconds, 3))
        for source, seconds in badput_by_source(ledger).items()
    ]
    window = {"accelerator_type": accelerator, "window_type": CUMULATIVE}
    out.append(Series(DISRUPTIONS, window, resource, max(0, len(ledger.boots) - 1)))
    out.append(Series(TOTAL_ELAPSED_TIME, window, resource, round(ledger.wall_seconds, 3)))
    return out


def first_place(moves: list[Move], location: str) -> str:
    """Pure: the `location` label: where the job started (its first move's origin, `zones/Z` -> `Z`),
    else `location` (where its group is). A move must not start new series: the dashboard sums each
    workload's series (`sum by (workload_id)` over `last_over_time`), so an old place's last point
    would be counted beside the new place's."""
    return moves[0].from_place.split("/", 1)[-1] if moves else location


def accelerator_of(spec: JobSpec) -> str:
    """The `accelerator_type` label for the job's machine (its spec's `compute:` section)."""
    compute = spec.extra.get("compute") or {}
    return monitoring.accelerator_type(compute.get("machine_type"), compute.get("gpu"))


def publish(
    spec: JobSpec,
    storage,
    *,
    project: str,
    location: str,
    metrics=None,
    now: _dt.datetime | None = None,
    created: _dt.datetime | None = None,
) -> int:
    """Writes the job's goodput as of `now` to Cloud Monitoring in `project` (`metrics`: a
    MetricServiceClient, default survivor/cloud/monitoring.py `client()`); returns the series written.
    Raises monitoring.MonitoringError with the API's words when a write is refused."""
    from survivor.jobdir.status import read_job

    now = now or _dt.datetime.now(_dt.timezone.utc)
    view = read_job(spec.job_dir, storage=storage, now=now, created=created, train_steps=spec.train_steps)
    series = goodput_series(
        view.ledger, job=spec.name, location=first_place(view.moves, location), accelerator=accelerator_of(spec)
    )
    monitoring.write(metrics or monitoring.client(), project, series, end=now)
    return len(series)
