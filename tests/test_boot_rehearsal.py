"""The boot rehearsal: survivor/startup/startup.sh run for real, as root, in a sandbox root, against the
metadata emulator and fake-gcs-server, with the metadata make-template's body gives a VM.

The wheel and lock come from the bucket (staged by survivor/operator/image.py as make-template stages them),
the venv is built with pip in hash-checking mode, the unit is written and checked with
`systemd-analyze verify`, and the unit's own ExecStart line, run as its User= (root: it names
none), starts the agent, which runs the trainer as survivor-trainer and trains to DONE. The lock is this machine's closure of survivor-train (the VM's lock is for
Python 3.10 with CUDA), its wheels in a local wheelhouse (survivor/local/boot.py), so nothing is
downloaded after the first run.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import sys
import time
import uuid

import pytest

from survivor.operator import image
from survivor.local.boot import SandboxRoot, default_cache_dir, machine_lock, wheelhouse_env
from survivor.local.metadata_server import MetadataServer
from survivor.spec import JobSpec
from survivor.cloud.template import MachineOptions, template_body

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.geteuid() != 0, reason="the startup script runs as root")]

PROJECT = "survivor-local"
ZONE = "us-west1-b"


@pytest.fixture(scope="module")
def install_files():
    """survivor's wheel (built from this checkout) and a lock of this machine's versions, with hashes."""
    cache = default_cache_dir()
    return image.build_wheel(), machine_lock(cache), wheelhouse_env(cache)


def spec_for(job_dir: str, steps_log: str, train_steps: int = 30) -> JobSpec:
    return JobSpec.from_mapping(
        {
            "name": "rehearsal",
            "job_dir": job_dir,
            "train_steps": train_steps,
            "checkpoint_steps": 10,
            "grace_seconds": 5,
            "sync_seconds": 0.3,
            "on_finish": "keep-alive",
            "trainer": {"builtin": "dummy"},
            "hyperparameters": {"step-seconds": "0.02", "step-log": steps_log},
        }
    )


def vm_attributes(spec: JobSpec, install) -> dict[str, str]:
    """The metadata items of make-template's body for this spec and install: what the VM sees."""
    body = template_body("rehearsal", spec, MachineOptions.from_spec(spec), install=install)
    return {item["key"]: item["value"] for item in body["properties"]["metadata"]["items"]}


def boot_records(job_dir: str) -> list[str]:
    from survivor.jobdir.storage import open_storage

    return sorted(info.name for info in open_storage(job_dir).list(image.BOOTS))


@pytest.fixture
def sandbox():
    roots = []

    def make() -> SandboxRoot:
        roots.append(SandboxRoot.create())
        return roots[-1]

    yield make
    for root in roots:
        root.remove()


def test_a_fresh_disk_installs_from_the_bucket_and_the_units_own_exec_start_trains_to_done(
    install_files, gcs_server, bucket, sandbox, tmp_path
):
    from survivor.jobdir.journal import Journal
    from survivor.jobdir.storage import open_storage

    wheel, lock, pip_env = install_files
    job_dir = f"gs://{bucket}/runs/{uuid.uuid4().hex[:8]}"
    install = image.stage_install(job_dir, image.LocalInstall(wheel, lock))
    root = sandbox()
    steps_log = root.at("/var/log/rehearsal/steps.log")  # where only the trainer's user may write
    spec = spec_for(job_dir, steps_log)
    metadata = MetadataServer(
        attributes=vm_attributes(spec, install), name="rehearsal-a1b2", zone=ZONE, project=PROJECT
    ).start()
    env = {**pip_env, "STORAGE_EMULATOR_HOST": gcs_server.url}
    try:
        first = root.run_startup(metadata.host, env=env)
        assert first.returncode == 0, first.output
        assert f"installing {os.path.basename(wheel)} with its lock" in first.output
        assert "no running systemd here" in first.output
        assert os.path.exists(root.at("/opt/survivor/venv/bin/survivor"))
        assert open(root.at("/opt/survivor/installed")).read().split() == [
            f"wheel={install.wheel_sha256}",
            f"lock={install.lock_sha256}",
            "requirements=none",
        ]
        shipped = open(
            os.path.join(os.path.dirname(os.path.dirname(image.__file__)), "startup", "survivor-agent.service")
        ).read()
        assert root.unit_text() == shipped
        verified = root.verify_unit()
        assert verified.returncode == 0 and verified.stdout + verified.stderr == "", verified.stderr
        assert root.unit_value("StandardOutput") == "journal+console"

        trainer_uid = user_uid("survivor-trainer")  # startup.sh made the user
        os.makedirs(os.path.dirname(steps_log))
        os.chown(os.path.dirname(steps_log), trainer_uid, -1)
        agent = root.start_agent(
            {"GCE_METADATA_HOST": metadata.host, "STORAGE_EMULATOR_HOST": gcs_server.url}, str(tmp_path / "agent.log")
        )
        assert agent.wait(timeout=120) == 0, (tmp_path / "agent.log").read_text()[-3000:]
        assert Journal(open_storage(job_dir)).done() is not None
        assert os.stat(steps_log).st_uid == trainer_uid  # the trainer ran as survivor-trainer
        assert os.stat(root.at("/var/lib/survivor/trainer.pid")).st_uid == 0  # written by the agent: root
        assert '"user": "survivor-trainer"' in (tmp_path / "agent.log").read_text()
        assert metadata.get("instance/guest-attributes/survivor/state") != "install-failed"

        # A second boot of the same disk installs nothing: the staged wheel and lock are gone from
        # the bucket, and it still boots.
        open_storage(job_dir).delete([name for name in _staged(job_dir)])
        second = root.run_startup(metadata.host, env=env)
        assert second.returncode == 0, second.output
        assert "nothing to install" in second.output and "installing" not in second.output
        assert second.seconds < first.seconds / 3, (first.seconds, second.seconds)

        # The builder's mode on a disk that holds the install: records the outcome for make-image
        metadata.set("instance/attributes/survivor-mode", "build")
        built = root.run_startup(metadata.host, env=env)
        assert built.returncode == 0, built.output
        assert "not powering off" in built.output
        assert metadata.get("instance/guest-attributes/survivor/build") == "done"
        assert image.build_outcome(boot_records(job_dir), "rehearsal-a1b2") == "built"
    finally:
        metadata.stop()
    print(f"\nrehearsal: fresh install {first.seconds:.1f} s, second boot {second.seconds:.1f} s")


