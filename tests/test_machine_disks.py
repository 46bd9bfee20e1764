"""Machine series that take Hyperdisk only (A3 Ultra, A4) boot from a disk type they take, and every
template name a job may make (its shapes', its deadline twins') fits Compute Engine's 63 characters.
The real Compute client talks to survivor's fake, which refuses what Compute Engine refuses."""

import pytest

from survivor.cloud import machines
from survivor.cloud.template import MachineOptions, machine_problems, template_body
from survivor.spec import JobSpec, SpecError

BASE = "job_dir: gs://bucket/run\ntrain_steps: 10\ntrainer: {builtin: dummy}\n"


def _disk_types(body: dict) -> list[str]:
    return [d["initializeParams"]["diskType"] for d in body["properties"]["disks"]]


@pytest.mark.parametrize("machine", ["a3-ultragpu-8g", "a4-highgpu-8g"])
def test_a_hyperdisk_only_machine_boots_and_keeps_its_state_on_hyperdisk_balanced(machine):
    spec = JobSpec.from_yaml(BASE + f"state_disk_gb: 100\ncompute: {{machine_type: {machine}}}\n")
    body = template_body("job", spec, MachineOptions.from_spec(spec), script="#!/bin/sh\n")
    assert _disk_types(body) == ["hyperdisk-balanced", "hyperdisk-balanced"]
    assert machines.property_violations(body["properties"]) == []


@pytest.mark.parametrize("machine", ["n1-standard-16", "a3-highgpu-8g", "g2-standard-8", "a2-highgpu-1g"])
def test_a_series_that_takes_persistent_disk_keeps_pd_balanced(machine):
    spec = JobSpec.from_yaml(BASE + f"compute: {{machine_type: {machine}}}\n")
    assert _disk_types(template_body("job", spec, MachineOptions.from_spec(spec), script="")) == ["pd-balanced"]


def test_a_persistent_disk_the_operator_names_for_a4_is_refused_in_one_line():
    spec = JobSpec.from_yaml(BASE + "compute: {machine_type: a4-highgpu-8g, disk_type: pd-ssd}\n")
    assert machine_problems(spec, MachineOptions.from_spec(spec)) == [
        "compute.disk_type pd-ssd with machine_type a4-highgpu-8g: its series takes Hyperdisk only "
        "(hyperdisk-balanced); set compute.disk_type hyperdisk-balanced or drop it"
    ]
    with pytest.raises(SpecError):
        template_body("job", spec, MachineOptions.from_spec(spec), script="")


def test_the_fake_refuses_a_persistent_boot_disk_on_a3_ultra_and_takes_survivors_template(compute_server):
    from survivor.cloud.compute import Compute, ComputeError

    spec = JobSpec.from_yaml(BASE + "compute: {machine_type: a3-ultragpu-8g}\n")
    compute = Compute("survivor-local")
    body = template_body("ultra", spec, MachineOptions.from_spec(spec), script="#!/bin/sh\n")
    stale = {**body, "name": "ultra-pd", "properties": {**body["properties"]}}
    stale["properties"]["disks"] = [
        {**d, "initializeParams": {**d["initializeParams"], "diskType": "pd-balanced"}}
        for d in body["properties"]["disks"]
    ]
    with pytest.raises(ComputeError, match=r"\[a3-ultragpu-8g, pd-balanced\] features are not compatible"):
        compute.insert_template(stale)
    compute.insert_template(body)
    assert compute.get_template("ultra") is not None


