"""A job's goodput in Cloud Monitoring: written by `survivor watch --goodput-metrics` with the real
google-cloud-monitoring client, under the metric types and labels of Google's goodput library, into
the Monitoring stand-in (survivor/local/monitoring_server.py), which refuses what the API refuses;
Google's goodput dashboard (tests/goodput_dashboard/, vendored unchanged) finds survivor's series."""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import pathlib
import re

import grpc
import pytest
from google.api_core import exceptions as gexc
from google.cloud import monitoring_v3
from google.cloud.monitoring_v3.services.metric_service.transports import MetricServiceGrpcTransport

from survivor.cloud import monitoring
from survivor.cloud.monitoring import (
    BADPUT_TIME,
    DISRUPTIONS,
    GOODPUT_TIME,
    MAX_SERIES,
    TOTAL_ELAPSED_TIME,
    WORKLOAD,
    Series,
)
from survivor.jobdir.ledger import CAUSE, build_ledger
from survivor.jobdir.storage import open_storage
from survivor.local.monitoring_server import DUPLICATE, FREQUENT, ORDER, MonitoringServer, parse_filter
from survivor.operator import goodput_metrics
from survivor.spec import JobSpec
from tests.conftest import dummy_spec
from tests.test_ledger import T0, simulated_job
from tests.test_report import write_job

PROJECT, ZONE = "survivor-local", "us-west1-b"
DASHBOARD = pathlib.Path(__file__).resolve().parent / "goodput_dashboard" / "goodput_dashboard.json"
DONE = T0 + _dt.timedelta(seconds=1710)
#: ml-goodput-measurement's `BadputType` names (ml_goodput_measurement/src/goodput_utils.py, 57092cf).
BADPUT_TYPES = {
    "TPU_INITIALIZATION",
    "TRAINING_PREP",
    "PROGRAM_STARTUP",
    "DATA_LOADING_SYNC",
    "DATA_LOADING_ASYNC",
    "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME",
    "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME",
    "WASTED_PROGRESS_FROM_DISRUPTION",
    "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION",
    "CUSTOM_BADPUT_EVENTS",
    "OTHER",
    "ELASTIC_SLICE_DOWN",
    "ELASTIC_SCALE_UP",
    "ELASTIC_REINITIALIZATION",
}


@pytest.fixture
def stand_in():
    """The Monitoring stand-in and the real client on an insecure gRPC channel to it."""
    with MonitoringServer() as server:
        channel = grpc.insecure_channel(server.address)
        yield server, monitoring_v3.MetricServiceClient(transport=MetricServiceGrpcTransport(channel=channel))
        channel.close()


@pytest.fixture
def job(tmp_path):
    """The ledger tests' simulated job (four boots, a preemption, a failure, a kill, DONE at 1710 s) in a job dir."""
    spec = JobSpec.from_yaml(
        dummy_spec(str(tmp_path / "jobdir"), tmp_path, compute={"machine_type": "g2-standard-8", "gpu": "nvidia-l4:1"})
    )
    write_job(spec.job_dir)
    return spec


def series_of(metric: str, n: int = 1, **labels) -> list[Series]:
    """`n` distinct series of `metric` (replica ids 0..n-1) with the labels the library gives it."""
    base = {GOODPUT_TIME: {"goodput_source": "TOTAL"}, BADPUT_TIME: {"badput_source": "OTHER"}}.get(
        metric, {"window_type": "cumulative"}
    )
    value = 1 if metric == DISRUPTIONS else 1.0
    return [
        Series(
            metric, {**base, "accelerator_type": "NVIDIA-L4", **labels}, monitoring.workload(ZONE, "job", str(i)), value
        )
        for i in range(n)
    ]


def at(seconds: float) -> _dt.datetime:
    return DONE + _dt.timedelta(seconds=seconds)


# -- what survivor writes ----------------------------------------------------------------------------


def test_each_badput_source_survivor_writes_is_a_badput_type_of_the_library_and_they_sum_to_the_badput():
    ledger = build_ledger(simulated_job(), now=DONE, done_at=DONE)
    by_source = goodput_metrics.badput_by_source(ledger)
    assert set(by_source) == set(goodput_metrics.sources()) and set(by_source) <= BADPUT_TYPES
    assert sum(by_source.values()) == pytest.approx(ledger.wall_seconds - ledger.productive_seconds)
    assert by_source["OTHER"] == pytest.approx(ledger.seconds_by_cause()["failed"] + ledger.seconds_by_cause()["other"])
    assert by_source["INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"] == pytest.approx(ledger.seconds_by_cause()["capacity"])
    assert {CAUSE[c].google_term for c in ("restore", "checkpoint")} == {
        "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME",
        "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME",
    }


