"""A fake Cloud Run Admin API v2 (jobs) for the real google-cloud-run REST client.

    >>> with RunServer() as run:
    ...     client = run_v2.JobsClient(transport="rest", credentials=AnonymousCredentials(),
    ...                                client_options={"api_endpoint": run.endpoint})
    ...     client.create_job(parent="projects/p/locations/us-west1", job=job, job_id="survivor-watch-x").result()

Serves the paths of the client's REST transport (google/cloud/run_v2/services/jobs/transports/
rest_base.py): jobs create (`?jobId=`), get, patch, delete and `:run`. Every body is parsed into
`run_v2.Job` with unknown fields refused, so a wrong field name fails the call as the API would.
Long-running operations come back done, their `response` the job (or the execution for `:run`).
`requests` keeps every call, `executions` every run, for tests to inspect.
"""

from __future__ import annotations

import itertools
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

from survivor.local.http import LocalService, QuietHandler, read_json, read_message, send_google_error, send_json

_JOBS = re.compile(r"^/v2/(projects/[^/]+/locations/[^/]+)/jobs$")
_JOB = re.compile(r"^/v2/(projects/[^/]+/locations/[^/]+/jobs/[^/:]+)(:run)?$")
#: Cloud Run's job id rule: lowercase letters, digits and hyphens, starting with a letter.
_JOB_ID = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


class RunServer(LocalService):
    """Cloud Run jobs on 127.0.0.1: create, get, update, delete and run, with done operations."""

    thread_name = "run-fake"

    def __init__(self, port: int = 0):
        self.jobs: dict[str, dict] = {}
        self.executions: list[dict] = []
        self.requests: list[tuple[str, str, Any]] = []
        self._ids = itertools.count(1)
        self._listen(port, self._handler())

    def _operation(self, parent: str, response: dict, kind: str) -> dict:
        return {
            "name": f"{parent}/operations/op-{next(self._ids)}",
            "done": True,
            "response": {"@type": f"type.googleapis.com/google.cloud.run.v2.{kind}", **response},
        }

    def _handler(self):
        server = self

        class Handler(QuietHandler):
            def _error(self, status: int, reason: str, message: str) -> None:
                send_google_error(self, status, reason, message)

            def _job_body(self) -> dict | None:
                from google.cloud import run_v2

                body = read_message(self, run_v2.Job)
                server.requests.append((self.command, self.path, body))
                if body is None:
                    return None
                containers = body.get("template", {}).get("template", {}).get("containers") or []
                if not containers or not all(c.get("image") for c in containers):
                    self._error(400, "INVALID_ARGUMENT", "template.template.containers[].image is required")
                    return None
                return body

            def do_GET(self):
                path = urlsplit(self.path).path
                server.requests.append(("GET", self.path, None))
                match = _JOB.match(path)
                if match and not match.group(2) and match.group(1) in server.jobs:
                    return send_json(self, 200, server.jobs[match.group(1)])
                self._error(404, "NOT_FOUND", f"Resource '{path[4:]}' was not found")

            def do_POST(self):
                url = urlsplit(self.path)
                match = _JOBS.match(url.path)
                if match:
                    body = self._job_body()
                    if body is None:
                        return
                    job_id = (parse_qs(url.query).get("jobId") or [""])[0]
                    if not _JOB_ID.match(job_id):
                        return self._error(
                            400,
                            "INVALID_ARGUMENT",
                            f"job_id {job_id!r}: lowercase letters, digits and hyphens, starting with a letter",
                        )
                    name = f"{match.group(1)}/jobs/{job_id}"
                    if name in server.jobs:
                        return self._error(409, "ALREADY_EXISTS", f"Resource '{job_id}' already exists.")
                    server.jobs[name] = {**body, "name": name, "generation": "1"}
                    return send_json(self, 200, server._operation(match.group(1), server.jobs[name], "Job"))
                match = _JOB.match(url.path)
                if match and match.group(2):
                    server.requests.append(("POST", self.path, read_json(self)))
                    if match.group(1) not in server.jobs:
                        return self._error(404, "NOT_FOUND", f"Resource '{match.group(1)}' was not found")
                    execution = {
                        "name": f"{match.group(1)}/executions/{match.group(1).rsplit('/', 1)[1]}-{next(server._ids)}",
                        "job": match.group(1).rsplit("/", 1)[1],
                    }
                    server.executions.append(execution)
                    parent = match.group(1).rsplit("/jobs/", 1)[0]
                    return send_json(self, 200, server._operation(parent, execution, "Execution"))
                self._error(404, "NOT_FOUND", f"no such method: POST {url.path}")

            def do_PATCH(self):
                path = urlsplit(self.path).path
                match = _JOB.match(path)
                if not match or match.group(2):
                    return self._error(404, "NOT_FOUND", f"no such method: PATCH {path}")
                body = self._job_body()
                if body is None:
                    return
                name = match.group(1)
                if name not in server.jobs:
                    return self._error(404, "NOT_FOUND", f"Resource '{name}' was not found")
                generation = str(int(server.jobs[name].get("generation", "1")) + 1)
                server.jobs[name] = {**body, "name": name, "generation": generation}
                send_json(self, 200, server._operation(name.rsplit("/jobs/", 1)[0], server.jobs[name], "Job"))

            def do_DELETE(self):
                path = urlsplit(self.path).path
                server.requests.append(("DELETE", self.path, None))
                match = _JOB.match(path)
                if not match or match.group(2) or match.group(1) not in server.jobs:
                    return self._error(404, "NOT_FOUND", f"Resource '{path[4:]}' was not found")
                job = server.jobs.pop(match.group(1))
                send_json(self, 200, server._operation(match.group(1).rsplit("/jobs/", 1)[0], job, "Job"))

        return Handler
