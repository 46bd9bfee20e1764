"""A Cloud Monitoring stand-in: MetricService's CreateTimeSeries and ListTimeSeries over gRPC on 127.0.0.1.

    >>> with MonitoringServer() as monitoring:
    ...     metrics = monitoring_v3.MetricServiceClient(transport=MetricServiceGrpcTransport(
    ...         channel=grpc.insecure_channel(monitoring.address)))
    ...     write(metrics, "survivor-local", series, end=now)          # survivor/cloud/monitoring.py
    ...     monitoring.points(GOODPUT_TIME)                           # [(labels, resource, end, value), ...]

gRPC, not HTTP: google-cloud-monitoring's MetricServiceClient has gRPC transports only, so the real
client reaches this server through `MetricServiceGrpcTransport(channel=grpc.insecure_channel(...))`.
It refuses what the API refuses (the rules and their sources: survivor/cloud/monitoring.py), each
failure in the API's form, INVALID_ARGUMENT "One or more TimeSeries could not be written: REASON:
timeSeries[i]", the valid series of the request still written (as the API does: the ranges of
failed indices in its answers, e.g. `timeSeries[0,2-6,8]`):

- more than 200 time series in a request: the whole request refused;
- a series with other than exactly one point, or a second point of one series in one request
  ("Duplicate TimeSeries encountered. Only one point can be written per TimeSeries per request.", as
  the API answers it: census-ecosystem/opencensus-go-exporter-stackdriver#73);
- a point whose end time is not after the series' last ("Points must be written in order. ...") or
  less than 10 s after it ("One or more points were written more frequently than the maximum sampling
  period configured for the metric."), as Cloud Monitoring's answers read in its users' reports;
- a metric type it has no descriptor of, a label its descriptor lacks, a value of another type,
  a GAUGE point whose start time is not its end time, a resource other than
  `compute.googleapis.com/Workload` or without each of its labels;
- `denied`: PERMISSION_DENIED naming monitoring.timeSeries.create (an account without
  roles/monitoring.metricWriter).

ListTimeSeries answers a filter of `metric.type`, `resource.type`, `metric.label(s).K` and
`resource.label(s).K` equalities (joined by spaces or AND), the points in the interval newest first;
a filter it cannot read is refused, never guessed.
"""

from __future__ import annotations

import datetime as _dt
import re
import threading
from concurrent import futures
from dataclasses import dataclass
from typing import Any

from survivor.cloud.monitoring import (
    DESCRIPTORS,
    INT64,
    MAX_SERIES,
    MIN_SECONDS_APART,
    WORKLOAD,
    WORKLOAD_LABELS,
    WRITE_PERMISSION,
)

SERVICE = "google.monitoring.v3.MetricService"
DUPLICATE = "Duplicate TimeSeries encountered. Only one point can be written per TimeSeries per request."
ORDER = (
    "Points must be written in order. One or more of the points specified had an older end time than the "
    "most recent point."
)
FREQUENT = "One or more points were written more frequently than the maximum sampling period configured for the metric."
TERM = re.compile(
    r"\s*(?:AND\s+)?(metric\.type|resource\.type|(?:metric|resource)\.labels?\.[A-Za-z_][A-Za-z0-9_]*)"
    r'\s*=\s*"([^"]*)"\s*'
)


@dataclass(frozen=True)
class Point:
    """One stored point: the series' metric labels, resource labels, end time and value."""

    labels: dict
    resource: dict
    end: _dt.datetime
    value: float | int


def _empty(_) -> bytes:
    """google.protobuf.Empty, serialized: no bytes."""
    return b""


def _seconds(stamp) -> float:
    return stamp.timestamp() if stamp else 0.0


def parse_filter(text: str) -> dict[str, str]:
    """Pure: a ListTimeSeries filter of equalities -> {field: value} (`metric.labels.K` read as
    `metric.label.K`); ValueError for anything else."""
    out: dict[str, str] = {}
    at = 0
    while at < len(text):
        found = TERM.match(text, at)
        if not found or found.end() == at:
            raise ValueError(f"cannot read the filter at {text[at : at + 40]!r}")
        out[found.group(1).replace(".labels.", ".label.")] = found.group(2)
        at = found.end()
    if "metric.type" not in out:
        raise ValueError("the filter names no metric.type")
    return out


