"""Notice watching: the first of preempted or a signal; a terminating maintenance event as a save request."""

import os
import signal
import threading
import time

import pytest

from survivor.metadata import MetadataClient
from survivor.agent.notice import NoticeWatcher
from survivor.metadata import notice_from_metadata


@pytest.mark.parametrize(
    "key, value, expected",
    [
        ("instance/preempted", "TRUE", "preempted"),
        ("instance/preempted", "FALSE", None),
        ("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE", "maintenance"),
        ("instance/maintenance-event", "MIGRATE_ON_HOST_MAINTENANCE", None),
        ("instance/maintenance-event", "NONE", None),
    ],
)
def test_what_a_metadata_value_means(key, value, expected):
    assert notice_from_metadata(key, value) == expected


def watcher_for(server):
    return NoticeWatcher(MetadataClient(server.host), timeout_sec=5, handle_signals=False).start()


def test_preempted_flag_fires_within_a_round_trip(metadata_server):
    watcher = watcher_for(metadata_server)
    try:
        assert watcher.wait(0.3) is None
        flipped = time.monotonic()
        metadata_server.set("instance/preempted", "TRUE")
        notice = watcher.wait(5)
        assert notice.source == "preempted" and notice.detail == "instance/preempted=TRUE"
        assert notice.monotonic - flipped < 3.0  # a round trip on a loaded machine, not the GET's 5 s timeout
    finally:
        watcher.stop()


def wait_for_maintenance(watcher, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        warning = watcher.take_maintenance()
        if warning is not None:
            return warning
        time.sleep(0.02)
    return None


def test_terminating_maintenance_asks_for_a_save_and_is_not_a_notice_to_stop(metadata_server):
    watcher = watcher_for(metadata_server)
    try:
        metadata_server.set("instance/maintenance-event", "MIGRATE_ON_HOST_MAINTENANCE")
        assert wait_for_maintenance(watcher, 0.5) is None
        metadata_server.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
        warning = wait_for_maintenance(watcher, 5)
        assert warning.source == "maintenance" and not warning.going_now
        assert watcher.wait(0.5) is None  # training goes on: nothing to stop for
        assert wait_for_maintenance(watcher, 1.0) is None  # the same value again is the same notice
        # the event ends and a new one is announced: a second save
        asked = metadata_server.requests
        metadata_server.set("instance/maintenance-event", "NONE")
        deadline = time.monotonic() + 5  # the watcher saw NONE and asks again (a fixed 0.3 s could merge the two)
        while metadata_server.requests == asked and time.monotonic() < deadline:
            time.sleep(0.01)
        metadata_server.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
        assert wait_for_maintenance(watcher, 5) is not None
        # the stop itself still comes as a notice
        metadata_server.set("instance/preempted", "TRUE")
        assert watcher.wait(5).source == "preempted"
    finally:
        watcher.stop()


def test_the_watcher_rides_out_a_misbehaving_metadata_server(metadata_server):
    metadata_server.fault("garbage", count=6)
    watcher = watcher_for(metadata_server)
    try:
        time.sleep(0.5)
        metadata_server.set("instance/preempted", "TRUE")
        assert watcher.wait(15).source == "preempted"
    finally:
        watcher.stop()


def test_the_first_notice_wins(metadata_server):
    watcher = watcher_for(metadata_server)
    try:
        watcher.fire("signal", "SIGTERM")
        metadata_server.set("instance/preempted", "TRUE")
        time.sleep(0.3)
        assert watcher.notice.source == "signal"
        assert watcher.notice.outcome == "stopped"
    finally:
        watcher.stop()


def test_sigterm_to_the_agent_is_a_notice():
    watcher = NoticeWatcher(None).start()  # installs handlers: we are on the main thread
    try:
        threading.Timer(0.1, os.kill, args=(os.getpid(), signal.SIGTERM)).start()
        notice = watcher.wait(5)
        assert notice.source == "signal" and notice.detail == "SIGTERM"
    finally:
        watcher.stop()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
