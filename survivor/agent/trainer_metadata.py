"""The trainer's metadata server: a token that reads the job's data bucket, and nothing of the VM's.

    >>> server = TrainerMetadataServer("my-data-bucket", project="my-project").start()
    >>> env["GCE_METADATA_HOST"] = env["GCE_METADATA_IP"] = server.host   # 127.0.0.1:PORT
    >>> server.stop()

The trainer is not the VM. Any process on a VM may ask the metadata server for the VM service
account's token, and that account may create and delete instance groups (a move at boot needs it).
So the trainer's user is refused the real metadata server (startup.sh's firewall rule), and the
agent serves the trainer this stand-in of it on 127.0.0.1, with one token: the VM's own, exchanged
at the Security Token Service for a downscoped one whose Credential Access Boundary allows
`roles/storage.objectViewer` on the bucket of the spec's `data_dir` and nothing else
(google-auth's `downscoped.Credentials`). A job without a `gs://` data dir gets no token at all.
docs/trainer-contract.md ("The trainer's Google credentials") cites each rule relied on here.

What it answers is what a trainer's clients ask when `GCE_METADATA_HOST` (and `GCE_METADATA_IP`)
point here:

- `GET /`: 200 with `Metadata-Flavor: Google`: google-auth's `_metadata.ping` asks the root of
  `GCE_METADATA_IP` and checks that header, which is how `google.auth.default()` decides it runs on
  Compute Engine;
- `project/project-id`, which `google.auth.default()` reads for the project;
- `instance/service-accounts/default/` with `?recursive=true` (`email`, `scopes`, `aliases`), which
  `compute_engine.Credentials` reads before its first token, and its `email` and `scopes` leaves;
- `instance/service-accounts/default/token`: `{"access_token", "expires_in", "token_type": "Bearer"}`,
  what google-auth's `_metadata.get_service_account_token` and TensorFlow's GCS file system
  (`GoogleAuthProvider::GetTokenFromGce`, `http://$GCE_METADATA_HOST/computeMetadata/v1/...`) read;
- `instance/preempted` and `instance/maintenance-event`, read through the agent's own client, for a
  trainer that watches for notices itself (`survivor.trainers.preemption.NoticePoll`); a plain GET
  only, no hanging GET.

Anything else is 404. Like the real server, a request without `Metadata-Flavor: Google`, or with
an `X-Forwarded-For` header (a proxied request), is refused with 403.
"""

from __future__ import annotations

import datetime
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from survivor import log as logs
from survivor.cloud import endpoints
from survivor.metadata import WATCHED_KEYS, MetadataClient, MetadataError

log = logs.get("trainer-metadata")

#: The role a trainer's token is bounded to on its data bucket: read objects and list them
#: (storage.objects.get, storage.objects.list; not even storage.buckets.get).
READ_ROLE = "roles/storage.objectViewer"
#: Where the downscoping goes: Google's Security Token Service, or a stand-in (survivor/local/sts_server.py).
STS_ENDPOINT_ENV = endpoints.STS.env
#: The variables that point google-auth (`GCE_METADATA_HOST` for its requests, `GCE_METADATA_IP` for
#: its ping; `GCE_METADATA_ROOT` is the old name of the first) and TensorFlow at a metadata server.
HOST_ENV, IP_ENV, OLD_HOST_ENV = "GCE_METADATA_HOST", "GCE_METADATA_IP", "GCE_METADATA_ROOT"

_PREFIX = "/computeMetadata/v1/"
_ACCOUNT = "instance/service-accounts/default"
_READ_ONLY_SCOPE = "https://www.googleapis.com/auth/devstorage.read_only"


def data_bucket(data_dir: str | None) -> str | None:
    """Pure: the bucket of a `gs://BUCKET/...` data dir, else None (no token for the trainer).

    >>> data_bucket("gs://my-data/cifar10"), data_bucket("/mnt/data"), data_bucket(None)
    ('my-data', None, None)
    """
    if not data_dir or not data_dir.startswith("gs://"):
        return None
    return data_dir[len("gs://") :].split("/", 1)[0] or None


