"""The dashboard's web side: a Flask app over a `Board`, served by waitress on 127.0.0.1.

    >>> app = make_app(Board(sources), refresh_seconds=10)
    >>> server = start(app, "127.0.0.1", 8080)     # serves in a thread; server.close() stops it
    >>> app.test_client().get("/").status_code
    200

Read-only by construction: every route is a GET, and the board only reads (its job dirs are opened
through a view that refuses writes, survivor/jobdir/refresh.py). Every value a page shows comes from
a job dir, which anyone who may write to it fills: the templates are Jinja's with autoescaping on,
never `|safe`, and each response carries a Content-Security-Policy that lets the page run only the
package's own script (`static/dashboard.js`, which re-fetches the page and swaps its `<main>` in) and
load only the package's own stylesheet: no inline script, no other origin, no CDN. The Host header
must name the address served (`TRUSTED_HOSTS`), so a web page elsewhere cannot reach the dashboard
through a DNS name rebound to 127.0.0.1. No credential reaches a page: the board holds none, and the
pages show records, figures and the job dirs' URLs only.
"""

from __future__ import annotations

import datetime as _dt
import os
import threading
from typing import Any

from survivor.cloud.pricing import money
from survivor.jobdir.ledger import CAUSE, CAUSES
from survivor.jobdir.switches import FLEX_START, ON_DEMAND, SPOT
from survivor.operator.dashboard.board import Board
from survivor.operator.dashboard import timeline

HERE = os.path.dirname(os.path.abspath(__file__))

#: What a page may load and run: its own origin's stylesheet and script, nothing inline, nothing else.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


def make_app(board: Board, *, refresh_seconds: float = 10.0, hosts: list[str] | None = None):
    """The Flask app of `board`: `/` the jobs, `/job/<n>` one job's page, `/static/...` the package's
    CSS and script. `refresh_seconds`: how often an open page re-fetches itself. `hosts`: the Host
    header values accepted (default: 127.0.0.1 and localhost, any port)."""
    from flask import Flask, abort, render_template

    app = Flask(__name__, template_folder=os.path.join(HERE, "templates"), static_folder=os.path.join(HERE, "static"))
    app.config["TRUSTED_HOSTS"] = hosts or ["127.0.0.1", "localhost"]
    app.jinja_env.autoescape = True  # every template, whatever its name
    app.jinja_env.filters.update(money=money, percent=_percent, duration=_duration, utc=_utc, cut=_cut)
    app.jinja_env.globals.update(
        CAUSE=CAUSE,
        CAUSES=CAUSES,
        SPOT=SPOT,
        ON_DEMAND=ON_DEMAND,
        FLEX_START=FLEX_START,
        WIDTH=timeline.WIDTH,
        HEIGHT=timeline.HEIGHT,
        refresh_ms=int(refresh_seconds * 1000),
    )

    @app.get("/")
    def jobs():
        return render_template("jobs.html", cards=board.cards(), now=board.clock())

    @app.get("/job/<int:index>")
    def job(index: int):
        card = board.card(index)
        if card is None:
            abort(404)
        return render_template("job.html", card=card, now=board.clock())

    @app.after_request
    def headers(response):
        response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["Cross-Origin-Resource-Policy"] = "same-origin"
        if response.mimetype == "text/html":
            response.headers["Cache-Control"] = "no-store"
        return response

    return app


def start(app, host: str = "127.0.0.1", port: int = 0, threads: int = 8):
    """Serves `app` with waitress in a daemon thread; the server (`effective_port`: the port bound,
    `close()`: stop)."""
    from waitress.server import create_server

    server = create_server(app, host=host, port=port, threads=threads, ident="survivor-dashboard")
    threading.Thread(target=server.run, name="dashboard", daemon=True).start()
    return server


def serve(app, host: str = "127.0.0.1", port: int = 8080, threads: int = 8) -> None:
    """Serves `app` with waitress until interrupted."""
    from waitress import serve as waitress_serve

    waitress_serve(app, host=host, port=port, threads=threads, ident="survivor-dashboard")


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.2f} h"


def _utc(value: Any) -> str:
    """A time as the pages show it: UTC to the second; the text as written (cut) when it is no time."""
    from survivor.jobdir.ledger import parse_time

    when = value if isinstance(value, _dt.datetime) else parse_time(str(value or ""))
    if when is None:
        return _cut(value, 40)
    try:
        return when.astimezone(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, ValueError):  # year 1 at +01:00 is before year 1 in UTC
        return _cut(value, 40)


def _cut(value: Any, width: int = 160) -> str:
    """A field on one line, at most `width` characters (a record's field can be 60 KB)."""
    text = "-" if value is None else " ".join(str(value)[: width * 2].split())
    return text if len(text) <= width else text[: width - 1] + "…"
