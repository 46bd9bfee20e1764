"""A Secret Manager stand-in for google-cloud-secret-manager's REST transport: AccessSecretVersion and
the secret's IAM policy, on 127.0.0.1.

    >>> with SecretManagerServer() as secrets:
    ...     name = secrets.add("survivor-local", "slack-hook", b"https://hooks.slack.com/services/T/B/X")
    ...     secrets.grant("survivor-local", "slack-hook", "serviceAccount:vm@p.iam.gserviceaccount.com")

What the API does, held to: `GET /v1/projects/P/secrets/S/versions/V:access` answers
`{"name", "payload": {"data": base64, "dataCrc32c": "int64"}}` with the version's number in its
name (`latest` resolved to the newest enabled version), 404 NOT_FOUND for a secret or version that
does not exist, and 403 PERMISSION_DENIED naming `secretmanager.versions.access` when `denied` is
set (the VM's account without roles/secretmanager.secretAccessor). `GET .../secrets/S:getIamPolicy`
answers the secret's policy (`grant` adds a member to secretAccessor), which preflight reads.
"""

from __future__ import annotations

import base64
import re
import threading

import google_crc32c

from survivor.local.http import LocalService, QuietHandler, send_google_error, send_json

ACCESS = re.compile(r"/v1/projects/([^/]+)/secrets/([^/]+)/versions/([^/:]+):access")
POLICY = re.compile(r"/v1/projects/([^/]+)/secrets/([^/:]+):getIamPolicy")


class SecretManagerServer(LocalService):
    """Holds secrets (their versions' payloads) and each secret's accessors."""

    thread_name = "secret-manager-fake"

    def __init__(self, port: int = 0):
        self.versions: dict[tuple[str, str], list[bytes]] = {}
        self.accessors: dict[tuple[str, str], set[str]] = {}
        self.denied = False  # every access refused: the reader lacks secretmanager.versions.access
        self.accessed: list[str] = []
        self._lock = threading.Lock()
        self._listen(port, self._handler())

    def add(self, project: str, secret: str, data: bytes) -> str:
        """Adds a version to `secret` (made if new); returns its name."""
        with self._lock:
            versions = self.versions.setdefault((project, secret), [])
            versions.append(data)
            return f"projects/{project}/secrets/{secret}/versions/{len(versions)}"

    def grant(self, project: str, secret: str, member: str) -> None:
        """Gives `member` roles/secretmanager.secretAccessor on `secret`."""
        with self._lock:
            self.accessors.setdefault((project, secret), set()).add(member)

    def _handler(self):
        server = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                policy = POLICY.fullmatch(path)
                if policy:
                    key = (policy.group(1), policy.group(2))
                    if key not in server.versions:
                        return send_google_error(
                            self, 404, "NOT_FOUND", f"Secret [projects/{key[0]}/secrets/{key[1]}] not found."
                        )
                    members = sorted(server.accessors.get(key, ()))
                    bindings = [{"role": "roles/secretmanager.secretAccessor", "members": members}] if members else []
                    return send_json(self, 200, {"version": 1, "etag": "BwYA", "bindings": bindings})
                found = ACCESS.fullmatch(path)
                if not found:
                    return send_google_error(self, 404, "NOT_FOUND", f"no such method: GET {path}")
                project, secret, version = found.groups()
                name = f"projects/{project}/secrets/{secret}/versions/{version}"
                if server.denied:
                    return send_google_error(
                        self,
                        403,
                        "PERMISSION_DENIED",
                        f"Permission 'secretmanager.versions.access' "
                        f"denied for resource '{name}' (or it may not exist).",
                    )
                with server._lock:
                    versions = server.versions.get((project, secret))
                    number = len(versions or ()) if version == "latest" else int(version) if version.isdigit() else 0
                    if not versions or not 1 <= number <= len(versions):
                        return send_google_error(self, 404, "NOT_FOUND", f"Secret Version [{name}] not found.")
                    data = versions[number - 1]
                    server.accessed.append(name)
                send_json(
                    self,
                    200,
                    {
                        "name": f"projects/{project}/secrets/{secret}/versions/{number}",
                        "payload": {
                            "data": base64.b64encode(data).decode(),
                            "dataCrc32c": str(google_crc32c.value(data)),
                        },
                    },
                )

        return Handler
