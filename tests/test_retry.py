"""Retry policies as data: each operation's worst case, the notice path against the grace budget,
and a log line before every sleep."""

import logging
import math
import re
from pathlib import Path

import pytest

from survivor.agent.budget import NoticeBudget, final_commit_worst_case, final_commit_writes_worst_case
from survivor import retry
from survivor.spec import JobSpec

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_a_policy_worst_case_is_every_attempt_timeout_plus_every_sleep():
    p = retry.Policy("x", attempts=3, deadline=math.inf, attempt_seconds=2.0, initial=0.5, maximum=10.0)
    # sleeps of at most 0.5 + 0.5 and 1.0 + 0.5 after the first and second attempts
    assert retry.worst_case(p) == pytest.approx(3 * 2.0 + 1.0 + 1.5)


def test_a_deadline_bounds_a_policy_by_one_attempt_past_it():
    p = retry.Policy("x", attempts=100, deadline=10.0, attempt_seconds=3.0)
    assert retry.worst_case(p) == 13.0  # no attempt starts after 10 s; the last may run 3 s


def test_the_metadata_deadlines_are_the_documented_ones():
    # docs/reliability.md: "5 s an attempt, 20 s a call with retries; the spec read retried for 30 s"
    assert retry.METADATA.attempt_seconds == 5.0
    assert retry.worst_case(retry.METADATA) == 20.0
    assert retry.SPEC_AT_BOOT.deadline == 30.0
    assert retry.worst_case(retry.SPEC_AT_BOOT) == 30.0 + 20.0
    assert retry.worst_case(retry.GUEST_ATTRIBUTE) == 5.0
    assert retry.worst_case(retry.NOTICE_WATCH) == math.inf  # a watcher never gives up
    reliability = (DOCS / "reliability.md").read_text()
    assert "5 s an attempt, 20 s a call with retries; the spec read retried for 30 s" in reliability


def test_the_metadata_client_takes_its_numbers_from_the_policy():
    from survivor.metadata import MetadataClient

    md = MetadataClient("127.0.0.1:9")
    assert (md.timeout, md.deadline) == (retry.METADATA.attempt_seconds, retry.METADATA.total)


def test_a_storage_call_is_the_client_window_plus_one_stalled_request_per_attempt():
    call = retry.StorageCall("x", connect=1.0, read=2.0, window=1.0, attempts=2, initial=0.2, maximum=2.0)
    assert call.client_seconds() == 4.0
    assert retry.worst_case(call) == pytest.approx(2 * 4.0 + 0.4)
    kwargs = call.client()
    assert kwargs["timeout"] == (1.0, 2.0)
    assert kwargs["retry"]._timeout == 1.0 and kwargs["retry"]._maximum == 2.0


def test_every_policy_is_bounded_but_the_watcher():
    for what, text, seconds in retry.table():
        assert what and text
        if what != retry.NOTICE_WATCH.what:
            assert math.isfinite(seconds), what


def test_the_final_commits_writes_give_up_inside_the_grace_budget_left_after_the_trainer():
    """After a notice the trainer gets 60% of grace_seconds; the lease's fence and the manifest
    write (the commit point) must give up inside the rest, even failing, and a conditional write
    whose answer was lost and that reads its object back still ends before the hard off at 30 s."""
    budget = NoticeBudget(JobSpec.__dataclass_fields__["grace_seconds"].default)
    assert budget.commit_seconds == pytest.approx(10.0)
    assert final_commit_writes_worst_case() <= budget.commit_seconds
    assert budget.trainer_seconds + final_commit_writes_worst_case() + retry.worst_case(retry.STORAGE_WRITE) <= 30.0
    # the commit's deadline leaves one write's worst case before the budget's end
    assert budget.commit_deadline(0.0) + retry.worst_case(retry.STORAGE_WRITE) == pytest.approx(budget.grace_seconds)


