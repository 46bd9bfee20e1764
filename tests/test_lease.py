"""Single writer: two agents on one job dir never both commit; a stale holder is fenced off."""

import json
import time

import pytest

from survivor.journal import Journal
from survivor.lease import LEASE, Holder, Lease, LeaseHeld, LeaseLost, decide_takeover, fence_needs_renewal
from survivor.storage import open_storage
from survivor.store import CheckpointStore
from tests.conftest import dummy_spec


@pytest.mark.parametrize("current, unchanged_for, expected", [
    (None, 0, "take"),
    ({"instance": "vm-a", "boot": "1"}, 0, "wait"),
    ({"instance": "vm-a", "boot": "1"}, 61, "take"),
    ({"instance": "me", "boot": "old"}, 0, "take"),  # our name, another boot: the old VM is gone
    ({"instance": "me", "boot": "now"}, 0, "hold"),
    ({"instance": "vm-a", "boot": "1", "released": True}, 0, "take"),
])
def test_takeover_decision(current, unchanged_for, expected):
    assert decide_takeover(current, Holder("me", "now"), unchanged_for, ttl=60) == expected


def test_a_live_holder_keeps_the_job_and_is_named(job_dir):
    storage = open_storage(job_dir)
    first = Lease(storage, Holder("vm-a", "1"), ttl=1.0).acquire().start_renewing()
    try:
        with pytest.raises(LeaseHeld, match="held by vm-a"):
            Lease(storage, Holder("vm-b", "1"), ttl=1.0).acquire(poll=0.1)
    finally:
        first.release()
    Lease(storage, Holder("vm-b", "1"), ttl=1.0).acquire(wait=0)  # released: taken at once


def test_a_stale_lease_is_taken_and_its_old_holder_is_fenced(job_dir):
    storage = open_storage(job_dir)
    old = Lease(storage, Holder("vm-a", "1"), ttl=0.5).acquire()  # never renewed: it goes stale
    new = Lease(storage, Holder("vm-b", "1"), ttl=0.5).acquire(poll=0.05)
    assert json.loads(storage.read(LEASE).data)["instance"] == "vm-b"
    with pytest.raises(LeaseLost, match="taken over by vm-b"):
        old.renew()
    new.renew()


@pytest.mark.parametrize("since_renewal, expected", [(0.0, False), (19.9, False), (20.0, True), (float("inf"), True)])
def test_a_commit_needs_a_renewal_from_the_last_third_of_a_ttl(since_renewal, expected):
    assert fence_needs_renewal(since_renewal, ttl=60) is expected


def test_the_fence_writes_the_lease_only_when_the_last_renewal_is_too_old(job_dir):
    storage = open_storage(job_dir)
    lease = Lease(storage, Holder("vm-a", "1"), ttl=60).acquire()
    generation = storage.read(LEASE).generation
    lease.fence()  # just acquired: fresh, no write
    assert storage.read(LEASE).generation == generation
    lease.renewed_at -= 30  # as if the renewal thread had not written for half a ttl
    lease.fence()
    assert storage.read(LEASE).generation != generation and lease.generation == storage.read(LEASE).generation


def test_a_fence_that_must_renew_finds_a_takeover(job_dir):
    storage = open_storage(job_dir)
    old = Lease(storage, Holder("vm-a", "1"), ttl=60).acquire()
    blob = storage.read(LEASE)
    storage.write(LEASE, Holder("vm-b", "1").to_json(), if_generation_match=blob.generation)  # vm-b took it
    old.renewed_at -= 60  # which a taker does only after a whole ttl without renewals
    with pytest.raises(LeaseLost, match="taken over by vm-b"):
        old.fence()
    with pytest.raises(LeaseLost):
        old.fence()  # and it stays lost


def test_second_agent_on_the_same_job_dir_stops_naming_the_holder(job_dir, tmp_path, instance_factory):
    spec = dummy_spec(job_dir, tmp_path, train_steps=1000, lease_seconds=2)  # ~30 s: outlives the wait
    first = instance_factory(spec, name="vm-a")
    second = instance_factory(spec, name="vm-b")
    first.boot()
    first.wait_for_step(5)
    second.boot()
    assert second.wait(60) == 1
    messages = [(line["message"], line.get("reason", "")) for line in second.log_lines()]
    assert any(m == "not training: another agent holds this job" and "held by vm-a" in r for m, r in messages)
    assert first.running()
    first.preempt()
    attempts = Journal(open_storage(job_dir)).attempts()
    assert [a.instance for a in attempts] == ["vm-a"]


def test_an_agent_whose_lease_is_taken_over_commits_nothing_more(job_dir, tmp_path, instance_factory):
    storage = open_storage(job_dir)
    vm = instance_factory(dummy_spec(job_dir, tmp_path, train_steps=400, checkpoint_steps=5, lease_seconds=3))
    vm.boot()
    vm.wait_for_step(12)
    # another writer takes the job (as a VM would after the lease went stale)
    blob = storage.read(LEASE)
    storage.write(LEASE, Holder("vm-intruder", "9").to_json(), if_generation_match=blob.generation)
    # Commits may land for up to ttl/3 after the holder's last renewal (a real taker waits a whole
    # ttl, so that is safe); its next renewal, at most ttl/4 after the last, finds the takeover.
    time.sleep(2.0)
    before = set(CheckpointStore(storage).manifest_names())
    assert vm.wait(30) == 1
    time.sleep(0.5)
    assert set(CheckpointStore(storage).manifest_names()) - before == set()
    assert vm.progress() > 12  # it kept training until the fence stopped it
    assert Journal(storage).attempts()[-1].outcome == "superseded"
    assert json.loads(storage.read(LEASE).data)["instance"] == "vm-intruder"
