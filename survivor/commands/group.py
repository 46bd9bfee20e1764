"""The operator's commands: make-template, make-image, make-group, status, stop, start, delete, logs.

They replace the recipe's `gcloud compute instance-templates create ...`, `instance-groups managed
create ...` and `instances stop/start`, by job name: a job NAME has a template NAME and a
single-instance MIG NAME (zonal with --zone, regional with --region). Every Compute failure ends in
one sentence that says what to do, and a non-zero exit.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import time
from typing import Any

from survivor.cloud import machines
from survivor.cloud.compute import BASE_INSTANCE_NAME_MAX, Compute, ComputeError, location_problems, name_problems
from survivor.agent.finish import GroupRef
from survivor.spec import JobSpec, SpecError
from survivor.jobdir.storage import StorageError
from survivor.cloud.template import MachineOptions, body_differences, named_differences, parse_gpu, pretty, template_body


def _err(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 1


def _price(text: str) -> float:
    from survivor.cloud import pricing

    try:
        return pricing.price_per_hour(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _project(args: argparse.Namespace, spec: JobSpec | None = None) -> str:
    project = (getattr(args, "project", None) or (spec.extra.get("compute", {}).get("project") if spec else None)
               or os.environ.get("GOOGLE_CLOUD_PROJECT") or os.environ.get("CLOUDSDK_CORE_PROJECT"))
    if not project:
        raise SpecError(["project: give --project, compute.project in the spec, or set GOOGLE_CLOUD_PROJECT"])
    return project


def _progress(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)


def compute_for(project: str) -> Compute:
    return Compute(project, progress=_progress)


def _group(args: argparse.Namespace, project: str) -> GroupRef:
    if bool(args.zone) == bool(args.region):
        raise SpecError(["zone/region: give exactly one of --zone (zonal MIG) or --region (regional MIG)"])
    problems = location_problems(args.zone, args.region)
    if problems:
        raise SpecError(problems)
    return GroupRef(project, args.name, zone=args.zone, region=args.region)


def _instance_zone(args: argparse.Namespace) -> str:
    """The zone of a standalone instance (--instance): --zone, which must be a zone."""
    problems = ([] if args.zone else [f"--instance {args.instance}: give its --zone too"]) + location_problems(
        args.zone, None, regional=False)
    if problems:
        raise SpecError(problems)
    return args.zone


def _where(args: argparse.Namespace) -> str:
    """The flag that names the job's group, for the next command a message suggests."""
    return f"--zone {args.zone}" if args.zone else f"--region {args.region}"


# -- make-template ---------------------------------------------------------------------------------


def _template_from_args(args: argparse.Namespace, boot=None) -> tuple[JobSpec, dict]:
    """The job spec and the template body the make-template flags describe (SpecError when contradictory).
    `boot(spec, options)`: chooses what the VM boots (make-template's image or wheel); returns the Install."""
    problems = name_problems("template", args.name) + location_problems(args.zone, args.region)
    if problems:
        raise SpecError(problems)
    spec = JobSpec.from_file(args.config)
    gpu_type = gpu_count = None
    if args.gpu:
        gpu_type, gpu_count = parse_gpu(args.gpu)
    options = MachineOptions.from_spec(
        spec, project=args.project, machine_type=args.machine_type, gpu_type=gpu_type, gpu_count=gpu_count,
        spot=args.spot, image_family=args.image_family, image_project=args.image_project, disk_gb=args.disk_gb,
        service_account=args.service_account, zone=args.zone, region=args.region,
        preemption_notice=args.preemption_notice, survivor_wheel=args.survivor_wheel,
        cloud_platform_scope=True if args.cloud_platform_scope else None,
    )
    if args.gpu and gpu_type is None:
        options.gpu_type, options.gpu_count = None, 0
    if not (args.zone or args.region):  # the spec's own compute.zone / compute.region
        problems = location_problems(options.zone, options.region, keys=("compute.zone", "compute.region"))
        if problems:
            raise SpecError(problems)
    template_body(args.name, spec, options)  # a contradictory request is refused before anything is built
    install = boot(spec, options) if boot else None
    return spec, template_body(args.name, spec, options, install=install)


