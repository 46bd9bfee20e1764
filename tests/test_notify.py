"""Notifications: a job's events reach its webhooks, each in its own format, and never cost training.

The receivers are survivor/local/webhook_receivers.py on 127.0.0.1 (generic, Slack-shaped,
Chat-shaped), each refusing what its real counterpart refuses; the jobs are real agent processes
(LocalInstance) running the dummy trainer; the watch's looks are `notices.tell_look`, which
`watch_once` calls at the end of every look.
"""

from __future__ import annotations

import datetime as _dt
import json
import pathlib
import re
import time

import jsonschema
import pytest

from survivor.jobdir.journal import Journal, now
from survivor.jobdir.moves import Move, record_move
from survivor.jobdir.status import read_job
from survivor.jobdir.storage import open_storage
from survivor.jobdir.switches import Switch, parse_time, record_switch
from survivor.local.webhook_receivers import Receivers, WebhookReceiver, chat_problem, slack_problem
from survivor.notify import events
from survivor.notify.delivery import Notifier
from survivor.notify.formats import chat_message_id, request_for
from survivor.notify.records import job_events
from survivor.operator import notices
from survivor.spec import JobSpec, NotifyTarget, SpecError
from tests.conftest import dummy_spec, executed_steps
from tests.waiting import PATIENCE, wait_until

SCHEMA = json.loads((pathlib.Path(__file__).resolve().parent.parent / "docs" / "notify-event.schema.json").read_text())
T0 = "2026-11-30T10:00:00.000+00:00"


def every_kind() -> list[events.Event]:
    return [
        events.notice("j", attempt=1, step=40, source="preempted", time=T0),
        events.safe("j", attempt=1, committed_step=40, steps_lost=0, seconds=2.5, time=T0),
        events.resumed("j", attempt=2, step=40, without_vm_seconds=95.0, restore_seconds=1.5, time=T0),
        events.done(
            "j", steps=100, wall_seconds=3600.0, goodput=0.8, preemptions=3, cost=1.2, on_demand_cost=3.4, time=T0
        ),
        events.failed("j", reason="3 attempts in a row failed <!channel> & more", committed_step=40, time=T0),
        events.moved("j", from_place="zones/us-west1-b", to_place="regions/us-central1", why="stockout", time=T0),
        events.switched("j", from_mode="spot", to_mode="on-demand", why="3.1 h left", time=T0),
        events.no_vm("j", since=T0, minutes=41.0, error="ZONE_RESOURCE_POOL_EXHAUSTED: no T4", time=T0),
        events.deadline_at_risk("j", reason="slack -0.5 h", slack_hours=-0.5, key="after-3", time=T0),
        events.budget_warning("j", spent=8.0, budget=10.0, share=0.8, time=T0),
        events.budget_stopped("j", spent=10.1, budget=10.0, committed_step=40, time=T0),
    ]


# -- formats and the spec ---------------------------------------------------------------------------


@pytest.mark.parametrize("event", every_kind(), ids=lambda e: e.kind)
def test_every_event_is_valid_in_each_format(event):
    jsonschema.validate(request_for("generic", event).body, SCHEMA)
    assert slack_problem(request_for("slack", event).body) is None
    chat = request_for("chat", event)
    assert chat_problem(chat.body, chat.params) is None
    assert event.kind in events.KINDS


def test_slack_text_is_escaped_so_a_reason_pings_nobody():
    failed = every_kind()[4]
    body = request_for("slack", failed).body
    assert "<!channel>" not in json.dumps(body) and "&lt;!channel&gt; &amp; more" in body["text"]


def test_a_chat_message_id_is_what_chat_accepts_and_stable_per_event():
    long_id = "a-very-long-job-name-of-sixty-three-characters-aaaaaaaaaaaaaa/moved/2026-11-30T10:00:00.000+00:00"
    for event_id in ("j/safe/1", long_id, "J/MOVED/2026", "///"):
        made = chat_message_id(event_id)
        assert re.fullmatch(r"client-[a-z0-9-]{1,56}", made), made
        assert made == chat_message_id(event_id)
    assert chat_message_id(long_id) != chat_message_id(long_id + "x")


