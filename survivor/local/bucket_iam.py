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

from survivor.local.http import LocalService, QuietHandler, send_json

_IAM = re.compile(r"^/storage/v1/b/([^/]+)/iam(/testPermissions)?$")
_BUCKET = re.compile(r"^/storage/v1/b/([^/]+)$")


def default_bindings(project: str) -> list[dict]:
    """The bindings Cloud Storage gives a new bucket: the project's owners and editors own it, its viewers read it."""
    return [{"role": "roles/storage.legacyBucketOwner", "members": [f"projectEditor:{project}", f"projectOwner:{project}"]},
            {"role": "roles/storage.legacyBucketReader", "members": [f"projectViewer:{project}"]}]


class BucketIam(LocalService):
    """A pass-through proxy to `upstream` (fake-gcs-server) that serves bucket IAM policies."""

    thread_name = "bucket-iam"

    def __init__(self, upstream: str, project: str = "survivor-local", port: int = 0):
        self.upstream = upstream.rstrip("/")
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
            self.policies[bucket] = {"kind": "storage#policy", "resourceId": f"projects/_/buckets/{bucket}",
                                     "version": 1, "etag": f"CA{self._changes[bucket]}", "bindings": bindings}

    def policy(self, bucket: str) -> dict:
        """A copy of a bucket's IAM policy as getIamPolicy returns it; a bucket never set has the default bindings."""
        with self.lock:
            if bucket not in self.policies:
                self.policies[bucket] = {"kind": "storage#policy", "resourceId": f"projects/_/buckets/{bucket}",
                                         "version": 1, "etag": "CA1", "bindings": default_bindings(self.project)}
            return json.loads(json.dumps(self.policies[bucket]))

    def set_location(self, bucket: str, location: str, location_type: str,
                     data_locations: tuple[str, ...] = ()) -> None:
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
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length", "connection")}
                answer = stand_in._session.request(self.command, stand_in.upstream + self.path, data=body,
                                                   headers=headers, allow_redirects=False, timeout=120)
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

            def _serve(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
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
                    return send_json(self, 404, {"error": {"code": 404, "message": message,
                                                           "errors": [{"message": message, "reason": "notFound"}]}})
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
                raise SystemExit(f"error: --grant {bucket}={role}: bucket {bucket} does not exist; add --bucket {bucket}")
            bindings = iam.policy(bucket)["bindings"]
            bindings.append({"role": role, "members": [account]})
            iam.set_bindings(bucket, bindings)
        print(f"Cloud Storage emulator on {iam.endpoint} (fake-gcs-server, bucket IAM in front; buckets: "
              f"{', '.join(buckets) or 'none'}); export STORAGE_EMULATOR_HOST={iam.endpoint}", flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        gcs.stop()