def _ranges(indices: list[int]) -> str:
    parts: list[str] = []
    for i in indices:
        if parts and parts[-1].split("-")[-1] == str(i - 1):
            parts[-1] = parts[-1].split("-")[0] + f"-{i}"
        else:
            parts.append(str(i))
    return ",".join(parts)


#: gRPC and the Monitoring types, from the operator extra: imported by the first server (`_load`), so
#: that this module imports with survivor's core packages alone, as every module does.
grpc: Any = None
monitoring_v3: Any = None


def _load() -> None:
    global grpc, monitoring_v3
    if grpc is None:
        import grpc as _grpc
        from google.cloud import monitoring_v3 as _monitoring_v3

        grpc, monitoring_v3 = _grpc, _monitoring_v3


class MonitoringServer:
    """Holds the series written to it, by (project, metric type, metric labels, resource labels)."""

    def __init__(self, port: int = 0):
        _load()
        self.series: dict[tuple, list[Point]] = {}
        self.requests: list[int] = []  # how many series each CreateTimeSeries held, accepted or not
        self.denied = False
        self._lock = threading.Lock()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handlers = {
            "CreateTimeSeries": grpc.unary_unary_rpc_method_handler(
                self._create,
                request_deserializer=monitoring_v3.CreateTimeSeriesRequest.deserialize,
                response_serializer=_empty,
            ),
            "ListTimeSeries": grpc.unary_unary_rpc_method_handler(
                self._list,
                request_deserializer=monitoring_v3.ListTimeSeriesRequest.deserialize,
                response_serializer=monitoring_v3.ListTimeSeriesResponse.serialize,
            ),
        }
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
        self.port = self._server.add_insecure_port(f"127.0.0.1:{port}")

    @property
    def address(self) -> str:
        """`127.0.0.1:PORT`: what SURVIVOR_MONITORING_ENDPOINT names (a gRPC target, not a URL)."""
        return f"127.0.0.1:{self.port}"

    def start(self):
        """Starts serving; returns self."""
        self._server.start()
        return self

    def stop(self) -> None:
        """Stops serving at once."""
        self._server.stop(None)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def points(self, metric: str, project: str | None = None) -> list[Point]:
        """Every stored point of `metric` (in `project`, or any), oldest first within each series."""
        with self._lock:
            return [
                p
                for (proj, kind, _, _), points in self.series.items()
                if kind == metric and project in (None, proj)
                for p in points
            ]

    # -- the API ------------------------------------------------------------------------------------

    def _problem(self, index: int, one, seen: set) -> tuple[str, tuple | None, Point | None]:
        """Why series `index` of a request cannot be written ("" when it can), its key and its point."""
        descriptor = DESCRIPTORS.get(one.metric.type)
        if descriptor is None:
            return f'Field timeSeries[{index}].metric.type had an invalid value of "{one.metric.type}"', None, None
        unknown = sorted(set(one.metric.labels) - set(descriptor.labels))
        if unknown:
            return (
                f'Field timeSeries[{index}].metric.labels had an invalid value of "{unknown[0]}": '
                f"Unrecognized metric label.",
                None,
                None,
            )
        if one.resource.type != WORKLOAD:
            return f'Field timeSeries[{index}].resource.type had an invalid value of "{one.resource.type}"', None, None
        labels = set(one.resource.labels)
        if labels != set(WORKLOAD_LABELS):
            wrong = sorted(labels.symmetric_difference(WORKLOAD_LABELS))[0]
            return (
                f'Field timeSeries[{index}].resource.labels had an invalid value of "{wrong}": the resource '
                f"{WORKLOAD} takes each of {', '.join(WORKLOAD_LABELS)} and no other",
                None,
                None,
            )
        if len(one.points) != 1:
            return (
                f"Field timeSeries[{index}].points had an invalid value: only one point can be written per "
                f"TimeSeries per request",
                None,
                None,
            )
        point = one.points[0]
        kind = "int64_value" if descriptor.value_type == INT64 else "double_value"
        if monitoring_v3.TypedValue.pb(point.value).WhichOneof("value") != kind:
            return (
                f"Field timeSeries[{index}].points[0].value had an invalid value: the metric {descriptor.type} "
                f"takes {descriptor.value_type} values",
                None,
                None,
            )
        end = point.interval.end_time
        start = point.interval.start_time
        if not _seconds(end):
            return f"Field timeSeries[{index}].points[0].interval.end_time is required", None, None
        if _seconds(start) and _seconds(start) != _seconds(end):
            return (
                f"Field timeSeries[{index}].points[0].interval.start_time had an invalid value: the start time of "
                f"a GAUGE point must equal its end time",
                None,
                None,
            )
        key = (one.metric.type, tuple(sorted(one.metric.labels.items())), tuple(sorted(one.resource.labels.items())))
        if key in seen:
            return f"Field timeSeries[{index}] had an invalid value: {DUPLICATE}", None, None
        value = point.value.int64_value if kind == "int64_value" else point.value.double_value
        return "", key, Point(dict(one.metric.labels), dict(one.resource.labels), end, value)

    def _create(self, request, context):
        with self._lock:
            self.requests.append(len(request.time_series))
        if self.denied:
            context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"Permission {WRITE_PERMISSION} denied (or the resource may not exist).",
            )
        project = request.name.removeprefix("projects/")
        if not request.name.startswith("projects/") or not project or "/" in project:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f'Field name had an invalid value of "{request.name}"')
        if len(request.time_series) > MAX_SERIES:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"Field timeSeries had an invalid value: the request holds {len(request.time_series)} "
                f"TimeSeries; the maximum is {MAX_SERIES}.",
            )
        failed: dict[str, list[int]] = {}
        seen: set = set()
        with self._lock:
            for index, one in enumerate(request.time_series):
                problem, key, point = self._problem(index, one, seen)
                if key is not None and point is not None:
                    seen.add(key)
                    full = (project, *key)
                    stored = self.series.setdefault(full, [])
                    if stored:
                        apart = point.end.timestamp() - stored[-1].end.timestamp()
                        problem = ORDER if apart <= 0 else FREQUENT if apart < MIN_SECONDS_APART else ""
                    if not problem:
                        stored.append(point)
                    elif not stored:
                        del self.series[full]
                if problem:
                    failed.setdefault(problem, []).append(index)
        if failed:
            reasons = "; ".join(f"{why}: timeSeries[{_ranges(indices)}]" for why, indices in failed.items())
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"One or more TimeSeries could not be written: {reasons}")
        return None

    def _list(self, request, context):
        try:
            wanted = parse_filter(request.filter)
        except ValueError as exc:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f'Field filter had an invalid value of "{request.filter}": {exc}'
            )
        if wanted.get("resource.type", WORKLOAD) != WORKLOAD:
            return monitoring_v3.ListTimeSeriesResponse()
        project = request.name.removeprefix("projects/")
        end = _seconds(request.interval.end_time) or float("inf")
        start = _seconds(request.interval.start_time)
        answer = monitoring_v3.ListTimeSeriesResponse()
        with self._lock:
            for (proj, kind, labels, resource), points in self.series.items():
                fields = {
                    "metric.type": kind,
                    **{f"metric.label.{k}": v for k, v in labels},
                    **{f"resource.label.{k}": v for k, v in resource},
                }
                if proj != project or any(fields.get(k) != v for k, v in wanted.items() if k != "resource.type"):
                    continue
                shown = [p for p in points if start <= p.end.timestamp() <= end]
                if not shown:
                    continue
                series = monitoring_v3.TimeSeries(
                    metric={"type": kind, "labels": dict(labels)},
                    resource={"type": WORKLOAD, "labels": dict(resource)},
                    metric_kind="GAUGE",
                )
                for p in reversed(shown):  # "points are returned in reverse time order"
                    value = (
                        {"int64_value": p.value} if DESCRIPTORS[kind].value_type == INT64 else {"double_value": p.value}
                    )
                    series.points.append(monitoring_v3.Point(interval={"end_time": p.end}, value=value))
                answer.time_series.append(series)
        return answer
