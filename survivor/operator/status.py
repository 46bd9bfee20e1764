"""Everything `survivor status` shows of a job on Compute Engine: its group, its VM, its job dir's
story, its goodput and cost.

    >>> status = job_status(compute, JobAddress("cifar10", zone="us-west1-b").group())
    >>> status.group["template"], status.goodput_line
    ('cifar10', 'goodput 83% of 2.10 h; $1.92 so far on Spot (on-demand $3.40); ...')
    >>> print(json.dumps(status.to_json(), indent=2, default=str))   # `survivor status NAME --json`
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any

from survivor.cloud import machines
from survivor.cloud.compute import Compute, GroupRef
from survivor.jobdir.switches import parse_time
from survivor.mig.templates import on_demand_template_body, spec_of, template_mode
from survivor.operator.group import state_disks_left
from survivor.places import region_of_zone
from survivor.policy.deadline import flex_start_failure, flex_start_queue
from survivor.jobdir.switches import FLEX_START
from survivor.spec import JobSpec


@dataclass(frozen=True)
class JobStatus:
    """What `job_status` found of a job: where its group is (`name`, `project`, `zone`, `region`); the
    group (`group`: its target size, template and creation; None when there is none), its members
    with their guest attributes (`instances`), a flex-start group's resize request (`resize_request`),
    the machine its Spot template asks for and the deadline's fallback machine when that is another
    (`machine`, `fallback_machine`: type, GPU type and count, Spot); the job dir and its steps; the
    state disks left (`state_disks` with their monthly total, or `state_disks_error`); and, when the
    job dir was read, its summary (`job`), cost (`cost`) and goodput line (`goodput_line`).

    `to_json()` is `survivor status --json`'s object: each key only where it was found, as before
    the view was typed (no group: no `instances`; no job dir read: no `job`, `cost`, `goodput_line`)."""

    name: str
    project: str
    zone: str | None
    region: str | None
    group: dict[str, Any] | None = None
    instances: list[dict[str, Any]] | None = None
    resize_request: str | None = None
    machine: dict[str, Any] | None = None
    fallback_machine: dict[str, Any] | None = None
    job_dir: str | None = None
    train_steps: int | None = None
    state_disks: list[dict[str, Any]] | None = None
    state_disks_monthly_usd: float | None = None
    state_disks_error: str | None = None
    job: dict[str, Any] | None = None
    cost: dict[str, Any] | None = None
    goodput_line: str | None = None

    @property
    def flex_start(self) -> bool:
        """The group runs its flex-start template: its VM comes from a resize request."""
        return self.group is not None and template_mode(str(self.group.get("template") or ""))[1] == FLEX_START

    def to_json(self) -> dict[str, Any]:
        """The plain JSON object `survivor status --json` prints, its keys in the order they were found."""
        out: dict[str, Any] = {
            "name": self.name,
            "project": self.project,
            "zone": self.zone,
            "region": self.region,
            "group": self.group,
        }
        if self.group is not None:
            out["instances"] = self.instances or []
            if self.flex_start:
                out["resize_request"] = self.resize_request
        if self.machine is not None:
            out["machine"] = self.machine
        if self.fallback_machine is not None:
            out["fallback_machine"] = self.fallback_machine
        out["job_dir"] = self.job_dir
        out["train_steps"] = self.train_steps
        if self.state_disks is not None:
            out["state_disks"] = self.state_disks
            out["state_disks_monthly_usd"] = self.state_disks_monthly_usd
        if self.state_disks_error is not None:
            out["state_disks_error"] = self.state_disks_error
        if self.job is not None:
            out["job"] = self.job
            out["cost"] = self.cost
            out["goodput_line"] = self.goodput_line
        return out


def _template_machine(template: dict) -> dict[str, Any]:
    """The machine a template asks for: type, GPUs (a2/a3/g2 carry theirs without guestAccelerators), Spot."""
    props = template["properties"]
    accel = (props.get("guestAccelerators") or [{}])[0]
    gpu_type, gpu_count = machines.gpus_of(
        props.get("machineType") or "", accel.get("acceleratorType"), int(accel.get("acceleratorCount") or 0)
    )
    return {
        "machine_type": props.get("machineType"),
        "gpu_type": gpu_type,
        "gpu_count": gpu_count,
        "spot": props.get("scheduling", {}).get("provisioningModel") == "SPOT",
    }


def _report_options(
    machine: dict | None,
    group: GroupRef,
    spec: JobSpec | None,
    spot_price: float | None,
    on_demand_price: float | None,
    created: str | None = None,
    fallback: dict | None = None,
):
    """How `status` prices the job's report (survivor/operator/report.py): from cached catalog prices
    (status never waits on the catalog: `survivor report` fetches and caches them)."""
    from survivor.cloud.catalog import Machine
    from survivor.policy.cost import ReportOptions

    return ReportOptions(
        machine=Machine(machine["machine_type"], machine["gpu_type"], machine["gpu_count"]) if machine else None,
        fallback=Machine(fallback["machine_type"], fallback["gpu_type"], fallback["gpu_count"]) if fallback else None,
        region=group.region or region_of_zone(group.zone or ""),
        train_steps=spec.train_steps if spec else None,
        spot_price=spot_price,
        on_demand_price=on_demand_price,
        online=False,
        created=parse_time(created),
    )


def job_status(
    compute: Compute,
    group: GroupRef,
    job_dir: str | None = None,
    *,
    spot_price: float | None = None,
    on_demand_price: float | None = None,
    read_job_dir: bool = True,
) -> JobStatus:
    """Everything `survivor status` shows: the group, its instance, the job dir's story, and its
    goodput and cost by the goodput ledger, priced as `survivor report` prices (the USD-per-hour
    prices given, else cached catalog prices, else the offline table). The job dir defaults to the
    one in the template's job spec; it is read once (`read_job`), for the story and the price alike.
    `read_job_dir=False`: the group and its machine only (what `survivor report` needs to price)."""
    from survivor.jobdir.status import job_summary, read_job
    from survivor.operator import report
    from survivor.policy.cost import cost_summary, status_line

    out: dict[str, Any] = {"name": group.name, "project": group.project, "zone": group.zone, "region": group.region}
    found = compute.get_group(group)
    spec = None
    if found is None:
        out["group"] = None
    else:
        out["group"] = {
            "target_size": found.get("targetSize"),
            "template": (found.get("instanceTemplate") or "").rsplit("/", 1)[-1],
            "created": found.get("creationTimestamp"),
        }
        instances = compute.managed_instances(group)
        for instance in instances:
            instance["guest"] = compute.guest_attributes(instance["zone"], instance["name"]) if instance["zone"] else {}
        out["instances"] = instances
        current = out["group"]["template"]
        template = compute.get_template(current) if current else None
        base, mode = template_mode(current)
        if mode == FLEX_START:  # its VM comes from a resize request: where that stands
            requests = compute.resize_requests_of(group)
            out["resize_request"] = flex_start_failure(requests) or flex_start_queue(
                requests, _dt.datetime.now(_dt.timezone.utc)
            )
        if template and base != current:  # after a deadline's switch: price the Spot machine
            template = compute.get_template(base) or template
        if template:
            spec = spec_of(template)
            out["machine"] = _template_machine(template)
            if spec and spec.fallback and (spec.fallback.machine_type or spec.fallback.gpu):
                fallback = _template_machine(on_demand_template_body(template, spec.fallback))
                if (fallback["machine_type"], fallback["gpu_type"], fallback["gpu_count"]) != (
                    out["machine"]["machine_type"],
                    out["machine"]["gpu_type"],
                    out["machine"]["gpu_count"],
                ):
                    out["fallback_machine"] = fallback
    job_dir = job_dir or (spec.job_dir if spec else None)
    out["job_dir"] = job_dir
    out["train_steps"] = spec.train_steps if spec else None
    if spec is None or spec.state_disk_gb:  # what is left of its state disks, and what it costs a month
        out.update(state_disks_left(compute, spec.name if spec else group.name, job_dir))
    if job_dir and read_job_dir:
        options = _report_options(
            out.get("machine"),
            group,
            spec,
            spot_price,
            on_demand_price,
            (out.get("group") or {}).get("created"),
            out.get("fallback_machine"),
        )
        view = read_job(job_dir, train_steps=options.train_steps, created=options.created)
        summary = job_summary(view)
        out["job"] = summary
        if spec:
            summary["train_steps"] = spec.train_steps
        made = report.build_report(view, options)
        out["cost"] = cost_summary(made)
        out["goodput_line"] = status_line(made)
    return JobStatus(**out)
