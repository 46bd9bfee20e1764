"""Notice watching: the first of preempted or a signal; a terminating maintenance event as a save request."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from survivor.metadata import MetadataClient
from survivor.agent.notice import NoticeWatcher
from survivor.metadata import notice_from_metadata
from tests.waiting import PATIENCE, wait_until


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
        notice = watcher.wait(PATIENCE)
        assert notice is not None, f"no notice within {PATIENCE:g} s of preempted=TRUE"
        assert notice.source == "preempted" and notice.detail == "instance/preempted=TRUE"
        assert notice.monotonic - flipped < 3.0  # a round trip on a loaded machine, not the GET's 5 s timeout
    finally:
        watcher.stop()


def no_maintenance_for(watcher, seconds):
    """True when the watcher takes no maintenance warning for `seconds`: a window in which nothing may
    happen, so the time is the test (a loaded machine only makes it a weaker one)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if watcher.take_maintenance() is not None:
            return False
        time.sleep(0.02)
    return True


def maintenance_warning(watcher, what):
    return wait_until(watcher.take_maintenance, PATIENCE, what, interval=0.02)


def test_terminating_maintenance_asks_for_a_save_and_is_not_a_notice_to_stop(metadata_server):
    watcher = watcher_for(metadata_server)
    try:
        metadata_server.set("instance/maintenance-event", "MIGRATE_ON_HOST_MAINTENANCE")
        assert no_maintenance_for(watcher, 0.5)
        metadata_server.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
        warning = maintenance_warning(watcher, "a save request for TERMINATE_ON_HOST_MAINTENANCE")
        assert warning.source == "maintenance" and not warning.going_now
        assert watcher.wait(0.5) is None  # training goes on: nothing to stop for
        assert no_maintenance_for(watcher, 1.0)  # the same value again is the same notice
        # the event ends and a new one is announced: a second save
        asked = metadata_server.requests
        metadata_server.set("instance/maintenance-event", "NONE")
        # the watcher saw NONE and asks again (a fixed 0.3 s could merge the two)
        wait_until(lambda: metadata_server.requests != asked, PATIENCE, "the watcher's next look after NONE", 0.01)
        metadata_server.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
        maintenance_warning(watcher, "a second save request for a second TERMINATE_ON_HOST_MAINTENANCE")
        # the stop itself still comes as a notice
        metadata_server.set("instance/preempted", "TRUE")
        notice = watcher.wait(PATIENCE)
        assert notice is not None and notice.source == "preempted", notice
    finally:
        watcher.stop()


def test_the_watcher_rides_out_a_misbehaving_metadata_server(metadata_server):
    metadata_server.fault("garbage", count=6)
    watcher = watcher_for(metadata_server)
    try:
        # the flag flips once the watcher has met every bad answer (a fixed 0.5 s let a loaded
        # machine's watcher meet none of them, and the test prove nothing)
        wait_until(lambda: metadata_server.faults_left() == 0, PATIENCE, "the watcher's six bad answers")
        metadata_server.set("instance/preempted", "TRUE")
        notice = watcher.wait(PATIENCE)
        assert notice is not None and notice.source == "preempted", notice
    finally:
        watcher.stop()


def test_the_first_notice_wins(metadata_server):
    watcher = watcher_for(metadata_server)
    try:
        watcher.fire("signal", "SIGTERM")
        metadata_server.set("instance/preempted", "TRUE")
        time.sleep(0.3)  # a window for the later notice to (wrongly) replace the first: nothing to wait for
        assert watcher.notice.source == "signal"
        assert watcher.notice.outcome == "stopped"
    finally:
        watcher.stop()


def test_sigterm_to_the_agent_is_a_notice():
    watcher = NoticeWatcher(None).start()  # installs handlers: we are on the main thread
    try:
        threading.Timer(0.1, os.kill, args=(os.getpid(), signal.SIGTERM)).start()
        notice = watcher.wait(PATIENCE)
        assert notice is not None, f"no notice within {PATIENCE:g} s of a SIGTERM"
        assert notice.source == "signal" and notice.detail == "SIGTERM"
    finally:
        watcher.stop()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


#: A fresh watcher each round, a SIGTERM at a random instant, the main thread in `wait()` the while.
_SIGTERM_AT_ANY_INSTANT = """
import os, random, signal, sys, threading
from survivor import log as logs
from survivor.agent.notice import NoticeWatcher, Signals
logs.setup("json", "ERROR")
for _ in range(int(sys.argv[1])):
    watcher = NoticeWatcher(None, sources=[Signals()]).start()
    threading.Timer(random.uniform(0, 0.002), os.kill, (os.getpid(), signal.SIGTERM)).start()
    while watcher.wait(timeout=0) is None:
        pass
    watcher.stop()
print("every SIGTERM heard")
"""


def test_a_sigterm_at_any_instant_of_the_main_threads_wait_is_heard_never_a_deadlock():
    """The handler ran in the main thread wherever it was, and fired there: a SIGTERM that landed
    while `wait()` held its Event's lock waited for that lock in the same thread, for good (the
    agent silent, then SIGKILLed at the hard off). Before the fix 300 rounds never finished."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        done = subprocess.run(
            [sys.executable, "-c", _SIGTERM_AT_ANY_INSTANT, "300"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=PATIENCE,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"a SIGTERM deadlocked the watcher's main thread: not done in {PATIENCE:g} s") from exc
    assert done.returncode == 0 and "every SIGTERM heard" in done.stdout, done.stderr[-2000:]


def test_a_trainers_save_and_stop_requests_take_no_lock_a_signal_could_find_held():
    """The trainer's side of the contract: its handlers run in the main thread between two bytecodes,
    so they only count (a lock the main thread held there would never be released). Requests made
    before a take are one save; one made after is the next."""
    from survivor.trainers.contract import SaveRequest, StopRequest

    save = SaveRequest()
    assert not save.take()
    save._ask()
    save._ask()
    assert save.take() and not save.take()
    save._ask()
    assert save.take()
    stop = StopRequest()
    assert not stop.requested
    stop._handle(15, None)
    assert stop.requested and stop.signal_name == "SIGTERM" and stop.at is not None
    assert not hasattr(save, "_event") and not hasattr(stop, "_event")