def _boot(args: argparse.Namespace, compute: Compute | None, project: str | None):
    """make-template's choice of what the VM boots: survivor's image for this wheel and lock when its
    family exists (the boot installs nothing), else the wheel and lock staged in the job's bucket."""
    from survivor.cloud import image

    def choose(spec: JobSpec, options: MachineOptions):
        if not spec.job_dir.startswith("gs://"):
            print(f"warning: job_dir {spec.job_dir} is not on Cloud Storage: a VM can reach neither it nor survivor's "
                  "wheel, so the template installs nothing (fine for the local stand-ins only)", file=sys.stderr)
            return None
        try:
            local = image.local_install(options.survivor_wheel, options.requirements)
            if compute is not None and not (args.image_family or args.image_project):
                family = image.family_name(image.install_for(spec.job_dir, local), image.tensorflow_version(local.lock))
                if compute.image_from_family(project, family) is not None:
                    options.image_project, options.image_family = project, family
                    print(f"  image family {family}: survivor's image for this wheel and lock; boots install nothing",
                          file=sys.stderr)
                    return None
            if compute is None:  # --dry-run: what would be staged, not uploaded
                return image.install_for(spec.job_dir, local)
            installed = image.stage_install(spec.job_dir, local)
            print(f"  staged {installed.wheel} and {installed.lock}", file=sys.stderr)
            return installed
        except image.ImageError as exc:
            raise SpecError([str(exc)]) from None

    return choose


def make_template(args: argparse.Namespace) -> int:
    try:
        project = None if args.dry_run else _project(args, JobSpec.from_file(args.config))
        compute = None if args.dry_run else compute_for(project)
        if compute is not None and not args.skip_preflight:
            # before anything is staged or created: the checks on the body as it stands before the boot choice
            _, draft = _template_from_args(args)
            if not _preflight_passes(draft, compute, args.zone, args.region):
                return 1
        spec, body = _template_from_args(args, boot=_boot(args, compute, project))
    except SpecError as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2
    except ComputeError as exc:
        return _err(str(exc))
    if args.dry_run:
        print(pretty(body))
        return 0
    try:
        # What would be sent, normalised through the request message (unknown fields fail here).
        wanted = json.loads(compute.v1.InstanceTemplate.to_json(compute.template_message(body)))
        existing = compute.get_template(args.name)
        if existing is not None:
            differences = body_differences(
                {k: existing.get(k) for k in ("name", "description", "properties")},
                {k: wanted.get(k) for k in ("name", "description", "properties")})
            if not differences:
                print(f"template {args.name}: unchanged")
                return 0
            named = named_differences(differences, wanted)
            why = (" -- survivor's wheel changed (another checkout or version)"
                   if set(named) <= {"metadata survivor-wheel", "metadata survivor-wheel-sha256"} else "")
            return _err(
                f"template {args.name} already exists with a different body (differs in: {', '.join(named[:6])}){why}. "
                f"Templates cannot be changed: use a new name (e.g. {args.name}-v2) and point the group at it, or "
                f"run `survivor delete {args.name} --zone ZONE` (or --region) first (the job dir is never touched)."
            )
        compute.insert_template(body)
    except ComputeError as exc:
        return _err(str(exc))
    print(f"template {args.name}: created in project {project}")
    return 0


# -- make-image ------------------------------------------------------------------------------------


def make_image(args: argparse.Namespace) -> int:
    """`survivor make-image --config SPEC --zone Z`: survivor's image for this wheel, lock and the trainer's
    requirements (compute.requirements), so that make-template's VMs boot into training installing nothing."""
    from survivor.cloud import image

    try:
        if location_problems(args.zone, None, regional=False):
            raise SpecError(location_problems(args.zone, None, regional=False))
        spec = JobSpec.from_file(args.config)
        options = MachineOptions.from_spec(spec, survivor_wheel=args.survivor_wheel)
        project = _project(args, spec)
        local = image.local_install(options.survivor_wheel, options.requirements)
        family = image.family_name(image.install_for(spec.job_dir, local), image.tensorflow_version(local.lock))
        compute = compute_for(project)
        if compute.image_from_family(project, family) is not None:
            print(f"image family {family}: already built for this wheel and lock; nothing to do")
            return 0
        install = image.stage_install(spec.job_dir, local)
        name = image.make_image(compute, install, family, zone=args.zone, progress=_progress, deadline=args.deadline,
                                poll=args.poll_seconds, keep_builder=args.keep_builder,
                                machine_type=args.machine_type, disk_gb=args.disk_gb,
                                service_account=options.service_account)
    except SpecError as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2
    except (image.ImageError, ComputeError) as exc:
        return _err(str(exc))
    print(f"image {name}: created in family {family}; make-template boots it for this wheel and lock")
    return 0


