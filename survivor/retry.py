"""The one place retry policies live: small tenacity values that call sites compose and pass in.

    >>> from survivor import retry
    >>> for attempt in retry.metadata():
    ...     with attempt:
    ...         fetch()

Every policy is bounded (attempts and a deadline) and jittered, so a dead dependency ends in an
error that says so instead of a hang.
"""

from __future__ import annotations

from typing import Callable

import requests
import tenacity

#: HTTP statuses worth another try: throttling and the server's own transient failures.
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


class TransientHTTPError(Exception):
    """An HTTP answer that says "try again" (429, 503, ...)."""

    def __init__(self, url: str, status: int):
        super().__init__(f"{url} answered HTTP {status}")
        self.url = url
        self.status = status


def is_transient(exc: BaseException) -> bool:
    """True for failures another attempt may cure: connection trouble and transient statuses."""
    if isinstance(exc, TransientHTTPError):
        return True
    return isinstance(exc, (requests.ConnectionError, requests.Timeout, ConnectionError, TimeoutError))


def policy(
    *,
    attempts: int,
    deadline: float,
    initial: float = 0.1,
    maximum: float = 2.0,
    retry_on: Callable[[BaseException], bool] = is_transient,
) -> tenacity.Retrying:
    """A bounded, jittered exponential-backoff policy that re-raises the last error."""
    return tenacity.Retrying(
        stop=tenacity.stop_after_attempt(attempts) | tenacity.stop_after_delay(deadline),
        wait=tenacity.wait_exponential_jitter(initial=initial, max=maximum, jitter=initial),
        retry=tenacity.retry_if_exception(retry_on),
        reraise=True,
    )


def metadata() -> tenacity.Retrying:
    """For metadata-server calls: it answers 503 for under a second during maintenance events."""
    return policy(attempts=8, deadline=20.0, initial=0.1, maximum=2.0)


def watcher_backoff() -> tenacity.wait.wait_base:
    """The pause between failed hanging GETs of a notice watcher, which never gives up."""
    return tenacity.wait_exponential_jitter(initial=0.2, max=5.0, jitter=0.2)


def storage() -> tenacity.Retrying:
    """For a whole job-dir operation (a commit, a restore) on top of the client's own per-call retries."""
    return policy(attempts=6, deadline=45.0, initial=0.2, maximum=3.0, retry_on=is_transient_storage)


def is_transient_storage(exc: BaseException) -> bool:
    """True for Cloud Storage failures worth another try: throttling, server errors, broken or
    stalled connections, and a download whose bytes did not match the object's checksum."""
    import http.client

    from google.api_core import exceptions as gexc
    from google.cloud.storage.exceptions import DataCorruption

    if isinstance(exc, (gexc.TooManyRequests, gexc.ServiceUnavailable, gexc.InternalServerError,
                        gexc.BadGateway, gexc.GatewayTimeout, DataCorruption, http.client.IncompleteRead,
                        requests.exceptions.ChunkedEncodingError, requests.exceptions.ContentDecodingError)):
        return True
    return is_transient(exc)
