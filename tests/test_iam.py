"""IAM as the operator guide prescribes it: object roles only, no storage.buckets.get.

The fault proxy in front of fake-gcs-server answers every call the granted role does not cover with
Cloud Storage's 403 (and its 404s in Cloud Storage's words); the real client, the real agent.
"""

import os

import pytest

from survivor.jobdir.journal import Journal
from harness.fault_proxy import ROLES, FaultPlan, FaultProxy, required_permission
from survivor.jobdir.storage import BUCKET_MISSING, FORBIDDEN, GcsStorage, StorageError, bucket_missing, open_storage
from tests.conftest import PYTHON, dummy_spec

OBJECT_ADMIN = ROLES["roles/storage.objectAdmin"]


@pytest.fixture
def iam(gcs_server, bucket, monkeypatch):
    """A proxy enforcing IAM in front of the storage emulator; the client (and agents) go through it."""
    proxy = FaultProxy(gcs_server.url, FaultPlan(rate=0), granted=OBJECT_ADMIN).start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
    yield proxy, bucket
    proxy.stop()


def test_the_object_roles_grant_no_bucket_metadata():
    for role in ("roles/storage.objectAdmin", "roles/storage.objectUser", "roles/storage.objectViewer"):
        assert "storage.buckets.get" not in ROLES[role]
    assert required_permission("GET", "/storage/v1/b/b?projection=noAcl") == "storage.buckets.get"
    assert required_permission("GET", "/download/storage/v1/b/b/o/x%2Fy?alt=media") == "storage.objects.get"
    assert required_permission("GET", "/storage/v1/b/b/o?prefix=x") == "storage.objects.list"
    assert required_permission("POST", "/upload/storage/v1/b/b/o?uploadType=multipart") == "storage.objects.create"
    assert required_permission("DELETE", "/storage/v1/b/b/o/x") == "storage.objects.delete"


def test_a_missing_object_is_just_missing_without_reading_bucket_metadata(iam, tmp_path):
    proxy, bucket = iam
    storage = GcsStorage(f"gs://{bucket}/job")
    assert storage.read("survivor/DONE") is None  # was: get_bucket to tell bucket from object, a 403 here
    storage.write("survivor/LEASE", b"me", if_generation_match=0)
    assert storage.read("survivor/LEASE").data == b"me"
    (tmp_path / "ckpt-1.bin").write_bytes(os.urandom(5000))
    storage.upload([(str(tmp_path / "ckpt-1.bin"), "blobs/ckpt-1.bin")])
    storage.download([("blobs/ckpt-1.bin", str(tmp_path / "back.bin"))])
    assert (tmp_path / "back.bin").read_bytes() == (tmp_path / "ckpt-1.bin").read_bytes()
    assert [o.name for o in storage.list("")] == ["blobs/ckpt-1.bin", "survivor/LEASE"]
    storage.delete(["blobs/ckpt-1.bin", "never-there"])
    assert proxy.denied == []


def test_every_refused_call_is_a_storage_error_naming_the_object_and_the_permission(iam, tmp_path):
    proxy, bucket = iam
    storage = GcsStorage(f"gs://{bucket}/job")
    storage.write("a", b"1")
    (tmp_path / "f").write_bytes(b"x" * 100)
    proxy.granted = frozenset()
    calls = {
        "storage.objects.get": [lambda: storage.read("a"), lambda: storage.download([("a", str(tmp_path / "a"))])],
        "storage.objects.create": [
            lambda: storage.write("b", b"2"),
            lambda: storage.upload([(str(tmp_path / "f"), "f")]),
        ],
        "storage.objects.list": [lambda: storage.list("")],
        "storage.objects.delete": [lambda: storage.delete(["a"])],
    }
    for permission, each in calls.items():
        for call in each:
            with pytest.raises(StorageError) as caught:
                call()
            error = caught.value
            assert error.reason == FORBIDDEN and error.forbidden and error.lasting
            assert error.permission == permission
            assert f"gs://{bucket}/job" in str(error) and f"{permission} is missing" in str(error)
            assert "\n" not in str(error)


def test_a_missing_bucket_is_told_from_a_missing_object_by_the_object_calls_own_404(iam):
    assert bucket_missing("GET https://storage.googleapis.com/...: The specified bucket does not exist.")
    assert not bucket_missing("GET https://...: No such object: my-bucket/survivor/DONE")
    with pytest.raises(StorageError) as caught:
        GcsStorage("gs://no-such-bucket-here/job").read("survivor/DONE")
    assert caught.value.reason == BUCKET_MISSING
    assert str(caught.value).startswith("gs://no-such-bucket-here: the bucket does not exist")


