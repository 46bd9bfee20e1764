"""make-template's wheel path and `survivor make-image`, through the real google-cloud-compute and
google-cloud-storage clients against survivor's Compute fake and fake-gcs-server. The builder VM's
part (the startup script in build mode) is rehearsed for real in tests/test_boot_rehearsal.py; here
a thread plays it from outside: its boot record, its guest attribute, its power-off."""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid

import pytest

from survivor.commands import main as cli

from survivor.operator import image
from survivor.cloud.compute import Compute, ComputeError
from survivor.jobdir.storage import open_storage

PROJECT = "survivor-local"
ZONE = "us-west1-b"
REGION = "us-west1"


def run_cli(capsys, *argv):
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def job(tmp_path, bucket):
    job_dir = f"gs://{bucket}/runs/{uuid.uuid4().hex[:8]}"
    spec = tmp_path / "job.yaml"
    spec.write_text(
        f"name: img\njob_dir: {job_dir}\ntrain_steps: 10\ntrainer: {{builtin: dummy}}\n"
        "compute: {machine_type: n1-standard-8, gpu: 'nvidia-tesla-t4:1'}\n"
    )
    return str(spec), job_dir


def items_of(body: dict) -> dict[str, str]:
    return {i["key"]: i["value"] for i in body["properties"]["metadata"]["items"]}


def play_builder(compute_server, job_dir: str, outcome: str, reason: str = "") -> threading.Thread:
    """What the builder VM does on its own: install (here: nothing), write its boot record and guest
    attribute as startup.sh does, power off."""
    compute_server.play_builders = False  # this test plays it

    def run():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = [key for key, vm in list(compute_server.instances.items()) if key[2].endswith("-builder")]
            if found:
                key = found[0]
                items = {i["key"]: i["value"] for i in compute_server.instances[key]["metadata"]["items"]}
                assert items["survivor-mode"] == "build"
                stamp = time.strftime("%Y%m%dT%H%M%S000000000", time.gmtime())
                open_storage(job_dir).write(
                    f"survivor/boots/{stamp}-{key[2]}-{outcome}.json",
                    json.dumps({"outcome": outcome, "reason": reason}).encode(),
                )
                compute_server.set_guest_attribute(*key, "survivor", "build", "done" if outcome == "built" else reason)
                time.sleep(0.3)  # still RUNNING for a while: an image now would be refused
                if key in compute_server.instances:  # make-image deletes a failed builder at once
                    compute_server.power_off(*key)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_make_template_stages_the_wheel_and_lock_and_names_them_with_their_sha256(
    compute_server, gcs_server, job, capsys
):
    spec, job_dir = job
    code, out, err = run_cli(
        capsys, "make-template", "img", "--config", spec, "--project", PROJECT, "--skip-preflight", "--install", "wheel"
    )
    assert code == 0, err
    items = items_of(compute_server.templates[(PROJECT, "img")])
    assert "survivor-version" not in items
    assert items["survivor-job-dir"] == job_dir
    storage = open_storage(job_dir)
    for key in ("survivor-wheel", "survivor-lock"):
        name = items[key][len(job_dir) + 1 :]
        data = storage.read(name).data
        assert hashlib.sha256(data).hexdigest() == items[f"{key}-sha256"]
    assert items["survivor-wheel"].endswith("-py3-none-any.whl") and "/survivor_train-" in items["survivor-wheel"]
    assert storage.read(items["survivor-lock"][len(job_dir) + 1 :]).data == open(image.lock_path(), "rb").read()
    assert "every fresh boot disk" in err  # the wheel path says what it costs on every recreation
    assert not [m for m, _, _ in compute_server.requests if m == "compute.instances.insert"]  # no builder
    # the same source again: the same objects and metadata, so the template is unchanged
    code, out, _ = run_cli(
        capsys, "make-template", "img", "--config", spec, "--project", PROJECT, "--skip-preflight", "--install", "wheel"
    )
    assert code == 0 and "unchanged" in out


