"""A fake Vertex AI JobService (custom jobs) for the real google-cloud-aiplatform REST client.

Each request body is parsed into `aiplatform_v1.CustomJob` with unknown fields refused, so a wrong
field name or an enum number the API does not define fails the call (the client sends enums as
integers: `$alt=json;enum-encoding=int`). A Python package must name a prebuilt training image
(PythonPackageSpec.executor_image_uri: "You must use an image from this list",
https://cloud.google.com/dotnet/docs/reference/Google.Cloud.AIPlatform.V1/2.20.0/Google.Cloud.AIPlatform.V1.PythonPackageSpec)
with the `latest` tag, still available on the fake's `today` by Google's table (survivor/cloud/runtimes.py);
the wording of these refusals is the fake's own. A FLEX_START job must meet flex-start's documented
requirements (survivor/cloud/vertex.py FLEX_START_ACCELERATORS: L4, A100, H100, H200 or B200 GPUs in
every pool, one machine configuration for all pools, a timeout of 7 days or less; `flex_start_problem`);
a `maxWaitDuration` that is not a Duration (`90m`) is refused by the parse, as by the API's (no other
limit on it is documented: 0 "waits indefinitely", the default is 1 day). Created jobs go
PENDING -> RUNNING -> SUCCEEDED as they are read; `requests` keeps every body for tests to inspect.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import json
from typing import Any
from urllib.parse import urlsplit

from survivor.cloud import runtimes, vertex
from survivor.local.http import LocalService, QuietHandler, send_json


def executor_image_problem(uri: str, today: _dt.date) -> str | None:
    """Pure decision: why Vertex would not run a Python package on `uri` on `today` (None: it would)."""
    host, _, path = uri.partition("/")
    if host not in runtimes.VERTEX_IMAGE_HOSTS or not path.startswith("vertex-ai/training/"):
        return f"executor_image_uri {uri!r} is not a prebuilt container for training"
    if not uri.endswith(":latest"):
        return f"executor_image_uri {uri!r}: prebuilt containers are used with the latest tag only"
    for row in runtimes.VERTEX_TRAINING_IMAGES:
        if row.uri.partition("/")[2] == path and not row.available_on(today):
            return f"executor_image_uri {uri!r} reached its end of availability on {row.end_of_availability}"
    return None


#: Scheduling.Strategy: the client sends the number (`enum-encoding=int`), a hand-made body the name.
_FLEX_START = (6, "FLEX_START")


def flex_start_problem(job_spec: dict) -> str | None:
    """Pure decision: why Vertex would not queue this CustomJob's `jobSpec` with flex-start (None: it would,
    or it is not flex-start)."""
    scheduling = job_spec.get("scheduling") or {}
    if scheduling.get("strategy") not in _FLEX_START:
        return None
    timeout = str(scheduling.get("timeout") or "0s").rstrip("s")
    if float(timeout or 0) > vertex.FLEX_START_MAX_TIMEOUT_SECONDS:
        return f"job_spec.scheduling.timeout {timeout}s: FLEX_START jobs run for 7 days at most"
    machines = set()
    for i, pool in enumerate(job_spec.get("workerPoolSpecs") or []):
        machine = pool.get("machineSpec") or {}
        kind = machine.get("acceleratorType")
        from google.cloud import aiplatform_v1  # the vertex extra: imported only when a job comes

        name = aiplatform_v1.AcceleratorType(kind).name if isinstance(kind, int) else kind
        if name not in vertex.FLEX_START_ACCELERATORS:
            return (
                f"job_spec.worker_pool_specs[{i}].machine_spec.accelerator_type {name or 'unset'}: FLEX_START "
                "needs L4, A100, H100, H200 or B200 GPUs"
            )
        machines.add((machine.get("machineType"), name, int(machine.get("acceleratorCount") or 0)))
    if len(machines) > 1:
        return "job_spec.worker_pool_specs: FLEX_START needs the same machine configuration for every pool"
    return None


class VertexServer(LocalService):
    """The Vertex AI custom jobs API on 127.0.0.1: create, get, list and cancel, with the rules the service applies."""

    thread_name = "vertex-fake"

    def __init__(self, port: int = 0, today: _dt.date | None = None):
        self.jobs: dict[str, dict] = {}
        self.requests: list[tuple[str, str, dict | None]] = []
        self.today = today or _dt.date.today()
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
                problem = flex_start_problem(body["jobSpec"])
                if problem:
                    return self._error(400, problem)
                for i, pool in enumerate(pools):
                    image = (pool.get("pythonPackageSpec") or {}).get("executorImageUri")
                    problem = executor_image_problem(image, server.today) if image is not None else None
                    if problem:
                        return self._error(400, f"job_spec.worker_pool_specs[{i}].python_package_spec.{problem}")
                name = f"{path[len('/v1/') :]}/{next(server._ids)}"
                job = {**body, "name": name, "state": 1, "createTime": "2026-11-22T00:00:00Z"}
                server.jobs[name] = job
                self._send(200, job)

            def do_GET(self):
                path = urlsplit(self.path).path[len("/v1/") :]
                job = server.jobs.get(path)
                if job is None:
                    return self._error(404, f"CustomJob {path} not found")
                job["state"] = {1: 3, 3: 4}.get(job["state"], job["state"])  # pending -> running -> succeeded
                self._send(200, job)

        return Handler