# -- make-group ------------------------------------------------------------------------------------


def _preflight_passes(body: dict, compute: Compute, zone: str | None, region: str | None) -> bool:
    """Runs survivor/cloud/preflight.py's checks for a template body; prints warnings and errors."""
    from survivor.cloud import preflight

    findings = [f for f in preflight.check(body, compute, zone=zone, region=region) if f.level != "ok"]
    passed = preflight.report(findings, lambda line: print(line, file=sys.stderr))
    if not passed:
        print("preflight failed: nothing was created (--skip-preflight to go ahead anyway)", file=sys.stderr)
    return passed


def _regional_zones(compute: Compute, region: str, template: dict) -> list[str]:
    """The region's zones that offer the template's GPU (all of them for a VM without GPUs)."""
    from survivor.cloud.preflight import target_from_body

    target = target_from_body(template)
    zones = compute.region(region)["zones"]
    if not target.gpu_type:
        return zones
    return [z for z in zones if compute.zone_accelerators(z).get(target.gpu_type, 0) >= target.gpu_count]


def wait_for_group(compute: Compute, group: GroupRef, wait_seconds: float, poll_seconds: float) -> tuple[str, str, list]:
    """Polls the new group until its VM is RUNNING, its creation failed, or `wait_seconds` passed."""
    from survivor.cloud.compute import group_creation

    deadline = time.monotonic() + wait_seconds
    while True:
        state = group_creation(compute.managed_instances(group), compute.group_errors(group))
        if state[0] != "waiting" or time.monotonic() >= deadline:
            return state
        _progress(f"group {group.name}: waiting for its VM ({max(0.0, deadline - time.monotonic()):.0f} s left)")
        time.sleep(min(poll_seconds, max(0.0, deadline - time.monotonic())))


def make_group(args: argparse.Namespace) -> int:
    """Creates the job's single-VM MIG, then waits until its VM runs or the MIG reports why it cannot."""
    from survivor.cloud.compute import distribution_policy, explain_operation_errors

    try:
        project = _project(args)
        group = _group(args, project)
        problems = (name_problems("job", args.name, max_length=BASE_INSTANCE_NAME_MAX)
                    + name_problems("template", args.template))
        if problems:
            raise SpecError(problems)
    except SpecError as exc:
        return _err(exc.problems[0])
    where = f"zone {args.zone}" if args.zone else f"region {args.region}"
    if args.dry_run:
        body = {"name": args.name, "baseInstanceName": args.name, "targetSize": 1,
                "instanceTemplate": f"projects/{project}/global/instanceTemplates/{args.template}",
                "zone" if args.zone else "region": args.zone or args.region}
        if args.region:
            body["distributionPolicy"] = distribution_policy(project, [])  # zones: those offering the GPU
        print(json.dumps(body, indent=2))
        return 0
    try:
        compute = compute_for(project)
        found = compute.get_group(group)
        done = "created"
        if found is not None:
            current = (found.get("instanceTemplate") or "").rsplit("/", 1)[-1]
            if current != args.template:
                return _err(f"group {args.name}: already exists with template {current}, not {args.template}; delete it "
                            f"first (`survivor delete {args.name} {_where(args)} --template {current}`) or use another name")
            if not found.get("targetSize"):
                print(f"group {args.name}: already exists, stopped (target size 0); `survivor start {args.name} "
                      f"{_where(args)}` starts it")
                return 0
            done = "already exists"
        template = None if found is not None else compute.get_template(args.template)
        if template is None and found is None:
            return _err(f"template {args.template}: not found; create it first with `survivor make-template "
                        f"{args.template} --config JOB.yaml`")
        if found is None and not args.skip_preflight and not _preflight_passes(template, compute, args.zone, args.region):
            return 1
        distribution = None
        if found is None and args.region:
            zones = _regional_zones(compute, args.region, template)
            if not zones:
                return _err(f"group {args.name}: no zone of region {args.region} offers the template's GPU; pick "
                            "another region (gcloud compute accelerator-types list)")
            distribution = distribution_policy(project, zones)
        if found is None:
            compute.create_group(args.name, args.template, zone=args.zone, region=args.region, size=1,
                                 distribution=distribution)
        if args.wait_seconds <= 0:
            print(f"group {args.name}: {done} ({where}, 1 instance); not waiting for its VM")
            return 0
        state, zone, errors = wait_for_group(compute, group, args.wait_seconds, args.poll_seconds)
    except ComputeError as exc:
        return _err(str(exc))
    if state == "running":
        print(f"group {args.name}: {done} ({where}); its VM is RUNNING in {zone}")
        return 0
    if state == "failed":
        problem = explain_operation_errors(errors, f"group {args.name}: its VM cannot be created",
                                           f"zone {zone}" if zone else where)
        return _err(f"{problem} The group keeps retrying; "
                    f"`survivor delete {args.name} --{'zone ' + args.zone if args.zone else 'region ' + args.region}` "
                    "stops it.")
    return _err(f"group {args.name}: {done} ({where}), but its VM is not RUNNING after {args.wait_seconds:g} s "
                f"and the group reports no error; follow it with `survivor status {args.name} {_where(args)}`, or "
                "wait longer with --wait-seconds")