def test_the_accelerator_label_is_the_librarys_name_for_a2_and_a3_else_the_gpu_type():
    assert monitoring.accelerator_type("a2-highgpu-1g", None) == "NVIDIA-A100"
    assert monitoring.accelerator_type("a3-megagpu-8g", None) == "NVIDIA-H100"
    assert monitoring.accelerator_type("g2-standard-8", "nvidia-l4:1") == "NVIDIA-L4"
    assert monitoring.accelerator_type("n1-standard-8", None) == "UNKNOWN"


def test_a_request_never_holds_more_than_200_series_or_one_series_twice():
    many = series_of(GOODPUT_TIME, 450)
    batches = monitoring.batches(many + many[:3])  # the 3 repeated: not in the requests that hold them
    assert [len(b) for b in batches] == [200, 200, 53]
    assert all(len({s.key for s in b}) == len(b) for b in batches)


# -- the stand-in accepts survivor's writes ----------------------------------------------------------


def test_a_jobs_goodput_is_written_as_the_librarys_series_and_a_second_look_adds_only_newer_points(job, stand_in):
    server, client = stand_in
    storage = open_storage(job.job_dir)
    assert goodput_metrics.publish(job, storage, project=PROJECT, location=ZONE, metrics=client, now=at(60)) == 10
    ledger = build_ledger(simulated_job(), now=DONE, done_at=DONE)
    resource = {"location": ZONE, "workload_id": job.name, "replica_id": "0"}
    [goodput] = server.points(GOODPUT_TIME, PROJECT)
    assert (
        goodput.labels == {"goodput_source": "TOTAL", "accelerator_type": "NVIDIA-L4"} and goodput.resource == resource
    )
    assert goodput.value == pytest.approx(ledger.productive_seconds, abs=1e-3)
    badput = {p.labels["badput_source"]: p.value for p in server.points(BADPUT_TIME)}
    assert badput == pytest.approx(goodput_metrics.badput_by_source(ledger), abs=1e-3)
    [disruptions] = server.points(DISRUPTIONS)
    assert disruptions.value == 3 and isinstance(disruptions.value, int)  # four boots: three restarts
    assert disruptions.labels == {"accelerator_type": "NVIDIA-L4", "window_type": "cumulative"}
    assert [p.value for p in server.points(TOTAL_ELAPSED_TIME)] == [1710.0]

    # the next look, a minute on: one newer point a series, the same values (the job is DONE)
    goodput_metrics.publish(job, storage, project=PROJECT, location=ZONE, metrics=client, now=at(120))
    assert len(server.series) == 10 and all(len(points) == 2 for points in server.series.values())
    assert all(points[0].end < points[1].end for points in server.series.values())
    assert server.requests == [10, 10]

    # a look whose clock is behind the last write's: refused in the API's words, nothing stored
    with pytest.raises(monitoring.MonitoringError, match=re.escape(ORDER)):
        goodput_metrics.publish(job, storage, project=PROJECT, location=ZONE, metrics=client, now=at(90))
    assert all(len(points) == 2 for points in server.series.values())


def test_write_splits_more_than_200_series_into_requests_the_api_takes(stand_in):
    server, client = stand_in
    assert monitoring.write(client, PROJECT, series_of(GOODPUT_TIME, 201), end=at(0)) == 2
    assert server.requests == [200, 1] and len(server.points(GOODPUT_TIME)) == 201


# -- the stand-in refuses what the API refuses -------------------------------------------------------


def create(client, series: list[Series], end: _dt.datetime):
    """One CreateTimeSeries with `series` as they are (no splitting), each with one point at `end`."""
    client.create_time_series(name=f"projects/{PROJECT}", time_series=[monitoring.time_series(s, end) for s in series])


def test_more_than_200_series_in_one_request_are_refused_whole(stand_in):
    server, client = stand_in
    with pytest.raises(gexc.InvalidArgument, match=f"201 TimeSeries; the maximum is {MAX_SERIES}"):
        create(client, series_of(GOODPUT_TIME, MAX_SERIES + 1), at(0))
    assert server.points(GOODPUT_TIME) == []
    create(client, series_of(GOODPUT_TIME, MAX_SERIES), at(0))
    assert len(server.points(GOODPUT_TIME)) == MAX_SERIES


