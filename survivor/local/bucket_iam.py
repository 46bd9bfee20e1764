"""Bucket IAM in front of fake-gcs-server, which has no IAM routes of its own.

    >>> with BucketIam(upstream=gcs.url) as iam:          # STORAGE_EMULATOR_HOST -> iam.endpoint
    ...     iam.set_bindings("my-bucket", [{"role": "roles/storage.objectUser",
    ...                                     "members": ["serviceAccount:vm@p.iam.gserviceaccount.com"]}])

fake-gcs-server (fsouza/fake-gcs-server, `fakestorage/server.go`) routes buckets, objects, ACLs and
notifications, but not `GET|PUT /storage/v1/b/BUCKET/iam` nor `GET .../iam/testPermissions`. This
stand-in answers those three from a policy per bucket and passes every other request through, so
the real google-cloud-storage client's `get_iam_policy`, `set_iam_policy` and
`test_iam_permissions` work against it. It enforces nothing: it only reports policies. A bucket
nobody set a policy for has the default bindings Cloud Storage gives a new bucket
(https://cloud.google.com/storage/docs/access-control/iam#default-roles: the project's owners and
editors are legacyBucketOwner, its viewers legacyBucketReader). `testPermissions` answers for the
caller, who here is always the bucket's owner: every permission asked for, or 404 for a missing bucket.

fake-gcs-server gives every bucket one location, its `-location` flag's (default US-CENTRAL1), with
`locationType` always `region`, whatever `buckets.insert` asked for (checked with the client's
`create_bucket(location=...)` and with the JSON API's `location`, `locationType` and
`customPlacementConfig`). `set_location` makes this stand-in answer a bucket's `buckets.get` with the
location Cloud Storage would report for it (a region, a dual-region, a multi-region), so preflight's
location check reads it through the real client.

With `sts` (the Security Token Service stand-in, survivor/local/sts_server.py), it enforces the
Credential Access Boundary of the tokens that stand-in issued: a request bearing one is refused with
Cloud Storage's 403 unless a rule of its boundary names the request's bucket and a role that grants
the permission the request needs (`required_permission`; the roles' permissions are the product's
table, survivor/cloud/permissions.py). Any other request passes as before: fake-gcs-server
authenticates nobody, so the agent's own calls (anonymous, with STORAGE_EMULATOR_HOST) go through.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
from typing import Sequence
from urllib.parse import parse_qs, urlsplit

import requests

from survivor.cloud.permissions import ROLE_PERMISSIONS
from survivor.local.http import LocalService, QuietHandler, send_json
from survivor.local.sts_server import PREFIX, StsServer

_IAM = re.compile(r"^/storage/v1/b/([^/]+)/iam(/testPermissions)?$")
_BUCKET = re.compile(r"^/storage/v1/b/([^/]+)$")
BUCKET_PATH = re.compile(r"^/(?:download/|upload/)?storage/v1/b(?:/(?P<bucket>[^/]+)(?P<rest>/.*)?)?$")
#: The principal a token bounded by a Credential Access Boundary is named as in a 403.
BOUNDED = "a token downscoped by a Credential Access Boundary"


def required_permission(method: str, path: str) -> str | None:
    """Pure: the IAM permission a JSON API request needs (None for a path that is not one).

    https://cloud.google.com/storage/docs/access-control/iam-permissions says what each permission allows.
    """
    match = BUCKET_PATH.match(urlsplit(path).path)
    if not match:
        return None
    bucket, rest = match.group("bucket"), match.group("rest") or ""
    method = method.upper()
    if bucket is None:
        return "storage.buckets.create" if method == "POST" else "storage.buckets.list"
    if not rest:
        return {"GET": "storage.buckets.get", "DELETE": "storage.buckets.delete"}.get(method, "storage.buckets.update")
    if rest in ("/o", "/o/"):
        return (
            "storage.objects.list" if method == "GET" and not path.startswith("/upload/") else "storage.objects.create"
        )
    if rest.endswith(("/compose",)) or "/rewriteTo/" in rest or "/copyTo/" in rest:
        return "storage.objects.create"
    if path.startswith("/upload/"):
        return "storage.objects.create"
    return {"GET": "storage.objects.get", "DELETE": "storage.objects.delete"}.get(method, "storage.objects.update")


def forbidden_body(permission: str, principal: str) -> bytes:
    """Cloud Storage's 403 for a missing permission, in its words ("... does not have
    storage.objects.get access to the Google Cloud Storage object.", googleapis/java-storage#1372)."""
    what = "bucket" if permission.startswith("storage.buckets.") else "object"
    message = (
        f"{principal} does not have {permission} access to the Google Cloud Storage {what}. "
        f"Permission '{permission}' denied on resource (or it may not exist)."
    )
    return json.dumps(
        {
            "error": {
                "code": 403,
                "message": message,
                "errors": [{"message": message, "domain": "global", "reason": "forbidden"}],
            }
        }
    ).encode()