# -- preflight -------------------------------------------------------------------------------------


def preflight_command(args: argparse.Namespace) -> int:
    """`survivor preflight JOB --config ...`: every check, one line each; non-zero when one blocks."""
    from survivor.cloud import preflight

    try:
        spec, body = _template_from_args(args)
        project = _project(args, spec)
    except SpecError as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2
    zone = args.zone or spec.extra.get("compute", {}).get("zone")
    region = args.region or spec.extra.get("compute", {}).get("region")
    try:
        findings = preflight.check(body, compute_for(project), zone=zone, region=region)
    except ComputeError as exc:
        return _err(str(exc))
    if not (zone or region):
        findings.append(preflight.Finding("gpu", "no --zone or --region: GPU offer and quota not checked", "warning"))
    return 0 if preflight.report(findings, print) else 1


# -- status ----------------------------------------------------------------------------------------


def _hours(attempts: list[dict]) -> float:
    total = 0.0
    now = _dt.datetime.now(_dt.timezone.utc)
    for a in attempts:
        try:
            start = _dt.datetime.fromisoformat(a["started"])
            end = _dt.datetime.fromisoformat(a["ended"]) if a.get("ended") else now
        except (KeyError, TypeError, ValueError):
            continue
        total += max(0.0, (end - start).total_seconds())
    return total / 3600


