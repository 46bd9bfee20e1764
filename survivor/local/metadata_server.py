"""A metadata-server emulator: the paths, headers, etags and hanging GETs the agent relies on.

    >>> server = MetadataServer(attributes={"survivor-job": spec_yaml}).start()
    >>> os.environ["GCE_METADATA_HOST"] = server.host       # 127.0.0.1:PORT
    >>> server.set("instance/preempted", "TRUE")            # what GCE does on a Spot preemption
    >>> server.stop()

Like the real server it requires `Metadata-Flavor: Google` (403 otherwise), answers with the same
header and an `ETag`, lists directories (`instance/`), returns JSON trees for
`?recursive=true&alt=json`, and holds `?wait_for_change=true&last_etag=E&timeout_sec=N` until the
value's etag differs from E (at once if it already does; with the current value at the timeout).
Guest attributes are writable with PUT, as from inside a VM.

An admin API outside `/computeMetadata/` lets tests and the simulator act as Compute Engine:
`PUT /emulator/v1/<path>` with the value as body sets a key, `DELETE` removes it,
`POST /emulator/v1/fault` with `{"mode": "garbage" | "no-flavor" | "503" | "drip" | "ok", "count": N}` makes
the next N answers misbehave; `drip` sends each answer (status line and headers included) one byte
every `interval` seconds (default 2), the slow server a timeout per read never ends.
`survivor emulate metadata` runs it as a process.

`refuse_uid(uid)` closes it to one user's processes, as startup.sh's firewall rule closes the real
server to the trainer's user (an iptables `owner` match on the socket's owner, REJECT with a TCP
reset). The emulator reads the same fact: the owner of the connecting socket, the `uid` column of
its line in /proc/net/tcp (proc(5)), looked up when the connection is accepted; a refused connection
is closed before a byte is read, so the client sees the connection reset, never an answer.
"""

from __future__ import annotations

import hashlib
import json
import socket
import struct
import threading
import time

from survivor.local.http import LocalService, QuietHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

PREFIX = "/computeMetadata/v1/"
ADMIN = "/emulator/v1/"