def boundary_denies(rules: list[dict], method: str, path: str) -> str | None:
    """Pure: the permission a request needs that a Credential Access Boundary's `rules` do not make
    available on its bucket, or None when they do. The boundary is the union of its rules, each an
    upper bound on one resource (a bucket: `//storage.googleapis.com/projects/_/buckets/NAME`)
    through roles (`inRole:ROLE`); a path that is no JSON API call of a bucket is denied."""
    permission = required_permission(method, path) or "storage.objects.get"
    match = BUCKET_PATH.match(urlsplit(path).path)
    if not match or match.group("bucket") is None:
        return permission
    resource = f"//storage.googleapis.com/projects/_/buckets/{match.group('bucket')}"
    for rule in rules:
        if rule.get("availableResource") != resource:
            continue
        for available in rule.get("availablePermissions", []):
            if permission in ROLE_PERMISSIONS.get(str(available).removeprefix("inRole:"), frozenset()):
                return None
    return permission


def default_bindings(project: str) -> list[dict]:
    """The bindings Cloud Storage gives a new bucket: the project's owners and editors own it, its viewers read it."""
    return [
        {"role": "roles/storage.legacyBucketOwner", "members": [f"projectEditor:{project}", f"projectOwner:{project}"]},
        {"role": "roles/storage.legacyBucketReader", "members": [f"projectViewer:{project}"]},
    ]