def job_status(compute: Compute, group: GroupRef, job_dir: str | None = None, *,
               spot_price: float | None = None, on_demand_price: float | None = None) -> dict[str, Any]:
    """Everything `survivor status` shows: the MIG, its instance, the job dir's story, the cost
    (from pricing's offline table, or the USD-per-hour prices given)."""
    from survivor.cloud import pricing
    from survivor.jobdir.status import job_summary

    out: dict[str, Any] = {"name": group.name, "project": group.project, "zone": group.zone, "region": group.region}
    found = compute.get_group(group)
    spec = None
    if found is None:
        out["group"] = None
    else:
        out["group"] = {"target_size": found.get("targetSize"), "template": (found.get("instanceTemplate") or "").rsplit("/", 1)[-1]}
        instances = compute.managed_instances(group)
        for instance in instances:
            instance["guest"] = compute.guest_attributes(instance["zone"], instance["name"]) if instance["zone"] else {}
        out["instances"] = instances
        template = compute.get_template(out["group"]["template"]) if out["group"]["template"] else None
        if template:
            items = {i["key"]: i["value"] for i in template["properties"].get("metadata", {}).get("items", [])}
            if "survivor-job" in items:
                spec = JobSpec.from_yaml(items["survivor-job"])
            props = template["properties"]
            accel = (props.get("guestAccelerators") or [{}])[0]
            # a2/a3/g2 carry their GPUs without guestAccelerators (survivor/cloud/machines.py)
            gpu_type, gpu_count = machines.gpus_of(props.get("machineType") or "", accel.get("acceleratorType"),
                                                   int(accel.get("acceleratorCount") or 0))
            out["machine"] = {"machine_type": props.get("machineType"), "gpu_type": gpu_type, "gpu_count": gpu_count,
                              "spot": props.get("scheduling", {}).get("provisioningModel") == "SPOT"}
    job_dir = job_dir or (spec.job_dir if spec else None)
    if job_dir:
        summary = job_summary(job_dir, train_steps=spec.train_steps if spec else None)
        out["job"] = summary
        if spec:
            summary["train_steps"] = spec.train_steps
        hours = _hours([{"started": h["started"], "ended": None if h["outcome"] == "running or killed" else h.get("ended")}
                        for h in summary["history"]])
        out["compute_hours"] = round(hours, 3)
        machine = out.get("machine")
        if machine:
            cost = pricing.estimate(hours, machine["machine_type"], machine["gpu_type"], machine["gpu_count"],
                                    spot_price=spot_price, on_demand_price=on_demand_price)
            out["cost_usd"] = {"spot": cost.spot_usd, "on_demand": cost.on_demand_usd, "saving": cost.saving,
                               "spot_per_hour": cost.spot_rate, "on_demand_per_hour": cost.on_demand_rate,
                               "basis": cost.basis}
    return out


def vertex_status(args: argparse.Namespace) -> int:
    """A Vertex AI custom job's state, beside what its job dir says."""
    from survivor.cloud import vertex

    region = args.vertex.split("/locations/")[1].split("/")[0] if "/locations/" in args.vertex else (args.region or "us-central1")
    try:
        job = vertex.get(args.vertex, region)
    except Exception as exc:
        return _err(f"custom job {args.vertex}: {getattr(exc, 'message', None) or exc}")
    report = {"vertex_job": job["name"], "state": job.get("state"), "display_name": job.get("displayName")}
    if args.job_dir:
        from survivor.jobdir.status import job_summary

        report["job"] = job_summary(args.job_dir)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print(f"{report['display_name']}: {report['state']} ({report['vertex_job']})")
        if "job" in report:
            print(f"  job dir: {report['job']['state']}, committed step {report['job']['committed_step']}")
        print(f"  logs: survivor logs --vertex {job['name']}")
    return 0