def _staged(job_dir: str) -> list[str]:
    from survivor.jobdir.storage import open_storage

    return [info.name for info in open_storage(job_dir).list(image.STAGE + "/")]


def user_uid(name: str) -> int:
    import pwd

    return pwd.getpwnam(name).pw_uid


def test_a_broken_wheel_is_reported_and_after_three_fresh_disks_the_vm_leaves_its_group(
    install_files, gcs_server, bucket, sandbox, tmp_path, compute_server
):
    from survivor.cloud.compute import Compute

    _, lock, pip_env = install_files
    broken = tmp_path / "survivor_train-0.1.0-py3-none-any.whl"
    broken.write_bytes(b"PK\x03\x04 this is not a zip file")
    job_dir = f"gs://{bucket}/runs/{uuid.uuid4().hex[:8]}"
    install = image.stage_install(job_dir, image.LocalInstall(str(broken), lock))
    spec = spec_for(job_dir, "/dev/null")
    compute = Compute(PROJECT)
    compute.insert_template(template_body("broken", spec, MachineOptions.from_spec(spec), install=install))
    compute.create_group("broken", "broken", zone=ZONE)
    group = compute_server.groups[(PROJECT, f"zones/{ZONE}", "broken")]
    member = group["_members"][0]
    vm = compute_server.instances[member]
    attributes = {item["key"]: item["value"] for item in vm["metadata"]["items"]}  # created-by included
    env = {**pip_env, "STORAGE_EMULATOR_HOST": gcs_server.url, "SURVIVOR_COMPUTE_ENDPOINT": compute_server.endpoint}
    outputs = []
    for boot in range(3):  # the MIG recreates the VM with a fresh disk each time
        metadata = MetadataServer(attributes=attributes, name=member[2], zone=ZONE, project=PROJECT).start()
        try:
            result = sandbox().run_startup(metadata.host, env=env)
            outputs.append(result.output)
            assert result.returncode == 1, result.output
            assert "FAILED: pip install failed" in result.output
            assert metadata.get("instance/guest-attributes/survivor/state") == "install-failed"
            assert "pip install failed" in metadata.get("instance/guest-attributes/survivor/install-error")
        finally:
            metadata.stop()
        records = boot_records(job_dir)
        assert len(records) == boot + 1 and all(name.endswith(f"-{member[2]}-failed.json") for name in records)
        if boot < 2:
            assert member in group["_members"], outputs[-1]
    assert "leaving managed instance group broken" in outputs[-1]
    assert member not in compute_server.instances and group["targetSize"] == 0


