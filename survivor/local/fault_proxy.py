"""A proxy between the Cloud Storage client and fake-gcs-server that misbehaves on a schedule.

    >>> proxy = FaultProxy(upstream="http://127.0.0.1:4443", faults=FaultPlan(rate=0.2, seed=7)).start()
    >>> os.environ["STORAGE_EMULATOR_HOST"] = proxy.url      # the client now talks through it

Each request draws from a seeded random stream: with probability `rate` it gets one of the faults
in `kinds` -- `429` or `503` (answered by the proxy, never forwarded), `reset` (the connection is
closed without an answer), `stall` (the request is held `stall_seconds` before being forwarded) or
`truncate` (forwarded, but the answer's body is cut in half). Everything else is passed through.
`count` records what was injected, for the figures in docs/reliability.md.
"""

from __future__ import annotations

import random
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import requests

from survivor.local.http import LocalService, QuietHandler

KINDS = ("429", "503", "reset", "stall", "truncate")


@dataclass
class FaultPlan:
    rate: float = 0.1
    kinds: tuple[str, ...] = KINDS
    seed: int = 0
    stall_seconds: float = 1.0
    enabled: bool = True
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self):
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()

    def draw(self) -> str | None:
        with self._lock:
            if not self.enabled or self._rng.random() >= self.rate:
                return None
            return self._rng.choice(self.kinds)


class FaultProxy(LocalService):
    """An HTTP reverse proxy on 127.0.0.1 injecting faults by `plan`."""

    thread_name = "fault-proxy"

    def __init__(self, upstream: str, plan: FaultPlan | None = None, port: int = 0):
        self.upstream = upstream.rstrip("/")
        self.plan = plan or FaultPlan()
        self.count: Counter = Counter()
        self._session = requests.Session()
        self._session.trust_env = False
        self._listen(port, self._handler_class())

    @property
    def url(self) -> str:
        return self.endpoint

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
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                fault = proxy.plan.draw()
                if fault:
                    proxy.count[fault] += 1
                if fault in ("429", "503"):
                    message = b'{"error": {"code": %s, "message": "injected by survivor\'s fault proxy"}}' % fault.encode()
                    return self._reply(int(fault), message, {"Content-Type": "application/json"})
                if fault == "reset":
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                if fault == "stall":
                    time.sleep(proxy.plan.stall_seconds)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length", "connection")}
                url = proxy.upstream + self.path
                answer = proxy._session.request(self.command, url, data=body, headers=headers, allow_redirects=False,
                                                stream=False, timeout=60)
                keep = {k: v for k, v in answer.headers.items()
                        if k.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding")}
                content = answer.content
                if "Location" in keep:  # resumable upload sessions point back at the upstream
                    keep["Location"] = keep["Location"].replace(proxy.upstream, proxy.url)
                self._reply(answer.status_code, content, keep, cut=fault == "truncate" and len(content) > 1)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve

        return Handler

