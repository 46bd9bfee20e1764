"""`survivor dashboard`, a read-only web page of jobs, read through the one read `status`
and `report` use, refreshed by reading only what changed; tested with Flask's client here and in
headless Chromium (the tests marked slow): the page's content, its timeline drawn (pixels of the
causes' colours where the ledger puts them), its refresh when the job commits, and hostile records
that neither break it nor run a script."""

from __future__ import annotations

import datetime as _dt
import io
import json
import os
import random
from dataclasses import replace

import pytest

from harness.job_records import commit, plan_job, write_job
from survivor.cloud.catalog import Machine
from survivor.jobdir.refresh import ReadOnly, RefreshingJob
from survivor.jobdir.status import job_summary, read_job
from survivor.jobdir.storage import open_storage
from survivor.operator.dashboard.board import Board, JobSource
from survivor.operator.dashboard.web import CONTENT_SECURITY_POLICY, make_app, start
from survivor.operator.report import build_report
from survivor.policy.cost import ReportOptions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MACHINE = Machine("n1-standard-8", "nvidia-tesla-t4", 1)
#: Set to write the browser tests' screenshots into docs/ (the README's picture of the dashboard).
SCREENSHOTS_ENV = "SURVIVOR_DASHBOARD_SCREENSHOTS"


def now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def simulated(job_dir: str, seed: int = 4, **kw):
    """A running job of 6 boots, preempted 5 times, moved once and switched to on-demand; its plan."""
    plan = plan_job(random.Random(seed), end=now(), boots=6, running=True, move=True, switch=True, **kw)
    write_job(open_storage(job_dir), plan)
    return plan


def source(job_dir: str, plan, name: str = "cifar10") -> JobSource:
    return JobSource(
        job_dir,
        name=name,
        exact=True,
        options=ReportOptions(machine=MACHINE, region="us-central1", train_steps=plan.train_steps, online=False),
    )


# -- reading only what changed ------------------------------------------------------------------


def test_a_refresh_lists_once_and_reads_only_the_records_that_changed(tmp_path):
    job_dir = str(tmp_path / "job")
    plan = simulated(job_dir)
    job = RefreshingJob(open_storage(job_dir))
    first = job.read()
    records = (
        len(plan.attempts) + 3 + len(plan.moves) + len(plan.switches)
    )  # attempts, 3 manifests kept, moves, switches
    assert (job.calls["list"], job.calls["read"]) == (1, records)
    job.read()
    assert (job.calls["list"], job.calls["read"]) == (2, records), "nothing changed: nothing read"
    commit(open_storage(job_dir), plan, plan.step + 600, now())
    third = job.read()
    assert (job.calls["list"], job.calls["read"]) == (3, records + 1), "only the new manifest"
    assert third.job.latest.step == plan.step == first.job.latest.step + 600


def test_the_view_a_refresh_reads_through_refuses_every_write(tmp_path):
    job_dir = str(tmp_path / "job")
    simulated(job_dir)
    view = RefreshingJob(open_storage(job_dir)).read().storage
    for attempt in (
        lambda: view.write("survivor/DONE", b"{}"),
        lambda: view.delete(["survivor/LEASE"]),
        lambda: view.upload([]),
        lambda: view.download([]),
    ):
        with pytest.raises(ReadOnly):
            attempt()
    assert not os.path.exists(os.path.join(job_dir, "survivor", "DONE"))


def test_a_card_holds_what_status_and_report_say_of_the_same_job_dir(tmp_path):
    """One read, no second interpretation: the card's summary is `status --json`'s, its figures `report`'s."""
    job_dir = str(tmp_path / "job")
    plan = simulated(job_dir)
    fixed = now()
    [card] = Board([source(job_dir, plan)], clock=lambda: fixed).cards()
    view = read_job(job_dir, train_steps=plan.train_steps, now=fixed, commits=True)
    assert card.summary == job_summary(view)
    made = build_report(
        view, ReportOptions(machine=MACHINE, region="us-central1", train_steps=plan.train_steps, online=False)
    )
    assert (card.report.goodput, card.report.cost_so_far, card.report.cost_projected) == (
        made.goodput,
        made.cost_so_far,
        made.cost_projected,
    )
    assert (card.state, card.step, card.train_steps) == ("RUNNING", plan.step, plan.train_steps)
    kinds = {e.kind for e in card.events}
    assert {"boot", "notice", "commit", "move", "switch", "ended"} <= kinds
    assert card.last_event.kind == "commit" and f"step {plan.step}" in card.last_event.text


