"""Single writer: two agents on one job dir never both commit; a stale holder is fenced off."""

import json
import os
import subprocess
import sys
import time

import pytest

from survivor.jobdir.journal import Journal
from survivor.jobdir.lease import (
    LEASE,
    Holder,
    Lease,
    LeaseHeld,
    LeaseLost,
    agent_running,
    decide_takeover,
    fence_needs_renewal,
    parse_lease,
    process_identity,
    read_boot_id,
    read_pid_namespace,
)
from survivor.jobdir.storage import StorageError, open_storage
from survivor.jobdir.store import CheckpointStore
from tests.conftest import dummy_spec


ME = Holder("me", "boot-2", "us-west1-b", "4242:100", "pid:[4026531836]")
HERE = "pid:[4026531836]"  # ME's pid namespace


@pytest.mark.parametrize(
    "current, unchanged_for, running, expected",
    [
        (None, 0, True, "take"),
        ({"instance": "vm-a", "zone": "us-west1-b", "boot": "1", "agent": "7:1"}, 0, True, "wait"),
        ({"instance": "vm-a", "zone": "us-west1-b", "boot": "1", "agent": "7:1"}, 61, True, "take"),
        ({"instance": "vm-a", "boot": "1", "released": True}, 0, True, "take"),
        # this very agent
        (
            {"instance": "me", "zone": "us-west1-b", "boot": "boot-2", "agent": "4242:100", "pidns": HERE},
            0,
            True,
            "hold",
        ),
        # the same pid and start time with no namespace said: maybe another namespace's process
        ({"instance": "me", "zone": "us-west1-b", "boot": "boot-2", "agent": "4242:100"}, 0, True, "wait"),
        # this VM in an earlier kernel boot (rebooted, or recreated by its MIG): over, taken at once
        ({"instance": "me", "zone": "us-west1-b", "boot": "boot-1", "agent": "4242:100"}, 0, True, "take"),
        # this boot, an agent that no longer runs (systemd restarted us): taken at once
        (
            {"instance": "me", "zone": "us-west1-b", "boot": "boot-2", "agent": "4100:90", "pidns": HERE},
            0,
            False,
            "take",
        ),
        # this boot, an agent that still runs (an operator's `survivor agent` beside the unit's): wait
        (
            {"instance": "me", "zone": "us-west1-b", "boot": "boot-2", "agent": "4100:90", "pidns": HERE},
            0,
            True,
            "wait",
        ),
        (
            {"instance": "me", "zone": "us-west1-b", "boot": "boot-2", "agent": "4100:90", "pidns": HERE},
            61,
            True,
            "take",
        ),
        # this boot, an agent in another pid namespace (a container on the VM, or the VM seen from one):
        # its pid means nothing here, so not seeing it running says nothing: alive until the ttl
        (
            {"instance": "me", "zone": "us-west1-b", "boot": "boot-2", "agent": "4100:90", "pidns": "pid:[4026532178]"},
            0,
            False,
            "wait",
        ),
        (
            {"instance": "me", "zone": "us-west1-b", "boot": "boot-2", "agent": "4100:90", "pidns": "pid:[4026532178]"},
            61,
            False,
            "take",
        ),
        # the same pid and start time in another namespace is another process, not this agent
        (
            {
                "instance": "me",
                "zone": "us-west1-b",
                "boot": "boot-2",
                "agent": "4242:100",
                "pidns": "pid:[4026532178]",
            },
            0,
            False,
            "wait",
        ),
        # a lease that does not say its namespace (an older survivor's): its pid cannot be judged either
        ({"instance": "me", "zone": "us-west1-b", "boot": "boot-2", "agent": "4100:90"}, 0, False, "wait"),
        # the same name in another zone is another VM: wait
        ({"instance": "me", "zone": "europe-west4-a", "boot": "boot-1", "agent": "4242:100"}, 0, False, "wait"),
        # a lease from before zones and boots were recorded names no boot: wait for the ttl
        ({"instance": "me", "boot": "1234:ab12cd34"}, 0, False, "wait"),
        ({"instance": "me", "zone": "us-west1-b", "boot": "", "agent": ""}, 0, False, "wait"),
    ],
)
def test_takeover_decision(current, unchanged_for, running, expected):
    assert decide_takeover(current, ME, unchanged_for, ttl=60, holder_running=running) == expected