def test_two_points_of_one_series_in_one_request_are_refused_as_the_api_refuses_them(stand_in):
    server, client = stand_in
    one = series_of(TOTAL_ELAPSED_TIME)[0]
    with pytest.raises(gexc.InvalidArgument, match=re.escape(f"Field timeSeries[1] had an invalid value: {DUPLICATE}")):
        create(client, [one, one], at(0))
    assert len(server.points(TOTAL_ELAPSED_TIME)) == 1  # the first was written, as the API writes the valid ones
    series = monitoring.time_series(one, at(30))
    series.points.append(series.points[0])
    with pytest.raises(gexc.InvalidArgument, match="only one point can be written per TimeSeries per request"):
        client.create_time_series(name=f"projects/{PROJECT}", time_series=[series])


@pytest.mark.parametrize("seconds, words", [(0, ORDER), (-30, ORDER), (5, FREQUENT)])
def test_a_point_not_after_the_series_last_or_under_10_s_after_it_is_refused(stand_in, seconds, words):
    server, client = stand_in
    create(client, series_of(GOODPUT_TIME), at(0))
    with pytest.raises(gexc.InvalidArgument, match=re.escape(words) + r": timeSeries\[0\]"):
        create(client, series_of(GOODPUT_TIME), at(seconds))
    create(client, series_of(GOODPUT_TIME), at(10))
    assert [p.end for p in server.points(GOODPUT_TIME)] == [at(0), at(10)]


def test_an_unknown_label_a_missing_resource_label_or_another_value_type_is_refused_and_the_rest_written(stand_in):
    server, client = stand_in
    unknown = series_of(GOODPUT_TIME, job_name="cifar10")[0]
    partial = Series(BADPUT_TIME, {"badput_source": "OTHER"}, {"location": ZONE, "workload_id": "job"}, 1.0)
    good = series_of(BADPUT_TIME)[0]
    with pytest.raises(gexc.InvalidArgument) as refused:
        create(client, [unknown, partial, good], at(0))
    assert 'metric.labels had an invalid value of "job_name": Unrecognized metric label.: timeSeries[0]' in str(
        refused.value
    )
    assert 'resource.labels had an invalid value of "replica_id"' in str(refused.value)
    assert [p.labels for p in server.points(BADPUT_TIME)] == [good.labels]
    as_double = monitoring.time_series(series_of(DISRUPTIONS)[0], at(0))
    as_double.points[0].value = monitoring_v3.TypedValue(double_value=1.0)
    with pytest.raises(gexc.InvalidArgument, match="takes int64 values"):
        client.create_time_series(name=f"projects/{PROJECT}", time_series=[as_double])
    # the library's optional cluster_name is a label the descriptors have
    create(client, series_of(DISRUPTIONS, cluster_name="gke-1"), at(0))


def test_an_account_without_metric_writer_is_refused_naming_the_permission_and_the_look_goes_on(job, stand_in):
    from survivor.cloud.compute import GroupRef
    from survivor.operator.watch import publish_goodput

    server, client = stand_in
    server.denied = True
    said: list[str] = []
    written = publish_goodput(
        job, open_storage(job.job_dir), GroupRef(PROJECT, job.name, zone=ZONE), say=said.append, metrics=client
    )
    assert written == 0 and "monitoring.timeSeries.create" in said[0] and "goodput not written" in said[0]


# -- Google's goodput dashboard finds survivor's series ----------------------------------------------