def test_make_template_builds_survivors_image_once_by_default_so_a_recreated_vm_installs_nothing(
    compute_server, gcs_server, job, capsys
):
    spec, job_dir = job
    code, out, err = run_cli(
        capsys, "make-template", "img", "--config", spec, "--project", PROJECT, "--skip-preflight", "--zone", ZONE
    )
    assert code == 0, err
    assert "has no image yet: building survivor's image once" in err and "n1-standard-8 builder in us-west1-b" in err
    assert "minutes (about $" in err  # its cost and time, said before the builder starts
    assert err.index("has no image yet") < err.index("creating in us-west1-b")
    body = compute_server.templates[(PROJECT, "img")]
    items = items_of(body)
    assert "survivor-wheel" not in items and "survivor-lock" not in items  # the image holds the install
    family = body["properties"]["disks"][0]["initializeParams"]["sourceImage"].split("/family/")[1]
    assert family.startswith("survivor-0-1-0-tf-") and (PROJECT, family) in compute_server.images
    assert not [key for key in compute_server.instances if key[2].endswith("-builder")]  # the builder is gone
    # again: the family has its image, nothing is built, the template is unchanged
    code, out, err = run_cli(
        capsys, "make-template", "img", "--config", spec, "--project", PROJECT, "--skip-preflight", "--zone", ZONE
    )
    assert code == 0 and "unchanged" in out and "building" not in err
    assert len([m for m, _, _ in compute_server.requests if m == "compute.instances.insert"]) == 1


def test_make_template_without_a_zone_or_region_for_its_builder_says_what_to_give(
    compute_server, gcs_server, job, capsys
):
    spec, _ = job
    code, _, err = run_cli(capsys, "make-template", "img", "--config", spec, "--project", PROJECT, "--skip-preflight")
    assert code == 2 and "give --zone or --region" in err and "--install wheel" in err
    assert not compute_server.templates and not [
        m for m, _, _ in compute_server.requests if m == "compute.instances.insert"
    ]


def test_make_image_bakes_the_install_and_make_template_then_boots_its_family(compute_server, gcs_server, job, capsys):
    spec, job_dir = job
    builder = play_builder(compute_server, job_dir, "built")
    code, out, err = run_cli(
        capsys, "make-image", "--config", spec, "--project", PROJECT, "--zone", ZONE, "--poll-seconds", "0.05"
    )
    builder.join(5)
    assert code == 0, err
    family = out.split("created in family ")[1].split(";")[0]
    assert family.startswith("survivor-0-1-0-tf-") and len(family) <= 63
    image_body = compute_server.images[(PROJECT, family)]
    assert image_body["sourceDisk"].endswith(f"/zones/{ZONE}/disks/{family}-builder")
    inserted = [body for method, _, body in compute_server.requests if method == "compute.instances.insert"]
    assert len(inserted) == 1
    builder_items = {i["key"]: i["value"] for i in inserted[0]["metadata"]["items"]}
    assert builder_items["survivor-mode"] == "build" and builder_items["survivor-wheel"].startswith(job_dir)
    assert "deeplearning-platform-release" in inserted[0]["disks"][0]["initializeParams"]["sourceImage"]
    assert not [key for key in compute_server.instances if key[2].endswith("-builder")]  # deleted
    # the image was made only once the builder was off (the fake refuses a disk in use, as the API does)
    assert "is already being used by" not in err

    code, _, err = run_cli(
        capsys, "make-template", "img", "--config", spec, "--project", PROJECT, "--skip-preflight", "--zone", ZONE
    )
    assert code == 0, err
    assert "building" not in err  # make-image built it already
    body = compute_server.templates[(PROJECT, "img")]
    items = items_of(body)
    assert "survivor-wheel" not in items and "survivor-lock" not in items  # the image holds them
    assert (
        body["properties"]["disks"][0]["initializeParams"]["sourceImage"]
        == f"https://compute.googleapis.com/compute/v1/projects/{PROJECT}/global/images/family/{family}"
    )  # as get returns it
    assert items["install-nvidia-driver"] == "True"

    code, out, _ = run_cli(capsys, "make-image", "--config", spec, "--project", PROJECT, "--zone", ZONE)
    assert code == 0 and "nothing to do" in out
    assert len([m for m, _, _ in compute_server.requests if m == "compute.instances.insert"]) == 1


