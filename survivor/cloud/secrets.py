"""Secret Manager: a `notify:` webhook's URL read from its secret version by the VM's service account.

    >>> access_secret("projects/my-project/secrets/slack-hook/versions/latest")
    'https://hooks.slack.com/services/T000/B000/XXXX'

A webhook's URL is its credential (anyone who has it may post), so a spec may name the secret version
that holds it instead (survivor/spec/uris.py `SECRET_VERSION`): instance metadata then carries only the
name, readable by whoever may read the VM's metadata, and the URL stays in Secret Manager, readable by
whoever holds `secretmanager.versions.access` (roles/secretmanager.secretAccessor) on the secret:
the VM's service account, which preflight checks (survivor/operator/preflight.py).

One call, `AccessSecretVersion` (`GET v1/{name=projects/*/secrets/*/versions/*}:access`), through
google-cloud-secret-manager over REST (at SURVIVOR_SECRET_MANAGER_ENDPOINT when a stand-in answers:
survivor/local/secret_manager_server.py), retried by `retry.SECRET_READ`; the payload's CRC32C is
checked when the answer carries one, as Google's samples do
(https://cloud.google.com/secret-manager/docs/access-secret-version).
"""

from __future__ import annotations

from survivor import retry
from survivor.cloud import endpoints

#: The variable naming a stand-in's address (survivor/cloud/endpoints.py).
ENDPOINT_ENV = endpoints.SECRET_MANAGER.env
#: The permission reading a version's payload takes, and the predefined role that grants it
#: (https://cloud.google.com/secret-manager/docs/access-control).
ACCESS_PERMISSION = "secretmanager.versions.access"
ACCESSOR_ROLE = "roles/secretmanager.secretAccessor"


class SecretError(Exception):
    """A secret version that could not be read: which, and why (a missing permission names it)."""


def _transient(exc: BaseException) -> bool:
    from google.api_core import exceptions as gexc

    return isinstance(
        exc,
        (
            gexc.TooManyRequests,
            gexc.ServiceUnavailable,
            gexc.InternalServerError,
            gexc.BadGateway,
            gexc.GatewayTimeout,
            gexc.DeadlineExceeded,
        ),
    ) or retry.is_transient(exc)


def client(endpoint: str | None = None):
    """A SecretManagerServiceClient over REST, at `endpoint` or SURVIVOR_SECRET_MANAGER_ENDPOINT or Google's."""
    from google.cloud import secretmanager

    return secretmanager.SecretManagerServiceClient(
        **endpoints.client_kwargs(endpoints.SECRET_MANAGER.endpoint(endpoint))
    )


def access_secret(name: str, *, secrets=None) -> str:
    """The text of secret version `name` (`projects/P/secrets/S/versions/V`). Raises SecretError
    naming the version: a refusal says the permission the reader lacks."""
    import google_crc32c
    from google.api_core import exceptions as gexc

    secrets = secrets or client()
    try:
        for attempt in retry.SECRET_READ.retrying(retry_on=_transient):
            with attempt:
                answer = secrets.access_secret_version(request={"name": name}, timeout=10.0)
    except (gexc.PermissionDenied, gexc.Forbidden) as exc:
        raise SecretError(
            f"{name}: permission denied: the reader needs {ACCESS_PERMISSION} ({ACCESSOR_ROLE}) "
            f"on the secret ({exc.message})"
        ) from None
    except gexc.NotFound as exc:
        raise SecretError(f"{name}: no such secret version ({exc.message})") from None
    except gexc.GoogleAPICallError as exc:
        raise SecretError(f"{name}: {type(exc).__name__}: {exc.message}") from None
    data = answer.payload.data
    if answer.payload.data_crc32c and google_crc32c.value(data) != answer.payload.data_crc32c:
        raise SecretError(f"{name}: the payload's CRC32C does not match: corrupted on the way")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SecretError(f"{name}: the payload is not UTF-8 text (expected a webhook URL)") from None
