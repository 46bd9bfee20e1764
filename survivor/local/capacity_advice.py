"""Compute Engine's capacity data, served from a Spot trace's past: `advice.capacity` and
`advice.capacityHistory` for the Compute fake, and the same figures for benchmarks/capacity.py.

    >>> zones = traces.load("benchmarks/traces/aws-02-15-2023")
    >>> scores(zones, "us-east-1a", at_hours=30.0)
    Scores(obtainability=1.0, uptime_seconds=3600)
    >>> preemption_history(zones, ["us-east-1a"], at_hours=30.0)[-1]
    (24.0, 30.0, 0.0)

What the API answers, and where each rule comes from (docs/capacity-data.md has the sources):

- `advice.capacity` (POST projects/P/regions/R/advice/capacity): one recommendation, its `scores`
  (`obtainability`, 0.0 through 1.0, "the likelihood of successfully obtaining (provisioning) the
  requested number of VMs"; `estimatedUptime`, a google-duration, "the estimated run time of the
  majority of Spot VMs in the request before preemption") and its `shards` (zone, machine type,
  instance count, provisioning model). Google computes obtainability "based on real-time
  availability ... and the success rate of recent creation requests", and sets the uptime to one
  of a few values (60 minutes, 10 minutes, 1 minute).
- `advice.capacityHistory` (POST .../advice/capacityHistory): `preemptionHistory`, daily records
  (`interval`, `preemptionRate`: "(total preempted Spots) / (total Spots that stopped running)",
  0.0 to 1.0) for the last 30 days, and `priceHistory` (`interval`, `listPrice` as Money).
  `instanceProperties.scheduling.provisioningModel` "must be set to SPOT"; N1 machine types with
  GPUs attached, custom machine types and TPUs have no history.

How the fake computes them from a trace (`traces.Zones`), from its past only, never ahead of `at`:

- obtainability: half the point at `at` (real-time availability: 1 with capacity, 0 without) plus
  half the share of the points of the trailing `WINDOW_HOURS` with capacity (recent success);
- estimated uptime: the median length of the zone's capacity stretches that ended in the trailing
  `UPTIME_WINDOW_HOURS` (and the current stretch's age, a lower bound), put into Google's bands
  (`UPTIME_BANDS`: at least an hour -> 3600 s, at least ten minutes -> 600 s, else 60 s); a zone
  out of capacity now has the lowest band;
- preemption history: one record a trace day (the trace's own hour 0 is a day's start; Google's
  days start at midnight Pacific Time), the day in progress up to `at`: the capacity losses
  (a point with capacity followed by one without: what preempts a running Spot VM) over those plus
  the other stops of a fleet whose VMs each run `FLEET_RUN_HOURS` of capacity before their users
  stop them. A zone with no loss in a day has rate 0; each loss raises it toward 1.

A zone the trace does not name has capacity all the time (as `follow_capacity` treats it).
"""

from __future__ import annotations

import datetime as _dt
import re
import statistics
from dataclasses import dataclass
from typing import Any, Iterable

from survivor.local import traces
from survivor.local.http import HttpError

#: The trailing window whose points make the "recent success" half of obtainability.
WINDOW_HOURS = 1.0
#: The trailing window whose capacity stretches make the estimated uptime.
UPTIME_WINDOW_HOURS = 24.0
#: Google's estimated uptime values (seconds), longest first (docs/capacity-data.md, C4).
UPTIME_BANDS = (3600, 600, 60)
#: How many days of preemption history the API returns (docs/capacity-data.md, H2).
HISTORY_DAYS = 30
#: The fake's fleet: how long a Spot VM runs before its user stops it, for the denominator of the
#: preemption rate ("total Spots that stopped running" counts users' stops too).
FLEET_RUN_HOURS = 24.0
#: Obtainability's band edges (docs/capacity-data.md, C3): 0.7 and up is "high", below 0.4 "low".
HIGH, LOW = 0.7, 0.4


