"""The Compute Engine metadata server, as the agent sees it.

    >>> md = MetadataClient()                       # honours GCE_METADATA_HOST
    >>> md.get("instance/name")
    'cifar10-managed-x1z2'
    >>> value, etag = md.wait_for_change("instance/preempted", last_etag="NONE", timeout_sec=60)

Every request carries `Metadata-Flavor: Google` and every answer must carry it back: anything else
is not a metadata server (a captive portal, a proxy, a wrong `GCE_METADATA_HOST`) and is refused.
503s and connection errors are retried (`survivor.retry.METADATA`, which logs each retry); a 404 is
an answer, not an error worth retrying.

Every call has a total deadline, not only a timeout per read: one attempt (connect, send, the whole
answer) gets `timeout` seconds and the call with its retries `deadline` seconds. A timeout per read
(what `requests` offers) lets a server that sends a byte every few seconds hold a caller for ever.
The answer is read straight from the socket with the time left as each read's timeout.
"""

from __future__ import annotations

import functools
import http.client
import io
import json
import os
import socket
import time
from typing import Any, Literal, cast
from urllib.parse import urlencode

from survivor import retry
from survivor.places import region_of_zone

DEFAULT_HOST = "metadata.google.internal"
HOST_ENV = "GCE_METADATA_HOST"
FLAVOR = {"Metadata-Flavor": "Google"}
#: The largest answer read. A value holds at most 256 KiB and all of an instance's metadata 512 KB
#: (Compute v1 `Metadata`, https://cloud.google.com/compute/docs/reference/rest/v1/instances);
#: a recursive JSON tree of that escapes to less than four times as much.
MAX_ANSWER = 4 * 1024 * 1024


class MetadataError(Exception):
    """The metadata server could not be asked, or did not answer like one. Names the URL."""

    def __init__(self, url: str, reason: str):
        super().__init__(f"metadata server {url}: {reason}")
        self.url = url
        self.reason = reason


class MetadataNotFound(MetadataError):
    """The key does not exist (HTTP 404)."""


def metadata_host() -> str:
    """The host[:port] to ask: `GCE_METADATA_HOST` when set, else metadata.google.internal."""
    return os.environ.get(HOST_ENV) or DEFAULT_HOST


class Answer:
    """One complete HTTP answer: status, headers, body."""

    def __init__(self, url: str, status: int, headers: http.client.HTTPMessage, body: bytes):
        self.url = url
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def text(self) -> str:
        """The body as text (UTF-8, undecodable bytes replaced)."""
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)


class _DeadlineReader(io.RawIOBase):
    """A socket read with the time left before `deadline` as each read's timeout."""

    def __init__(self, sock: socket.socket, deadline: float):
        self.sock = sock
        self.deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no complete answer in time")
        self.sock.settimeout(left)
        return self.sock.recv_into(buffer)


class _DeadlineResponse(http.client.HTTPResponse):
    """http.client's response parser, reading through a `_DeadlineReader`."""

    def __init__(self, sock: socket.socket, *args: Any, deadline: float, **kwargs: Any):
        super().__init__(sock, *args, **kwargs)
        self.fp.close()
        self.fp = io.BufferedReader(_DeadlineReader(sock, deadline))