def test_an_unreadable_lease_is_an_unknown_holder_that_goes_stale():
    assert decide_takeover(None, ME, 0, ttl=60, readable=False) == "wait"
    assert decide_takeover(None, ME, 60, ttl=60, readable=False) == "take"


@pytest.mark.usefixtures("gc_off")  # parses 100,000-deep JSON in this process
@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xff\xfe garbage",
        b"[1, 2]",
        b"42",
        b"null",
        b'"vm-a"',
        b'{"instance": 5}',
        b'{"instance": "vm-a", "boot": ["x"]}',
        b"[" * 100000,
    ],
)
def test_a_lease_object_that_does_not_parse_has_no_holder(data):
    assert parse_lease(data) is None


def test_a_lease_object_parses_into_strings():
    assert parse_lease(b'{"instance": "vm-a", "zone": "z", "boot": "b", "agent": "1:2", "renewed": 1.5}') == {
        "instance": "vm-a",
        "zone": "z",
        "boot": "b",
        "agent": "1:2",
        "pidns": "",
        "released": False,
    }
    assert parse_lease(b'{"instance": "vm-a", "pidns": "pid:[1]"}')["pidns"] == "pid:[1]"
    assert parse_lease(b'{"instance": "vm-a", "pidns": 1}') is None
    assert parse_lease(b'{"instance": "vm-a", "released": true}')["released"] is True
    assert parse_lease(b'{"instance": "vm-a", "released": "no"}')["released"] is False


def test_a_process_is_named_by_pid_and_start_time_so_a_reused_pid_is_another_process():
    me = process_identity(os.getpid())
    assert me.startswith(f"{os.getpid()}:") and agent_running(me)
    pid, _, started = me.partition(":")
    assert not agent_running(f"{pid}:{int(started) + 1}")  # same pid, another start: not this process
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child_id = process_identity(child.pid)
    child.wait()
    assert child_id and not agent_running(child_id)
    assert agent_running("") and agent_running("garbage")  # cannot tell: as if alive (wait for the ttl)
    assert len(read_boot_id()) == 36  # a UUID, new at every kernel boot


def test_this_agent_names_its_pid_namespace_in_the_lease():
    here = Holder.here("vm-a", "zone-a")
    assert here.pidns == read_pid_namespace() == os.readlink("/proc/self/ns/pid")
    assert json.loads(here.to_json())["pidns"] == here.pidns


def test_an_agent_of_this_boot_in_another_pid_namespace_is_alive_until_its_lease_expires(job_dir):
    """The holder's pid names no process here (it runs in another pid namespace: a container on
    the same VM), yet it renews: the taker waits it out instead of taking the job at once."""
    storage = open_storage(job_dir)
    me = Holder.here("vm-a", "zone-a")
    container = Holder("vm-a", me.boot, "zone-a", "999999999:12345", "pid:[4026532999]")
    holder = Lease(storage, container, ttl=1.0).acquire().start_renewing()  # renews every 0.25 s
    try:
        with pytest.raises(LeaseHeld, match="held by vm-a"):  # stale after 3 s unrenewed; waits 4 s
            Lease(storage, me, ttl=3.0).acquire(wait=4.0, poll=0.1)
        assert not holder.lost.is_set()
    finally:
        holder.release()
    dead_here = Holder("vm-a", me.boot, "zone-a", "999999999:12345", me.pidns)  # same namespace: gone
    storage.write(LEASE, dead_here.to_json(), if_generation_match=storage.read(LEASE).generation)
    started = time.monotonic()
    Lease(storage, me, ttl=60).acquire(poll=0.1)
    # taken at once, not after the 60 s ttl (half of it is a loaded machine's slack)
    assert time.monotonic() - started < 30