@dataclass(frozen=True)
class Scores:
    """One zone's `advice.capacity` scores."""

    obtainability: float
    uptime_seconds: int


def _points(zones: traces.Zones, zone: str, first: float, last: float) -> list[bool]:
    """The zone's points from hour `first` through hour `last` (clipped to the trace)."""
    series = zones.capacity[zone]
    lo = max(0, int(first // zones.gap_hours))
    hi = min(len(series) - 1, int(last // zones.gap_hours))
    return list(series[lo : hi + 1]) if hi >= lo else []


def scores(zones: traces.Zones, zone: str, at_hours: float) -> Scores:
    """Pure: the capacity scores of `zone` at hour `at_hours` of the trace, from its points up to it."""
    if zone not in zones.capacity:
        return Scores(1.0, UPTIME_BANDS[0])
    now = _points(zones, zone, at_hours, at_hours)
    up = bool(now and now[0])
    recent = _points(zones, zone, at_hours - WINDOW_HOURS, at_hours)
    share = sum(recent) / len(recent) if recent else float(up)
    obtainable = round(0.5 * up + 0.5 * share, 3)
    if not up:
        return Scores(obtainable, UPTIME_BANDS[-1])
    past = _points(zones, zone, at_hours - UPTIME_WINDOW_HOURS, at_hours)
    runs, length = [], 0
    for point in past:
        if point:
            length += 1
        elif length:
            runs.append(length)
            length = 0
    current = length  # the stretch that runs now: its age so far
    typical = statistics.median(runs) if runs else current
    hours = max(typical, current if not runs else 0) * zones.gap_hours
    band = next((b for b in UPTIME_BANDS if hours * 3600 >= b), UPTIME_BANDS[-1])
    return Scores(obtainable, band)


def preemption_history(
    zones: traces.Zones, zone_list: Iterable[str], at_hours: float, days: int = HISTORY_DAYS
) -> list[tuple[float, float, float]]:
    """Pure: (start hour, end hour, preemption rate) a trace day for the zones together, the last
    `days` days up to `at_hours` (the day in progress ends at `at_hours`); only days the trace
    has begun."""
    names = [z for z in zone_list if z in zones.capacity]
    out = []
    today = int(at_hours // 24)
    for day in range(max(0, today - days + 1), today + 1):
        start, end = day * 24.0, min((day + 1) * 24.0, at_hours)
        if end <= start:
            continue
        lost = up_hours = 0.0
        for zone in names:
            points = _points(zones, zone, start - zones.gap_hours, end - 1e-9)
            lost += sum(1 for a, b in zip(points, points[1:]) if a and not b)
            up_hours += sum(points[1:]) * zones.gap_hours
        others = up_hours / FLEET_RUN_HOURS
        rate = lost / (lost + others) if lost + others > 0 else 0.0
        out.append((start, end, round(rate, 4)))
    return out


def rate_to_hazard(rate: float) -> float:
    """Pure: the preemptions per hour of a running Spot VM a daily preemption rate stands for, under
    the fleet model above (rate = p / (p + 1 / FLEET_RUN_HOURS)); the inverse of the fake's rule,
    which survivor uses only to rank places and size slack (docs/capacity-data.md, "What survivor
    makes of them")."""
    rate = min(max(rate, 0.0), 0.999)
    return rate / (1 - rate) / FLEET_RUN_HOURS


# -- the fake's two methods ---------------------------------------------------------------------

_TPU = re.compile(r"^(ct[0-9]|tpu)")


def _duration(seconds: int) -> str:
    return f"{seconds}s"


def _time(start: _dt.datetime, hours: float) -> str:
    return (start + _dt.timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%SZ")


class AdviceServing:
    """The two `advice` methods of the Compute fake (a mixin of `ComputeServer`), answered from the
    trace `follow_capacity` follows (`capacity_trace`) at its current hour. Without a trace every
    zone has capacity. Refused as the API refuses: a provisioning model other than SPOT for the
    history, a machine without history (N1 with GPUs, custom, TPU), a TPU for capacity, zones or a
    location outside the request's region, a request without a machine or with no VM."""

    #: the wall time of the trace's hour 0, for the records' intervals
    trace_epoch = _dt.datetime(2026, 11, 1, tzinfo=_dt.timezone.utc)

    def zones_of(self, region: str) -> list[str]:
        """The fake's zones of `region`: ComputeServer's own, which comes first in the MRO."""
        raise NotImplementedError

    def _trace_now(self) -> tuple[Any, dict[str, str], float] | None:
        """(trace, the fake's zone -> the trace's zone, the trace's hour now), or None."""
        state = getattr(self, "capacity_trace", None)
        if state is None:
            return None
        trace, speed, named, clock, start = state
        return trace, named, (clock() - start) * speed / 3600

    def _zone_scores(self, zone: str, machine: str = "", gpus: tuple[str, ...] = ()) -> Scores:
        """A zone's scores for a Spot VM of `machine` with `gpus`: none where the zone lacks the GPU
        or a stockout is injected (`fail_instance_creation`, as `_creation_error` matches them: a
        test's stockout is capacity the fake knows is not there), else from the trace."""
        from survivor.cloud import machines as rules

        built = rules.built_in_gpus(machine) if machine else None
        wanted = tuple(gpus) + ((built[0],) if built else ())
        offered = getattr(self, "accelerators", {}).get(zone, {})
        if wanted and any(k not in offered for k in wanted):  # as `_creation_error` refuses the VM
            return Scores(0.0, UPTIME_BANDS[-1])
        for failure in getattr(self, "creation_failures", []):
            if (
                failure["code"].startswith("ZONE_RESOURCE_POOL_EXHAUSTED")
                and failure["zone"] in (None, zone)
                and failure["remaining"] != 0
                and failure.get("machine_type") in (None, machine)
                and failure.get("accelerator") in (None, *wanted)
            ):
                return Scores(0.0, UPTIME_BANDS[-1])
        found = self._trace_now()
        if found is None:
            return Scores(1.0, UPTIME_BANDS[0])
        trace, named, at = found
        return scores(trace, named[zone], at) if zone in named else Scores(1.0, UPTIME_BANDS[0])

    def _advice_capacity(self, params, query, body):
        region = params["region"]
        selections = (body.get("instanceFlexibilityPolicy") or {}).get("instanceSelections") or {}
        machines = [(key, m, sel) for key, sel in sorted(selections.items()) for m in (sel.get("machineTypes") or [])]
        if not machines:
            raise HttpError(
                400,
                "Invalid value for field 'resource.instanceFlexibilityPolicy.instanceSelections': "
                "at least one instance selection with a machine type is required.",
            )
        if any(_TPU.match(m) for _, m, _ in machines):
            raise HttpError(400, "advice.capacity cannot view the availability of TPUs.")
        size = int(body.get("size") or 0)
        if size < 1:
            raise HttpError(400, "Invalid value for field 'resource.size': must be at least 1.")
        model = ((body.get("instanceProperties") or {}).get("scheduling") or {}).get("provisioningModel") or "SPOT"
        asked = [
            z.get("zone", "").rsplit("/", 1)[-1] for z in (body.get("distributionPolicy") or {}).get("zones") or []
        ]
        outside = [z for z in asked if z.rsplit("-", 1)[0] != region]
        if outside:
            raise HttpError(
                400,
                f"Invalid value for field 'resource.distributionPolicy.zones': zone {outside[0]} "
                f"is not in region {region}.",
            )
        zones = asked or self.zones_of(region)
        machine = machines[0][1]
        gpus = tuple(
            str(a.get("acceleratorType", "")).rsplit("/", 1)[-1] for a in machines[0][2].get("guestAccelerators") or []
        )
        per_zone = {z: self._zone_scores(z, machine, gpus) if model == "SPOT" else Scores(1.0, 0) for z in zones}
        best = max(zones, key=lambda z: (per_zone[z].obtainability, per_zone[z].uptime_seconds, z))
        chosen = per_zone[best]
        scores_out: dict[str, Any] = {"obtainability": chosen.obtainability}
        if model == "SPOT":
            scores_out["estimatedUptime"] = _duration(chosen.uptime_seconds)
        return {
            "recommendations": [
                {
                    "scores": scores_out,
                    "shards": [
                        {"zone": best, "machineType": machines[0][1], "instanceCount": size, "provisioningModel": model}
                    ],
                }
            ]
        }

    def _advice_capacityHistory(self, params, query, body):
        from survivor.cloud import pricing

        region, project = params["region"], params["project"]
        props = body.get("instanceProperties") or {}
        machine = props.get("machineType") or ""
        model = (props.get("scheduling") or {}).get("provisioningModel")
        if model != "SPOT":
            raise HttpError(
                400,
                "Invalid value for field 'resource.instanceProperties.scheduling.provisioningModel': "
                f"'{model}'. This field must be set to SPOT.",
            )
        if not machine:
            raise HttpError(
                400, "Invalid value for field 'resource.instanceProperties.machineType': a machine type is required."
            )
        if (
            machine.startswith("custom-")
            or "-custom-" in machine
            or _TPU.match(machine)
            or (machine.startswith("n1-") and props.get("guestAccelerators"))
        ):
            raise HttpError(
                400,
                f"Capacity history is not available for machine type {machine} with this "
                "configuration: N1 machine types with GPUs attached, custom machine types and TPUs "
                "have no preemption or price history.",
            )
        location = ((body.get("locationPolicy") or {}).get("location") or "").rstrip("/")
        where = location.rsplit("/", 1)[-1]
        if location and where.rsplit("-", 1)[0] != region and where != region:
            raise HttpError(
                400,
                f"Invalid value for field 'resource.locationPolicy.location': '{location}' is not in region {region}.",
            )
        zonal = bool(location) and where != region
        types = body.get("types") or ["PREEMPTION", "PRICE"]
        url = (
            "https://www.googleapis.com/compute/v1/projects/"
            + project
            + (f"/zones/{where}" if zonal else f"/regions/{region}")
        )
        out: dict[str, Any] = {"machineType": machine, "location": url}
        found = self._trace_now()
        if "PREEMPTION" in types:
            zones = [where] if zonal else self.zones_of(region)
            if found is None:
                records = [(max(0.0, d * 24.0), (d + 1) * 24.0, 0.0) for d in range(-HISTORY_DAYS, 0)]
            else:
                trace, named, at = found
                records = preemption_history(trace, [named[z] for z in zones if z in named], at)
            out["preemptionHistory"] = [
                {
                    "interval": {"startTime": _time(self.trace_epoch, s), "endTime": _time(self.trace_epoch, e)},
                    "preemptionRate": r,
                }
                for s, e, r in records
            ]
        if "PRICE" in types and not zonal:
            gpu = (props.get("guestAccelerators") or [{}])[0]
            prices = pricing.hourly(
                machine,
                (gpu.get("acceleratorType") or "").rsplit("/", 1)[-1] or None,
                int(gpu.get("acceleratorCount") or 0),
            )
            if prices:
                spot = prices[1]
                at = found[2] if found else 0.0
                out["priceHistory"] = [
                    {
                        "interval": {
                            "startTime": _time(self.trace_epoch, at - 365 * 24),
                            "endTime": _time(self.trace_epoch, at),
                        },
                        "listPrice": {
                            "currencyCode": "USD",
                            "units": str(int(spot)),
                            "nanos": int(round((spot - int(spot)) * 1e9)),
                        },
                    }
                ]
        return out