def test_a_folder_of_job_dirs_lists_each_and_leaves_out_a_data_dir(tmp_path):
    for name in ("a", "b"):
        simulated(str(tmp_path / "jobs" / name), seed=ord(name))
    (tmp_path / "jobs" / "cifar-10-data").mkdir()
    cards = Board([JobSource(str(tmp_path / "jobs"))]).cards()
    assert [c.name for c in cards] == ["a", "b"]


def test_the_pages_are_get_only_carry_a_strict_policy_and_refuse_a_foreign_host(tmp_path):
    job_dir = str(tmp_path / "job")
    plan = simulated(job_dir)
    client = make_app(Board([source(job_dir, plan)])).test_client()
    page = client.get("/")
    assert page.status_code == 200 and page.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    assert "script-src 'self'" in CONTENT_SECURITY_POLICY and "unsafe" not in CONTENT_SECURITY_POLICY
    assert client.get("/job/0").status_code == 200 and client.get("/job/7").status_code == 404
    assert client.post("/").status_code == 405 and client.delete("/job/0").status_code == 405
    assert client.get("/", headers={"Host": "attacker.example"}).status_code == 400  # a rebound DNS name
    for asset in ("dashboard.css", "dashboard.js"):  # served by the package: nothing from elsewhere
        assert client.get(f"/static/{asset}").status_code == 200
    html = page.get_data(as_text=True) + client.get("/job/0").get_data(as_text=True)
    assert "http://" not in html.replace("http://localhost", "") and "https://" not in html


def test_a_job_dir_that_cannot_be_read_is_one_line_on_its_card(tmp_path):
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / "survivor").write_text("a file where the records' folder belongs")
    [card] = Board([JobSource(str(job_dir), exact=True)]).cards()
    assert card.error and "\n" not in card.error
    page = make_app(Board([JobSource(str(job_dir), exact=True)])).test_client().get("/").get_data(as_text=True)
    assert "could not read" in page


def test_the_command_refuses_a_missing_job_dir_and_creates_nothing(tmp_path, capsys):
    from survivor.commands.main import main

    assert main(["dashboard", str(tmp_path / "nope")]) != 0
    assert "no such directory" in capsys.readouterr().err
    assert not (tmp_path / "nope").exists()


# -- hostile records ------------------------------------------------------------------------------

PAYLOAD = (
    '<script>window.__pwned = 1; document.title = "PWNED"</script>'
    '<img src=x onerror="window.__pwned = 2"><svg onload="window.__pwned = 3"></svg>"\'&'
)


def hostile_job(job_dir: str) -> None:
    """A simulated job whose every string field holds HTML and script, with the chaos harness's kinds of
    damaged records beside: a move shaped "²", a switch dated year 1, an attempt with an outcome no agent
    writes, a ledger record of impossible times, a manifest that does not parse, a FAILED marker not JSON."""
    plan = simulated(job_dir)
    storage = open_storage(job_dir)
    at = (now() - _dt.timedelta(hours=1)).isoformat()
    last = plan.attempts[-1].number
    storage.write(
        f"survivor/attempts/{last + 1:06d}.json",
        json.dumps(
            {
                "number": last + 1,
                "instance": PAYLOAD,
                "started": at,
                "ended": at,
                "outcome": "failed",
                "reason": PAYLOAD,
                "notice": PAYLOAD,
                "zone": PAYLOAD,
            }
        ).encode(),
    )
    storage.write(
        f"survivor/attempts/{last + 2:06d}.json",
        json.dumps({"number": last + 2, "instance": "x", "started": at, "outcome": PAYLOAD}).encode(),
    )
    storage.write(
        f"survivor/attempts/{last + 3:06d}.json",
        json.dumps({"number": last + 3, "instance": "x", "started": at, "ended": "2001-01-01T00:00:00+00:00"}).encode(),
    )
    good_move = {"time": at, "from_place": "zones/us-west1-b", "to_place": "regions/us-central1"}
    storage.write(
        "survivor/moves/hostile.json",
        json.dumps({**good_move, "reason": PAYLOAD, "by": PAYLOAD[:190], "machine": PAYLOAD[:190]}).encode(),
    )
    storage.write("survivor/moves/shape.json", json.dumps({**good_move, "shape": "²", "reason": PAYLOAD}).encode())
    storage.write("survivor/moves/place.json", json.dumps({**good_move, "to_place": PAYLOAD}).encode())
    good_switch = {"time": at, "to_mode": "on-demand", "from_mode": "spot"}
    storage.write(
        "survivor/switches/hostile.json", json.dumps({**good_switch, "reason": PAYLOAD, "by": PAYLOAD[:190]}).encode()
    )
    storage.write(
        "survivor/switches/year-one.json",
        json.dumps({**good_switch, "time": "0001-01-01T00:00:00+01:00", "reason": PAYLOAD}).encode(),
    )
    storage.write(
        "survivor/switch-failures/hostile.json",
        json.dumps({**good_switch, "error": PAYLOAD, "by": PAYLOAD[:190], "reason": PAYLOAD}).encode(),
    )
    storage.write("survivor/snapshots/999999999999-000001-0000.json", PAYLOAD.encode())
    storage.write("survivor/FAILED", PAYLOAD.encode())


