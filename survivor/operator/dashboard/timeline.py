"""What a job's page draws: its events in time order and its timeline laid out for the browser.

    >>> marks = events(view)                          # boots, notices, commits, moves, switches, the end
    >>> drawing = lay_out(view.ledger, marks)         # bars and marks in a 1000-wide box
    >>> drawing.bars[0].cause, round(drawing.bars[0].x, 1)
    ('capacity', 0.0)

Everything here is read from one `JobView` (survivor/jobdir/status.py): the ledger's spans by cause
(the time without a VM is its `capacity` span), its boots with their outcome and provisioning mode,
the kept commits, the move and switch records. A notice is drawn where its attempt's checkpoint stall
began (the save after the notice): the ledger's span, no new reading of a record. The page's template
(templates/job.html) turns the drawing into SVG; the browser draws it.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass

from survivor.jobdir.journal import NOTICED, restored_text
from survivor.jobdir.ledger import CAUSE, Ledger, parse_time
from survivor.jobdir.switches import FLEX_START, ON_DEMAND
from survivor.jobdir.status import JobView

#: The drawing's width in its own units (the SVG's viewBox); the browser scales it to the page.
WIDTH = 1000.0
#: Rows of the drawing, top to bottom: each with its y and height in the viewBox.
CAUSE_ROW = (22.0, 34.0)
BOOT_ROW = (64.0, 18.0)
HEIGHT = 96.0

#: Each mark's colour; a boot's bar's colour by its provisioning mode.
MARK_COLOURS = {
    "notice": "#de2d26",
    "commit": "#006d2c",
    "move": "#3182bd",
    "switch": "#54278f",
    "done": "#000000",
    "failed": "#de2d26",
}
BOOT_COLOURS = {"spot": "#636363", ON_DEMAND: "#54278f", FLEX_START: "#807dba"}


@dataclass(frozen=True)
class Event:
    """One thing that happened to the job: when, what kind (boot, ended, notice, commit, move,
    switch, done, failed) and a sentence for people."""

    time: _dt.datetime
    kind: str
    text: str


def events(view: JobView) -> list[Event]:
    """Pure: the job's events from one read of its job dir, oldest first (those without a readable
    time left out)."""
    out: list[Event] = []

    def add(text_time: str | None, kind: str, text: str) -> None:
        when = parse_time(text_time or "")
        if when is not None:
            out.append(Event(when, kind, text))

    notices = _notice_times(view.ledger)
    for a in view.state.attempts:
        add(a.started, "boot", f"boot {a.number} on {a.instance}: {restored_text(a)}")
        if a.number in notices:
            out.append(
                Event(
                    notices[a.number], "notice", f"notice to boot {a.number}" + (f" ({a.notice})" if a.notice else "")
                )
            )
        if a.ended:
            reached = f" at step {a.end_step}" if a.end_step is not None else ""
            lost = f", {a.steps_lost} steps lost" if a.steps_lost else ""
            add(a.ended, "ended", f"boot {a.number} {a.outcome or 'ended'}{reached}{lost}")
    for m in view.commits:
        add(m.created, "commit", f"committed step {m.step} (boot {m.attempt})")
    for move in view.moves:
        add(
            move.time,
            "move",
            f"moved from {move.from_place} to {move.to_place}"
            + (f" ({move.machine})" if move.machine else "")
            + (f": {move.reason}" if move.reason else ""),
        )
    for s in view.switches:
        add(
            s.time,
            "switch",
            f"switched {s.from_mode or '?'} to {s.to_mode} ({s.by or '?'})" + (f": {s.reason}" if s.reason else ""),
        )
    if view.state.done is not None:
        add(str(view.state.done.get("time") or ""), "done", "DONE")
    if view.state.failed is not None:
        add(str(view.state.failed.get("time") or ""), "failed", "FAILED")
    return sorted(out, key=lambda e: e.time)


def _notice_times(ledger: Ledger) -> dict[int, _dt.datetime]:
    """Pure: for each boot that ended on a notice, when its checkpoint stall began (else its end)."""
    out = {}
    for number, _, end, outcome in ledger.boots:
        if outcome in NOTICED:
            stall = next((s.start for s in ledger.spans if s.attempt == number and s.cause == "checkpoint"), None)
            out[number] = stall or end
    return out


@dataclass(frozen=True)
class Bar:
    """A stretch drawn as a rectangle: `x`, `width` in the drawing's units, its row's `y`, `height`,
    fill colour and the tooltip (`title`)."""

    x: float
    width: float
    y: float
    height: float
    colour: str
    title: str
    cause: str = ""
    hatched: bool = False


@dataclass(frozen=True)
class Mark:
    """A moment drawn as a vertical line across the rows at `x`, of `kind` (its colour), with a tooltip."""

    x: float
    kind: str
    colour: str
    title: str


@dataclass(frozen=True)
class Drawing:
    """The timeline as the page draws it: bars by cause and by boot, marks, the legend and the axis."""

    bars: list[Bar]
    marks: list[Mark]
    legend: list[tuple[str, str]]  # (colour, label) of each cause present
    start: _dt.datetime
    end: _dt.datetime
    labels: list[tuple[float, str]]  # (x, text): boot numbers above their bars

    @property
    def hours(self) -> float:
        """The drawing's span in hours."""
        return (self.end - self.start).total_seconds() / 3600


def lay_out(ledger: Ledger, marks: list[Event]) -> Drawing:
    """Pure: the ledger's spans (top row, by cause), its boots (second row, by mode; on-demand
    hatched) and the notices, commits, moves, switches and the end as marks, from the ledger's start
    to its end."""
    start, end = ledger.start, max(ledger.end, ledger.start + _dt.timedelta(seconds=1))
    total = (end - start).total_seconds()

    def x(t: _dt.datetime) -> float:
        return max(0.0, min(WIDTH, (t - start).total_seconds() / total * WIDTH))

    bars = [
        Bar(
            x(s.start),
            x(s.end) - x(s.start),
            *CAUSE_ROW,
            CAUSE[s.cause].colour,
            f"{CAUSE[s.cause].label}: {_duration(s.seconds)}" + (f" (boot {s.attempt})" if s.attempt else ""),
            cause=s.cause,
        )
        for s in ledger.spans
    ]
    labels = []
    for number, b_start, b_end, outcome in ledger.boots:
        mode = ledger.modes.get(number, "spot")
        bars.append(
            Bar(
                x(b_start),
                x(b_end) - x(b_start),
                *BOOT_ROW,
                BOOT_COLOURS.get(mode, "#636363"),
                f"boot {number} on {mode}: {outcome}, {_duration((b_end - b_start).total_seconds())}",
                hatched=mode != "spot",
            )
        )
        labels.append((x(b_start), str(number)))
    drawn = [
        Mark(x(e.time), e.kind, MARK_COLOURS[e.kind], f"{e.time:%Y-%m-%d %H:%M:%S} {e.text}")
        for e in marks
        if e.kind in MARK_COLOURS and start <= e.time <= end + _dt.timedelta(seconds=1)
    ]
    present = {s.cause for s in ledger.spans}
    legend = [(cause.colour, cause.label) for cause in CAUSE.values() if cause.name in present]
    return Drawing(bars, drawn, legend, start, end, labels)


def _duration(seconds: float) -> str:
    """Seconds for people: `42 s`, `12.5 min`, `3.20 h`."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.2f} h"