def test_a_builder_that_cannot_install_is_reported_and_deleted_and_no_image_is_made(
    compute_server, gcs_server, job, capsys
):
    spec, job_dir = job
    builder = play_builder(
        compute_server, job_dir, "not-built", "failed: pip install failed: ERROR: THESE PACKAGES DO NOT MATCH"
    )
    code, _, err = run_cli(
        capsys, "make-image", "--config", spec, "--project", PROJECT, "--zone", ZONE, "--poll-seconds", "0.05"
    )
    builder.join(5)
    assert code == 1
    assert "could not install: failed: pip install failed" in err
    assert not [key for key in compute_server.images if key[1].startswith("survivor-")]
    assert not [key for key in compute_server.instances if key[2].endswith("-builder")]


def test_the_fake_refuses_an_image_of_a_disk_in_use_by_a_running_vm(compute_server):
    compute = Compute(PROJECT)
    local = image.LocalInstall(image.lock_path(), image.lock_path())  # any files: only the body matters here
    install = image.install_for("gs://b/run", local)
    compute.insert_instance(ZONE, image.builder_body("b1", ZONE, install))
    with pytest.raises(
        ComputeError, match="is already being used by 'projects/survivor-local/zones/us-west1-b/instances/b1'"
    ):
        compute.insert_image({"name": "i1", "family": "survivor-x", "sourceDisk": f"zones/{ZONE}/disks/b1"})
    compute_server.power_off(PROJECT, ZONE, "b1")
    compute.insert_image({"name": "i1", "family": "survivor-x", "sourceDisk": f"zones/{ZONE}/disks/b1"})
    assert compute.image_from_family(PROJECT, "survivor-x")["name"] == "i1"


# -- the supported base, the spec's family, the job's external-IP choice -----------


def test_the_default_template_boots_the_supported_cu129_580_family_and_survivors_image_names_its_base(
    compute_server, gcs_server, job, capsys
):
    """Must show: make-template's default (the wheel path shows the base family itself) names
    common-cu129-ubuntu-2404-nvidia-580, the Deep Learning VM table's Ubuntu 24.04 row; survivor's own
    family names its base, so a new base is a new family (built again)."""
    from survivor.cloud.template import DEFAULT_IMAGE_FAMILY, Install

    assert DEFAULT_IMAGE_FAMILY == "common-cu129-ubuntu-2404-nvidia-580" == image.BUILDER_IMAGE_FAMILY
    spec, _ = job
    code, _, err = run_cli(
        capsys, "make-template", "img", "--config", spec, "--project", PROJECT, "--skip-preflight", "--install", "wheel"
    )
    assert code == 0, err
    disk = compute_server.templates[(PROJECT, "img")]["properties"]["disks"][0]["initializeParams"]["sourceImage"]
    assert disk.endswith(
        "projects/deeplearning-platform-release/global/images/family/common-cu129-ubuntu-2404-nvidia-580"
    )
    install = Install(job_dir="gs://b/j", wheel="w", wheel_sha256="1" * 64, lock="l", lock_sha256="2" * 64)
    new, old = (
        image.family_name(install, "2.21.0", base)
        for base in (DEFAULT_IMAGE_FAMILY, "common-cu128-ubuntu-2404-nvidia-570")
    )
    assert "-cu129-u2404-n580-" in new and "-cu128-u2404-n570-" in old and new != old and len(new) <= 63