def default_tree(
    *,
    project: str = "survivor-local",
    zone: str = "us-west1-b",
    name: str = "survivor-local-1",
    instance_id: str = "1234567890123456789",
    attributes: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The keys a fresh Spot VM shows, with the given identity and custom attributes."""
    return {
        "instance": {
            "id": instance_id,
            "name": name,
            "hostname": f"{name}.{zone}.c.{project}.internal",
            "zone": f"projects/123456789012/zones/{zone}",
            "machine-type": "projects/123456789012/machineTypes/n1-standard-16",
            "preempted": "FALSE",
            "maintenance-event": "NONE",
            "attributes": dict(attributes or {}),
            "guest-attributes": {},
            "service-accounts": {
                "default": {
                    "email": f"survivor@{project}.iam.gserviceaccount.com",
                    "scopes": "https://www.googleapis.com/auth/devstorage.read_write\nhttps://www.googleapis.com/auth/compute",
                    "token": json.dumps({"access_token": "emulated-token", "expires_in": 3599, "token_type": "Bearer"}),
                }
            },
        },
        "project": {"project-id": project, "numeric-project-id": "123456789012", "attributes": {}},
    }


def socket_owner(local: tuple[str, int], remote: tuple[str, int], table: str = "/proc/net/tcp") -> int | None:
    """The uid that owns the IPv4 TCP socket from `local` to `remote` on this host (its line of
    /proc/net/tcp, proc(5): addresses as hex in host byte order, the uid in the eighth column), or
    None when no such socket is listed."""

    def hexed(address: tuple[str, int]) -> str:
        return "%08X:%04X" % (struct.unpack("=I", socket.inet_aton(address[0]))[0], address[1])

    wanted = (hexed(local), hexed(remote))
    try:
        with open(table, encoding="ascii") as f:
            next(f, None)  # the header
            for line in f:
                fields = line.split()
                if len(fields) > 7 and (fields[1], fields[2]) == wanted:
                    return int(fields[7])
    except (OSError, ValueError):
        return None
    return None


def _etag(value: Any) -> str:
    return hashlib.sha1(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


class MetadataServer(LocalService):
    """The emulator. Thread-safe; `start()` serves on 127.0.0.1 in a daemon thread."""

    thread_name = "metadata-emulator"

    def __init__(self, tree: dict[str, Any] | None = None, *, port: int = 0, **identity: Any):
        self.tree = tree or default_tree(**identity)
        self._cond = threading.Condition()
        self._fault: tuple[str, int] = ("ok", 0)
        self._drip_interval = 2.0
        self._stopping = threading.Event()
        self.requests = 0
        self.refused_uids: set[int] = set()
        self.refused = 0  # connections closed by `refuse_uid`
        self._listen(port, self._handler_class())
        self._httpd.admit = self._admits

    # -- lifecycle --------------------------------------------------------------------------------

    @property
    def host(self) -> str:
        """`127.0.0.1:PORT`, the value for GCE_METADATA_HOST."""
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        """Stops the server and wakes every hanging GET so it returns."""
        self._stopping.set()  # dripping answers stop
        with self._cond:
            self._cond.notify_all()  # hanging GETs return
        super().stop()

    def refuse_uid(self, uid: int) -> None:
        """Closes the server to connections from sockets `uid` owns (the trainer's user on a VM)."""
        self.refused_uids.add(uid)

    def _admits(self, request: socket.socket, client: Any) -> bool:
        if not self.refused_uids:
            return True
        owner = socket_owner(client[:2], request.getsockname()[:2])
        if owner in self.refused_uids:
            self.refused += 1
            return False
        return True

    # -- the tree ---------------------------------------------------------------------------------

    def _lookup(self, path: str) -> Any:
        node: Any = self.tree
        for part in [p for p in path.strip("/").split("/") if p]:
            if not isinstance(node, dict) or part not in node:
                raise KeyError(path)
            node = node[part]
        return node

    def get(self, path: str) -> Any:
        """Returns the value (str) or directory (dict copy) at `path`."""
        with self._cond:
            value = self._lookup(path)
            return json.loads(json.dumps(value))

    def set(self, path: str, value: str) -> None:
        """Sets a leaf, creating directories on the way, and wakes hanging GETs."""
        parts = [p for p in path.strip("/").split("/") if p]
        with self._cond:
            node = self.tree
            for part in parts[:-1]:
                node = node.setdefault(part, {})
            node[parts[-1]] = value
            self._cond.notify_all()

    def delete(self, path: str) -> None:
        """Removes a metadata value (and wakes the hanging GETs watching it)."""
        parts = [p for p in path.strip("/").split("/") if p]
        with self._cond:
            node = self._lookup("/".join(parts[:-1]))
            node.pop(parts[-1], None)
            self._cond.notify_all()

    def fault(self, mode: str, count: int = 1, interval: float = 2.0) -> None:
        """Makes the next `count` metadata answers misbehave: `garbage`, `no-flavor`, `503`, `drip` (a
        byte every `interval` seconds); `ok` clears."""
        with self._cond:
            self._fault = (mode, count)
            self._drip_interval = interval

    def faults_left(self) -> int:
        """How many of the answers `fault` asked to misbehave have not been taken yet (0 when `ok`)."""
        with self._cond:
            mode, count = self._fault
            return 0 if mode == "ok" else max(count, 0)

    def _take_fault(self) -> str:
        with self._cond:
            mode, count = self._fault
            if mode == "ok" or count <= 0:
                return "ok"
            self._fault = (mode, count - 1)
            return mode

    def _wait(self, path: str, last_etag: str, timeout: float) -> tuple[Any, str]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                value = self._lookup(path)
                etag = _etag(value)
                remaining = deadline - time.monotonic()
                if etag != last_etag or remaining <= 0:
                    return json.loads(json.dumps(value)), etag
                self._cond.wait(remaining)

    # -- HTTP -------------------------------------------------------------------------------------

    def _handler_class(self):
        server = self

        class Handler(QuietHandler):
            drip = False

            def _send(
                self,
                status: int,
                body: str | bytes,
                *,
                etag: str | None = None,
                content_type: str = "application/text",
                flavor: bool = True,
            ) -> None:
                data = body.encode() if isinstance(body, str) else body
                if self.drip:
                    return self._drip(status, data, etag, content_type, flavor)
                self.send_response(status)
                if flavor:
                    self.send_header("Metadata-Flavor", "Google")
                if etag:
                    self.send_header("ETag", etag)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _drip(self, status: int, data: bytes, etag: str | None, content_type: str, flavor: bool) -> None:
                head = [
                    f"HTTP/1.1 {status} {self.responses.get(status, ('',))[0]}",
                    f"Content-Type: {content_type}",
                    f"Content-Length: {len(data)}",
                ]
                head += ["Metadata-Flavor: Google"] if flavor else []
                head += [f"ETag: {etag}"] if etag else []
                raw = ("\r\n".join(head) + "\r\n\r\n").encode() + data
                self.close_connection = True
                for i in range(len(raw)):
                    if server._stopping.wait(server._drip_interval):
                        return
                    self.wfile.write(raw[i : i + 1])

            def _body(self) -> bytes:
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def do_GET(self):
                url = urlsplit(self.path)
                if url.path.startswith(ADMIN):
                    return self._admin_get(url.path[len(ADMIN) :])
                if not url.path.startswith(PREFIX):
                    return self._send(404, "not found", flavor=False)
                server.requests += 1
                if self.headers.get("Metadata-Flavor") != "Google":
                    return self._send(403, "Missing required header: Metadata-Flavor")
                fault = server._take_fault()
                self.drip = fault == "drip"
                if fault == "503":
                    return self._send(503, "service unavailable")
                if fault == "garbage":
                    return self._send(200, b"\x00\xffnot-metadata", flavor=False, content_type="text/html")
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                path = url.path[len(PREFIX) :]
                try:
                    if query.get("wait_for_change") == "true":
                        timeout = min(float(query.get("timeout_sec", "60")), 3600.0)
                        value, etag = server._wait(path, query.get("last_etag", "NONE"), timeout)
                    else:
                        value = server.get(path)
                        etag = _etag(value)
                except KeyError:
                    return self._send(404, "not found", flavor=fault != "no-flavor")
                flavor = fault != "no-flavor"
                if isinstance(value, dict):
                    if query.get("recursive") == "true" or query.get("alt") == "json":
                        return self._send(
                            200, json.dumps(value), etag=etag, content_type="application/json", flavor=flavor
                        )
                    if not path.endswith("/") and path:
                        # the real server redirects a directory without a trailing slash
                        self.send_response(301)
                        self.send_header("Location", url.path + "/")
                        self.send_header("Metadata-Flavor", "Google")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    listing = "".join(f"{k}/\n" if isinstance(v, dict) else f"{k}\n" for k, v in value.items())
                    return self._send(200, listing, etag=etag, flavor=flavor)
                if query.get("alt") == "json":
                    return self._send(200, json.dumps(value), etag=etag, content_type="application/json", flavor=flavor)
                if path.startswith("instance/service-accounts/") and path.endswith("/token"):
                    # a JSON document, which google-auth parses only when the server says so
                    return self._send(200, str(value), etag=etag, content_type="application/json", flavor=flavor)
                return self._send(200, str(value), etag=etag, flavor=flavor)

            def do_PUT(self):
                url = urlsplit(self.path)
                body = self._body().decode()
                if url.path.startswith(ADMIN):
                    server.set(url.path[len(ADMIN) :], body)
                    return self._send(200, "ok", flavor=False)
                path = url.path[len(PREFIX) :] if url.path.startswith(PREFIX) else ""
                if self.headers.get("Metadata-Flavor") != "Google":
                    return self._send(403, "Missing required header: Metadata-Flavor")
                if not path.startswith("instance/guest-attributes/") or path.count("/") != 3:
                    return self._send(405, "only instance/guest-attributes/NAMESPACE/KEY is writable")
                self.drip = server._fault[0] == "drip" and server._fault[1] > 0  # slow for writes too
                server.set(path, body)
                return self._send(200, "")

            def do_DELETE(self):
                url = urlsplit(self.path)
                if not url.path.startswith(ADMIN):
                    return self._send(405, "method not allowed")
                server.delete(url.path[len(ADMIN) :])
                return self._send(200, "ok", flavor=False)

            def do_POST(self):
                url = urlsplit(self.path)
                if url.path == ADMIN + "fault":
                    spec = json.loads(self._body() or b"{}")
                    server.fault(spec.get("mode", "ok"), int(spec.get("count", 1)), float(spec.get("interval", 2.0)))
                    return self._send(200, "ok", flavor=False)
                return self._send(404, "not found", flavor=False)

            def _admin_get(self, path: str):
                try:
                    value = server.get(path)
                except KeyError:
                    return self._send(404, "not found", flavor=False)
                return self._send(200, json.dumps(value), content_type="application/json", flavor=False)

        return Handler


def serve_forever(port: int, attributes: dict[str, str], **identity: Any) -> None:
    """Runs the emulator in the foreground (for `survivor emulate metadata`)."""
    server = MetadataServer(port=port, attributes=attributes, **identity).start()
    print(f"metadata emulator on {server.host}; export GCE_METADATA_HOST={server.host}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()