def test_hostile_records_render_escaped_with_each_damaged_record_one_line(tmp_path, caplog):
    job_dir = str(tmp_path / "job")
    hostile_job(job_dir)
    client = make_app(Board([JobSource(job_dir, name=PAYLOAD, exact=True)])).test_client()
    for path in ("/", "/job/0"):
        page = client.get(path)
        html = page.get_data(as_text=True)
        assert page.status_code == 200, html[-2000:]
        assert "<script>window" not in html and "<img src=x" not in html and "<svg onload" not in html
        assert "&lt;script&gt;window.__pwned" in html
        assert "Traceback" not in html
    job_page = client.get("/job/0").get_data(as_text=True)
    assert "Damaged records" in job_page
    for damaged in (
        "survivor/moves/shape.json: shape",
        "survivor/moves/place.json: to_place",
        "survivor/switches/year-one.json: time",
        "000009.json",
        "must not be followed",
    ):
        assert damaged in job_page, damaged
    assert "damaged:" in client.get("/").get_data(as_text=True)  # the list page: one line for the job


# -- in a real browser ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chromium():
    from tests import chromium as browsers

    binary = browsers.chromium_binary()
    if binary is None:
        pytest.skip(browsers.missing_reason)
    browser = browsers.Chromium.start(binary, width=1280, height=900)
    yield browser
    browser.close()


@pytest.fixture
def served():
    """Serves a board on a free port of 127.0.0.1 for the test; stops it after."""
    servers = []

    def serve(board: Board, refresh_seconds: float = 10.0) -> str:
        server = start(make_app(board, refresh_seconds=refresh_seconds), "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.effective_port}"

    yield serve
    for server in servers:
        server.close()


def rgb(hex_colour: str) -> tuple[int, int, int]:
    return tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))  # type: ignore[return-value]


def near(pixel, colour: str, tolerance: int = 12) -> bool:
    return all(abs(a - b) <= tolerance for a, b in zip(pixel[:3], rgb(colour)))


def keep_screenshot(png: bytes, name: str) -> None:
    """Into docs/ when asked (SURVIVOR_DASHBOARD_SCREENSHOTS=1): the README's picture comes from here."""
    if os.environ.get(SCREENSHOTS_ENV):
        with open(os.path.join(ROOT, "docs", name), "wb") as f:
            f.write(png)


