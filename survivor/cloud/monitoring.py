"""Cloud Monitoring: a job's goodput written as Google's goodput library writes it, and the API's rules.

    >>> series = [Series(GOODPUT_TIME, {"goodput_source": "TOTAL", "accelerator_type": "NVIDIA-L4"},
    ...                  workload("us-central1-a", "cifar10"), 3600.0)]
    >>> write(client(), "my-project", series, end=now)       # one CreateTimeSeries call per 200 series

The metric types, their labels and the monitored resource are those of Google's ML Goodput
Measurement library (https://github.com/AI-Hypercomputer/ml-goodput-measurement, commit 57092cf,
ml_goodput_measurement/src/monitoring.py `_upload_goodput_metrics_to_gcm` and src/gcp_metrics.py
`GCPMetrics.create_time_series`), so that the library's dashboard
(ml_goodput_measurement/dashboards/goodput_dashboard.json) shows a survivor job as it shows a job
the library measured; Google lists the metrics as `compute.googleapis.com/workload/...`
(https://cloud.google.com/tpu/docs/goodput, "Goodput metrics"):

- `workload/goodput_time` (double, seconds): labels `goodput_source` (the library's `GoodputType`
  name: `TOTAL`) and `accelerator_type`;
- `workload/badput_time` (double, seconds): `badput_source` (a `BadputType` name) and `accelerator_type`;
- `workload/disruptions` (int64): `accelerator_type` and `window_type` (`cumulative`, lower case:
  src/goodput_utils.py `MonitoringWindowType.CUMULATIVE`);
- `workload/total_elapsed_time` (double, seconds): `accelerator_type` and `window_type`;
- each may carry the library's optional `cluster_name`; the resource is `compute.googleapis.com/Workload`
  with `location`, `workload_id` (the job's name) and `replica_id` (`0` unless told).

The library writes each point with an end time only, the way a GAUGE point is written (a GAUGE's
"start time is optional, but if it is supplied, it must equal the end time": `Point.interval` in
google-cloud-monitoring, monitoring_v3/types/metric.py).

`CreateTimeSeries`, as Google documents it and as survivor/local/monitoring_server.py refuses it:

- at most 200 time series a request (`MAX_SERIES`), each with exactly one point, and "at most one
  data point to each of several time series" (CreateTimeSeriesRequest.time_series and
  TimeSeries.points, monitoring_v3/types/metric_service.py and metric.py; "You can write only one
  data point for each time series in a request", https://cloud.google.com/monitoring/quotas);
- each point "must be more recent than any other point in its time series" (CreateTimeSeriesRequest),
  and "the end times of points written to a time series be at least 10 seconds apart"
  (`MIN_SECONDS_APART`, https://cloud.google.com/monitoring/quotas, "Rate at which data can be written
  to a single time series: one point each 10 seconds");
- the point's value type is the metric's (TimeSeries.points); every label of the monitored resource
  is given ("Each TimeSeries value must fully specify a unique time series by supplying all label
  values for the metric and the monitored resource") and no label the descriptor lacks;
- the caller needs `monitoring.timeSeries.create`, in roles/monitoring.metricWriter ("for service
  accounts and agents", https://cloud.google.com/monitoring/access-control,
  https://cloud.google.com/iam/docs/roles-permissions/monitoring).

google-cloud-monitoring ships gRPC transports only (monitoring_v3/services/metric_service/transports:
grpc.py, grpc_asyncio.py; no rest.py), so a stand-in at SURVIVOR_MONITORING_ENDPOINT (`host:port`)
is reached over an insecure gRPC channel, not over REST as the other stand-ins are.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Mapping, Sequence

from survivor import retry
from survivor.cloud import endpoints

#: The variable naming a stand-in's address (survivor/cloud/endpoints.py).
ENDPOINT_ENV = endpoints.MONITORING.env

DOMAIN = "compute.googleapis.com/"
GOODPUT_TIME = DOMAIN + "workload/goodput_time"
BADPUT_TIME = DOMAIN + "workload/badput_time"
DISRUPTIONS = DOMAIN + "workload/disruptions"
TOTAL_ELAPSED_TIME = DOMAIN + "workload/total_elapsed_time"
#: The monitored resource the library writes every goodput metric against, and its labels.
WORKLOAD = "compute.googleapis.com/Workload"
WORKLOAD_LABELS = ("location", "workload_id", "replica_id")

DOUBLE, INT64 = "double", "int64"


@dataclass(frozen=True)
class Descriptor:
    """What a goodput metric accepts: its value type and its labels (the library's, optional ones too)."""

    type: str
    value_type: str
    labels: tuple[str, ...]


#: The four metrics survivor writes, as the library writes them (`cluster_name`: its optional label).
DESCRIPTORS = {
    d.type: d
    for d in (
        Descriptor(GOODPUT_TIME, DOUBLE, ("goodput_source", "accelerator_type", "cluster_name")),
        Descriptor(BADPUT_TIME, DOUBLE, ("badput_source", "accelerator_type", "cluster_name")),
        Descriptor(DISRUPTIONS, INT64, ("accelerator_type", "window_type", "cluster_name")),
        Descriptor(TOTAL_ELAPSED_TIME, DOUBLE, ("accelerator_type", "window_type", "cluster_name")),
    )
}
#: The library's `GoodputType.TOTAL` and `MonitoringWindowType.CUMULATIVE` (src/goodput_utils.py).
GOODPUT_TOTAL = "TOTAL"
CUMULATIVE = "cumulative"

#: CreateTimeSeries: the most time series one request may hold.
MAX_SERIES = 200
#: The fewest seconds between the end times of two points of one time series.
MIN_SECONDS_APART = 10.0
#: The permission CreateTimeSeries takes, and the predefined role for a writer that only writes.
WRITE_PERMISSION = "monitoring.timeSeries.create"
WRITER_ROLE = "roles/monitoring.metricWriter"

#: The library's machine-type prefixes -> accelerator names, GPU rows only (src/goodput_utils.py
#: MACHINE_TYPE_TO_ACCELERATOR_TYPE_MAPPING; first match wins, as in `get_accelerator_type`).
MACHINE_ACCELERATORS = (
    ("a3-edgegpu", "NVIDIA-H100"),
    ("a3-highgpu", "NVIDIA-H100"),
    ("a3-megagpu", "NVIDIA-H100"),
    ("a3-ultragpu", "NVIDIA-H200"),
    ("a2", "NVIDIA-A100"),
)


@dataclass(frozen=True)
class Series:
    """One time series to write one point to: its metric type and labels, its resource's labels, the value."""

    metric: str
    labels: Mapping[str, str]
    resource: Mapping[str, str]
    value: float | int

    @property
    def key(self) -> tuple:
        """What identifies the series: metric type and labels, resource type and labels."""
        return (self.metric, tuple(sorted(self.labels.items())), WORKLOAD, tuple(sorted(self.resource.items())))


def workload(location: str, workload_id: str, replica_id: str = "0") -> dict[str, str]:
    """The `compute.googleapis.com/Workload` resource's labels, as the library fills them: the zone
    (or region) the job runs in, the job's name, the replica ("0" unless there are several)."""
    return {"location": location, "workload_id": workload_id, "replica_id": replica_id}


def accelerator_type(machine_type: str | None, gpu: str | None) -> str:
    """Pure: the `accelerator_type` label for a machine: the library's name for an A2/A3 machine type,
    else the GPU's type as the spec names it, upper case (`nvidia-l4:1` -> `NVIDIA-L4`), else `UNKNOWN`
    (the library's word for a machine it cannot name)."""
    name = (machine_type or "").lower()
    for prefix, accelerator in MACHINE_ACCELERATORS:
        if prefix in name:
            return accelerator
    if gpu:
        return gpu.split(":", 1)[0].upper()
    return "UNKNOWN"


def batches(series: Sequence[Series]) -> list[list[Series]]:
    """Pure: `series` in requests of at most MAX_SERIES, none holding one series twice."""
    out: list[list[Series]] = []
    seen: list[set] = []
    for one in series:
        for batch, keys in zip(out, seen):
            if len(batch) < MAX_SERIES and one.key not in keys:
                batch.append(one)
                keys.add(one.key)
                break
        else:
            out.append([one])
            seen.append({one.key})
    return out


def time_series(one: Series, end: _dt.datetime):
    """The monitoring_v3.TimeSeries for `one` with a single point at `end`, as the library builds it
    (src/gcp_metrics.py `create_time_series`: metric type and labels, resource, one point with an end time)."""
    from google.cloud import monitoring_v3

    descriptor = DESCRIPTORS.get(one.metric)
    value_type = descriptor.value_type if descriptor else (INT64 if isinstance(one.value, int) else DOUBLE)
    value = {"int64_value": int(one.value)} if value_type == INT64 else {"double_value": float(one.value)}
    series = monitoring_v3.TimeSeries()
    series.metric.type = one.metric
    series.metric.labels.update(dict(one.labels))
    series.resource.type = WORKLOAD
    series.resource.labels.update(dict(one.resource))
    seconds = int(end.timestamp())
    nanos = int(round((end.timestamp() - seconds) * 1e9)) % 1_000_000_000
    series.points.append(
        monitoring_v3.Point(
            interval=monitoring_v3.TimeInterval(end_time={"seconds": seconds, "nanos": nanos}),
            value=monitoring_v3.TypedValue(**value),
        )
    )
    return series


class MonitoringError(Exception):
    """A write Cloud Monitoring refused or could not take: which request, and the API's words."""


def _transient(exc: BaseException) -> bool:
    from google.api_core import exceptions as gexc

    # only what was certainly not written: a retried write that had landed would be refused as out of order
    return isinstance(exc, (gexc.ServiceUnavailable, gexc.TooManyRequests))


def client(endpoint: str | None = None):
    """A MetricServiceClient: at `endpoint` or SURVIVOR_MONITORING_ENDPOINT (`host:port`, a stand-in,
    over an insecure gRPC channel), else Google's, with Application Default Credentials."""
    from google.cloud import monitoring_v3
    from google.cloud.monitoring_v3.services.metric_service.transports import MetricServiceGrpcTransport

    address = endpoints.MONITORING.endpoint(endpoint)
    if address:
        import grpc

        host = address.split("://", 1)[-1]
        return monitoring_v3.MetricServiceClient(
            transport=MetricServiceGrpcTransport(channel=grpc.insecure_channel(host))
        )
    return monitoring_v3.MetricServiceClient(
        credentials=endpoints.application_default(MetricServiceGrpcTransport.AUTH_SCOPES)
    )


def write(metrics, project: str, series: Sequence[Series], *, end: _dt.datetime) -> int:
    """Writes one point at `end` to each of `series` (`metrics`: a MetricServiceClient), at most
    MAX_SERIES a request; returns the number of requests. Raises MonitoringError with the API's words
    for a refused request (the ones before it are written)."""
    from google.api_core import exceptions as gexc

    requests = batches(series)
    for number, batch in enumerate(requests, 1):
        body = [time_series(one, end) for one in batch]
        try:
            for attempt in retry.MONITORING_WRITE.retrying(retry_on=_transient):
                with attempt:
                    metrics.create_time_series(name=f"projects/{project}", time_series=body, timeout=10.0)
        except gexc.GoogleAPICallError as exc:
            raise MonitoringError(
                f"CreateTimeSeries in projects/{project} (request {number} of {len(requests)}, "
                f"{len(body)} series): {exc.message}"
            ) from None
    return len(requests)