class MetadataClient:
    """A thin client for the metadata server's v1 API. Thread-safe (a connection per call).

    `timeout`: seconds for one attempt, from connecting to the answer's last byte. `deadline`:
    seconds for a whole call, its retries included (a hanging GET gets its own, longer one).
    `retrying`: makes the tenacity loop of one call (`survivor.retry.metadata`; `retry.once` for
    a single attempt). `wait_margin`: seconds a hanging GET waits beyond its `timeout_sec` (the
    guest agent's margin over the server-side timeout).
    """

    WAIT_MARGIN = 10.0

    def __init__(
        self,
        host: str | None = None,
        timeout: float = retry.METADATA.attempt_seconds,
        retrying=retry.metadata,
        deadline: float = retry.METADATA.total,
        wait_margin: float = WAIT_MARGIN,
    ):
        self.host = host or metadata_host()
        self.wait_margin = wait_margin
        self.retrying = retrying
        self.base = f"http://{self.host}/computeMetadata/v1/"
        self.timeout = timeout
        self.deadline = deadline

    def _request(self, method: str, path: str, *, params=None, data=None, timeout=None, deadline=None) -> Answer:
        url = self.base + path.lstrip("/") + (f"?{urlencode(params)}" if params else "")
        per_attempt = timeout or self.timeout
        total = deadline if deadline is not None else max(self.deadline, per_attempt)
        per_attempt = min(per_attempt, total)
        ends = time.monotonic() + total
        late = f"no complete answer in time ({per_attempt:g} s an attempt, {total:g} s in all)"
        try:
            for attempt in self.retrying():
                with attempt:
                    left = ends - time.monotonic()
                    if left <= 0:
                        raise MetadataError(url, late)
                    answer = self._once(method, url, data, min(per_attempt, left))
                    if answer.status in retry.TRANSIENT_STATUSES:
                        raise retry.TransientHTTPError(url, answer.status)
        except retry.TransientHTTPError as exc:
            raise MetadataError(url, f"HTTP {exc.status} after retries") from exc
        except TimeoutError as exc:
            raise MetadataError(url, late) from exc
        except (OSError, http.client.HTTPException) as exc:
            raise MetadataError(url, f"cannot connect ({type(exc).__name__}: {exc})") from exc
        if answer.headers.get("Metadata-Flavor") != "Google":
            raise MetadataError(
                url, "the answer lacks the header Metadata-Flavor: Google; this is not a metadata server"
            )
        if answer.status == 404:
            raise MetadataNotFound(url, "no such key (HTTP 404)")
        if answer.status >= 400:
            raise MetadataError(url, f"HTTP {answer.status}: {answer.text[:200]}")
        if answer.status >= 300:
            raise MetadataError(url, f"HTTP {answer.status} (a directory needs a trailing slash)")
        return answer

    def _once(self, method: str, url: str, data: bytes | None, seconds: float) -> Answer:
        """One request, all of it within `seconds`."""
        deadline = time.monotonic() + seconds
        host, _, port = self.host.partition(":")
        conn = http.client.HTTPConnection(host, int(port) if port else 80, timeout=seconds)
        # http.client only calls response_class(sock, method=...): a partial of the class does as well
        conn.response_class = cast(
            "type[http.client.HTTPResponse]", functools.partial(_DeadlineResponse, deadline=deadline)
        )
        try:
            conn.request(method, url[len(f"http://{self.host}") :], body=data, headers=FLAVOR)
            response = conn.getresponse()
            body = response.read(MAX_ANSWER + 1)
            if len(body) > MAX_ANSWER:
                raise http.client.HTTPException(f"an answer larger than {MAX_ANSWER} bytes")
            return Answer(url, response.status, response.headers, body)
        finally:
            conn.close()

    def get(self, path: str, deadline: float | None = None) -> str:
        """Returns the text value at `path` (e.g. `instance/zone`), within `deadline` seconds if given
        (retries included). Raises MetadataNotFound, MetadataError."""
        return self._request("GET", path, deadline=deadline).text

    def get_json(self, path: str) -> Any:
        """Returns the directory at `path` as a JSON tree (`recursive=true&alt=json`)."""
        response = self._request("GET", path, params={"recursive": "true", "alt": "json"})
        try:
            return response.json()
        except (ValueError, RecursionError) as exc:
            raise MetadataError(response.url, "answered text that is not JSON") from exc

    def get_or(self, path: str, default: str | None = None, deadline: float | None = None) -> str | None:
        """Returns the value at `path`, or `default` when the key does not exist."""
        try:
            return self.get(path, deadline=deadline)
        except MetadataNotFound:
            return default

    def wait_for_change(self, path: str, last_etag: str = "NONE", timeout_sec: int = 60) -> tuple[str, str]:
        """Hanging GET: returns (value, etag) once the value's etag differs from `last_etag`, or at
        `timeout_sec` with the current value. Start with `NONE` to get the value at once."""
        response = self._request(
            "GET",
            path,
            params={"wait_for_change": "true", "last_etag": last_etag, "timeout_sec": str(timeout_sec)},
            timeout=timeout_sec + self.wait_margin,
        )
        return response.text, response.headers.get("ETag", "NONE")

    def attributes(self) -> dict[str, str]:
        """Returns every instance attribute (custom metadata) as a dict of strings."""
        tree = self.get_json("instance/attributes/")
        if not isinstance(tree, dict):
            raise MetadataError(self.base + "instance/attributes/", "attributes are not a JSON object")
        return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in tree.items()}

    def put_guest_attribute(self, namespace: str, key: str, value: str) -> None:
        """Writes a guest attribute that `instances.getGuestAttributes` shows from outside. Keep rare:
        one attempt's time at most, since nothing waits on it."""
        self._request("PUT", f"instance/guest-attributes/{namespace}/{key}", data=value.encode(), deadline=self.timeout)

    def identity(self) -> "InstanceIdentity":
        """Returns who this VM is: project, zone, name, and the MIG that created it, if any."""
        zone_path = self.get("instance/zone")  # projects/NUM/zones/ZONE
        return InstanceIdentity(
            project=self.get("project/project-id"),
            zone=zone_path.rsplit("/", 1)[-1],
            name=self.get("instance/name"),
            instance_id=self.get_or("instance/id", "") or "",
            created_by=self.get_or("instance/attributes/created-by"),
        )


class InstanceIdentity:
    """Where the agent runs. `created_by` is the managing MIG's URL for MIG-created instances;
    `project` is None off Compute Engine (no metadata server)."""

    def __init__(self, project: str | None, zone: str, name: str, instance_id: str = "", created_by: str | None = None):
        self.project = project
        self.zone = zone
        self.name = name
        self.instance_id = instance_id
        self.created_by = created_by

    @property
    def region(self) -> str:
        """The zone's region: `us-west1-b` -> `us-west1`."""
        return region_of_zone(self.zone)

    def __repr__(self) -> str:
        return f"InstanceIdentity({self.project}/{self.zone}/{self.name}, created_by={self.created_by})"


#: The metadata keys that announce the VM's end: a Spot/preemptible preemption, and host maintenance
#: (https://cloud.google.com/compute/docs/instances/spot#preemption and
#: https://cloud.google.com/compute/docs/metadata/predefined-metadata-keys).
WATCHED_KEYS = ("instance/preempted", "instance/maintenance-event")


#: The notices the metadata server gives: a Spot preemption, or a maintenance event that will stop the VM.
MetadataNotice = Literal["preempted", "maintenance"]


def notice_from_metadata(key: str, value: str) -> MetadataNotice | None:
    """Pure decision: the notice source a metadata value means, or None for "keep training"."""
    value = value.strip().upper()
    if key == "instance/preempted" and value == "TRUE":
        return "preempted"
    if key == "instance/maintenance-event" and value.startswith("TERMINATE"):
        return "maintenance"
    return None