def dashboard_queries() -> tuple[list[dict], list[str]]:
    """The dashboard's Monitoring queries (`timeSeriesFilter`: filter, aggregation) and its PromQL."""
    filters: list[dict] = []
    promql: list[str] = []

    def walk(node) -> None:
        if isinstance(node, dict):
            if "timeSeriesFilter" in node:
                filters.append(node["timeSeriesFilter"])
            if "prometheusQuery" in node:
                promql.append(node["prometheusQuery"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(DASHBOARD.read_text()))
    return filters, promql


def promql_name(metric_type: str) -> str:
    """A Monitoring metric type's PromQL name: the first `/` becomes `:`, every other special character `_`
    (https://cloud.google.com/monitoring/promql/promql-mapping)."""
    domain, path = metric_type.split("/", 1)
    return re.sub(r"[^A-Za-z0-9_]", "_", domain) + ":" + re.sub(r"[^A-Za-z0-9_]", "_", path)


def test_the_vendored_dashboard_is_the_librarys_unchanged():
    readme = (DASHBOARD.parent / "README.md").read_text()
    assert hashlib.sha256(DASHBOARD.read_bytes()).hexdigest() in readme


def test_googles_goodput_dashboard_queries_find_survivors_series(job, stand_in):
    server, client = stand_in
    goodput_metrics.publish(job, open_storage(job.job_dir), project=PROJECT, location=ZONE, metrics=client, now=at(60))
    interval = monitoring_v3.TimeInterval(start_time=at(0), end_time=at(600))

    def listed(text: str) -> list:
        return list(client.list_time_series(name=f"projects/{PROJECT}", filter=text, interval=interval))

    filters, promql = dashboard_queries()
    assert len(filters) >= 8 and len(promql) >= 10  # the dashboard as vendored: every tile is checked below
    for query in filters:
        found = listed(query["filter"])
        assert found, query["filter"]
        for field in query.get("aggregation", {}).get("groupByFields", []):
            kind, label = re.fullmatch(r'(metric|resource)\.label\."(\w+)"', field).groups()
            assert all(label in (s.metric.labels if kind == "metric" else s.resource.labels) for s in found), field

    names = {promql_name(t): t for t in (GOODPUT_TIME, BADPUT_TIME, DISRUPTIONS, TOTAL_ELAPSED_TIME)}
    selected = 0
    for query in promql:
        # each `by (labels)` groups the selector it is applied to: those labels must be on its series
        grouping = {
            m.start(2): {label.strip() for label in m.group(1).split(",")}
            for m in re.finditer(
                r"by\s*\(([^)]*)\)\s*\((?:\s*\(|\s*last_over_time\s*\()*\s*(compute_googleapis_com:\w+)", query
            )
        }
        assert len(grouping) == len(re.findall(r"\bby\s*\(", query)), query  # every grouping read
        for selector in re.finditer(r"(compute_googleapis_com:\w+)(\{[^}]*\})?", query):
            name, matchers = selector.group(1), selector.group(2) or ""
            grouped = grouping.get(selector.start(1), set())
            assert name in names, f"the dashboard reads {name}, which survivor does not write"
            wanted = dict(re.findall(r'(\w+)="([^"]*)"', matchers))
            assert wanted.pop("monitored_resource", WORKLOAD) == WORKLOAD
            found = listed(f'metric.type="{names[name]}" resource.type="{WORKLOAD}"')
            found = [
                s for s in found if all({**s.metric.labels, **s.resource.labels}.get(k) == v for k, v in wanted.items())
            ]
            assert found, query
            assert all(grouped <= {*s.metric.labels, *s.resource.labels} for s in found), (grouped, query)
            selected += 1
    assert selected >= 20


def test_the_stand_in_reads_the_dashboards_filter_form_and_refuses_one_it_cannot_read(stand_in):
    assert parse_filter(
        'metric.type="compute.googleapis.com/workload/badput_time" resource.type="compute.googleapis.com/Workload"'
    ) == {"metric.type": BADPUT_TIME, "resource.type": WORKLOAD}
    assert (
        parse_filter(f'metric.type="{GOODPUT_TIME}" AND resource.labels.workload_id="job"')[
            "resource.label.workload_id"
        ]
        == "job"
    )
    server, client = stand_in
    with pytest.raises(gexc.InvalidArgument, match="cannot read the filter"):
        list(
            client.list_time_series(
                name=f"projects/{PROJECT}",
                filter=f'metric.type = starts_with("{GOODPUT_TIME}")',
                interval=monitoring_v3.TimeInterval(end_time=at(0)),
            )
        )


# -- survivor watch ----------------------------------------------------------------------------------


def test_watch_with_goodput_metrics_writes_the_job_in_its_groups_project_each_look(
    compute_server, stand_in, tmp_path, monkeypatch
):
    from survivor.cloud.compute import Compute, GroupRef
    from survivor.cloud.template import MachineOptions, template_body
    from survivor.operator.watch import watch_once

    server, _ = stand_in
    monkeypatch.setenv(monitoring.ENDPOINT_ENV, server.address)
    spec = JobSpec.from_yaml(dummy_spec(str(tmp_path / "jobdir"), tmp_path, compute={"machine_type": "a2-highgpu-1g"}))
    write_job(spec.job_dir)
    compute = Compute(PROJECT, endpoint=compute_server.endpoint)
    compute.insert_template(template_body(spec.name, spec, MachineOptions.from_spec(spec), script="#!/bin/bash\n"))
    compute.create_group(spec.name, spec.name, zone=ZONE, size=0)
    said: list[str] = []
    watch_once(compute, GroupRef(PROJECT, spec.name, zone=ZONE), say=said.append, goodput_metrics=True)
    assert any("goodput written to Cloud Monitoring (10 series" in line for line in said), said
    [point] = server.points(GOODPUT_TIME, PROJECT)
    assert point.resource == {"location": ZONE, "workload_id": spec.name, "replica_id": "0"}
    assert point.labels["accelerator_type"] == "NVIDIA-A100"
    said.clear()
    watch_once(compute, GroupRef(PROJECT, spec.name, zone=ZONE), say=said.append)  # without the flag: nothing written
    assert not any("Cloud Monitoring" in line for line in said) and len(server.points(GOODPUT_TIME)) == 1


def test_a_deployed_watch_carries_the_flag():
    from survivor.operator.watch_deploy import WatchDeployment, watch_args

    options = WatchDeployment(
        job="job", project=PROJECT, region="us-west1", zone=ZONE, service_account="sa@p.iam", goodput_metrics=True
    )
    assert watch_args(options)[-1] == "--goodput-metrics"
    assert "--goodput-metrics" not in watch_args(
        WatchDeployment(job="job", project=PROJECT, region="us-west1", zone=ZONE, service_account="sa@p.iam")
    )


def test_deploying_the_watch_with_goodput_metrics_says_whether_its_account_may_write_them(
    compute_server, monkeypatch, capsys
):
    from survivor.commands.main import main
    from survivor.local.run_server import RunServer
    from survivor.local.scheduler_server import SchedulerServer
    from survivor.operator import watch_deploy

    account = "survivor-watch@survivor-local.iam.gserviceaccount.com"
    base = [
        "watch",
        "job",
        "--project",
        PROJECT,
        "--zone",
        ZONE,
        "--deploy",
        "--service-account",
        account,
        "--goodput-metrics",
    ]
    with RunServer() as run, SchedulerServer() as scheduler:
        monkeypatch.setenv(watch_deploy.RUN_ENDPOINT_ENV, run.endpoint)
        monkeypatch.setenv(watch_deploy.SCHEDULER_ENDPOINT_ENV, scheduler.endpoint)
        compute_server.set_project_policy(PROJECT, [{"role": "roles/viewer", "members": [f"serviceAccount:{account}"]}])
        assert main(base) == 0
        out = capsys.readouterr().out
        assert (
            f"warning: project {PROJECT}: {account} lacks monitoring.timeSeries.create (grant "
            f"roles/monitoring.metricWriter"
        ) in out
        [job] = run.jobs.values()
        assert "--goodput-metrics" in json.dumps(job)
        compute_server.set_project_policy(
            PROJECT, [{"role": "roles/monitoring.metricWriter", "members": [f"serviceAccount:{account}"]}]
        )
        assert main(base) == 0
        assert f"ok: project {PROJECT}: {account} has monitoring.timeSeries.create" in capsys.readouterr().out


def test_a_job_that_moved_keeps_writing_the_series_of_the_place_it_started():
    from survivor.jobdir.moves import Move

    moved = [
        Move(time="2026-03-01T13:00:00.000+00:00", from_place="zones/us-west1-b", to_place="zones/us-east4-c"),
        Move(time="2026-03-01T14:00:00.000+00:00", from_place="zones/us-east4-c", to_place="regions/europe-west4"),
    ]
    assert goodput_metrics.first_place(moved, "europe-west4") == "us-west1-b"
    assert goodput_metrics.first_place([], "us-west1-b") == "us-west1-b"


def test_a_gauge_point_with_a_start_time_other_than_its_end_or_a_metric_it_has_no_descriptor_of_is_refused(stand_in):
    server, client = stand_in
    ranged = monitoring.time_series(series_of(GOODPUT_TIME)[0], at(0))
    ranged.points[0].interval.start_time = at(-60)
    with pytest.raises(gexc.InvalidArgument, match="start time of a GAUGE point must equal its end time"):
        client.create_time_series(name=f"projects/{PROJECT}", time_series=[ranged])
    other = Series(GOODPUT_TIME.replace("goodput_time", "goodput_seconds"), {}, monitoring.workload(ZONE, "job"), 1.0)
    with pytest.raises(gexc.InvalidArgument, match='metric.type had an invalid value of ".*goodput_seconds"'):
        create(client, [other], at(0))
    assert server.series == {}
