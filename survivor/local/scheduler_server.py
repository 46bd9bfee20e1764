"""A fake Cloud Scheduler API v1 (jobs) for the real google-cloud-scheduler REST client.

    >>> with SchedulerServer() as scheduler, RunServer() as run:
    ...     client = scheduler_v1.CloudSchedulerClient(transport="rest", credentials=AnonymousCredentials(),
    ...                                                client_options={"api_endpoint": scheduler.endpoint})
    ...     client.create_job(parent="projects/p/locations/us-west1", job=job)
    ...     scheduler.fire(job.name, run.endpoint)   # what Scheduler does at each tick of the schedule

Serves the paths of the client's REST transport (google/cloud/scheduler_v1/services/cloud_scheduler/
transports/rest_base.py): jobs create, get, patch and delete. Every body is parsed into
`scheduler_v1.Job` with unknown fields refused; a job needs a schedule and exactly one target.
`fire` sends a job's HTTP target request the way Scheduler would, to another stand-in in place of
the target's Google host, so a test can see that the target names a method that exists.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import requests

from survivor.local.http import LocalService, QuietHandler, read_message, send_google_error, send_json

_JOBS = re.compile(r"^/v1/(projects/[^/]+/locations/[^/]+)/jobs$")
_JOB = re.compile(r"^/v1/(projects/[^/]+/locations/[^/]+/jobs/[^/:]+)$")
_TARGETS = ("httpTarget", "pubsubTarget", "appEngineHttpTarget")


class SchedulerServer(LocalService):
    """Cloud Scheduler jobs on 127.0.0.1: create, get, update, delete, and `fire` for tests."""

    thread_name = "scheduler-fake"

    def __init__(self, port: int = 0):
        self.jobs: dict[str, dict] = {}
        self.requests: list[tuple[str, str, Any]] = []
        self._listen(port, self._handler())

    def fire(self, name: str, target_endpoint: str, timeout: float = 10.0) -> requests.Response:
        """Sends job `name`'s HTTP target request (method, body, headers) to `target_endpoint` in place
        of the URI's scheme and host, with a bearer token standing for the OAuth token it names."""
        target = self.jobs[name]["httpTarget"]
        uri = urlsplit(target["uri"])
        headers = {**target.get("headers", {}), "Content-Type": "application/json"}
        if "oauthToken" in target:
            headers["Authorization"] = f"Bearer token-of-{target['oauthToken']['serviceAccountEmail']}"
        from google.cloud import scheduler_v1

        method = target.get("httpMethod", "POST")  # the client sends enums as integers
        method = scheduler_v1.HttpMethod(method).name if isinstance(method, int) else method
        return requests.request(
            method, target_endpoint + uri.path, headers=headers, data=target.get("body") or b"{}", timeout=timeout
        )

    def _handler(self):
        server = self

        class Handler(QuietHandler):
            def _error(self, status: int, reason: str, message: str) -> None:
                send_google_error(self, status, reason, message)

            def _job_body(self) -> dict | None:
                from google.cloud import scheduler_v1

                body = read_message(self, scheduler_v1.Job)
                server.requests.append((self.command, self.path, body))
                if body is None:
                    return None
                if not body.get("schedule") or sum(t in body for t in _TARGETS) != 1:
                    self._error(400, "INVALID_ARGUMENT", "a job needs a schedule and exactly one target")
                    return None
                return body

            def do_GET(self):
                path = urlsplit(self.path).path
                server.requests.append(("GET", self.path, None))
                match = _JOB.match(path)
                if match and match.group(1) in server.jobs:
                    return send_json(self, 200, server.jobs[match.group(1)])
                self._error(404, "NOT_FOUND", f"Job not found: {path[4:]}")

            def do_POST(self):
                path = urlsplit(self.path).path
                match = _JOBS.match(path)
                if not match:
                    return self._error(404, "NOT_FOUND", f"no such method: POST {path}")
                body = self._job_body()
                if body is None:
                    return
                name = body.get("name") or ""
                if not name.startswith(match.group(1) + "/jobs/"):
                    return self._error(400, "INVALID_ARGUMENT", f"job name {name!r} is not under {match.group(1)}")
                if name in server.jobs:
                    return self._error(409, "ALREADY_EXISTS", f"Job {name} already exists.")
                server.jobs[name] = {**body, "state": "ENABLED"}
                send_json(self, 200, server.jobs[name])

            def do_PATCH(self):
                path = urlsplit(self.path).path
                match = _JOB.match(path)
                if not match:
                    return self._error(404, "NOT_FOUND", f"no such method: PATCH {path}")
                body = self._job_body()
                if body is None:
                    return
                if match.group(1) not in server.jobs:
                    return self._error(404, "NOT_FOUND", f"Job not found: {match.group(1)}")
                server.jobs[match.group(1)] = {**body, "name": match.group(1), "state": "ENABLED"}
                send_json(self, 200, server.jobs[match.group(1)])

            def do_DELETE(self):
                path = urlsplit(self.path).path
                server.requests.append(("DELETE", self.path, None))
                match = _JOB.match(path)
                if not match or match.group(1) not in server.jobs:
                    return self._error(404, "NOT_FOUND", f"Job not found: {path[4:]}")
                del server.jobs[match.group(1)]
                send_json(self, 200, {})

        return Handler
