"""A fake Cloud Logging `entries.list` for the real google-cloud-logging client (HTTP/JSON transport).

Understands the filters survivor sends and refuses any other (HTTP 400), so a filter typo fails the
test instead of matching nothing: clauses joined by AND, each `field="value"`, `field>"value"` or
`field>="value"` on `resource.type`, `resource.labels.*`, `labels.*`, `severity` or `timestamp`.
Entries are returned in timestamp order, in pages of `pageSize` with `nextPageToken`.
"""

from __future__ import annotations

import datetime as _dt
import re
import threading
from typing import Any

from survivor.local.http import LocalService, QuietHandler, read_json, send_json

CLAUSE = re.compile(r'^\s*([A-Za-z_.\-]+)\s*(=|>=|>)\s*"([^"]*)"\s*$')


def _field(entry: dict[str, Any], dotted: str) -> str | None:
    value: Any = entry
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return str(value)


def parse_filter(filter_: str) -> list[tuple[str, str, str]]:
    """(field, operator, value) per clause. Raises ValueError for a clause this fake does not know."""
    clauses = []
    for clause in (c for c in re.split(r"\s+AND\s+", filter_.strip()) if c):
        found = CLAUSE.match(clause)
        if not found:
            raise ValueError(f"unsupported filter clause {clause!r}")
        name, op, wanted = found.groups()
        if not name.startswith(("resource.type", "resource.labels.", "labels.", "severity", "timestamp")):
            raise ValueError(f"unsupported filter field {name!r}")
        if name == "timestamp":
            _parse_time(wanted)
        clauses.append((name, op, wanted))
    return clauses


def matches(entry: dict[str, Any], clauses: list[tuple[str, str, str]]) -> bool:
    """True when `entry` passes every clause."""
    for name, op, wanted in clauses:
        actual = _field(entry, name)
        if actual is None:
            return False
        if name == "timestamp":
            actual_t, wanted_t = _parse_time(actual), _parse_time(wanted)
            ok = actual_t == wanted_t if op == "=" else actual_t > wanted_t if op == ">" else actual_t >= wanted_t
        else:
            ok = actual == wanted if op == "=" else actual > wanted if op == ">" else actual >= wanted
        if not ok:
            return False
    return True


def _parse_time(text: str) -> _dt.datetime:
    return _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


class LoggingServer(LocalService):
    """Holds entries; `add()` writes one as Vertex AI would for a custom job's replica."""

    thread_name = "logging-fake"

    def __init__(self, port: int = 0):
        self.entries: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.max_page = 1000  # Cloud Logging's own cap on pageSize
        self._lock = threading.Lock()
        self._listen(port, self._handler())

    def add(
        self, project: str, job_id: str, task: str, text: str, *, severity: str = "INFO", timestamp: str | None = None
    ) -> dict[str, Any]:
        """Adds a log entry of a Vertex AI job's task, as Cloud Logging would store it; returns the entry."""
        with self._lock:
            stamp = timestamp or _dt.datetime.now(_dt.timezone.utc).isoformat().replace("+00:00", "Z")
            entry = {
                "logName": f"projects/{project}/logs/workerpool0-0",
                "insertId": f"{len(self.entries):08d}",
                "resource": {"type": "ml_job", "labels": {"job_id": job_id, "project_id": project, "task_name": task}},
                "labels": {"ml.googleapis.com/trial_type": "", "compute.googleapis.com/resource_name": task},
                "severity": severity,
                "timestamp": stamp,
                "textPayload": text,
            }
            self.entries.append(entry)
            return entry

    def _handler(self):
        server = self

        class Handler(QuietHandler):
            def _error(self, status: int, message: str) -> None:
                send_json(self, status, {"error": {"code": status, "message": message, "status": "INVALID_ARGUMENT"}})

            def do_POST(self) -> None:
                if self.path.split("?")[0] != "/v2/entries:list":
                    return self._error(404, f"no such method: POST {self.path}")
                try:
                    body = read_json(self)
                except ValueError:
                    return self._error(400, "Invalid JSON payload received.")
                server.requests.append(body)
                names = body.get("resourceNames")
                if not names or not all(isinstance(n, str) and n.startswith("projects/") for n in names):
                    return self._error(400, "resourceNames: expected one or more projects/PROJECT")
                projects = {n.split("/")[1] for n in names}
                try:
                    clauses = parse_filter(body.get("filter", ""))
                except ValueError as exc:
                    return self._error(400, f"Invalid filter: {exc}")
                with server._lock:
                    found = [
                        e
                        for e in server.entries
                        if e["resource"]["labels"]["project_id"] in projects and matches(e, clauses)
                    ]
                found.sort(
                    key=lambda e: (_parse_time(e["timestamp"]), e["insertId"]),
                    reverse=body.get("orderBy", "timestamp asc").endswith("desc"),
                )
                start = int(body.get("pageToken") or 0)
                size = min(int(body.get("pageSize") or server.max_page), server.max_page)
                page = found[start : start + size]
                reply: dict[str, Any] = {"entries": page} if page else {}
                if start + size < len(found):
                    reply["nextPageToken"] = str(start + size)
                send_json(self, 200, reply)

        return Handler
