"""The mirror after a notice: the trainer's last checkpoint is committed as soon as it lands, while
the trainer is still exiting, and nothing but the commit runs on the way to safety."""

import os
import threading

from survivor.agent.mirror import POLL_AFTER_NOTICE, Mirror
from survivor.jobdir.storage import open_storage
from survivor.jobdir.store import CheckpointStore


def test_after_a_notice_the_mirror_commits_a_checkpoint_the_moment_it_appears(tmp_path):
    """Its routine interval is an hour; after the notice a renamed checkpoint is committed at once."""
    local = str(tmp_path / "job")
    os.makedirs(local)
    storage = open_storage(str(tmp_path / "jobdir"))
    committed = threading.Event()
    steps = []

    def on_commit(stats):
        steps.append(stats.manifest.step)
        committed.set()

    mirror = Mirror(CheckpointStore(storage), storage, local, attempt=1, interval=3600, committed_step=None,
                    on_commit=on_commit).start()
    try:
        mirror.after_notice()
        assert mirror.interval == POLL_AFTER_NOTICE
        (tmp_path / "job" / ".dummy-checkpoint-5.json.tmp").write_text('{"step": 5}')
        os.replace(tmp_path / "job" / ".dummy-checkpoint-5.json.tmp", tmp_path / "job" / "dummy-checkpoint-5.json")
        assert committed.wait(30), "the renamed checkpoint was not committed"
    finally:
        mirror.stop()
    assert steps == [5]


class CountedGarbage(CheckpointStore):
    """A checkpoint store that counts its garbage collections."""

    collections = 0

    def collect_garbage(self):
        self.collections += 1
        return super().collect_garbage()


def test_after_a_notice_the_mirror_commits_and_leaves_garbage_collection_to_the_next_boot(tmp_path):
    local = str(tmp_path / "job")
    os.makedirs(local)
    storage = open_storage(str(tmp_path / "jobdir"))
    store = CountedGarbage(storage)
    committed = threading.Event()
    mirror = Mirror(store, storage, local, attempt=1, interval=3600, committed_step=None,
                    on_commit=lambda stats: committed.set()).start()
    try:
        mirror.after_notice()
        (tmp_path / "job" / ".dummy-checkpoint-7.json.tmp").write_text('{"step": 7}')  # as the contract says
        os.replace(tmp_path / "job" / ".dummy-checkpoint-7.json.tmp", tmp_path / "job" / "dummy-checkpoint-7.json")
        assert committed.wait(30)
    finally:
        mirror.stop()
    assert store.collections == 0, "garbage collection ran on the way to safety"
    mirror.tidy()
    assert store.collections == 0, "garbage collection ran while the VM was going"
    assert storage.list("survivor/snapshots/")  # the commit stands
    routine = Mirror(store, storage, local, attempt=2, interval=3600, committed_step=7, on_commit=lambda s: None)
    routine.tidy()  # a boot that had no notice collects as before
    assert store.collections == 1