def test_a_live_holder_keeps_the_job_and_is_named(job_dir):
    storage = open_storage(job_dir)
    first = Lease(storage, Holder("vm-a", "1"), ttl=1.0).acquire().start_renewing()  # renews every 0.25 s
    try:
        # the taker's 3 s without a renewal, not 0.75 s, before it calls the lease stale: one late
        # renewal on a loaded machine must not hand the job over (it waits 4 s, past that)
        with pytest.raises(LeaseHeld, match="held by vm-a"):
            Lease(storage, Holder("vm-b", "1"), ttl=3.0).acquire(wait=4.0, poll=0.1)
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


class AnswerLost:
    """A job dir whose next lease write lands but whose answer never arrives (the call fails), as a
    renewal on a loaded network does."""

    def __init__(self, storage):
        self.storage, self.lose_next = storage, False

    def write(self, name, data, *, if_generation_match=None):
        generation = self.storage.write(name, data, if_generation_match=if_generation_match)
        if self.lose_next:
            self.lose_next = False
            raise StorageError(f"{name}: the answer was lost (timed out)", object=name)
        return generation

    def __getattr__(self, name):
        return getattr(self.storage, name)


def test_a_renewal_whose_answer_was_lost_is_not_a_takeover(job_dir):
    storage = AnswerLost(open_storage(job_dir))
    lease = Lease(storage, Holder("vm-a", "boot-1", "zone-a", "123:456"), ttl=60).acquire()
    storage.lose_next = True
    with pytest.raises(StorageError):
        lease.renew()  # it landed; this agent does not know the new generation
    lease.renew()  # refused at the old generation, the object still names this agent: carried on
    assert not lease.lost.is_set() and lease.generation == storage.read(LEASE).generation
    lease.fence()


def test_a_lease_naming_this_instance_but_another_agent_is_still_a_takeover(job_dir):
    storage = open_storage(job_dir)
    lease = Lease(storage, Holder("vm-a", "boot-1", "zone-a", "123:456"), ttl=60).acquire()
    blob = storage.read(LEASE)
    storage.write(LEASE, Holder("vm-a", "boot-1", "zone-a", "999:1").to_json(), if_generation_match=blob.generation)
    with pytest.raises(LeaseLost, match="taken over by vm-a"):
        lease.renew()


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
    # ~30 s of training outlives the second agent's wait (twice the lease); a 4 s lease, not 2 s, so
    # that a renewal a loaded machine delays never lets the second take a live job
    spec = dummy_spec(job_dir, tmp_path, train_steps=1000, lease_seconds=4)
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
    # ttl, so that is safe); its next renewal, at most ttl/4 after the last, finds the takeover. The
    # whole ttl is what the product promises, and leaves a loaded machine its slack.
    time.sleep(3.0)
    before = set(CheckpointStore(storage).manifest_names())
    assert vm.wait(30) == 1
    time.sleep(0.5)
    assert set(CheckpointStore(storage).manifest_names()) - before == set()
    assert vm.progress() > 12  # it kept training until the fence stopped it
    assert Journal(storage).attempts()[-1].outcome == "superseded"
    assert json.loads(storage.read(LEASE).data)["instance"] == "vm-intruder"