def test_a_bad_target_is_one_line_naming_it():
    base = {"job_dir": "/tmp/j", "train_steps": 10, "trainer": {"builtin": "dummy"}}
    with pytest.raises(SpecError) as bad:
        JobSpec.from_mapping(
            {
                **base,
                "notify": [
                    {"url": "http://example.com/hook"},
                    {
                        "url": "https://hooks.slack.com/services/T/B/" + "x" * 40,
                        "format": "teams",
                        "on": ["donee"],
                        "colour": "red",
                    },
                ],
            }
        )
    assert bad.value.problems == [
        "notify[0].url = 'http://example.com/hook': expected an https:// webhook URL (http:// only to 127.0.0.1 or "
        "localhost) or a Secret Manager version projects/PROJECT/secrets/NAME/versions/VERSION",
        "notify[1].colour: unknown key; expected url, format, on, no_vm_minutes",
        "notify[1].format = 'teams': expected one of generic, slack, chat",
        "notify[1].on: 'donee' is no event (did you mean done?); expected among notice, safe, resumed, done, "
        "failed, moved, switched, no_vm, deadline_at_risk, budget_warning, budget_stopped",
    ]
    spec = JobSpec.from_mapping(
        {**base, "notify": [{"url": "projects/p/secrets/hook/versions/latest", "format": "chat", "on": "done"}]}
    )
    assert spec.notify[0].secret and spec.notify[0].wants("done") and not spec.notify[0].wants("safe")
    assert JobSpec.from_mapping(spec.to_mapping()) == spec


def test_a_webhook_url_is_masked_in_the_agents_logs():
    url = "https://hooks.slack.com/services/T0/B0/secret-token"
    spec = JobSpec.from_mapping(
        {
            "job_dir": "/tmp/j",
            "train_steps": 10,
            "trainer": {"builtin": "dummy"},
            "notify": [{"url": url, "format": "slack"}],
        }
    )
    assert url in spec.secret_values()


# -- delivery ---------------------------------------------------------------------------------------


def test_an_event_told_once_is_not_told_again_by_a_later_look(tmp_path):
    storage = open_storage(str(tmp_path / "jobdir"))
    event = every_kind()[1]
    with Receivers() as receivers:
        targets = [NotifyTarget(**t) for t in receivers.targets]
        first = Notifier(targets, storage=storage).start()
        first.tell(event)
        assert first.drain(10)
        later = Notifier(targets, storage=storage).start()  # the next boot, or the watch, from the records
        later.tell(lambda: [event])
        assert later.drain(10)
        assert [len(r.accepted()) for r in receivers.all()] == [1, 1, 1]


def test_a_dead_webhook_delays_no_other_and_tell_returns_at_once(tmp_path):
    with Receivers() as receivers, WebhookReceiver("generic", "hang") as hang, WebhookReceiver("slack", "fail") as fail:
        targets = [NotifyTarget(hang.url), NotifyTarget(fail.url, "slack")] + [
            NotifyTarget(**t) for t in receivers.targets
        ]
        notifier = Notifier(targets, storage=open_storage(str(tmp_path / "jobdir"))).start()
        started = time.monotonic()
        for event in every_kind():
            notifier.tell(event)
        told = time.monotonic() - started
        # queued, not sent: a call to the hanging webhook would hold tell() for its whole timeout
        assert told < 1.0, f"tell() took {told:.2f} s"
        wait_until(
            lambda: all(len(r.accepted()) >= len(every_kind()) for r in receivers.all()),
            PATIENCE,
            "every event at every live receiver",
        )
        for receiver in receivers.all():
            assert [_event_id(receiver, r) for r in receiver.accepted()] == [e.id for e in every_kind()]
        # retried (tenacity, retry.WEBHOOK), in its own thread
        wait_until(lambda: len(fail.received) >= 2, PATIENCE, "a second call to the webhook that answers 500")
        notifier.stop()


# -- the agent and the watch, end to end --------------------------------------------------------------


def _event_id(receiver: WebhookReceiver, call) -> str:
    if receiver.fmt == "generic":
        return call.body["id"]
    text = call.body["blocks"][1]["elements"][0]["text"] if receiver.fmt == "slack" else call.body["text"]
    return re.search(r"id (\S+)$", text).group(1)


def _kind_of(event_id: str) -> str:
    return event_id.split("/")[1]


def _first_copies(receiver: WebhookReceiver) -> list:
    """What a receiver keeps: the first copy of each id (delivery is at least once)."""
    seen, out = set(), []
    for call in receiver.accepted():
        event_id = _event_id(receiver, call)
        if event_id not in seen:
            seen.add(event_id)
            out.append((event_id, call))
    return out