def test_an_unreachable_bucket_is_reported_where_it_can_be(install_files, gcs_server, bucket, sandbox):
    from survivor.local.http import free_port

    wheel, lock, pip_env = install_files
    job_dir = f"gs://{bucket}/runs/{uuid.uuid4().hex[:8]}"
    install = image.stage_install(job_dir, image.LocalInstall(wheel, lock))
    metadata = MetadataServer(
        attributes=vm_attributes(spec_for(job_dir, "/dev/null"), install),
        name="rehearsal-c3d4",
        zone=ZONE,
        project=PROJECT,
    ).start()
    root = sandbox()
    started = time.monotonic()
    try:
        result = root.run_startup(metadata.host, env={**pip_env, "STORAGE_EMULATOR_HOST": f"127.0.0.1:{free_port()}"})
        assert result.returncode == 1, result.output
        assert "FAILED: cannot download gs://" in result.output
        assert "could not record this boot in the job dir" in result.output
        assert metadata.get("instance/guest-attributes/survivor/state") == "install-failed"
        assert metadata.get("instance/guest-attributes/survivor/install-error").startswith("cannot download gs://")
    finally:
        metadata.stop()
    assert boot_records(job_dir) == []  # the bucket (reachable from here) got nothing: the VM could not reach it
    assert open(root.at("/opt/survivor/failed-boots")).read().strip() == "1"  # counted on the disk instead
    assert not os.path.exists(root.at("/opt/survivor/installed"))
    assert time.monotonic() - started < 90


def debian_image_without_venv(shims: pathlib.Path, apt_works: bool, lock_held: bool = False) -> dict[str, str]:
    """PATH stand-ins for a Debian/Ubuntu image without python3-venv: its python3 refuses `-m venv`
    with Debian's words until the apt-get stand-in "installs" pythonX.Y-venv (or, with `apt_works`
    False, cannot). With `lock_held`, unattended-upgrades holds the dpkg lock as on a first Ubuntu
    boot: an apt-get without DPkg::Lock::Timeout fails at once in apt's words (exit 100), one with it
    waits and goes on. Returns the PATH to run startup.sh with."""
    shims.mkdir()
    marker = shims / "venv-package-installed"
    real = shutil.which("python3")
    (shims / "python3").write_text(f"""#!/bin/bash
if [[ "$1 $2" == "-m venv" && ! -e {marker} ]]; then
  printf '%s\\n' "The virtual environment was not created successfully because ensurepip is not" \\
    "available.  On Debian/Ubuntu systems, you need to install the python3-venv" \\
    "package using the following command." "" "    apt install python3.10-venv"
  exit 1
fi
exec {real} "$@"
""")
    held = (
        '[[ "$*" == *"DPkg::Lock::Timeout="* ]] || { echo "E: Could not get lock /var/lib/dpkg/lock-frontend. '
        'It is held by process 1234 (unattended-upgr)"; exit 100; }'
        if lock_held
        else ""
    )
    (shims / "apt-get").write_text(f"""#!/bin/bash
echo "$*" >> {shims}/apt-get.calls
{held}
{"" if apt_works else '[[ " $* " == *" install "* ]] && { echo "E: Unable to locate package ${@: -1}"; exit 100; }'}
[[ " $* " == *" install "* && "${{@: -1}}" == python3.*-venv ]] && touch {marker}
exit 0
""")
    for shim in ("python3", "apt-get"):
        (shims / shim).chmod(0o755)
    return {"PATH": f"{shims}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}


@pytest.mark.parametrize("apt_works,lock_held", [(True, False), (False, False), (True, True)])
def test_an_image_whose_python_has_no_ensurepip(
    apt_works, lock_held, install_files, gcs_server, bucket, sandbox, tmp_path
):
    wheel, lock, pip_env = install_files
    job_dir = f"gs://{bucket}/runs/{uuid.uuid4().hex[:8]}"
    install = image.stage_install(job_dir, image.LocalInstall(wheel, lock))
    metadata = MetadataServer(
        attributes=vm_attributes(spec_for(job_dir, "/dev/null"), install),
        name="rehearsal-e5f6",
        zone=ZONE,
        project=PROJECT,
    ).start()
    path = debian_image_without_venv(tmp_path / "shims", apt_works, lock_held)
    version = "%d.%d" % sys.version_info[:2]
    root = sandbox()
    try:
        result = root.run_startup(metadata.host, env={**pip_env, **path, "STORAGE_EMULATOR_HOST": gcs_server.url})
    finally:
        metadata.stop()
    said = f"this image's python3 has no ensurepip (Debian/Ubuntu without python{version}-venv)"
    assert said in result.output, result.output
    # every apt-get waits for the dpkg lock that unattended-upgrades holds on a first boot
    assert (
        (tmp_path / "shims" / "apt-get.calls")
        .read_text()
        .startswith(f"-o DPkg::Lock::Timeout=600 install -y -q python{version}-venv")
    )
    if apt_works:
        assert result.returncode == 0, result.output
        assert f"installed python{version}-venv; the venv is made" in result.output
        assert os.path.exists(root.at("/opt/survivor/venv/bin/survivor"))
    else:
        assert result.returncode == 1, result.output
        assert (
            f"FAILED: python3 -m venv needs python{version}-venv, and apt-get could not install it: "
            f"E: Unable to locate package python{version}-venv"
        ) in result.output
