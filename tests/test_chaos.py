"""The chaos run's new fault classes: damaged manifests, full disks, a slow metadata server, a second
agent in another pid namespace.

The pure parts first (each damage is one the store must refuse, for its own reason; the verdicts
can say corrupt, lost and traceback), then a short run of every class through real agents."""

import json
import random

import pytest

from harness.chaos import (
    DAMAGES,
    TRAIN_STEPS,
    _placeholder,
    agent_traceback,
    damaged_manifest,
    judge_restore,
    run_chaos,
)
from survivor.jobdir.store import CheckpointStore, ChunkEntry, FileEntry, Manifest, ManifestError, _order

GOOD = Manifest(
    step=120,
    attempt=4,
    seq=2,
    created="t",
    writer="w",
    parent="",
    files=(
        FileEntry(
            "dummy-checkpoint-120.json",
            30,
            "AAAAAA==",
            (ChunkEntry(0, 30, "AAAAAA==", "survivor/blobs/chunks/" + "1" * 64),),
        ),
    ),
)


@pytest.mark.usefixtures("gc_off")  # parses 100,000-deep JSON in this process
@pytest.mark.parametrize("kind", sorted(DAMAGES))
@pytest.mark.parametrize("good", [GOOD, None], ids=["after a commit", "before any commit"])
def test_each_damaged_manifest_sorts_newest_and_is_refused_for_its_own_damage(kind, good):
    store = CheckpointStore(storage=None, max_step=TRAIN_STEPS)  # the agent's: bounded by train_steps
    name, body = damaged_manifest(kind, good.to_json() if good else None, good.step if good else 0, random.Random(kind))
    assert _order(name) > _order(GOOD.name if good else "survivor/snapshots/000000000000-000000-0000.json")
    with pytest.raises(ManifestError) as refused:
        store.parse(name, body)
    # only the copy is refused for its name; every other damage must be caught by what it damages
    assert ("which is not its name" in str(refused.value)) == (kind == "a good manifest under a newer name")


def test_the_body_damaged_before_any_commit_is_a_manifest_this_survivor_reads():
    """Else every damage made from it would be refused for its format, not for the damage."""
    body = json.dumps(_placeholder(7)).encode()
    assert Manifest.from_json(body).step == 7


def test_the_verdicts_on_a_restore_past_a_damaged_manifest():
    bad = "survivor/snapshots/000000000150-999999-0001.json"
    assert judge_restore(bad, 120, bad, 150, trained=True) == "corrupt"
    assert judge_restore(bad, 120, None, 10_000_000, trained=True) == "corrupt"  # a record without restored_from
    assert judge_restore(bad, None, None, 5, trained=True) == "corrupt"  # nothing committed, yet a step restored
    assert judge_restore(bad, 120, None, -5, trained=True) == "corrupt"  # no commit has a negative step
    assert judge_restore(bad, 120, "survivor/snapshots/000000000090-000003-0001.json", 90, trained=True) == "lost"
    assert judge_restore(bad, 120, "", None, trained=True) == "lost"  # a start from scratch over a commit
    assert judge_restore(bad, 120, GOOD.name, 120, trained=True) is None
    assert judge_restore(bad, None, "", None, trained=True) is None  # nothing was committed
    assert judge_restore(bad, 120, None, None, trained=False) is None  # the boot ended before restoring


def test_a_restore_judged_a_loss_says_what_it_saw(tmp_path):
    """The words a lost commit is reported with: each manifest listed and why it was not followed."""
    from harness.chaos import _Rounds
    from survivor.jobdir.snapshot import scan
    from survivor.jobdir.storage import open_storage

    job_dir, local = str(tmp_path / "job"), tmp_path / "local"
    local.mkdir()
    (local / "dummy-checkpoint-10.json").write_text('{"step": 10}')
    storage = open_storage(job_dir)
    good = CheckpointStore(storage).commit(str(local), scan(str(local)), attempt=1).manifest
    storage.write(good.name, good.to_json().replace(b'"format": 2', b'"format": 1'))
    rounds = _Rounds(
        vm=None, job_dir=job_dir, rng=random.Random(1), seed=1, result=None, root=str(tmp_path), proxy=None
    )
    said = rounds.why_not_restored()
    assert f"listed ['{good.name}']" in said and f"{good.name}: ignoring a manifest" in said, said
    assert "format 1" in said and said.endswith("restored again: None"), said


def test_only_the_agents_own_traceback_counts():
    trainer = json.dumps({"severity": "INFO", "message": "Traceback (most recent call last):", "source": "trainer"})
    agent = json.dumps(
        {
            "severity": "ERROR",
            "message": "the boot failed unexpectedly",
            "exception": "Traceback (most recent call last):\n  ...",
        }
    )
    assert not agent_traceback(trainer + "\n" + json.dumps({"message": "committed"}))
    assert agent_traceback(trainer + "\n" + agent)
    assert agent_traceback("Traceback (most recent call last):\n  File ...\nOverflowError")  # before logging


@pytest.mark.slow
def test_damaged_manifests_full_disks_and_a_slow_metadata_server_lose_nothing_and_hang_nothing(tmp_path):
    result = run_chaos(
        kills=2,
        fault_rate=0.05,
        seed=random.randrange(1 << 20),
        root=str(tmp_path / "chaos"),
        manifests=6,
        full_disks=2,
        slow_metadata=3,
        overlapped=3,
        damaged_chunks=2,
        contract_breakers=2,
        state_disks=2,
        pid_namespaces=1,
        save_orders=3,
        cuts=4,
    )
    print(
        json.dumps(
            {
                name: {"inputs": t.inputs, "faults": dict(t.faults), "slowest": t.slowest_seconds, "skipped": t.skipped}
                for name, t in result.tallies.items()
            }
        )
    )
    assert result.problems == [], "every problem, one a line:\n" + "\n".join(result.problems)
    tallies = result.tallies
    assert (tallies["damaged manifest"].inputs, tallies["slow metadata"].inputs) == (6, 3)
    assert tallies["overlapped upload"].inputs == 3
    assert tallies["damaged chunk"].inputs == 2 and tallies["contract breaker"].inputs == 2
    assert tallies["hostile state disk"].inputs == 2 and tallies["save orders"].inputs == 3
    assert tallies["cut moves and switches"].inputs == 4 and result.wrong_groups == 0
    assert sum(n for k, n in tallies["slow metadata"].faults.items() if k == "dripped metadata answers") >= 3
    if not tallies["full disk"].skipped:  # mounting a tmpfs needs root
        assert tallies["full disk"].inputs == 2
    if not tallies["pid namespace"].skipped:  # so does a new pid namespace
        assert tallies["pid namespace"].inputs == 1
    assert result.stolen_leases == 0
    assert (result.corrupt_restores, result.lost_commits, result.hangs) == (0, 0, 0)
    assert result.tracebacks == 0 and result.leaked_temp_files == 0
    assert not result.failed_marker