class BucketIam(LocalService):
    """A pass-through proxy to `upstream` (fake-gcs-server) that serves bucket IAM policies."""

    thread_name = "bucket-iam"

    def __init__(self, upstream: str, project: str = "survivor-local", port: int = 0, sts: StsServer | None = None):
        self.upstream = upstream.rstrip("/")
        self.sts = sts
        self.refused: list[tuple[str, str, str]] = []  # (method, path, permission) of each bounded token's 403
        self.project = project
        self.policies: dict[str, dict] = {}
        self._changes: dict[str, int] = {}
        self.locations: dict[str, dict] = {}  # bucket -> the location fields its buckets.get reports
        self.lock = threading.Lock()
        self._session = requests.Session()
        self._session.trust_env = False
        self._listen(port, self._handler_class())

    def set_bindings(self, bucket: str, bindings: list[dict]) -> None:
        """Replaces a bucket's policy bindings (as setIamPolicy would), with a new etag."""
        with self.lock:
            self._changes[bucket] = self._changes.get(bucket, 1) + 1
            self.policies[bucket] = {
                "kind": "storage#policy",
                "resourceId": f"projects/_/buckets/{bucket}",
                "version": 1,
                "etag": f"CA{self._changes[bucket]}",
                "bindings": bindings,
            }

    def policy(self, bucket: str) -> dict:
        """A copy of a bucket's IAM policy as getIamPolicy returns it; a bucket never set has the default bindings."""
        with self.lock:
            if bucket not in self.policies:
                self.policies[bucket] = {
                    "kind": "storage#policy",
                    "resourceId": f"projects/_/buckets/{bucket}",
                    "version": 1,
                    "etag": "CA1",
                    "bindings": default_bindings(self.project),
                }
            return json.loads(json.dumps(self.policies[bucket]))

    def set_location(
        self, bucket: str, location: str, location_type: str, data_locations: tuple[str, ...] = ()
    ) -> None:
        """What the bucket's `buckets.get` reports as its location: `location` (e.g. US-WEST1, NAM4, US),
        `locationType` (region, dual-region, multi-region) and, for a configurable dual-region, its
        `customPlacementConfig.dataLocations`."""
        fields: dict = {"location": location.upper(), "locationType": location_type}
        if data_locations:
            fields["customPlacementConfig"] = {"dataLocations": [r.upper() for r in data_locations]}
        with self.lock:
            self.locations[bucket] = fields

    def _bucket_exists(self, bucket: str) -> bool:
        return self._session.get(f"{self.upstream}/storage/v1/b/{bucket}", timeout=30).status_code == 200

    def _handler_class(self):
        stand_in = self

        class Handler(QuietHandler):
            def _forward(self, body: bytes) -> None:
                headers = {
                    k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length", "connection")
                }
                answer = stand_in._session.request(
                    self.command,
                    stand_in.upstream + self.path,
                    data=body,
                    headers=headers,
                    allow_redirects=False,
                    timeout=120,
                )
                content = answer.content
                self.send_response(answer.status_code)
                for key, value in answer.headers.items():
                    if key.lower() in ("content-length", "transfer-encoding", "connection", "content-encoding"):
                        continue
                    if key.lower() == "location":  # resumable upload sessions point back at the upstream
                        value = value.replace(stand_in.upstream, stand_in.endpoint)
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            def _bounded(self) -> bool:
                """Answers a request whose token the STS stand-in issued, unless its boundary allows it."""
                scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
                if stand_in.sts is None or scheme.lower() != "bearer" or not token.startswith(PREFIX):
                    return False
                rules = stand_in.sts.boundary_of(token)
                if rules is None:
                    message = "Invalid Credentials"
                    send_json(
                        self,
                        401,
                        {
                            "error": {
                                "code": 401,
                                "message": message,
                                "errors": [{"message": message, "reason": "authError"}],
                            }
                        },
                    )
                    return True
                denied = boundary_denies(rules, self.command, self.path)
                if denied is None:
                    return False
                with stand_in.lock:
                    stand_in.refused.append((self.command, self.path, denied))
                data = forbidden_body(denied, BOUNDED)
                self.send_response(403)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return True

            def _serve(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self._bounded():
                    return
                url = urlsplit(self.path)
                located = _BUCKET.match(url.path)
                if located and self.command == "GET" and located.group(1) in stand_in.locations:
                    answer = stand_in._session.get(stand_in.upstream + self.path, timeout=30)
                    if answer.status_code != 200:
                        return self._forward(body)
                    with stand_in.lock:
                        fields = dict(stand_in.locations[located.group(1)])
                    return send_json(self, 200, {**answer.json(), **fields})
                m = _IAM.match(url.path)
                if not m or self.command not in ("GET", "PUT"):
                    return self._forward(body)
                bucket = m.group(1)
                if not stand_in._bucket_exists(bucket):
                    message = "The specified bucket does not exist."
                    return send_json(
                        self,
                        404,
                        {
                            "error": {
                                "code": 404,
                                "message": message,
                                "errors": [{"message": message, "reason": "notFound"}],
                            }
                        },
                    )
                if m.group(2):  # testPermissions: the caller owns every fake bucket
                    asked = parse_qs(url.query).get("permissions", [])
                    return send_json(self, 200, {"kind": "storage#testIamPermissionsResponse", "permissions": asked})
                if self.command == "PUT":
                    stand_in.set_bindings(bucket, json.loads(body or b"{}").get("bindings", []))
                return send_json(self, 200, stand_in.policy(bucket))

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve

        return Handler


def serve_forever(port: int, *, project: str, buckets: Sequence[str] = (), grants: Sequence[str] = ()) -> None:
    """fake-gcs-server behind this stand-in, in the foreground (for `survivor emulate storage`).

    `buckets`: created at start (gcloud cannot reach an emulator); `grants`: `BUCKET=ROLE` bindings for
    the Compute fake's default service account, as `gcloud storage buckets add-iam-policy-binding` would
    add them."""
    from google.api_core.exceptions import GoogleAPICallError

    from survivor.local.compute_server import PROJECT_NUMBER
    from survivor.local.gcs import StorageEmulator

    account = f"serviceAccount:{PROJECT_NUMBER}-compute@developer.gserviceaccount.com"
    parsed = []
    for item in grants:
        bucket, _, role = item.partition("=")
        if not (bucket and role.startswith("roles/")):
            raise SystemExit(f"error: --grant {item!r}: expected BUCKET=ROLE, e.g. my-bucket=roles/storage.objectUser")
        parsed.append((bucket, role))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # `kill` stops fake-gcs-server too, like Ctrl-C
    gcs = StorageEmulator().start()
    try:
        try:
            iam = BucketIam(upstream=gcs.url, project=project, port=port).start()
        except OSError as exc:
            raise SystemExit(f"error: --port {port}: {exc.strerror}; pick another port") from None
        os.environ["STORAGE_EMULATOR_HOST"] = iam.endpoint
        for bucket in buckets:
            try:
                gcs.create_bucket(bucket)
            except GoogleAPICallError as exc:
                raise SystemExit(f"error: --bucket {bucket!r}: {exc.message}") from None
        for bucket, role in parsed:
            if bucket not in buckets and not iam._bucket_exists(bucket):
                raise SystemExit(
                    f"error: --grant {bucket}={role}: bucket {bucket} does not exist; add --bucket {bucket}"
                )
            bindings = iam.policy(bucket)["bindings"]
            bindings.append({"role": role, "members": [account]})
            iam.set_bindings(bucket, bindings)
        print(
            f"Cloud Storage emulator on {iam.endpoint} (fake-gcs-server, bucket IAM in front; buckets: "
            f"{', '.join(buckets) or 'none'}); export STORAGE_EMULATOR_HOST={iam.endpoint}",
            flush=True,
        )
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        gcs.stop()