def status(args: argparse.Namespace) -> int:
    if getattr(args, "vertex", None):
        return vertex_status(args)
    if args.name is None:
        if not args.job_dir:
            return _err("give a job name (with --zone or --region), or --job-dir")
        if getattr(args, "spot_price", None) or getattr(args, "on_demand_price", None):
            return _err("--spot-price/--on-demand-price: name the job too, so its machine and compute hours are known")
        from survivor.jobdir import status as job_dir_status

        try:
            return job_dir_status.main(args)
        except StorageError as exc:
            return _err(str(exc))
    try:
        project = _project(args)
        group = _group(args, project)
    except SpecError as exc:
        return _err(exc.problems[0])
    try:
        report = job_status(compute_for(project), group, args.job_dir, spot_price=getattr(args, "spot_price", None),
                            on_demand_price=getattr(args, "on_demand_price", None))
    except (ComputeError, StorageError) as exc:
        return _err(str(exc))
    if args.json:
        print(json.dumps(report, indent=2, default=str))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    g = report.get("group")
    console.print(f"[bold]{report['name']}[/bold] in {report['project']}/{report['zone'] or report['region']}: "
                  + (f"group target size {g['target_size']}, template {g['template']}" if g else "no group"))
    for instance in report.get("instances", []):
        guest = instance.get("guest") or {}
        state = instance["status"] or f"not created yet ({instance.get('action') or 'CREATING'})"
        errors = "; ".join(f"{code}: {message}" for code, message in instance.get("errors") or [])
        console.print(f"  instance {instance['name']} ({instance['zone']}): {state}"
                      + (f", agent {guest.get('state')} at step {guest.get('step')}" if guest else "")
                      + (f"; the group's last attempt failed: {errors}" if errors and not instance["status"] else ""),
                      markup=False)
    job = report.get("job")
    if job:
        committed = "nothing committed" if job["committed_step"] is None else f"committed step {job['committed_step']}"
        console.print(f"  job {job['state']}: {committed} of {job.get('train_steps', '?')}, "
                      f"{job['preemptions']} preemptions survived, {job['steps_lost']} steps lost, "
                      f"{job['attempts']} boots")
        if job.get("failed"):
            from survivor.jobdir.status import failed_reason

            console.print(f"  [red]FAILED[/red]: {failed_reason(job['failed'])}")
        cost = report.get("cost_usd") or {}
        if cost.get("spot") is not None or cost.get("on_demand") is not None:
            spot = f"${cost['spot']:.2f} on Spot" if cost.get("spot") is not None else "Spot price unknown"
            on_demand = f"${cost['on_demand']:.2f} on demand" if cost.get("on_demand") is not None else "on-demand price unknown"
            saved = f", {100 * cost['saving']:.0f}% saved" if cost.get("saving") is not None else ""
            console.print(f"  compute {report['compute_hours']:.2f} h: {spot} ({on_demand}{saved}; {cost['basis']})")
        elif "compute_hours" in report:
            console.print(f"  compute {report['compute_hours']:.2f} h")
        table = Table("boot", "instance", "from", "saved", "outcome", "lost", "reason")
        for row in job["history"][-10:]:
            table.add_row(str(row["attempt"]), row["instance"], row["restored"],
                          "-" if row["end_step"] is None else str(row["end_step"]), row["outcome"],
                          "-" if row["steps_lost"] is None else str(row["steps_lost"]), row["reason"][:60])
        console.print(table)
    return 0


# -- stop / start / delete / logs ------------------------------------------------------------------


def stop(args: argparse.Namespace) -> int:
    """Graceful: GCE soft-offs the VM, the agent saves and commits before it goes."""
    try:
        project = _project(args)
        compute = compute_for(project)
        if args.instance:
            compute.stop_instance(project, _instance_zone(args), args.instance)
            print(f"instance {args.instance}: stopped (the agent saved on the way down)")
            return 0
        group = _group(args, project)
        compute.resize_group(group, 0)
    except (SpecError, ComputeError) as exc:
        return _err(exc.problems[0] if isinstance(exc, SpecError) else str(exc))
    print(f"group {args.name}: resized to 0; the agent saves and commits before its VM goes. "
          f"`survivor start {args.name} {_where(args)}` resumes from that checkpoint.")
    return 0


def start(args: argparse.Namespace) -> int:
    try:
        project = _project(args)
        compute = compute_for(project)
        if args.instance:
            compute.start_instance(_instance_zone(args), args.instance)
            print(f"instance {args.instance}: started")
            return 0
        group = _group(args, project)
        compute.resize_group(group, 1)
    except (SpecError, ComputeError) as exc:
        return _err(exc.problems[0] if isinstance(exc, SpecError) else str(exc))
    print(f"group {args.name}: resized to 1; training resumes from the newest committed checkpoint")
    return 0


def delete(args: argparse.Namespace) -> int:
    """Deletes the MIG, then the template. Never the job dir."""
    try:
        project = _project(args)
        group = _group(args, project)
        compute = compute_for(project)
        found = compute.get_group(group)
        template = args.template or ((found or {}).get("instanceTemplate") or "").rsplit("/", 1)[-1] or args.name
        if found is not None:
            compute.delete_group(group)
            print(f"group {args.name}: deleted")
        else:
            print(f"group {args.name}: not found (nothing to delete)")
        if compute.get_template(template) is not None:
            compute.delete_template(template)
            print(f"template {template}: deleted")
    except (SpecError, ComputeError) as exc:
        return _err(exc.problems[0] if isinstance(exc, SpecError) else str(exc))
    print("the job dir is untouched")
    return 0


