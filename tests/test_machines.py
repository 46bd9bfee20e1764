"""The Compute rules the discovery document does not carry (survivor/cloud/machines.py), as pure functions,
and the template that follows them: no request Compute Engine would refuse leaves survivor."""

import pytest

from survivor.cloud import machines
from survivor.spec import JobSpec, SpecError
from survivor.cloud.template import MachineOptions, template_body

SPEC = "job_dir: /tmp/x\ntrain_steps: 1\ntrainer: {builtin: dummy}\n"


def body_for(spec_yaml: str = SPEC, **overrides) -> dict:
    spec = JobSpec.from_yaml(spec_yaml)
    return template_body("t", spec, MachineOptions.from_spec(spec, **overrides), script="#!/bin/bash\n")


# -- what an operator may ask for ------------------------------------------------------------------


def test_a_gpu_on_a_machine_that_carries_its_own_is_refused_naming_both_fields():
    [line] = machines.choice_problems("g2-standard-8", "nvidia-tesla-t4", 4)
    assert line.startswith("compute.gpu nvidia-tesla-t4:4 with machine_type g2-standard-8: g2 machines carry their own")
    assert "1 x nvidia-l4" in line and "drop compute.gpu" in line


def test_asking_for_exactly_the_gpus_a_machine_carries_is_not_a_contradiction():
    assert machines.choice_problems("a2-highgpu-4g", "nvidia-tesla-a100", 4) == []


def test_more_gpus_for_the_trainer_than_an_a2_carries_points_at_the_bigger_shape():
    [line] = machines.choice_problems("a2-highgpu-1g", None, 0, gpu_explicit=False, num_gpus=4)
    assert line.startswith("num_gpus 4 with machine_type a2-highgpu-1g") and "a2-highgpu-4g" in line


@pytest.mark.parametrize(
    "machine, gpu, count, expected",
    [
        (
            "n1-standard-16",
            "nvidia-tesla-t4",
            3,
            "attaches in counts 1 (up to 48 vCPUs), 2 (up to 48 vCPUs), 4 (up to 96 vCPUs)",
        ),
        ("n1-standard-64", "nvidia-tesla-t4", 1, "allows up to 48 vCPUs"),
        ("n1-standard-32", "nvidia-tesla-v100", 1, "use 4 GPUs or a smaller machine_type"),
        ("e2-standard-8", "nvidia-tesla-t4", 1, "GPUs attach only to N1 machines"),
        (
            "n1-standard-8",
            "nvidia-l4",
            1,
            "nvidia-l4 comes only built into g2 machines; use machine_type g2-standard-4",
        ),
        ("n1-standard-8", "nvidia-tesla-k80", 1, "unknown GPU type"),
    ],
)
def test_n1_takes_its_gpus_in_fixed_counts_up_to_a_vcpu_limit(machine, gpu, count, expected):
    [line] = machines.choice_problems(machine, gpu, count)
    assert line.startswith(f"compute.gpu {gpu}:{count} with machine_type {machine}") or "unknown GPU type" in line
    assert expected in line


@pytest.mark.parametrize(
    "machine, gpu, count",
    [
        ("n1-standard-16", "nvidia-tesla-t4", 4),
        ("n1-highmem-8", "nvidia-tesla-v100", 1),
        ("n1-standard-96", "nvidia-tesla-p4", 4),
        ("custom-12-79872", "nvidia-tesla-v100", 1),
    ],
)
def test_n1_shapes_within_the_limits_pass(machine, gpu, count):
    assert machines.choice_problems(machine, gpu, count) == []


def test_the_preemption_notice_is_spot_only_and_120_seconds_only():
    [line] = machines.choice_problems("n1-standard-8", "nvidia-tesla-t4", 1, preemption_notice=30)
    assert line.startswith("compute.preemption_notice 30:") and "120 seconds only" in line
    [line] = machines.choice_problems("n1-standard-8", "nvidia-tesla-t4", 1, spot=False, preemption_notice=120)
    assert line.startswith("compute.preemption_notice 120 with compute.spot false")
    assert machines.choice_problems("n1-standard-8", "nvidia-tesla-t4", 1, preemption_notice=120) == []


def test_spot_terminates_by_stopping_or_deleting():
    [line] = machines.choice_problems("n1-standard-8", None, 0, termination_action="HIBERNATE")
    assert line.startswith("compute.termination_action 'HIBERNATE' with compute.spot true") and "STOP or DELETE" in line


# -- the template survivor sends -------------------------------------------------------------------


def test_a_g2_template_has_no_accelerators_terminates_and_installs_the_driver():
    props = body_for(machine_type="g2-standard-8")["properties"]
    assert "guestAccelerators" not in props
    assert props["scheduling"]["onHostMaintenance"] == "TERMINATE"
    items = {i["key"]: i["value"] for i in props["metadata"]["items"]}
    assert items.get("install-nvidia-driver") == "True"
    assert machines.property_violations(props) == []


