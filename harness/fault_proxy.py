"""A proxy between the Cloud Storage client and fake-gcs-server that misbehaves on a schedule.

    >>> proxy = FaultProxy(upstream="http://127.0.0.1:4443", faults=FaultPlan(rate=0.2, seed=7)).start()
    >>> os.environ["STORAGE_EMULATOR_HOST"] = proxy.url      # the client now talks through it

Each request draws from a seeded random stream: with probability `rate` it gets one of the faults
in `kinds` -- `429` or `503` (answered by the proxy, never forwarded), `reset` (the connection is
closed without an answer), `stall` (the request is held `stall_seconds` before being forwarded) or
`truncate` (forwarded, but the answer's body is cut in half). Everything else is passed through.
`count` records what was injected, for the figures in docs/reliability.md.

It also holds two rules of Cloud Storage that fake-gcs-server does not:

- IAM: with `granted` set (say `ROLES["roles/storage.objectAdmin"]`), a request whose permission
  (`required_permission`) is not in it gets Cloud Storage's 403, naming the permission; `denied`
  records each. `None` (the default) grants everything.
- 404 wording: fake-gcs-server answers every 404 "Not Found"; Cloud Storage says whether the bucket
  or the object is missing, which is all a client can tell them apart by without reading bucket
  metadata. The proxy rewrites its 404s into those words.

    >>> proxy = FaultProxy(upstream, FaultPlan(rate=0), granted=ROLES["roles/storage.objectAdmin"]).start()
"""

from __future__ import annotations

import json
import random
import re
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

import requests

from survivor.local.bucket_iam import BUCKET_PATH, forbidden_body, required_permission
from survivor.local.http import LocalService, QuietHandler
from survivor.cloud.permissions import ROLE_PERMISSIONS

KINDS = ("429", "503", "reset", "stall", "truncate")

#: The Cloud Storage permissions of predefined roles: the product's table (survivor/cloud/permissions.py,
#: with Google's role reference and the client libraries' StorageRoles as its sources), so preflight
#: and this stand-in can never disagree on what a role grants.
ROLES: dict[str, frozenset[str]] = ROLE_PERMISSIONS
#: The principal named in injected 403s.
PRINCIPAL = "survivor-vm@survivor-local.iam.gserviceaccount.com"


def _error_body(code: int, message: str, reason: str) -> bytes:
    return json.dumps(
        {
            "error": {
                "code": code,
                "message": message,
                "errors": [{"message": message, "domain": "global", "reason": reason}],
            }
        }
    ).encode()


@dataclass
class FaultPlan:
    """Which requests get a fault. `kinds` may also name any HTTP status ("400", "500"), answered by
    the proxy; `paths`, a regular expression, limits faults to requests whose decoded path (with its
    query) it finds (say, downloads of checkpoint blobs: r"/o/.*survivor/blobs/.*alt=media"), and
    `bodies` to requests whose body's first 4 KiB it finds (an upload names its object there);
    `outage_seconds` makes each drawn fault last that long for every matching request, and for at
    least `outage_requests` of them (a client a loaded machine slows still meets the outage as many
    times); `limit` (0: none) is how many faults (or outages) are drawn at most."""

    rate: float = 0.1
    kinds: tuple[str, ...] = KINDS
    seed: int = 0
    stall_seconds: float = 1.0
    enabled: bool = True
    paths: str = ""
    bodies: str = ""
    outage_seconds: float = 0.0
    outage_requests: int = 0
    limit: int = 0
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()
        self._outage: tuple[float, str] | None = None  # (ends, fault) of the outage under way
        self._outage_left = 0  # requests the outage under way fails still, whatever the time
        self._drawn = 0

    def draw(self, path: str = "", body: bytes = b"") -> str | None:
        """The fault for a request to `path` (None for no fault), drawn from the seeded generator at
        the plan's rate. With `outage_seconds`, a drawn fault starts an outage: every request the plan
        matches gets the same fault until it ends (a second-long 503 burst, not scattered faults)."""
        if self.paths and not re.search(self.paths, unquote(path)):
            return None
        if self.bodies and not re.search(self.bodies.encode(), body[:4096]):
            return None
        with self._lock:
            if not self.enabled:
                return None
            if self._outage is not None:
                ends, fault = self._outage
                if time.monotonic() < ends or self._outage_left > 0:
                    self._outage_left -= 1
                    return fault
                self._outage = None
            if (self.limit and self._drawn >= self.limit) or self._rng.random() >= self.rate:
                return None
            self._drawn += 1
            fault = self._rng.choice(self.kinds)
            if self.outage_seconds:
                self._outage = (time.monotonic() + self.outage_seconds, fault)
                self._outage_left = self.outage_requests - 1  # this request is the outage's first
            return fault