@pytest.mark.slow
def test_in_chromium_the_job_page_shows_its_story_and_draws_each_cause_where_the_ledger_puts_it(
    tmp_path, chromium, served
):
    from PIL import Image

    from survivor.jobdir.ledger import CAUSE, parse_time
    from survivor.operator.dashboard.timeline import BOOT_ROW, CAUSE_ROW, HEIGHT, WIDTH

    job_dir = str(tmp_path / "jobs" / "cifar10")
    plan = simulated(job_dir)
    other = simulated(str(tmp_path / "jobs" / "mlp"), seed=11)
    from survivor.spec import JobSpec

    spec = JobSpec.from_yaml(
        f"job_dir: {job_dir}\ntrain_steps: {plan.train_steps}\ntrainer: {{builtin: dummy}}\ndeadline: 30h\n"
    )
    base = served(
        Board([replace(source(job_dir, plan), spec=spec), source(str(tmp_path / "jobs" / "mlp"), other, "mlp")])
    )

    chromium.open(base + "/")
    listing = chromium.text()
    for expected in ("cifar10", "mlp", "RUNNING", f"{plan.step} of {plan.train_steps}", "on-demand $"):
        assert expected in listing, (expected, listing)
    keep_screenshot(chromium.screenshot(), "dashboard-jobs.png")

    chromium.open(base + "/job/0")
    text = chromium.text()
    for expected in (
        "cifar10",
        "RUNNING",
        f"{plan.step} of {plan.train_steps}",
        "Where the time went",
        "waiting for capacity",
        "productive training",
        "move zones/us-west1-b → regions/us-central1",
        "switch spot → on-demand",
        "preempted",
        "projected (on on-demand)",
        "notice to boot 5",
        "Spot goodput",
    ):  # the deadline policy's verdict
        assert expected in text, (expected, text[:3000])
    png = chromium.screenshot()
    keep_screenshot(png, "dashboard.png")
    shot = Image.open(io.BytesIO(png)).convert("RGB")
    box = chromium.evaluate(
        "(() => { const r = document.getElementById('timeline').getBoundingClientRect();"
        " return [r.left, r.top, r.width, r.height]; })()"
    )
    left, top, width, height = box
    assert top + height < shot.height, "the timeline is in the first screen"

    # where the ledger (survivor/jobdir/ledger.py, read here, not the page's layout) puts each cause
    ledger = read_job(job_dir, train_steps=plan.train_steps).ledger
    span_seconds = (ledger.end - ledger.start).total_seconds()

    def pixel(t: _dt.datetime, row: tuple[float, float]):
        x = left + (t - ledger.start).total_seconds() / span_seconds * width
        y = top + (row[0] + row[1] / 2) / HEIGHT * height
        return shot.getpixel((int(x), int(y)))

    for cause in ("productive", "capacity"):
        widest = max((s for s in ledger.spans if s.cause == cause), key=lambda s: s.seconds)
        # a fifth and a third of the way in: clear of the marks drawn across the row (a move halfway
        # through a wait, a switch two thirds through, the newest commits near the end)
        for share in (0.2, 0.33):
            seen = pixel(widest.start + (widest.end - widest.start) * share, CAUSE_ROW)
            assert near(seen, CAUSE[cause].colour), (cause, share, seen)
    first_boot = ledger.boots[0]
    assert near(pixel(first_boot[1] + (first_boot[2] - first_boot[1]) / 2, BOOT_ROW), "#636363"), "a Spot boot"
    last_boot = ledger.boots[-1]
    hatch = [pixel(last_boot[1] + (last_boot[2] - last_boot[1]) * f, BOOT_ROW) for f in (0.3, 0.31, 0.32, 0.33, 0.34)]
    assert any(near(p, "#54278f", 30) for p in hatch), ("the on-demand boot is drawn hatched purple", hatch)
    for kind, colour, when in (("move", "#3182bd", plan.moves[0].time), ("switch", "#54278f", plan.switches[0].time)):
        x = left + (parse_time(when) - ledger.start).total_seconds() / span_seconds * width
        head = [shot.getpixel((int(x) + dx, int(top + 5 / HEIGHT * height))) for dx in (-1, 0, 1)]
        assert any(near(p, colour, 30) for p in head), (kind, head)
    assert WIDTH == 1000.0


@pytest.mark.slow
def test_in_chromium_an_open_page_shows_the_step_the_job_commits_next_by_itself(tmp_path, chromium, served):
    job_dir = str(tmp_path / "job")
    plan = simulated(job_dir)
    base = served(Board([source(job_dir, plan)], refresh_seconds=0.5), refresh_seconds=0.5)
    chromium.open(base + "/job/0")
    before = chromium.text()
    assert f"{plan.step} of {plan.train_steps}" in before
    chromium.evaluate("window.__same_document = true")  # gone if the page were loaded again
    step = plan.step + 640
    commit(open_storage(job_dir), plan, step, now())
    after = chromium.wait_for_text(f"{step} of {plan.train_steps}", timeout=15)
    assert f"committed step {step}" in after
    assert chromium.evaluate("window.__same_document") is True, "refreshed in place, not reloaded"

    chromium.open(base + "/")
    assert f"{step} of {plan.train_steps}" in chromium.text()


@pytest.mark.slow
def test_in_chromium_hostile_records_run_no_script_and_show_as_damaged(tmp_path, chromium, served):
    job_dir = str(tmp_path / "job")
    hostile_job(job_dir)
    base = served(Board([JobSource(job_dir, name=PAYLOAD, exact=True)]))
    for path in ("/", "/job/0"):
        chromium.open(base + path)
        assert chromium.evaluate("window.__pwned === undefined"), path
        assert chromium.evaluate("document.title") != "PWNED"
        text = chromium.text()
        assert 'window.__pwned = 1; document.title = "PWNED"' in text  # shown as text
        assert "Traceback" not in text
    assert "Damaged records" in chromium.text()
    assert chromium.evaluate("document.querySelectorAll('script').length") == 1  # the package's own
    assert chromium.evaluate("document.querySelectorAll('img').length") == 0
