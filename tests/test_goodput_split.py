"""The goodput benchmark's badput split (benchmarks/peers/run.py `badput`) on boots whose times are known:
every share is what the made-up timeline says, and the shares add up to the wall time."""

import argparse

import pytest

from benchmarks.peers.run import Boot, Row, badput, with_recreation


def boot(
    started: float,
    first_step: int,
    steps: int,
    step_time: float,
    *,
    restore: float,
    startup: float,
    stall_after: int | None = None,
    stall: float = 0.0,
    exit_after: float = 0.0,
) -> Boot:
    """A boot that starts up, restores, then reports `steps` steps from `first_step`, with one save stall."""
    b = Boot(started=started, restore=restore)
    t = started + startup + restore + step_time  # the first report comes one step after start-up and restore
    for step in range(first_step, first_step + steps):
        b.samples.append((t, step))
        t += step_time + (stall if step == stall_after else 0.0)
    b.notice = b.samples[-1][0]
    b.ended = b.notice + exit_after
    return b


def test_the_split_of_a_made_up_timeline_is_exact():
    saves_at = {10}
    row = Row("r", "own code", None, lambda step, start, args: step in saves_at)
    # boot 1: steps 1..20 (a 0.5 s save stall after step 10), killed; resumes from 10, so 10 re-run
    first = boot(0.0, 1, 20, 0.1, restore=0.0, startup=2.0, stall_after=10, stall=0.5, exit_after=1.0)
    # boot 2: restored at 10, steps 11..30, then the window ends; the job resumes at 30
    second = boot(first.ended, 11, 20, 0.1, restore=0.3, startup=2.0, exit_after=1.0)
    split = badput({"row": row, "boots": [first, second], "resumes_at": 30}, argparse.Namespace())
    wall = second.ended
    assert split["step"] == pytest.approx(0.1)
    assert split["wall"] == pytest.approx(wall)
    assert split["goodput"] == pytest.approx(30 * 0.1 / wall)
    assert split["startup"] == pytest.approx(4.0 / wall)
    assert split["restore"] == pytest.approx(0.3 / wall)
    assert split["stalls"] == pytest.approx(0.5 / wall)
    assert split["rerun"] == pytest.approx(10 * 0.1 / wall)
    assert split["rerun_per"] == [10, 0]
    assert split["other"] == pytest.approx(2.0 / wall)  # the two notices to exit
    assert sum(split[k] for k in ("goodput", "startup", "restore", "stalls", "rerun", "other")) == pytest.approx(1)


def test_the_time_without_a_vm_is_its_own_share_and_every_share_still_adds_up():
    row = Row("r", "own code", None, lambda step, start, args: False)
    first = boot(0.0, 1, 20, 0.1, restore=0.0, startup=2.0, exit_after=1.0)
    second = boot(first.ended, 21, 20, 0.1, restore=0.3, startup=2.0, exit_after=1.0)
    split = badput({"row": row, "boots": [first, second], "resumes_at": 40}, argparse.Namespace())
    real = with_recreation(split, preemptions=2, seconds=150.0)
    wall = second.ended + 300.0
    assert real["goodput"] == pytest.approx(40 * 0.1 / wall)  # the same work over the longer wall time
    assert real["no_vm"] == pytest.approx(300.0 / wall)
    assert real["startup"] == pytest.approx(4.0 / wall)
    shares = ("goodput", "startup", "restore", "stalls", "rerun", "other", "no_vm")
    assert sum(real[k] for k in shares) == pytest.approx(1)
    assert with_recreation(split, preemptions=2, seconds=0.0)["goodput"] == pytest.approx(split["goodput"])