def test_an_upload_outwaits_a_slow_answer_rather_than_lose_the_commit():
    """A chunk's answer comes once the server has the whole chunk; a loaded server can take seconds.
    Cutting it off loses the commit for certain, so an upload waits longer than a write, and a
    failing one is stated, not hidden: against a server that is gone the final commit can outlast
    the notice (the attempt then stays open, and the next boot counts it as killed)."""
    assert retry.STORAGE_UPLOAD.read >= 10 * retry.STORAGE_WRITE.read / 2
    assert retry.STORAGE_UPLOAD.window >= retry.STORAGE_UPLOAD.read / 2
    assert final_commit_worst_case() == pytest.approx(
        retry.worst_case(retry.STORAGE_UPLOAD) + retry.worst_case(retry.STORAGE_WRITE)
    )


def test_the_docs_table_lists_every_policy_with_its_worst_case():
    reliability = (DOCS / "reliability.md").read_text()
    section = reliability.split("## Retries: each operation, its policy, its worst case", 1)[1]
    for what, _, seconds in retry.table():
        row = next((line for line in section.splitlines() if line.startswith(f"| {what} |")), None)
        assert row is not None, what
        shown = "for ever" if math.isinf(seconds) else f"{seconds:g} s"
        assert shown in row, (what, shown, row)


def test_every_retry_is_logged_before_its_sleep(caplog):
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("reset by peer")
        return "ok"

    p = retry.Policy("the flaky thing", attempts=5, deadline=5.0, attempt_seconds=0.1, initial=0.01, maximum=0.02)
    with caplog.at_level(logging.WARNING, logger="survivor.retry"):
        for attempt in p:
            with attempt:
                result = flaky()
    assert result == "ok"
    lines = [r for r in caplog.records if r.getMessage() == "retrying"]
    assert [r.fields["attempt"] for r in lines] == [1, 2]
    assert all(r.fields["what"] == "the flaky thing" and "reset by peer" in r.fields["error"] for r in lines)
    assert all(0 <= r.fields["wait"] <= 0.02 for r in lines)


def test_the_client_retry_logs_each_failed_request(caplog):
    call = retry.StorageCall("job dir thing", connect=1.0, read=1.0, window=0.5, initial=0.01, maximum=0.01)
    answers = iter([ConnectionError("reset"), ConnectionError("reset"), "ok"])

    def request():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    with caplog.at_level(logging.WARNING, logger="survivor.retry"):
        assert call.client_retry()(request)() == "ok"
    lines = [r for r in caplog.records if r.getMessage() == "retrying"]
    assert [r.fields["attempt"] for r in lines] == [1, 2]
    assert lines[0].fields["what"] == "job dir thing (a request)"


def test_the_last_error_is_raised_when_a_policy_gives_up():
    p = retry.Policy("x", attempts=2, deadline=5.0, attempt_seconds=0.1, initial=0.01, maximum=0.01)
    with pytest.raises(ConnectionError, match="down"):
        for attempt in p:
            with attempt:
                raise ConnectionError("down")


def test_a_policy_stops_and_wakes_when_told():
    import threading
    import time

    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    started = time.monotonic()
    with pytest.raises(ConnectionError):
        for attempt in retry.Policy(
            "x", attempts=math.inf, deadline=math.inf, attempt_seconds=0.0, initial=5.0, maximum=5.0
        ).retrying(until=stop):
            with attempt:
                raise ConnectionError("down")
    assert time.monotonic() - started < 4.0  # the 5 s sleep was cut short (at 0.2 s; the rest: a loaded machine's)


def test_no_retry_loop_is_written_by_hand():
    """Every retry goes through this module: no tenacity and no google-api-core Retry elsewhere."""
    package = Path(retry.__file__).parent
    for path in package.rglob("*.py"):
        if path.name == "retry.py" or "local" in path.relative_to(package).parts:
            continue
        text = path.read_text()
        assert "import tenacity" not in text, path
        assert not re.search(r"\bRetry\(|DEFAULT_RETRY", text), path