def _can_unshare_pid() -> bool:
    """Whether this host lets a test start a process in a new pid namespace (root, unshare(1))."""
    try:
        return (
            subprocess.run(
                ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, timeout=10
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.parametrize(
    "zones, pid_namespace",
    [
        (("us-west1-b", "europe-west4-a"), False),
        (("us-west1-b", "us-west1-b"), False),
        pytest.param(
            ("us-west1-b", "us-west1-b"),
            True,
            marks=pytest.mark.skipif(
                not _can_unshare_pid(), reason="no new pid namespace here (needs root and unshare)"
            ),
        ),
    ],
    ids=["same-name-other-zone", "operator-agent-beside-the-units", "agent-in-another-pid-namespace"],
)
def test_a_second_live_agent_under_the_same_instance_name_never_takes_the_job(
    zones, pid_namespace, tmp_path, instance_factory
):
    """Two VMs of one name in different zones, an operator's `survivor agent` on the VM while the
    unit's runs (same name, zone and kernel boot), or one in a container on the VM (its own pid
    namespace: the holder's pid is not visible there): the second waits for a stale lease and stops
    naming the holder; the first is never superseded and is the only one that commits."""
    job_dir = str(tmp_path / "jobdir")
    storage = open_storage(job_dir)
    spec = dummy_spec(job_dir, tmp_path, train_steps=1500, checkpoint_steps=5, lease_seconds=4)  # as above
    first = instance_factory(spec, name="vm-a", zone=zones[0])
    second = instance_factory(
        spec,
        name="vm-a",
        zone=zones[1],
        wrapper=("unshare", "--pid", "--fork", "--mount-proc") if pid_namespace else (),
    )
    first.boot()
    first.wait_for_step(10)
    lease_before = json.loads(storage.read(LEASE).data)
    second.boot()
    assert second.wait(60) == 1, "the second agent must give up on a job whose holder is alive"
    messages = [(line["message"], line.get("reason", "")) for line in second.log_lines()]
    assert any(m == "not training: another agent holds this job" and "held by vm-a" in r for m, r in messages), messages
    assert first.running(), "the first agent must not be superseded"
    assert not os.path.exists(os.path.join(second.workdir, "job")), "the second never restored or trained"
    assert json.loads(storage.read(LEASE).data)["agent"] == lease_before["agent"]
    # the first still commits: a snapshot newer than every one before (counting them would not do:
    # garbage collection after a commit removes the oldest, and may run before the next lands)
    newest = max(CheckpointStore(storage).manifest_names())
    deadline = time.monotonic() + 60
    while max(CheckpointStore(storage).manifest_names()) <= newest:
        assert time.monotonic() < deadline and first.running(), f"no commit after {newest} in 60 s"
        time.sleep(0.1)
    first.preempt()
    assert [a.instance for a in Journal(storage).attempts()] == ["vm-a"]
    assert not any(
        line["message"] == "another agent took over this job; stopped without committing" for line in first.log_lines()
    )


def test_the_agent_systemd_restarts_takes_its_dead_predecessors_lease_at_once(tmp_path, instance_factory):
    """Same VM, same kernel boot, the old agent SIGKILLed (no release): its lease names a process
    that no longer runs, so the next agent takes it without waiting out the ttl."""
    job_dir = str(tmp_path / "jobdir")
    vm = instance_factory(dummy_spec(job_dir, tmp_path, train_steps=2000, lease_seconds=120))
    vm.boot()
    vm.wait_for_step(5)
    vm.kill()
    assert not json.loads(open_storage(job_dir).read(LEASE).data).get("released")
    vm.boot()
    started = time.monotonic()
    vm.wait_for_step(vm.progress() + 1 if vm.progress() else 1, timeout=60)
    assert time.monotonic() - started < 60  # not the 120 s ttl
    vm.kill()


@pytest.mark.parametrize(
    "data",
    [b"[1, 2]", b"\xff\xfe not json", b'{"instance": 5}', b"null"],
    ids=["a-list", "not-utf8", "instance-a-number", "null"],
)
def test_an_unparseable_lease_object_is_an_unknown_holder_never_a_crash(data, tmp_path, instance_factory):
    job_dir = str(tmp_path / "jobdir")
    storage = open_storage(job_dir)
    storage.write(LEASE, data, if_generation_match=0)
    vm = instance_factory(dummy_spec(job_dir, tmp_path, train_steps=20, lease_seconds=1))
    vm.boot()
    assert vm.wait(90) == 0, open(vm.log_path()).read()[-3000:]
    assert Journal(storage).state().done is not None
    assert any(line["message"].startswith("the lease object does not parse") for line in vm.log_lines())