def _preempt_at(vm, step: int) -> float:
    vm.wait_for_step(step)
    vm.set_preempted()
    started = time.monotonic()
    assert vm.wait(30) == 0
    return time.monotonic() - started


@pytest.mark.slow
def test_every_event_of_a_job_preempted_three_times_moved_switched_and_done_reaches_each_receiver_in_order(
    tmp_path, instance_factory
):
    job_dir = str(tmp_path / "jobdir")
    storage = open_storage(job_dir)
    with Receivers() as receivers:
        text = dummy_spec(job_dir, tmp_path, train_steps=160, notify=receivers.targets)
        spec = JobSpec.from_yaml(text)
        vm = instance_factory(text)

        def look(**kwargs):  # what `survivor watch` does at the end of each look (operator/watch.py)
            notices.tell_look(spec, storage, running=False, drain_seconds=20, **kwargs)

        vm.boot(wipe=True)
        _preempt_at(vm, 25)
        record_move(
            storage,
            Move(
                time=now(),
                from_place="zones/us-west1-b",
                to_place="regions/us-central1",
                reason="no training VM for 31 min: ZONE_RESOURCE_POOL_EXHAUSTED",
                by="watch",
            ),
        )
        look()
        vm.boot(wipe=True)
        _preempt_at(vm, 60)
        vm.boot(wipe=True)
        _preempt_at(vm, 95)
        record_switch(
            storage,
            Switch(
                time=now(),
                to_mode="on-demand",
                from_mode="spot",
                by="watch",
                reason="3.1 h left, 2.9 h of work on on-demand plus 0.4 h margin",
                template="jobdir-on-demand",
            ),
        )
        look()
        vm.boot(wipe=True)
        assert vm.wait(60) == 0
        look()  # the watch's look at a DONE job
        expected = [
            "notice",
            "safe",
            "moved",
            "resumed",
            "notice",
            "safe",
            "resumed",
            "notice",
            "safe",
            "switched",
            "resumed",
            "done",
        ]
        wait_until(
            lambda: all(len(_first_copies(r)) >= len(expected) for r in receivers.all()),
            PATIENCE,
            f"the {len(expected)} events at every receiver",
            0.1,
            instead=lambda: {r.fmt: [i for i, _ in _first_copies(r)] for r in receivers.all()},
        )

        state = Journal(storage).state()
        assert state.done is not None and [a.steps_lost for a in state.attempts[:3]] == [0, 0, 0]
        for receiver in receivers.all():
            assert receiver.refused == [], receiver.refused
            got = _first_copies(receiver)
            assert [_kind_of(i) for i, _ in got] == expected, (receiver.fmt, [i for i, _ in got])
            for event_id, call in got:
                happened = (
                    parse_time(re.sub(r".*/", "", event_id)) if _kind_of(event_id) in ("moved", "switched") else None
                )
                if receiver.fmt == "generic":
                    jsonschema.validate(call.body, SCHEMA)
                    happened = parse_time(call.body["time"])
                if happened is not None:
                    late = call.at - happened.timestamp()
                    assert -1.0 <= late <= 60.0, (event_id, late)
        done = _first_copies(receivers.generic)[-1][1].body
        assert done["facts"]["preemptions"] == 3 and done["facts"]["steps"] == 160
        assert done["facts"]["cost_usd"] is not None and done["facts"]["goodput"] > 0
    assert executed_steps(tmp_path)[-1] == 160


def _notice_to_exit(tmp_path, instance_factory, name: str, notify) -> tuple[float, object]:
    job_dir = str(tmp_path / name / "jobdir")
    (tmp_path / name).mkdir()
    vm = instance_factory(dummy_spec(job_dir, tmp_path / name, train_steps=400, notify=notify))
    vm.boot(wipe=True)
    seconds = _preempt_at(vm, 30)
    attempt = Journal(open_storage(job_dir)).state().attempts[-1]
    return seconds, attempt