def test_shape_and_fallback_templates_take_the_disk_type_of_their_own_machine(compute_server):
    from survivor.cloud.compute import Compute
    from survivor.mig.templates import on_demand_template_body, shape_template_body
    from survivor.spec import FallbackSpec

    compute = Compute("survivor-local")
    spec = JobSpec.from_yaml(
        BASE + "compute: {machine_type: n1-standard-8, gpu: nvidia-tesla-t4:1}\n"
        "placement: {regions: [us-west1], shapes: [{machine_type: a4-highgpu-8g}]}\n"
    )
    job = template_body("job", spec, MachineOptions.from_spec(spec), script="#!/bin/sh\n")
    a4 = shape_template_body(job, spec, 1)
    assert _disk_types(job) == ["pd-balanced"] and _disk_types(a4) == ["hyperdisk-balanced"]
    ultra = JobSpec.from_yaml(
        BASE + "compute: {machine_type: a3-ultragpu-8g}\n"
        "placement: {regions: [us-west1], shapes: [{machine_type: g2-standard-8}]}\n"
    )
    own = template_body("ultra", ultra, MachineOptions.from_spec(ultra), script="#!/bin/sh\n")
    g2 = shape_template_body(own, ultra, 1)
    assert _disk_types(g2) == ["pd-balanced"]  # G2 takes no Hyperdisk Balanced
    n1 = on_demand_template_body(own, FallbackSpec(machine_type="n1-standard-8", gpu="nvidia-tesla-t4:1"))
    assert _disk_types(n1) == ["pd-balanced"]
    for body in (job, a4, own, g2, n1):
        compute.insert_template(body)  # the fake, as Compute Engine, refuses a disk its machine cannot take


def test_the_fake_refuses_hyperdisk_balanced_on_n1():
    violations = machines.property_violations(
        {
            "machineType": "n1-standard-8",
            "disks": [{"boot": True, "initializeParams": {"diskType": "hyperdisk-balanced"}}],
        }
    )
    assert [v.message for v in violations] == [
        "[n1-standard-8, hyperdisk-balanced] features are not compatible for creating instance."
    ]


# -- template names --------------------------------------------------------------------------------


def _request(tmp_path, name: str, extra: str):
    from survivor.operator.template import TemplateRequest

    config = tmp_path / "job.yaml"
    config.write_text(BASE + "compute: {machine_type: n1-standard-8, gpu: nvidia-tesla-t4:1}\n" + extra)
    return TemplateRequest(name=name, config=str(config))


def test_every_template_name_a_job_may_make_is_listed():
    from survivor.mig.templates import job_template_names

    spec = JobSpec.from_yaml(
        BASE + "deadline: 36h\nfallback: {flex_start: true}\n"
        "placement: {regions: [us-west1], shapes: [{machine_type: g2-standard-8}]}\n"
    )
    assert job_template_names("job", spec) == [
        "job",
        "job-on-demand",
        "job-flex-start",
        "job-shape-1",
        "job-shape-1-on-demand",
        "job-shape-1-flex-start",
    ]


def test_make_template_refuses_a_name_whose_shape_twin_passes_63_characters(tmp_path):
    from survivor.operator.template import describe_template

    extra = "deadline: 36h\nplacement: {regions: [us-west1], shapes: [{machine_type: g2-standard-8}]}\n"
    name = "t" * 50  # 50 + "-shape-1" + "-on-demand" = 68
    with pytest.raises(SpecError) as refused:
        describe_template(_request(tmp_path, name, extra))
    assert refused.value.problems == [
        f"template {name!r}: the job may make template '{name}-shape-1-on-demand' (68 characters; Compute "
        "Engine names are at most 63): name the template with at most 45 characters"
    ]
    spec, body = describe_template(_request(tmp_path, "t" * 45, extra))
    assert body["name"] == "t" * 45
    # without shapes or a deadline the same 50 characters are a name Compute Engine takes
    assert describe_template(_request(tmp_path, name, ""))[1]["name"] == name


def test_the_fake_refuses_a_template_name_longer_than_63_characters(compute_server):
    from survivor.cloud.compute import Compute, ComputeError

    spec = JobSpec.from_yaml(BASE)
    compute = Compute("survivor-local")
    body = template_body("t" * 64, spec, MachineOptions.from_spec(spec), script="#!/bin/sh\n")
    with pytest.raises(ComputeError, match="Must be a match of regex"):
        compute.insert_template(body)
    compute.insert_template({**body, "name": "t" * 63})
