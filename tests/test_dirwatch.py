"""File events in the job dir wake the mirror after a notice; where there are none, its clock does."""

import os
import sys
import threading

import pytest

from survivor.agent import dirwatch
from survivor.agent.boot import Mirror
from survivor.agent.dirwatch import DirChanges
from survivor.jobdir.storage import open_storage
from survivor.jobdir.store import CheckpointStore

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")


@linux_only
def test_a_rename_into_the_dir_and_a_write_in_a_new_subdir_are_both_seen(tmp_path):
    changes = DirChanges(str(tmp_path))
    try:
        assert changes.available
        assert changes.wait(0) is False, "nothing changed yet"
        (tmp_path / ".ckpt.tmp").write_bytes(b"x")
        os.replace(tmp_path / ".ckpt.tmp", tmp_path / "ckpt-1.json")
        assert changes.wait(5) is True
        while changes.wait(0):  # drain
            pass
        os.makedirs(tmp_path / "ckpt-2_temp")
        assert changes.wait(5) is True  # the new dir, which is now watched too
        while changes.wait(0):
            pass
        (tmp_path / "ckpt-2_temp" / "part-00000").write_bytes(b"y")
        assert changes.wait(5) is True, "a write inside a directory made after the watch began was missed"
    finally:
        changes.close()
    assert not changes.available


def test_without_inotify_wait_returns_at_once_and_the_caller_polls(tmp_path, monkeypatch):
    monkeypatch.setattr(dirwatch, "INotify", None)
    changes = DirChanges(str(tmp_path))
    assert not changes.available
    (tmp_path / "ckpt-1.json").write_bytes(b"{}")
    assert changes.wait(0) is False


class StoppedClock(threading.Event):
    """A wake-up event whose timeout never fires: only an explicit set() wakes the mirror."""

    def wait(self, timeout=None):
        return super().wait(None)


@pytest.mark.parametrize("events", [pytest.param(True, marks=linux_only), False], ids=["inotify", "clock"])
def test_a_hurried_mirror_commits_a_checkpoint_the_moment_it_appears(tmp_path, monkeypatch, events):
    """With file events the rename itself wakes the mirror (its clock here never ticks); without
    them, its 2 ms clock finds the checkpoint."""
    if not events:
        monkeypatch.setattr(dirwatch, "INotify", None)
    local = str(tmp_path / "job")
    os.makedirs(local)
    storage = open_storage(str(tmp_path / "jobdir"))
    committed = threading.Event()
    steps = []

    def on_commit(stats):
        steps.append(stats.manifest.step)
        committed.set()

    mirror = Mirror(CheckpointStore(storage), storage, local, attempt=1, interval=3600, committed_step=None,
                    on_commit=on_commit)
    if events:
        mirror._wake = StoppedClock()
    mirror.start()
    try:
        mirror.hurry(fallback=3600)
        (tmp_path / "job" / ".dummy-checkpoint-5.json.tmp").write_text('{"step": 5}')
        os.replace(tmp_path / "job" / ".dummy-checkpoint-5.json.tmp", tmp_path / "job" / "dummy-checkpoint-5.json")
        assert committed.wait(30), "the renamed checkpoint was not committed"
    finally:
        mirror.stop()
    assert steps == [5]
