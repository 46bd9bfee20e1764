"""One record per GPU type and per machine family (survivor/cloud/hardware.py): the records agree with
the discovery document and with each other, and a new GPU is one record that every rule, price and
stand-in then knows."""

import pytest

from survivor.cloud import catalog, hardware, machines, pricing
from survivor.cloud.compute import Compute
from survivor.cloud.hardware import Family, Gpu, Shape
from survivor.cloud.template import MachineOptions, template_body
from survivor.local import catalog_server, compute_server as fake
from survivor.spec import JobSpec

SPEC = "job_dir: /tmp/x\ntrain_steps: 1\ntrainer: {builtin: dummy}\n"


def quota_metrics() -> set[str]:
    return set(fake.discovery()["schemas"]["Quota"]["properties"]["metric"]["enum"])


def test_every_gpus_spot_quota_metric_is_one_the_discovery_document_names():
    known = quota_metrics()
    for gpu in hardware.GPUS.values():
        if gpu.quota_metric is None:
            continue
        assert gpu.quota(spot=True) in known, gpu
        # H100: only the preemptible metric is a regional one (its record says so)
        assert gpu.quota(spot=False) in known or gpu.name == "nvidia-h100-80gb", gpu


def test_every_shape_carries_a_gpu_survivor_knows_and_belongs_to_a_family_that_carries_gpus():
    for fam in hardware.FAMILIES.values():
        for name, shape in fam.shapes.items():
            assert hardware.family(name) == fam.name and fam.carries_gpus, name
            assert shape.gpu in hardware.GPUS and shape.count > 0, name
            assert machines.built_in_gpus(name) == (shape.gpu, shape.count)


def test_every_gpu_the_fakes_zones_offer_has_a_most_per_vm_that_fits_its_counts():
    for zone, offered in fake.zone_accelerators().items():
        for name in offered:
            gpu = hardware.GPUS[name]
            assert gpu.max_per_vm >= max(gpu.n1_counts, default=0), (zone, name)
            assert gpu.max_per_vm >= max((s.count for s in hardware.shapes().values() if s.gpu == name), default=0)


def test_every_priced_gpu_has_a_catalog_name_and_every_priced_shape_a_priced_gpu():
    for gpu in hardware.GPUS.values():
        assert gpu.prices is None or gpu.sku_name, gpu
    for name, shape in hardware.shapes().items():
        if shape.prices:
            assert hardware.GPUS[shape.gpu].prices == (0.0, 0.0), name  # the shape's price has its GPUs
            assert pricing.hourly(name, None, 0) == shape.prices


def test_flex_start_runs_the_families_whose_record_says_so_in_that_order():
    assert machines.flex_start_families() == ["a4", "a3", "a2", "g2", "h4d"]
    assert all(hardware.FAMILIES[f].carries_gpus for f in ("a4", "a3", "a2", "g2"))


MADE_UP = Gpu(
    "nvidia-made-up-x1",
    sku_name="Nvidia Made Up X1",
    quota_metric="NVIDIA_MADE_UP_X1_GPUS",
    n1_counts={1: (16, 104), 2: (32, 208)},
    max_per_vm=2,
    prices=(1.0, 0.4),
    zones=("us-west1-b",),
)
BUILT_ONLY = Gpu("nvidia-made-up-y1")
MADE_UP_FAMILY = Family(
    "z9",
    carries_gpus=True,
    shapes={
        "z9-gpu-2g": Shape(MADE_UP.name, 2, vcpus=24, memory_gb=170.0),
        "z9-solo-1g": Shape(BUILT_ONLY.name, 1),
    },
)


@pytest.fixture
def made_up(monkeypatch):
    """A GPU type and a family nobody has heard of, each one record, in a zone of the Compute fake."""
    monkeypatch.setitem(hardware.GPUS, MADE_UP.name, MADE_UP)
    monkeypatch.setitem(hardware.GPUS, BUILT_ONLY.name, BUILT_ONLY)
    monkeypatch.setitem(hardware.FAMILIES, MADE_UP_FAMILY.name, MADE_UP_FAMILY)


def test_a_new_gpu_is_one_record_that_the_rules_the_template_and_the_prices_know(made_up):
    assert machines.choice_problems("n1-standard-16", MADE_UP.name, 2) == []
    assert (
        "attaches in counts 1 (up to 16 vCPUs), 2 (up to 32 vCPUs)"
        in machines.choice_problems("n1-standard-16", MADE_UP.name, 4)[0]
    )
    assert machines.built_in_gpus("z9-gpu-2g") == (MADE_UP.name, 2)
    assert "z9 machines carry their own GPUs" in machines.choice_problems("z9-gpu-2g", "nvidia-tesla-t4", 1)[0]
    assert (
        "comes only built into z9 machines; use machine_type z9-solo-1g"
        in machines.choice_problems("n1-standard-8", BUILT_ONLY.name, 1)[0]
    )

    spec = JobSpec.from_yaml(SPEC)
    body = template_body(
        "t", spec, MachineOptions.from_spec(spec, gpu_type=MADE_UP.name, gpu_count=2), script="#!/bin/bash\n"
    )
    assert machines.property_violations(body["properties"]) == []  # the fake's check of the template
    assert body["properties"]["guestAccelerators"][0]["acceleratorCount"] == 2

    assert machines.quota_metric(MADE_UP.name, spot=True) == "PREEMPTIBLE_NVIDIA_MADE_UP_X1_GPUS"
    n1 = pricing.MACHINES["n1-standard-16"]
    assert pricing.hourly("n1-standard-16", MADE_UP.name, 2) == (round(n1[0] + 2.0, 6), round(n1[1] + 0.8, 6))
    assert catalog.shape("z9-gpu-2g") == (24, 170.0)

    rows = catalog_server.ROWS + catalog_server.gpu_rows(MADE_UP.name, 1.5, 0.6)
    skus = [catalog.sku_from_message(catalog_server.sku(i, *row)) for i, row in enumerate(rows)]
    machine = catalog.Machine("n1-standard-16", MADE_UP.name, 2)
    on_demand, spot = catalog.catalog_hourly([s for s in skus if s], "us-central1", machine)
    without = catalog.catalog_hourly([s for s in skus if s], "us-central1", catalog.Machine("n1-standard-16", None, 0))
    assert (round(on_demand - without[0], 6), round(spot - without[1], 6)) == (3.0, 1.2)


def test_a_new_gpu_is_offered_counted_and_shaped_by_the_compute_fake(made_up, compute_server):
    compute = Compute("p", endpoint=compute_server.endpoint)
    assert compute.zone_accelerators("us-west1-b")[MADE_UP.name] == 2
    assert compute.region("us-west1")["quotas"]["PREEMPTIBLE_NVIDIA_MADE_UP_X1_GPUS"][0] > 0
    assert compute.machine_vcpus("us-west1-b", "z9-gpu-2g") == 24
