"""The endpoint overrides (survivor/cloud/endpoints.py): one table, each naming a stand-in that exists,
and the one way a client is pointed at it. The clients themselves talk to the stand-ins in their
own tests (test_compute, test_catalog, test_vertex, test_watch_deploy, test_trainer_isolation)."""

from __future__ import annotations

import pathlib

from google.auth.credentials import AnonymousCredentials

from survivor.agent import trainer_metadata
from survivor.cloud import catalog, compute, endpoints, vertex
from survivor.operator import watch_deploy

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_every_override_names_a_stand_in_that_exists_and_a_variable_of_its_own():
    assert len({o.env for o in endpoints.OVERRIDES}) == len(endpoints.OVERRIDES)
    for override in endpoints.OVERRIDES:
        assert override.env.startswith("SURVIVOR_") and override.env.endswith("_ENDPOINT")
        assert (ROOT / override.stand_in).is_file(), override


def test_the_modules_variables_are_the_tables():
    assert {compute.ENDPOINT_ENV, catalog.ENDPOINT_ENV, vertex.ENDPOINT_ENV, vertex.LOGGING_ENDPOINT_ENV,
            watch_deploy.RUN_ENDPOINT_ENV, watch_deploy.SCHEDULER_ENDPOINT_ENV,
            trainer_metadata.STS_ENDPOINT_ENV} == {o.env for o in endpoints.OVERRIDES}


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
    assert regional == {"transport": "rest", "client_options": {"api_endpoint": "europe-west4-aiplatform.googleapis.com"}}


def test_the_compute_client_is_built_at_the_variables_endpoint(monkeypatch):
    monkeypatch.setenv(endpoints.COMPUTE.env, "http://127.0.0.1:9")
    client = compute.Compute("p")
    assert client.endpoint == "http://127.0.0.1:9"
    assert client.templates._transport._host.endswith("127.0.0.1:9")