def vertex_logs(args: argparse.Namespace) -> int:
    """A Vertex AI custom job's replica logs from Cloud Logging; with --follow, until the job ends."""
    from google.api_core import exceptions as api_errors

    from survivor.cloud import vertex

    try:
        project, region, _ = vertex.job_parts(args.vertex)
        job = vertex.get(args.vertex, region)
        since = job.get("createTime") or "1970-01-01T00:00:00Z"
        client = vertex.logging_client(project)
        printed_at_since: set[str] = set()  # entries at the newest timestamp, asked for again next time
        while True:
            for line in vertex.job_logs(args.vertex, since, client):
                if line.insert_id in printed_at_since:
                    continue
                print(line, flush=True)
                if line.timestamp != since:
                    since, printed_at_since = line.timestamp, set()
                printed_at_since.add(line.insert_id)
            if not args.follow or job.get("state") in vertex.FINISHED_STATES:
                return 0
            time.sleep(args.interval)
            job = vertex.get(args.vertex, region)
    except SpecError as exc:
        return _err(exc.problems[0])
    except api_errors.GoogleAPICallError as exc:
        return _err(f"custom job {args.vertex}: {exc.message}")
    except KeyboardInterrupt:
        return 0


def logs(args: argparse.Namespace) -> int:
    """Serial port output of the job's instance (the startup script and the agent's journal)."""
    if args.vertex:
        return vertex_logs(args)
    if not args.name and not args.instance:
        return _err("name the job (its MIG), an instance with --instance and --zone, or a Vertex AI custom job "
                    "with --vertex")
    try:
        project = _project(args)
        compute = compute_for(project)
        if args.instance:
            zone, name = _instance_zone(args), args.instance
        else:
            members = compute.managed_instances(_group(args, project))
            if not members:
                return _err(f"group {args.name} has no instance right now (stopped or finished)")
            zone, name = members[0]["zone"], members[0]["name"]
            if not members[0]["status"]:
                errors = "; ".join(f"{code}: {message}" for code, message in members[0]["errors"])
                return _err(f"group {args.name}: its VM {name} is not created yet, so it has no serial port"
                            + (f" (the group's last attempt: {errors})" if errors else "")
                            + f"; `survivor status {args.name} {_where(args)}` follows it")
        offset = 0
        while True:
            text, offset = compute.serial_output(zone, name, offset)
            sys.stdout.write(text)
            sys.stdout.flush()
            if not args.follow:
                return 0
            time.sleep(args.interval)
    except (SpecError, ComputeError) as exc:
        return _err(exc.problems[0] if isinstance(exc, SpecError) else str(exc))
    except KeyboardInterrupt:
        return 0