def access_boundary(bucket: str) -> Any:
    """The Credential Access Boundary of a trainer's token: one rule, `READ_ROLE` on `bucket`."""
    from google.auth import downscoped

    rule = downscoped.AccessBoundaryRule(
        available_resource=f"//storage.googleapis.com/projects/_/buckets/{bucket}",
        available_permissions=[f"inRole:{READ_ROLE}"],
    )
    return downscoped.CredentialAccessBoundary(rules=[rule])


def downscoped_credentials(source: Any, bucket: str, sts_endpoint: str | None = None) -> Any:
    """`source` (the VM's credentials) downscoped to `access_boundary(bucket)`. `sts_endpoint`: a
    stand-in's base URL (else `STS_ENDPOINT_ENV`, else Google's `https://sts.googleapis.com`)."""
    from google.auth import downscoped
    from google.oauth2 import sts

    credentials = downscoped.Credentials(source_credentials=source, credential_access_boundary=access_boundary(bucket))
    endpoint = endpoints.STS.endpoint(sts_endpoint)
    if endpoint:  # google-auth builds its STS URL from the universe domain alone: no setting to change it
        credentials._sts_client = sts.Client(endpoint.rstrip("/") + "/v1/token")
    return credentials


class TokenUnavailable(Exception):
    """The downscoped token could not be made (the VM's token, or the exchange, failed)."""


class DataToken:
    """The trainer's token, made when first asked and again when it nears its expiry (google-auth's
    own refresh threshold, `Credentials.valid`). `source`: the VM's credentials (default: the metadata
    server's, `compute_engine.Credentials`)."""

    def __init__(self, bucket: str, source: Any = None, sts_endpoint: str | None = None):
        if source is None:
            from google.auth import compute_engine

            source = compute_engine.Credentials()
        self.bucket = bucket
        self.source = source
        self.credentials = downscoped_credentials(source, bucket, sts_endpoint)
        self._lock = threading.Lock()
        self._request: Any = None

    def get(self) -> tuple[str, int]:
        """(access token, seconds until it expires). Raises TokenUnavailable."""
        from google.auth.transport.requests import Request

        with self._lock:
            if not self.credentials.valid:
                self._request = self._request or Request()
                try:
                    self.credentials.refresh(self._request)
                except Exception as exc:  # whatever failed, the trainer gets a 503, never a dropped connection
                    raise TokenUnavailable(f"{type(exc).__name__}: {exc}") from exc
                log.info("the trainer's token: read-only on its data bucket", bucket=self.bucket)
            return self.credentials.token, _seconds_left(self.credentials.expiry)

    @property
    def email(self) -> str:
        """The VM service account's email (known once a token was made; "default" before)."""
        return getattr(self.source, "service_account_email", None) or "default"


def _seconds_left(expiry: datetime.datetime | None) -> int:
    if expiry is None:
        return 3599
    if expiry.tzinfo is None:  # google-auth keeps naive UTC times
        expiry = expiry.replace(tzinfo=datetime.timezone.utc)
    return max(0, int((expiry - datetime.datetime.now(datetime.timezone.utc)).total_seconds()))


#: Seconds a trainer's connection to the server may sit idle before it is closed.
IDLE_SECONDS = 30.0


class _QuietServer(ThreadingHTTPServer):
    """A trainer that resets its connections gets no traceback printed on the agent's stderr."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Drops the error of one connection (a reset, a timeout): the server goes on serving."""