@pytest.mark.slow
def test_a_webhook_that_hangs_or_answers_500_costs_no_step_and_no_second_between_the_notice_and_the_exit(
    tmp_path, instance_factory
):
    with (
        WebhookReceiver("generic", "hang") as hang,
        WebhookReceiver("slack", "fail") as fail,
        WebhookReceiver("chat", "hang") as chat,
    ):
        targets = [{"url": hang.url}, {"url": fail.url, "format": "slack"}, {"url": chat.url, "format": "chat"}]
        runs = {}
        for round_ in range(2):  # alternated, so a machine that slows down meanwhile slows both
            for name, notify in (("none", []), ("dead", targets)):
                runs.setdefault(name, []).append(_notice_to_exit(tmp_path, instance_factory, f"{name}{round_}", notify))
        assert hang.received and fail.received  # the events went out, and got nowhere
    for name, measured in runs.items():
        for _, attempt in measured:
            assert attempt.outcome == "preempted" and attempt.steps_lost == 0, (name, attempt)
    best = {name: min(seconds for seconds, _ in measured) for name, measured in runs.items()}
    safe = {name: min(a.timings["notice_to_safe"] for _, a in measured) for name, measured in runs.items()}
    print(
        f"notice to exit, best of 2: none {best['none']:.2f} s, dead webhooks {best['dead']:.2f} s; "
        f"notice to safe: {safe['none']:.2f} s / {safe['dead']:.2f} s"
    )
    assert best["dead"] <= best["none"] + 0.5
    assert safe["dead"] <= safe["none"] + 0.5


def test_records_give_the_agents_events_their_ids():
    """The next look tells what an exited agent could not, under the id the agent gave it."""
    from survivor.jobdir.journal import Attempt, JobState
    from survivor.jobdir.ledger import build_ledger
    from survivor.jobdir.status import JobView

    a1 = Attempt(
        1,
        "vm",
        T0,
        restored_from="",
        ended="2026-11-30T10:10:00.000+00:00",
        outcome="preempted",
        end_step=40,
        reached_step=40,
        steps_lost=0,
        notice="preempted",
        timings={"notice_to_safe": 2.5},
        booted=T0,
    )
    a2 = Attempt(
        2,
        "vm",
        "2026-11-30T10:12:00.000+00:00",
        restored_step=40,
        restored_from="m",
        booted="2026-11-30T10:11:30.000+00:00",
        timings={"restore": 1.5},
    )
    when = _dt.datetime(2026, 11, 30, 10, 20, tzinfo=_dt.timezone.utc)
    view = JobView("/j", JobState(None, None, [a1, a2]), None, [], [], [], [], build_ledger([a1, a2], now=when))
    told = job_events("j", view)
    assert [e.id for e in told] == ["j/notice/1", "j/safe/1", "j/resumed/2"]
    assert told[2].facts["without_vm_seconds"] == 90.0 and told[0].time == "2026-11-30T10:09:57.500+00:00"
    assert read_job  # the same reader the agent and the watch use


@pytest.mark.slow
def test_a_webhook_kept_in_secret_manager_is_read_by_the_vms_account_and_told(tmp_path, instance_factory):
    from survivor.local.secret_manager_server import SecretManagerServer

    job_dir = str(tmp_path / "jobdir")
    with SecretManagerServer() as secrets, WebhookReceiver("chat") as chat:
        version = secrets.add("survivor-local", "chat-hook", chat.url.encode())
        text = dummy_spec(job_dir, tmp_path, train_steps=120, notify=[{"url": version, "format": "chat"}])
        assert chat.url not in text  # the instance metadata holds the secret's name only
        vm = instance_factory(text, env={"SURVIVOR_SECRET_MANAGER_ENDPOINT": secrets.endpoint})
        vm.boot(wipe=True)
        _preempt_at(vm, 20)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(_first_copies(chat)) < 2:
            time.sleep(0.1)
        if len(_first_copies(chat)) < 2:
            # the agent's exit abandons an event still in flight (a loaded machine: the secret read,
            # then the call, after the commit); the next boot's look tells what was not sent
            vm.boot()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and len(_first_copies(chat)) < 2:
                time.sleep(0.1)
            vm.soft_off()
            vm.wait(30)
        assert [_kind_of(i) for i, _ in _first_copies(chat)][:2] == ["notice", "safe"]
        assert set(secrets.accessed) == {version}
        assert chat.url not in (tmp_path / "vm0" / "agent-boot-1.log").read_text()


# -- preflight: the VM's account may read a webhook kept in Secret Manager ------------------------------