def test_a_specs_image_family_reaches_the_template(compute_server, gcs_server, job, capsys, tmp_path):
    """Must show (item 4): compute.image_family in the spec is booted as given, as the flag is; it used
    to be replaced by survivor's own family on the image path."""
    spec, job_dir = job
    text = open(spec).read().replace("compute: {", "compute: {image_family: common-cu128-ubuntu-2204-nvidia-570, ")
    (tmp_path / "family.yaml").write_text(text)
    code, _, err = run_cli(
        capsys,
        "make-template",
        "img",
        "--config",
        str(tmp_path / "family.yaml"),
        "--project",
        PROJECT,
        "--skip-preflight",
        "--zone",
        ZONE,
    )
    assert code == 0, err
    body = compute_server.templates[(PROJECT, "img")]
    assert body["properties"]["disks"][0]["initializeParams"]["sourceImage"].endswith(
        "/family/common-cu128-ubuntu-2204-nvidia-570"
    )
    assert "survivor-wheel" in items_of(body)  # the wheel staged: that family has no survivor installed
    assert not [m for m, _, _ in compute_server.requests if m == "compute.instances.insert"]  # nothing built


def test_a_builder_under_the_external_ip_policy_has_no_access_config(compute_server, gcs_server, job, capsys):
    """Must show (item 5): with --no-external-ip the builder follows the job (no accessConfig), so the
    organisation policy constraints/compute.vmExternalIpAccess does not refuse it; it says it needs
    Cloud NAT or a mirror to reach the package index."""
    spec, _ = job
    compute_server.external_ip_denied.add(PROJECT)
    code, _, err = run_cli(
        capsys,
        "make-template",
        "img",
        "--config",
        spec,
        "--project",
        PROJECT,
        "--skip-preflight",
        "--zone",
        ZONE,
        "--no-external-ip",
    )
    assert code == 0, err
    [body] = [b for m, _, b in compute_server.requests if m == "compute.instances.insert"]
    assert [nic.get("accessConfigs") for nic in body["networkInterfaces"]] == [None]
    assert body["disks"][0]["initializeParams"]["sourceImage"].endswith("/family/common-cu129-ubuntu-2404-nvidia-580")
    # before the builder is made, whether it reaches the package index (Cloud NAT in the zone's region)
    [route] = [line for line in err.splitlines() if "no Cloud NAT on network" in line]
    assert route.strip().startswith(f"warning: no external IP, and no Cloud NAT on network default in {REGION}")
    assert image.builder_body("b", ZONE, _install())["networkInterfaces"][0]["accessConfigs"]  # the default has one


def test_make_image_says_the_builders_route_to_the_package_index_before_making_it(
    compute_server, gcs_server, job, capsys
):
    """`survivor make-image` for a job without an external IP reads the region's Cloud
    NAT gateways (routers.list) and says whether the builder can download, before instances.insert."""
    spec, _ = job
    with open(spec) as f:
        text = f.read()
    with open(spec, "w") as f:
        f.write(text.replace("compute: {", "compute: {external_ip: false, "))
    compute_server.add_nat(PROJECT, REGION, "default")
    code, out, err = run_cli(capsys, "make-image", "--config", spec, "--project", PROJECT, "--zone", ZONE)
    assert code == 0, err
    said = out + err
    assert (
        f"ok: no external IP: Cloud NAT nat-router-nat (router nat-router) routes network default in {REGION}" in said
    )
    routers = [i for i, (m, _, _) in enumerate(compute_server.requests) if m == "compute.routers.list"]
    inserts = [i for i, (m, _, _) in enumerate(compute_server.requests) if m == "compute.instances.insert"]
    assert routers and inserts and routers[0] < inserts[0]


def _install():
    from survivor.cloud.template import Install

    return Install(job_dir="gs://b/j", wheel="w", wheel_sha256="1" * 64, lock="l", lock_sha256="2" * 64)