class TrainerMetadataServer:
    """The trainer's metadata server on 127.0.0.1 (a port of its own); `bucket` None: no token.
    `notices`: the agent's client of the VM's metadata server, for the notice keys."""

    def __init__(
        self,
        bucket: str | None,
        *,
        project: str | None = None,
        notices: MetadataClient | None = None,
        source: Any = None,
        sts_endpoint: str | None = None,
    ):
        self.token = DataToken(bucket, source, sts_endpoint) if bucket else None
        self.project = project
        self.notices = notices
        self._httpd = _QuietServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def host(self) -> str:
        """`127.0.0.1:PORT`: the trainer's GCE_METADATA_HOST and GCE_METADATA_IP."""
        return f"127.0.0.1:{self._httpd.server_address[1]}"

    def start(self) -> "TrainerMetadataServer":
        """Serves from a daemon thread; returns self."""
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, name="trainer-metadata", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops serving and closes the port (once; later calls do nothing)."""
        if self._thread is None:
            return
        self._thread = None
        self._httpd.shutdown()
        self._httpd.server_close()

    def answer(self, path: str, query: dict[str, str]) -> tuple[int, str, str]:
        """Pure but for the token: (status, content type, body) for a GET of `path` under
        /computeMetadata/v1/ with `query`."""
        path = path.strip("/")
        if path == "project/project-id" and self.project:
            return 200, "application/text", self.project
        if path in WATCHED_KEYS and self.notices is not None:
            if query.get("wait_for_change"):
                return 400, "text/plain", "no hanging GET here: ask again"
            try:
                return 200, "application/text", self.notices.get_or(path, "", deadline=5.0) or ""
            except MetadataError:
                return 503, "text/plain", "the metadata server did not answer"
        if self.token is None or not (path == _ACCOUNT or path.startswith(_ACCOUNT + "/")):
            return 404, "text/plain", "not found"
        leaf = path[len(_ACCOUNT) :].strip("/")
        if leaf == "token":
            try:
                token, seconds = self.token.get()
            except TokenUnavailable as exc:
                log.warning("no token for the trainer now", error=str(exc))
                return 503, "text/plain", "the token is not available now"
            return (
                200,
                "application/json",
                json.dumps({"access_token": token, "expires_in": seconds, "token_type": "Bearer"}),
            )
        info = {"aliases": ["default"], "email": self.token.email, "scopes": [_READ_ONLY_SCOPE]}
        if leaf == "" and (query.get("recursive") == "true" or query.get("alt") == "json"):
            return 200, "application/json", json.dumps(info)
        if leaf == "":
            return 200, "application/text", "aliases\nemail\nscopes\ntoken\n"
        if leaf in ("email", "scopes"):
            value = info[leaf]
            return 200, "application/text", value if isinstance(value, str) else "\n".join(value) + "\n"
        return 404, "text/plain", "not found"

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            #: a connection idle this long is closed (socketserver.StreamRequestHandler.timeout): the
            #: trainer's half-open connections held an agent thread each, for good (a hostile review)
            timeout = IDLE_SECONDS

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, content_type: str, body: str) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Metadata-Flavor", "Google")
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                if self.headers.get("Metadata-Flavor") != "Google" or self.headers.get("X-Forwarded-For"):
                    return self._send(
                        403, "text/plain", "Missing required header: Metadata-Flavor, or a proxied request"
                    )
                if url.path == "/":  # google-auth's ping
                    return self._send(200, "application/text", "computeMetadata/\n")
                if not url.path.startswith(_PREFIX):
                    return self._send(404, "text/plain", "not found")
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                self._send(*server.answer(url.path[len(_PREFIX) :], query))

            def _refuse(self) -> None:
                self._send(405, "text/plain", "only GET")

            do_POST = do_PUT = do_DELETE = do_PATCH = _refuse

        return Handler


def metadata_env(env: dict[str, str], host: str) -> dict[str, str]:
    """Pure: `env` with the metadata variables pointing at the trainer's server at `host`; the old
    name goes, so nothing of the VM's metadata server's address is left."""
    out = {k: v for k, v in env.items() if k != OLD_HOST_ENV}
    out[HOST_ENV] = out[IP_ENV] = host
    return out