def add_commands(sub) -> None:
    """Adds the operator subcommands to the CLI's subparsers."""

    def where(p, instance: bool = False, name_optional: bool = False):
        p.add_argument("name", nargs="?" if name_optional else None, help="the job's name (its MIG and template)")
        p.add_argument("--project", help="Google Cloud project (default: $GOOGLE_CLOUD_PROJECT)")
        p.add_argument("--zone", help="the zonal MIG's zone")
        p.add_argument("--region", help="the regional MIG's region")
        if instance:
            p.add_argument("--instance", help="a standalone instance instead of the MIG (with --zone)")

    def template_flags(p) -> None:
        """The flags that describe a template (make-template and preflight)."""
        p.add_argument("name")
        p.add_argument("--config", required=True, help="the job spec YAML")
        p.add_argument("--project")
        p.add_argument("--machine-type")
        p.add_argument("--gpu", help="TYPE:COUNT, e.g. nvidia-tesla-t4:4, or none")
        spot = p.add_mutually_exclusive_group()
        spot.add_argument("--spot", dest="spot", action="store_true", default=None, help="Spot VM (default)")
        spot.add_argument("--on-demand", dest="spot", action="store_false", help="standard (on-demand) VM")
        p.add_argument("--image-family")
        p.add_argument("--image-project")
        p.add_argument("--disk-gb", type=int)
        p.add_argument("--service-account")
        p.add_argument("--cloud-platform-scope", action="store_true", help="the whole cloud-platform scope instead of storage+compute")
        p.add_argument("--zone")
        p.add_argument("--region")
        p.add_argument("--preemption-notice", type=int, metavar="SECONDS", help="Spot: ask for this much notice before the soft off")
        p.add_argument("--survivor-wheel", help="stage this local survivor_train-*.whl instead of building one "
                                                "from the checkout")

    p = sub.add_parser("make-template", help="create the instance template for a job spec")
    template_flags(p)
    p.add_argument("--dry-run", action="store_true", help="print the exact REST body; call nothing")
    p.add_argument("--skip-preflight", action="store_true", help="create it even if `survivor preflight` finds problems")
    p.set_defaults(func=make_template)

    p = sub.add_parser("make-image", help="bake survivor, its lock and the trainer's requirements into an image "
                                          "that make-template then boots (boots install nothing)")
    p.add_argument("--config", required=True, help="the job spec YAML (its job dir stages the wheel and lock)")
    p.add_argument("--project")
    p.add_argument("--zone", required=True, help="where the builder VM runs")
    p.add_argument("--survivor-wheel", help="a local survivor_train-*.whl instead of building one from the checkout")
    p.add_argument("--machine-type", default="n1-standard-8", help="the builder's machine type (no GPU needed)")
    p.add_argument("--disk-gb", type=int, default=100, help="the builder's (and so the image's) disk size")
    p.add_argument("--deadline", type=float, default=3600.0, help="give up on the builder after this many seconds")
    p.add_argument("--poll-seconds", type=float, default=15.0)
    p.add_argument("--keep-builder", action="store_true", help="leave the builder VM for inspection")
    p.set_defaults(func=make_image)

    p = sub.add_parser("make-group", help="create the job's single-instance managed instance group")
    where(p)
    p.add_argument("--template", required=True)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--skip-preflight", action="store_true", help="create it even if `survivor preflight` finds problems")
    p.add_argument("--wait-seconds", type=float, default=300.0,
                   help="wait this long for the VM to be RUNNING or for the group's error (0: do not wait)")
    p.add_argument("--poll-seconds", type=float, default=5.0, help="how often to look while waiting")
    p.set_defaults(func=make_group)

    p = sub.add_parser("preflight", help="check bucket, IAM, image, GPU offer and quota for a job; change nothing",
                       description="Takes the make-template flags and checks what the template would need.")
    template_flags(p)
    p.set_defaults(func=preflight_command)

    p = sub.add_parser("status", help="MIG, instance, progress, preemptions, lost work and cost of a job")
    p.add_argument("name", nargs="?", help="the job's name (omit with --job-dir alone for the job dir only)")
    p.add_argument("--project")
    p.add_argument("--zone")
    p.add_argument("--region")
    p.add_argument("--job-dir", help="the job dir (default: from the template's job spec)")
    p.add_argument("--vertex", metavar="CUSTOM_JOB", help="a Vertex AI custom job's name (from survivor submit)")
    for flag, side in (("--spot-price", "Spot"), ("--on-demand-price", "on-demand")):
        p.add_argument(flag, type=_price, metavar="USD_PER_HOUR",
                       help=f"the {side} price of the whole VM with its GPUs, instead of pricing's offline table")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=status)

    for name, func, text in (("stop", stop, "stop training gracefully (the agent saves first): MIG resize to 0"),
                             ("start", start, "start training again: MIG resize to 1")):
        p = sub.add_parser(name, help=text)
        where(p, instance=True)
        p.set_defaults(func=func)

    p = sub.add_parser("delete", help="delete the job's MIG and template (never the job dir)")
    where(p)
    p.add_argument("--template", help="template name when it is not the job's name")
    p.set_defaults(func=delete)

    p = sub.add_parser("logs", help="the job instance's serial port output, or a Vertex AI job's logs")
    where(p, instance=True, name_optional=True)
    p.add_argument("--vertex", metavar="CUSTOM_JOB", help="a Vertex AI custom job's name: its replicas' logs")
    p.add_argument("--follow", "-f", action="store_true")
    p.add_argument("--interval", type=float, default=5.0)
    p.set_defaults(func=logs)
