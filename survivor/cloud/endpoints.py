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
each of these APIs); a stand-in gets `AnonymousCredentials`, since it checks none and a developer's
machine may have none. The Compute fake also answers the IAM, Resource Manager and Org Policy calls
preflight makes, so those follow `COMPUTE`'s override (survivor/operator/preflight.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Override:
    """An API whose endpoint an environment variable may replace, and the stand-in meant to answer."""

    api: str
    env: str
    stand_in: str

    def endpoint(self, given: str | None = None) -> str | None:
        """`given`, else the variable's value, else None (Google's endpoint)."""
        return given or os.environ.get(self.env) or None


COMPUTE = Override("Compute Engine v1 (and preflight's IAM reads)", "SURVIVOR_COMPUTE_ENDPOINT",
                   "survivor/local/compute_server.py")
CATALOG = Override("Cloud Billing Catalog", "SURVIVOR_CATALOG_ENDPOINT", "survivor/local/catalog_server.py")
VERTEX = Override("Vertex AI (JobService)", "SURVIVOR_VERTEX_ENDPOINT", "survivor/local/vertex_server.py")
LOGGING = Override("Cloud Logging", "SURVIVOR_LOGGING_ENDPOINT", "survivor/local/logging_server.py")
RUN = Override("Cloud Run Admin v2", "SURVIVOR_RUN_ENDPOINT", "survivor/local/run_server.py")
SCHEDULER = Override("Cloud Scheduler", "SURVIVOR_SCHEDULER_ENDPOINT", "survivor/local/scheduler_server.py")
STS = Override("Security Token Service (the trainer's downscoped token)", "SURVIVOR_STS_ENDPOINT",
               "survivor/local/sts_server.py")

#: Every override, for the docs and a test that each names a stand-in that exists.
OVERRIDES = (COMPUTE, CATALOG, VERTEX, LOGGING, RUN, SCHEDULER, STS)


def client_kwargs(endpoint: str | None, *, transport: str | None = "rest", default: str | None = None,
                  credentials: Any = None) -> dict[str, Any]:
    """Keyword arguments for a google-cloud client: at `endpoint` with anonymous credentials when
    it is a stand-in's, else at `default` (an API's regional endpoint) or the library's own, with
    `credentials` (None: Application Default Credentials). `transport=None` leaves the argument out
    (clients without one)."""
    kwargs: dict[str, Any] = {} if transport is None else {"transport": transport}
    if endpoint:
        if credentials is None:
            from google.auth.credentials import AnonymousCredentials

            credentials = AnonymousCredentials()
        kwargs["client_options"] = {"api_endpoint": endpoint}
    elif default:
        kwargs["client_options"] = {"api_endpoint": default}
    if credentials is not None:
        kwargs["credentials"] = credentials
    return kwargs
