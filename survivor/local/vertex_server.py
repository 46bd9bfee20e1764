"""A fake Vertex AI JobService (custom jobs) for the real google-cloud-aiplatform REST client.

Each request body is parsed into `aiplatform_v1.CustomJob` with unknown fields refused, so a wrong
field name or an enum number the API does not define fails the call (the client sends enums as
integers: `$alt=json;enum-encoding=int`). Created jobs go PENDING -> RUNNING -> SUCCEEDED as they
are read; `requests` keeps every body for tests to inspect.
"""

from __future__ import annotations

import itertools
import json
from typing import Any
from urllib.parse import urlsplit

from survivor.local.http import LocalService, QuietHandler, send_json



class VertexServer(LocalService):
    thread_name = "vertex-fake"

    def __init__(self, port: int = 0):
        self.jobs: dict[str, dict] = {}
        self.requests: list[tuple[str, str, dict | None]] = []
        self._ids = itertools.count(4000000000000000000)
        self._listen(port, self._handler())


    def _handler(self):
        server = self

        class Handler(QuietHandler):
            def _send(self, status: int, payload: Any) -> None:
                send_json(self, status, payload)

            def _error(self, status: int, message: str) -> None:
                self._send(status, {"error": {"code": status, "message": message, "status": "INVALID_ARGUMENT"}})

            def do_POST(self):
                from google.cloud import aiplatform_v1

                path = urlsplit(self.path).path
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                server.requests.append(("POST", self.path, body))
                if not path.startswith("/v1/projects/") or not path.endswith("/customJobs"):
                    return self._error(404, f"no such method: POST {path}")
                try:
                    aiplatform_v1.CustomJob.from_json(json.dumps(body), ignore_unknown_fields=False)
                except Exception as exc:
                    return self._error(400, f"Invalid JSON payload received. {exc}")
                if not body.get("displayName"):
                    return self._error(400, "display_name is required")
                pools = body.get("jobSpec", {}).get("workerPoolSpecs") or []
                if not pools:
                    return self._error(400, "job_spec.worker_pool_specs is required")
                name = f"{path[len('/v1/'):]}/{next(server._ids)}"
                job = {**body, "name": name, "state": 1, "createTime": "2026-11-22T00:00:00Z"}
                server.jobs[name] = job
                self._send(200, job)

            def do_GET(self):
                path = urlsplit(self.path).path[len("/v1/"):]
                job = server.jobs.get(path)
                if job is None:
                    return self._error(404, f"CustomJob {path} not found")
                job["state"] = {1: 3, 3: 4}.get(job["state"], job["state"])  # pending -> running -> succeeded
                self._send(200, job)

        return Handler
