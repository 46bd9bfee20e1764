"""The Compute Engine metadata server, as the agent sees it.

    >>> md = MetadataClient()                       # honours GCE_METADATA_HOST
    >>> md.get("instance/name")
    'cifar10-managed-x1z2'
    >>> value, etag = md.wait_for_change("instance/preempted", last_etag="NONE", timeout_sec=60)

Every request carries `Metadata-Flavor: Google` and every answer must carry it back: anything else
is not a metadata server (a captive portal, a proxy, a wrong `GCE_METADATA_HOST`) and is refused.
503s and connection errors are retried (`survivor.retry.metadata`); a 404 is an answer, not an error
worth retrying.
"""

from __future__ import annotations

import json
import os
from typing import Any

import requests

from survivor import retry

DEFAULT_HOST = "metadata.google.internal"
HOST_ENV = "GCE_METADATA_HOST"
FLAVOR = {"Metadata-Flavor": "Google"}


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


class MetadataClient:
    """A thin client for the metadata server's v1 API. Thread-safe for concurrent calls."""

    def __init__(self, host: str | None = None, timeout: float = 5.0, retrying=retry.metadata):
        self.host = host or metadata_host()
        self.retrying = retrying
        self.base = f"http://{self.host}/computeMetadata/v1/"
        self.timeout = timeout
        self._session = requests.Session()
        self._session.trust_env = False  # a proxy must never stand between us and the metadata server

    def _request(self, method: str, path: str, *, params=None, data=None, timeout=None) -> requests.Response:
        url = self.base + path.lstrip("/")
        try:
            for attempt in self.retrying():
                with attempt:
                    response = self._session.request(
                        method, url, params=params, data=data, headers=FLAVOR, timeout=timeout or self.timeout
                    )
                    if response.status_code in retry.TRANSIENT_STATUSES:
                        raise retry.TransientHTTPError(url, response.status_code)
        except retry.TransientHTTPError as exc:
            raise MetadataError(url, f"HTTP {exc.status} after retries") from exc
        except requests.RequestException as exc:
            raise MetadataError(url, f"cannot connect ({type(exc).__name__}: {exc})") from exc
        if response.headers.get("Metadata-Flavor") != "Google":
            raise MetadataError(url, "the answer lacks the header Metadata-Flavor: Google; this is not a metadata server")
        if response.status_code == 404:
            raise MetadataNotFound(url, "no such key (HTTP 404)")
        if response.status_code >= 400:
            raise MetadataError(url, f"HTTP {response.status_code}: {response.text[:200]}")
        return response

    def get(self, path: str) -> str:
        """Returns the text value at `path` (e.g. `instance/zone`). Raises MetadataNotFound, MetadataError."""
        return self._request("GET", path).text

    def get_json(self, path: str) -> Any:
        """Returns the directory at `path` as a JSON tree (`recursive=true&alt=json`)."""
        response = self._request("GET", path, params={"recursive": "true", "alt": "json"})
        try:
            return response.json()
        except ValueError as exc:
            raise MetadataError(response.url, "answered text that is not JSON") from exc

    def get_or(self, path: str, default: str | None = None) -> str | None:
        """Returns the value at `path`, or `default` when the key does not exist."""
        try:
            return self.get(path)
        except MetadataNotFound:
            return default

    def wait_for_change(self, path: str, last_etag: str = "NONE", timeout_sec: int = 60) -> tuple[str, str]:
        """Hanging GET: returns (value, etag) once the value's etag differs from `last_etag`, or at
        `timeout_sec` with the current value. Start with `NONE` to get the value at once."""
        response = self._request(
            "GET",
            path,
            params={"wait_for_change": "true", "last_etag": last_etag, "timeout_sec": str(timeout_sec)},
            timeout=timeout_sec + 10,  # the guest agent's margin over the server-side timeout
        )
        return response.text, response.headers.get("ETag", "NONE")

    def attributes(self) -> dict[str, str]:
        """Returns every instance attribute (custom metadata) as a dict of strings."""
        tree = self.get_json("instance/attributes/")
        if not isinstance(tree, dict):
            raise MetadataError(self.base + "instance/attributes/", "attributes are not a JSON object")
        return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in tree.items()}

    def put_guest_attribute(self, namespace: str, key: str, value: str) -> None:
        """Writes a guest attribute that `instances.getGuestAttributes` shows from outside. Keep rare."""
        self._request("PUT", f"instance/guest-attributes/{namespace}/{key}", data=value.encode())

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
    """Where the agent runs. `created_by` is the managing MIG's URL for MIG-created instances."""

    def __init__(self, project: str, zone: str, name: str, instance_id: str = "", created_by: str | None = None):
        self.project = project
        self.zone = zone
        self.name = name
        self.instance_id = instance_id
        self.created_by = created_by

    @property
    def region(self) -> str:
        """The zone's region: `us-west1-b` -> `us-west1`."""
        return self.zone.rsplit("-", 1)[0]

    def __repr__(self) -> str:
        return f"InstanceIdentity({self.project}/{self.zone}/{self.name}, created_by={self.created_by})"