class FaultProxy(LocalService):
    """An HTTP reverse proxy on 127.0.0.1 injecting faults by `plan`."""

    thread_name = "fault-proxy"

    def __init__(
        self, upstream: str, plan: FaultPlan | None = None, port: int = 0, granted: frozenset[str] | None = None
    ):
        self.upstream = upstream.rstrip("/")
        self.plan = plan or FaultPlan()
        self.count: Counter = Counter()
        self.granted = granted  # None: every permission
        self.denied: list[tuple[str, str, str]] = []  # (method, path, permission) of each 403 given
        self._in_flight = 0  # requests read and not yet answered (a stalled one is still forwarded)
        self._idle = threading.Condition()
        self._session = requests.Session()
        self._session.trust_env = False
        self._listen(port, self._handler_class())

    @property
    def url(self) -> str:
        """The proxy's URL, for STORAGE_EMULATOR_HOST."""
        return self.endpoint

    def settle(self, timeout: float = 10.0) -> bool:
        """Waits until no request is in flight; False if one still is after `timeout` seconds.

        A request the proxy has read is forwarded even when its client has died meanwhile (a stall
        holds it first), as Cloud Storage may apply a request whose client never saw the answer
        (its retry strategy, cloud.google.com/storage/docs/retry-strategy: a socket timeout or TCP
        disconnect is retryable, and only an idempotent request is safe to retry, because the first
        may have taken effect): a harness that kills an agent settles the proxy before it reads what
        the job dir holds."""
        with self._idle:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout)

    def _not_found_body(self, path: str) -> bytes:
        """Cloud Storage's 404 wording for `path`: whether its bucket or its object is missing."""
        match = BUCKET_PATH.match(urlsplit(path).path)
        bucket = match.group("bucket") if match else None
        if match is None or bucket is None:
            return _error_body(404, "Not Found", "notFound")
        exists = self._session.get(f"{self.upstream}/storage/v1/b/{bucket}", timeout=10).status_code == 200
        if not exists:
            return _error_body(404, "The specified bucket does not exist.", "notFound")
        name = unquote((match.group("rest") or "").removeprefix("/o/"))
        return _error_body(404, f"No such object: {bucket}/{name}", "notFound")

    def _handler_class(self):
        proxy = self

        class Handler(QuietHandler):
            def _reply(self, status: int, body: bytes, headers: dict[str, str] | None = None, cut: bool = False):
                self.send_response(status)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2] if cut else body)
                if cut:
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True

            def _serve(self):
                with proxy._idle:
                    proxy._in_flight += 1
                try:
                    self._forward()
                finally:
                    with proxy._idle:
                        proxy._in_flight -= 1
                        proxy._idle.notify_all()

            def _forward(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if (
                    len(body) < length
                ):  # the client died mid-send: an incomplete message (RFC 9112 §6.3), never acted on
                    self.close_connection = True
                    return
                permission = required_permission(self.command, self.path)
                if proxy.granted is not None and permission is not None and permission not in proxy.granted:
                    proxy.denied.append((self.command, self.path, permission))
                    return self._reply(403, forbidden_body(permission, PRINCIPAL), {"Content-Type": "application/json"})
                fault = proxy.plan.draw(self.path, body)
                if fault:
                    proxy.count[fault] += 1
                if fault and fault.isdigit():
                    message = (
                        b'{"error": {"code": %s, "message": "injected by survivor\'s fault proxy"}}' % fault.encode()
                    )
                    return self._reply(int(fault), message, {"Content-Type": "application/json"})
                if fault == "reset":
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                if fault == "stall":
                    time.sleep(proxy.plan.stall_seconds)
                headers = {
                    k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length", "connection")
                }
                url = proxy.upstream + self.path
                answer = proxy._session.request(
                    self.command, url, data=body, headers=headers, allow_redirects=False, stream=False, timeout=60
                )
                keep = {
                    k: v
                    for k, v in answer.headers.items()
                    if k.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding")
                }
                content = answer.content
                if answer.status_code == 404:
                    content = proxy._not_found_body(self.path)
                    keep["Content-Type"] = "application/json"
                if "Location" in keep:  # resumable upload sessions point back at the upstream
                    keep["Location"] = keep["Location"].replace(proxy.upstream, proxy.url)
                self._reply(answer.status_code, content, keep, cut=fault == "truncate" and len(content) > 1)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve

        return Handler
