"""The HTTP server base the emulators share: 127.0.0.1 only, daemon threads, quiet about clients
that hang up (a preempted agent drops its hanging GET; that is not an error)."""

from __future__ import annotations

import json
import random
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


class HttpError(Exception):
    """An error a Google API stand-in answers with: HTTP status, message and Google's error reason."""

    def __init__(self, status: int, message: str, reason: str = "invalid"):
        super().__init__(message)
        self.status = status
        self.message = message
        self.reason = reason


#: Linux's range of ephemeral ports: the ones bind(port 0) and every outgoing connection are given
#: (https://www.kernel.org/doc/Documentation/networking/ip-sysctl.txt, ip_local_port_range)
EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
#: The lowest port handed out below that range: above the well-known and common service ports
LOWEST_PORT = 10000


def free_ports(count: int) -> list[int]:
    """`count` distinct ports on 127.0.0.1 that nothing listens on (all bound at once, then released).

    Below the ephemeral range where the system has one: a port is told to a process (a TensorFlow
    worker's `TF_CONFIG`) before that process binds it, and an ephemeral port freed here can be
    given meanwhile to any outgoing connection (TensorFlow's "Could not start gRPC server" on a
    busy machine); a random port below the range is taken only by another bind to that very port."""
    try:
        with open(EPHEMERAL_RANGE) as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 0
    picks: list[int] = []
    sockets = []
    try:
        if low > LOWEST_PORT + 1000:
            draw = random.Random()
            for _ in range(count * 50):
                if len(picks) == count:
                    break
                port = draw.randrange(LOWEST_PORT, low)
                if port in picks:
                    continue
                s = socket.socket()
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    s.close()
                    continue
                sockets.append(s)
                picks.append(port)
        while len(picks) < count:  # no such range here, or it was crowded: the system's choice
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
            picks.append(s.getsockname()[1])
        return picks
    finally:
        for s in sockets:
            s.close()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    return free_ports(1)[0]


class QuietServer(ThreadingHTTPServer):
    """A threading HTTP server whose handler threads do not keep the process alive. `admit`, when
    set, decides for each connection (socket, client address) whether it is served or closed."""

    daemon_threads = True
    admit: Callable[[socket.socket, Any], bool] | None = None

    def verify_request(self, request, client_address) -> bool:
        """Whether to serve this connection: `admit`'s answer, else yes."""
        return self.admit is None or self.admit(request, client_address)

    def handle_error(self, request, client_address) -> None:
        """Ignores a client that hung up (tests do, on purpose); reports any other handler error."""
        error = sys.exc_info()[1]
        if isinstance(error, (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)):
            return
        super().handle_error(request, client_address)


def send_json(
    handler: BaseHTTPRequestHandler, status: int, payload: Any, headers: dict[str, str] | None = None
) -> None:
    """Writes one JSON reply with its length (the fakes speak HTTP/1.1 keep-alive to the clients)."""
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json; charset=UTF-8")
    handler.send_header("Content-Length", str(len(data)))
    for key, value in (headers or {}).items():
        handler.send_header(key, value)
    handler.end_headers()
    handler.wfile.write(data)


def read_json(handler: BaseHTTPRequestHandler) -> Any:
    """The request body as JSON ({} when empty). Raises ValueError for a body that is not JSON."""
    raw = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
    return json.loads(raw) if raw else {}


def send_google_error(handler: BaseHTTPRequestHandler, status: int, reason: str, message: str) -> None:
    """Google's JSON error reply (`{"error": {code, message, status}}`), which the clients turn into
    their own exceptions (NotFound, AlreadyExists, InvalidArgument...)."""
    send_json(handler, status, {"error": {"code": status, "message": message, "status": reason}})


def read_message(handler: BaseHTTPRequestHandler, message_type: Any) -> dict | None:
    """The request's JSON body, held to the client library's own proto-plus `message_type` with
    unknown fields refused, as the API refuses them; None after answering 400 with the parser's
    words (they name the field)."""
    body = read_json(handler)
    try:
        message_type.from_json(json.dumps(body), ignore_unknown_fields=False)
    except Exception as exc:
        send_google_error(handler, 400, "INVALID_ARGUMENT", f"Invalid JSON payload received. {exc}")
        return None
    return body


class QuietHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 keep-alive like the real APIs, and no access log (tests and the demo tell their own story)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        """Drops the per-request access log: stand-ins serve thousands of requests per test."""
        pass


class LocalService:
    """A stand-in's lifecycle: serves on 127.0.0.1 from a daemon thread; `start()`/`stop()` or `with`."""

    thread_name = "stand-in"

    def _listen(self, port: int, handler_class: type[BaseHTTPRequestHandler]) -> None:
        self._httpd = QuietServer(("127.0.0.1", port), handler_class)

    @property
    def port(self) -> int:
        """The port the service listens on (chosen by the OS when 0 was asked)."""
        return self._httpd.server_address[1]

    @property
    def endpoint(self) -> str:
        """`http://127.0.0.1:PORT`: the `api_endpoint` for a client library's client_options."""
        return f"http://127.0.0.1:{self.port}"

    def start(self):
        """Starts serving from a daemon thread; returns self."""
        threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name=self.thread_name, daemon=True
        ).start()
        return self

    def stop(self) -> None:
        """Stops serving and closes the socket."""
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