def test_preflight_checks_the_vms_account_is_a_secret_accessor_of_each_notify_secret(compute_server, monkeypatch):
    """The secret's IAM policy read with the real client's REST transport (the stand-in serves
    GetIamPolicy), each bound role with IAM's roles.get (the Compute fake serves it)."""
    from survivor.cloud.compute import Compute
    from survivor.cloud.template import MachineOptions, template_body
    from survivor.local.secret_manager_server import SecretManagerServer
    from survivor.operator import preflight

    vm = "serviceAccount:vm@survivor-local.iam.gserviceaccount.com"
    compute = Compute("survivor-local", endpoint=compute_server.endpoint)
    with SecretManagerServer() as secrets:
        monkeypatch.setenv("SURVIVOR_SECRET_MANAGER_ENDPOINT", secrets.endpoint)
        version = secrets.add("survivor-local", "chat-hook", b"https://chat.googleapis.com/v1/spaces/X/messages")
        spec = JobSpec.from_mapping(
            {
                "job_dir": "gs://bucket-1/j",
                "train_steps": 10,
                "trainer": {"builtin": "dummy"},
                "notify": [{"url": version, "format": "chat"}, {"url": "https://hooks.example.com/x"}],
            }
        )
        body = template_body("job", spec, MachineOptions.from_spec(spec), script="#!/bin/bash\n")
        assert preflight.target_from_body(body).notify_secrets == (version,)

        [missing] = preflight._secret_state(compute, version, vm)
        assert (
            missing.level == "warning"
            and "does not grant vm@survivor-local.iam.gserviceaccount.com secretmanager.versions.access"
            in missing.message
        )
        assert "gcloud secrets add-iam-policy-binding chat-hook --project survivor-local" in missing.message
        secrets.grant("survivor-local", "chat-hook", vm)
        [granted] = preflight._secret_state(compute, version, vm)
        assert granted.level == "ok", granted
        [absent] = preflight._secret_state(compute, "projects/survivor-local/secrets/nope/versions/latest", vm)
        assert absent.level == "error" and "does not exist" in absent.message


def test_a_secret_bound_to_a_role_roles_get_cannot_read_is_a_warning_naming_it():
    from survivor.operator import preflight

    vm = "serviceAccount:vm@p.iam.gserviceaccount.com"
    version = "projects/p/secrets/hook/versions/3"
    [found] = preflight.secret_findings(version, vm, [{"role": "projects/p/roles/custom", "members": [vm]}])
    assert found.level == "warning" and "roles.get could not read projects/p/roles/custom" in found.message
    [unread] = preflight.secret_findings(version, vm, None, "403 secretmanager.secrets.getIamPolicy")
    assert unread.level == "warning" and "could not read its IAM policy" in unread.message


# -- what a hostile review of the spec's notify: and budget: keys found ------------------------------


def _problems(text: str) -> list[str]:
    try:
        JobSpec.from_yaml(text)
    except SpecError as exc:
        return exc.problems
    return []


BASE = "job_dir: gs://bucket-1/j\ntrain_steps: 10\ntrainer: {builtin: dummy}\n"


def test_the_docs_unquoted_on_filter_is_read_as_on_not_as_yamls_true():
    spec = JobSpec.from_yaml(
        BASE + "notify:\n  - url: https://hooks.slack.com/services/T000/B000/XXXX\n"
        "    format: slack\n    on: [safe, done]\n"
    )
    assert spec.notify[0].on == ("safe", "done")
    assert "on:" in (pathlib.Path(__file__).parent.parent / "docs" / "notifications.md").read_text()


def test_an_empty_on_filter_is_refused_rather_than_meaning_every_event():
    problems = _problems(BASE + 'notify:\n  - {url: "https://hooks.example.com/x", "on": []}\n')
    assert problems == ["notify[0].on = []: expected at least one event; leave on: out to be told every event"]


def test_a_url_with_a_password_is_refused_saying_why_and_never_shown():
    problems = _problems(BASE + "notify:\n  - url: https://user:p4ssw0rd@example.com/hook\n")
    assert len(problems) == 1 and "p4ssw0rd" not in problems[0] and "user:password" in problems[0], problems


def test_a_budget_out_of_range_says_its_range_and_an_exponent_read_as_text_says_so():
    assert "at most 1000000000" in _problems(BASE + "budget: {usd: 99999999999}\n")[0]
    assert "YAML reads 1e9 as text" in _problems(BASE + "budget: {usd: 1e9}\n")[0]