# -- the agent -------------------------------------------------------------------------------------


def test_the_agent_trains_to_done_with_object_admin_only(iam, tmp_path, instance_factory):
    proxy, bucket = iam
    job_dir = f"gs://{bucket}/object-admin"
    vm = instance_factory(
        dummy_spec(job_dir, tmp_path, train_steps=30, checkpoint_steps=10), env={"STORAGE_EMULATOR_HOST": proxy.url}
    )
    vm.boot()
    assert vm.wait(120) == 0, open(vm.log_path()).read()[-3000:]
    assert Journal(open_storage(job_dir)).state().done["step"] == 30
    assert proxy.denied == []  # not one bucket-metadata call, from survivor or from the client library


def test_without_object_permissions_the_agent_says_why_and_leaves_its_mig_without_a_restart(iam, tmp_path, monkeypatch):
    from survivor.local.simulator import Simulator

    proxy, bucket = iam
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.upstream)  # the simulator's own reads: every permission
    proxy.granted = ROLES["roles/storage.legacyBucketReader"]  # bucket metadata and listing, no object reads
    job_dir = f"gs://{bucket}/refused"
    sim = Simulator(
        dummy_spec(job_dir, tmp_path, on_finish="auto"),
        str(tmp_path / "sim"),
        preempt_every=10_000,
        python=PYTHON,
        env={"STORAGE_EMULATOR_HOST": proxy.url, "SURVIVOR_PERMISSION_WAIT_SECONDS": "8"},
    )
    result = sim.run(timeout=90)
    boots = [e for e in result.events if e.kind == "boot"]
    assert len(boots) == 1, result.table()  # exit 0: systemd does not restart it, let alone in a burst
    assert result.target_size == 0  # it left the MIG: no GPU VM idles on a job it cannot touch
    vm = next(iter(sim.vms.values()))
    assert vm.process.returncode == 0
    guest = vm.metadata.get("instance/guest-attributes")["survivor"]
    assert guest["state"] == "failed"
    assert "storage.objects.get is missing" in guest["reason"] and f"gs://{bucket}/refused" in guest["reason"]
    errors = [line["message"] for line in vm.log_lines() if line["severity"] == "ERROR"]
    assert any(m.startswith("giving up on this boot: the job dir cannot be used") for m in errors), errors
    waits = [line for line in vm.log_lines() if line["message"].startswith("the job dir refuses this VM")]
    assert len(waits) >= 2  # it waited for IAM to catch up before giving up
    assert any(denied[2] == "storage.objects.get" for denied in proxy.denied)


def test_failed_is_written_to_a_job_dir_that_takes_writes_but_refuses_reads(iam, tmp_path, instance_factory):
    proxy, bucket = iam
    proxy.granted = ROLES["roles/storage.objectCreator"]
    job_dir = f"gs://{bucket}/creator-only"
    vm = instance_factory(
        dummy_spec(job_dir, tmp_path), env={"STORAGE_EMULATOR_HOST": proxy.url, "SURVIVOR_PERMISSION_WAIT_SECONDS": "2"}
    )
    vm.boot()
    assert vm.wait(60) == 0, open(vm.log_path()).read()[-3000:]
    proxy.granted = None  # read here with every permission
    failed = Journal(open_storage(job_dir)).failed()
    assert failed is not None and "storage.objects.get is missing" in failed["reason"]
    assert "delete this FAILED marker" in failed["reason"]


def test_a_role_granted_while_the_agent_waits_is_used(iam, tmp_path, instance_factory):
    import threading

    proxy, bucket = iam
    proxy.granted = frozenset()
    job_dir = f"gs://{bucket}/granted-late"
    vm = instance_factory(
        dummy_spec(job_dir, tmp_path, train_steps=20),
        env={"STORAGE_EMULATOR_HOST": proxy.url, "SURVIVOR_PERMISSION_WAIT_SECONDS": "60"},
    )
    vm.boot()
    threading.Timer(3.0, lambda: setattr(proxy, "granted", OBJECT_ADMIN)).start()  # IAM catching up
    assert vm.wait(120) == 0, open(vm.log_path()).read()[-3000:]
    assert Journal(open_storage(job_dir)).state().done["step"] == 20
    assert proxy.denied  # it was refused first
