"""Where survivor's Google API clients send their calls: Google's own endpoints, or a stand-in named
by an environment variable. One table of the overrides, one way to turn an override into a client.

    >>> COMPUTE.env
    'SURVIVOR_COMPUTE_ENDPOINT'
    >>> client_kwargs(None)                                  # Google's endpoint, default credentials
    {'transport': 'rest'}
    >>> sorted(client_kwargs("http://127.0.0.1:8090"))      # a stand-in: anonymous, at its address
    ['client_options', 'credentials', 'transport']
    >>> client_kwargs(None, transport=None, default="us-central1-aiplatform.googleapis.com")
    {'client_options': {'api_endpoint': 'us-central1-aiplatform.googleapis.com'}}

Every client is made over REST (the stand-ins on 127.0.0.1 speak HTTP/JSON, and so does Google for
each of these APIs), except Cloud Monitoring's, which has gRPC transports only: its override is a
`host:port` its client reaches over an insecure gRPC channel (survivor/cloud/monitoring.py `client`); a stand-in gets `AnonymousCredentials`, since it checks none and a developer's
machine may have none. The Compute fake also answers the IAM, Resource Manager and Org Policy calls
preflight makes, so those follow `COMPUTE`'s override (survivor/operator/preflight.py). Google's
endpoints get Application Default Credentials, looked for once per process (`application_default`).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Sequence


@dataclass(frozen=True)
class Override:
    """An API whose endpoint an environment variable may replace, and the stand-in meant to answer."""

    api: str
    env: str
    stand_in: str

    def endpoint(self, given: str | None = None) -> str | None:
        """`given`, else the variable's value, else None (Google's endpoint)."""
        return given or os.environ.get(self.env) or None


COMPUTE = Override(
    "Compute Engine v1 (and preflight's IAM reads)", "SURVIVOR_COMPUTE_ENDPOINT", "survivor/local/compute_server.py"
)
CATALOG = Override("Cloud Billing Catalog", "SURVIVOR_CATALOG_ENDPOINT", "survivor/local/catalog_server.py")
VERTEX = Override("Vertex AI (JobService)", "SURVIVOR_VERTEX_ENDPOINT", "survivor/local/vertex_server.py")
LOGGING = Override("Cloud Logging", "SURVIVOR_LOGGING_ENDPOINT", "survivor/local/logging_server.py")
RUN = Override("Cloud Run Admin v2", "SURVIVOR_RUN_ENDPOINT", "survivor/local/run_server.py")
SCHEDULER = Override("Cloud Scheduler", "SURVIVOR_SCHEDULER_ENDPOINT", "survivor/local/scheduler_server.py")
STS = Override(
    "Security Token Service (the trainer's downscoped token)", "SURVIVOR_STS_ENDPOINT", "survivor/local/sts_server.py"
)

SECRET_MANAGER = Override(
    "Secret Manager (a notify: webhook's URL)",
    "SURVIVOR_SECRET_MANAGER_ENDPOINT",
    "survivor/local/secret_manager_server.py",
)

#: `host:port`, not a URL: google-cloud-monitoring speaks gRPC only (survivor/cloud/monitoring.py)
MONITORING = Override(
    "Cloud Monitoring (the job's goodput, from `survivor watch --goodput-metrics`)",
    "SURVIVOR_MONITORING_ENDPOINT",
    "survivor/local/monitoring_server.py",
)

#: Every override, for the docs and a test that each names a stand-in that exists.
OVERRIDES = (COMPUTE, CATALOG, VERTEX, LOGGING, RUN, SCHEDULER, STS, SECRET_MANAGER, MONITORING)


def client_kwargs(
    endpoint: str | None,
    *,
    transport: str | None = "rest",
    default: str | None = None,
    credentials: Any = None,
    scopes: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Keyword arguments for a google-cloud client: at `endpoint` with anonymous credentials when
    it is a stand-in's, else at `default` (an API's regional endpoint) or the library's own, with
    `credentials` (None: Application Default Credentials). `transport=None` leaves the argument out
    (clients without one). `scopes`: the client's own default scopes (its transport's AUTH_SCOPES);
    given, Google's endpoint gets the process's one lookup (`application_default`) instead of a lookup
    of the client's own; raises google-auth's DefaultCredentialsError when there are none."""
    kwargs: dict[str, Any] = {} if transport is None else {"transport": transport}
    if endpoint:
        if credentials is None:
            from google.auth.credentials import AnonymousCredentials

            credentials = AnonymousCredentials()
        kwargs["client_options"] = {"api_endpoint": endpoint}
    elif default:
        kwargs["client_options"] = {"api_endpoint": default}
    elif credentials is None and scopes is not None:
        credentials = application_default(scopes)
    if credentials is not None:
        kwargs["credentials"] = credentials
    return kwargs


#: How long a lookup that found no credentials stands as the answer: a command asks once; a process
#: that lives on (the agent, `watch --every`) asks again after a miss that may pass (a metadata
#: server not up yet, googleapis/google-auth-library-python#1261).
NO_CREDENTIALS_SECONDS = 60.0

_lookup = threading.Lock()
_found: Any = None
_missed: tuple[float, str] | None = None  # (monotonic time, google-auth's message)


def application_default(scopes: Sequence[str]) -> Any:
    """Application Default Credentials, looked for once per process, with `scopes` as a client's
    default scopes. Raises google-auth's DefaultCredentialsError when there are none.

    google-auth looks in order (google/auth/_default.py, `default`'s checkers): the file
    GOOGLE_APPLICATION_CREDENTIALS names, gcloud's application_default_credentials.json (and, when it
    names no project, `gcloud config config-helper` in a subprocess), App Engine, and last the
    metadata server, whose probe waits GCE_METADATA_TIMEOUT (3 s) a try, 3 tries, wherever nothing
    answers at 169.254.169.254 (google/auth/compute_engine/_metadata.py, `ping` and `is_on_gce`):
    9 s and more on a laptop with no credentials. Each google-cloud client made without credentials
    makes that lookup itself: Compute's 14 clients made 14, a report's two price reads two. Here the
    credentials found are kept for the process (they refresh their own tokens), and each client's
    scopes applied as `google.auth.default(default_scopes=...)` applies them (`with_scopes_if_required`),
    so every client gets what its own lookup gave it. None found stands for NO_CREDENTIALS_SECONDS."""
    global _found, _missed
    import google.auth
    from google.auth.credentials import with_scopes_if_required
    from google.auth.exceptions import DefaultCredentialsError

    with _lookup:
        if _found is None and (_missed is None or time.monotonic() - _missed[0] > NO_CREDENTIALS_SECONDS):
            try:
                _found, _ = google.auth.default()
                _missed = None
            except DefaultCredentialsError as exc:
                _missed = (time.monotonic(), str(exc))
        if _found is None:
            assert _missed is not None
            raise DefaultCredentialsError(_missed[1])
        return with_scopes_if_required(_found, None, default_scopes=scopes)


def forget_credentials() -> None:
    """Looks for the credentials afresh at the next `application_default` (a test that changed the
    environment)."""
    global _found, _missed
    with _lookup:
        _found, _missed = None, None