def test_on_demand_g2_without_a_gpu_flag_does_not_ask_for_live_migration():
    spec = JobSpec.from_yaml(SPEC)
    options = MachineOptions.from_spec(spec, machine_type="g2-standard-8", spot=False)
    options.gpu_type, options.gpu_count = None, 0  # what `--gpu none` does
    props = template_body("t", spec, options, script="#!/bin/bash\n")["properties"]
    assert props["scheduling"] == {
        "onHostMaintenance": "TERMINATE",
        "provisioningModel": "STANDARD",
        "automaticRestart": True,
    }


def test_a_cpu_only_on_demand_vm_may_migrate():
    spec = JobSpec.from_yaml(SPEC)
    options = MachineOptions.from_spec(spec, machine_type="n2-standard-8", spot=False)
    props = template_body("t", spec, options, script="#!/bin/bash\n")["properties"]
    assert props["scheduling"]["onHostMaintenance"] == "MIGRATE" and "guestAccelerators" not in props


def test_the_template_omits_the_notice_unless_asked_and_sends_120_when_asked():
    assert "preemptionNoticeDuration" not in body_for()["properties"]["scheduling"]
    assert body_for(preemption_notice=120)["properties"]["scheduling"]["preemptionNoticeDuration"] == {"seconds": "120"}


def test_a_contradictory_spec_is_refused_before_any_body_is_built():
    spec_yaml = SPEC + "compute: {machine_type: g2-standard-8, gpu: 'nvidia-tesla-t4:4'}\n"
    with pytest.raises(SpecError) as err:
        body_for(spec_yaml)
    assert err.value.problems == [
        "compute.gpu nvidia-tesla-t4:4 with machine_type g2-standard-8: g2 machines carry their own GPUs "
        "(g2-standard-8: 1 x nvidia-l4); drop compute.gpu (or --gpu none)"
    ]


# -- the REST-level check the fake applies ---------------------------------------------------------


@pytest.mark.parametrize(
    "props, message",
    [
        (
            {"machineType": "g2-standard-4", "scheduling": {"onHostMaintenance": "MIGRATE"}},
            "Instances with guest accelerators do not support live migration.",
        ),
        (
            {
                "machineType": "n1-standard-8",
                "guestAccelerators": [{"acceleratorType": "nvidia-tesla-t4", "acceleratorCount": 1}],
            },
            "Instances with guest accelerators do not support live migration.",
        ),
        (
            {
                "machineType": "g2-standard-8",
                "guestAccelerators": [{"acceleratorType": "nvidia-tesla-t4", "acceleratorCount": 4}],
                "scheduling": {"onHostMaintenance": "TERMINATE"},
            },
            "[g2-standard-8, nvidia-tesla-t4] features are not compatible for creating instance.",
        ),
        (
            {"machineType": "n1-standard-8", "scheduling": {"provisioningModel": "SPOT", "automaticRestart": True}},
            "Scheduling must have provisioningModel be STANDARD when AutomaticRestart is true.",
        ),
        (
            {
                "machineType": "n1-standard-8",
                "scheduling": {"provisioningModel": "SPOT", "preemptionNoticeDuration": {"seconds": "30"}},
            },
            "'resource.properties.scheduling.preemptionNoticeDuration': '30s'",
        ),
    ],
)
def test_property_violations_use_the_apis_words(props, message):
    found = machines.property_violations(props)
    assert found and message in found[0].message


def test_the_default_maintenance_of_a_spot_vm_is_terminate():
    props = {"machineType": "g2-standard-4", "scheduling": {"provisioningModel": "SPOT", "automaticRestart": False}}
    assert machines.property_violations(props) == []


@pytest.mark.parametrize(
    "machine, gpu, count, runs",
    [
        ("a2-highgpu-1g", None, 0, True),
        ("a3-highgpu-8g", None, 0, True),
        ("a4-highgpu-8g", None, 0, True),
        ("g2-standard-8", None, 0, True),
        ("zones/us-central1-a/machineTypes/g2-standard-8", None, 0, True),
        ("n1-standard-8", "nvidia-tesla-t4", 1, False),  # general-purpose: not accelerator-optimized
        ("a4x-highgpu-4g", None, 0, False),  # the documented exceptions
        ("g4-standard-48", None, 0, False),
        ("e2-standard-4", None, 0, False),
    ],
)
def test_flex_start_runs_accelerator_optimized_machines_but_a4x_and_g4(machine, gpu, count, runs):
    problem = machines.flex_start_problem(machine, gpu, count)
    assert (problem is None) is runs
    if problem:
        assert machine.rsplit("/", 1)[-1] in problem and "accelerator-optimized" in problem


@pytest.mark.parametrize("seconds, ok", [(599, False), (600, True), (604800, True), (604801, False)])
def test_a_resize_requests_run_duration_is_ten_minutes_to_seven_days(seconds, ok):
    assert (machines.run_duration_problem(seconds) is None) is ok
