"""The endpoint overrides (survivor/cloud/endpoints.py): one table, each naming a stand-in that exists,
and the one way a client is pointed at it. The clients themselves talk to the stand-ins in their
own tests (test_compute, test_catalog, test_vertex, test_watch_deploy, test_trainer_isolation)."""

from __future__ import annotations

import json
import pathlib

import pytest
from google.auth.credentials import AnonymousCredentials

from survivor.agent import trainer_metadata
from survivor.cloud import catalog, compute, endpoints, monitoring, secrets, vertex
from survivor.operator import watch_deploy

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_every_override_names_a_stand_in_that_exists_and_a_variable_of_its_own():
    assert len({o.env for o in endpoints.OVERRIDES}) == len(endpoints.OVERRIDES)
    for override in endpoints.OVERRIDES:
        assert override.env.startswith("SURVIVOR_") and override.env.endswith("_ENDPOINT")
        assert (ROOT / override.stand_in).is_file(), override


def test_the_modules_variables_are_the_tables():
    assert {
        compute.ENDPOINT_ENV,
        catalog.ENDPOINT_ENV,
        vertex.ENDPOINT_ENV,
        vertex.LOGGING_ENDPOINT_ENV,
        watch_deploy.RUN_ENDPOINT_ENV,
        watch_deploy.SCHEDULER_ENDPOINT_ENV,
        trainer_metadata.STS_ENDPOINT_ENV,
        secrets.ENDPOINT_ENV,
        monitoring.ENDPOINT_ENV,
    } == {o.env for o in endpoints.OVERRIDES}


def test_a_given_endpoint_wins_over_the_variable_and_an_empty_one_is_googles(monkeypatch):
    monkeypatch.setenv(endpoints.RUN.env, "http://127.0.0.1:1")
    assert endpoints.RUN.endpoint("http://127.0.0.1:2") == "http://127.0.0.1:2"
    assert endpoints.RUN.endpoint() == "http://127.0.0.1:1"
    monkeypatch.setenv(endpoints.RUN.env, "")
    assert endpoints.RUN.endpoint() is None


def test_a_stand_in_gets_anonymous_credentials_and_google_keeps_the_callers():
    stand_in = endpoints.client_kwargs("http://127.0.0.1:9")
    assert isinstance(stand_in["credentials"], AnonymousCredentials)
    assert stand_in["client_options"] == {"api_endpoint": "http://127.0.0.1:9"}
    mine = object()
    assert endpoints.client_kwargs(None, credentials=mine) == {"transport": "rest", "credentials": mine}
    regional = endpoints.client_kwargs(None, default="europe-west4-aiplatform.googleapis.com")
    assert regional == {
        "transport": "rest",
        "client_options": {"api_endpoint": "europe-west4-aiplatform.googleapis.com"},
    }


def test_the_compute_client_is_built_at_the_variables_endpoint(monkeypatch):
    monkeypatch.setenv(endpoints.COMPUTE.env, "http://127.0.0.1:9")
    client = compute.Compute("p")
    assert client.endpoint == "http://127.0.0.1:9"
    assert client.templates._transport._host.endswith("127.0.0.1:9")


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    """An environment where google-auth finds nothing: no key file, no gcloud login (a fresh HOME), and
    a metadata address that refuses at once (google-auth's probe then fails without waiting); the
    process's lookup forgotten before and after."""
    import socket

    for name in (
        "GOOGLE_APPLICATION_CREDENTIALS",
        "CLOUDSDK_CONFIG",
        "SURVIVOR_COMPUTE_ENDPOINT",
        "SURVIVOR_CATALOG_ENDPOINT",
        "GCE_METADATA_HOST",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        monkeypatch.setenv("GCE_METADATA_IP", f"127.0.0.1:{s.getsockname()[1]}")
    endpoints.forget_credentials()
    yield
    endpoints.forget_credentials()


def _user_login(tmp_path) -> str:
    """What `gcloud auth application-default login` leaves: an authorized_user file (never used to call)."""
    path = tmp_path / "adc.json"
    path.write_text(
        json.dumps(
            {
                "type": "authorized_user",
                "client_id": "id.apps.googleusercontent.com",
                "client_secret": "secret",
                "refresh_token": "refresh",
            }
        )
    )
    return str(path)


def _service_account_key(tmp_path) -> str:
    """A service account's JSON key (a fresh RSA key; never used to call)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    pem = (
        rsa.generate_private_key(public_exponent=65537, key_size=2048)
        .private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        .decode()
    )
    path = tmp_path / "key.json"
    path.write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": "p",
                "private_key_id": "1",
                "private_key": pem,
                "client_email": "sa@p.iam.gserviceaccount.com",
                "client_id": "1",
                "token_uri": "https://oauth2.googleapis.com/token",
            }
        )
    )
    return str(path)


def _clients(c: compute.Compute) -> list:
    return [v for v in vars(c).values() if hasattr(v, "transport")]


def test_compute_clients_on_googles_endpoint_share_one_credential_lookup(no_credentials, monkeypatch, tmp_path):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", _user_login(tmp_path))
    clients = _clients(compute.Compute("my-project"))
    assert len(clients) >= 14
    # a lookup of each client's own made an object each; one lookup gives them all the same one
    assert len({id(client.transport._credentials) for client in clients}) == 1


def test_each_client_gets_the_scopes_its_own_lookup_would_have_asked_for(no_credentials, monkeypatch, tmp_path):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", _service_account_key(tmp_path))
    for client in _clients(compute.Compute("my-project")) + [catalog.client()]:
        assert client.transport._credentials.default_scopes == type(client).get_transport_class("rest").AUTH_SCOPES


def test_no_credentials_is_the_answer_for_a_while_then_looked_for_again(no_credentials, monkeypatch, tmp_path):
    from google.auth.exceptions import DefaultCredentialsError

    with pytest.raises(compute.ComputeError, match="no Google Cloud credentials"):
        compute.Compute("my-project")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", _user_login(tmp_path))
    with pytest.raises(DefaultCredentialsError):  # a command asks once: the second price read does not probe again
        endpoints.application_default(["https://www.googleapis.com/auth/cloud-platform"])
    monkeypatch.setattr(endpoints, "NO_CREDENTIALS_SECONDS", 0.0)  # a process that lives on asks again
    assert endpoints.application_default(["https://www.googleapis.com/auth/cloud-platform"]) is not None
