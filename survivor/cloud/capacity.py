"""Where Spot capacity is, as Compute Engine says: a place's `Outlook` from `advice.capacity` and
`advice.capacityHistory` (docs/capacity-data.md has every field's source).

    >>> outlook = outlook_from(advice={"recommendations": [{"scores": {"obtainability": 0.9,
    ...                                  "estimatedUptime": "3600s"}}]}, history=None)
    >>> outlook.obtainability, outlook.uptime_hours
    (0.9, 1.0)

`request_bodies` makes the two REST bodies for a region and a machine; `outlook_from` (pure) reads
the answers; `read_outlooks` asks for every place of a job and returns None for the places it could
not get (no permission, a region or machine without the data, a failed call): the caller decides
those with the rule it had before, and `Fallback` says so once in the log, never at every look.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable

from survivor import log as logs

log = logs.get("capacity")

#: How many of the newest daily preemption records make a place's rate (docs/capacity-data.md H4:
#: daily, 30 days; a week weighs the recent past without one day's noise).
HISTORY_DAYS_USED = 7
#: The fleet model that turns a daily preemption rate into preemptions per running hour (the same
#: model the Compute fake serves its history with: a Spot VM of the fleet runs this long before its
#: user stops it): rate = p / (p + 1 / FLEET_RUN_HOURS).
FLEET_RUN_HOURS = 24.0
#: The longest estimated uptime Google gives (C4: 3600 s) is a floor, not a mean: a place in that
#: band is planned with this typical uptime (hours) when no history says more.
TOP_BAND_UPTIME_HOURS = 8.0


@dataclass(frozen=True)
class Outlook:
    """One place's capacity data: obtainability (0-1), the estimated uptime (hours), and the mean
    daily preemption rate of its recent history (None: no history for this machine or place)."""

    obtainability: float
    uptime_hours: float
    preemption_rate: float | None = None

    def hazard_per_hour(self, top_band_hours: float = TOP_BAND_UPTIME_HOURS) -> float:
        """Pure: the expected preemptions per hour of a running Spot VM here: from the history's rate
        when there is one (the fleet model), else from the estimated uptime as a median of an
        exponential lifetime (ln 2 / uptime; the top band at `top_band_hours`)."""
        if self.preemption_rate is not None:
            rate = min(max(self.preemption_rate, 0.0), 0.999)
            return rate / (1 - rate) / FLEET_RUN_HOURS
        uptime = top_band_hours if self.uptime_hours >= 1.0 else max(self.uptime_hours, 1 / 60)
        return math.log(2) / uptime


def duration_hours(text: str) -> float | None:
    """Pure: a google-duration ("3600s", "600.5s") in hours; None when it is not one."""
    found = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)s", text or "")
    return float(found.group(1)) / 3600 if found else None


def outlook_from(advice: dict | None, history: dict | None) -> Outlook | None:
    """Pure: the Outlook of an `advice.capacity` answer (its first recommendation: C3) and an
    `advice.capacityHistory` answer (None: none); None when the advice has no scores."""
    recommendations = (advice or {}).get("recommendations") or []
    scores = (recommendations[0].get("scores") if recommendations else None) or {}
    if "obtainability" not in scores:
        return None
    uptime = duration_hours(scores.get("estimatedUptime", ""))
    rates = [r.get("preemptionRate") for r in ((history or {}).get("preemptionHistory") or [])]
    rates = [float(r) for r in rates if isinstance(r, (int, float))][-HISTORY_DAYS_USED:]
    return Outlook(
        obtainability=min(1.0, max(0.0, float(scores["obtainability"]))),
        uptime_hours=uptime if uptime is not None else 1 / 60,
        preemption_rate=sum(rates) / len(rates) if rates else None,
    )


def has_history(machine_type: str, gpu_type: str | None) -> bool:
    """Pure: whether Compute Engine keeps preemption history for the machine (H5: not N1 with GPUs
    attached, custom machine types or TPUs)."""
    return not (
        (machine_type.startswith("n1-") and gpu_type)
        or "custom" in machine_type
        or re.match(r"^(ct[0-9]|tpu)", machine_type)
    )


def request_bodies(
    machine_type: str, gpu_type: str | None, gpu_count: int, zone: str | None = None
) -> tuple[dict, dict | None]:
    """Pure: the `advice.capacity` body for one Spot VM of the machine anywhere in the region (in
    `zone` only, for a zonal group), and the `advice.capacityHistory` body (None for a machine
    without history, H5)."""
    selection: dict = {"machineTypes": [machine_type]}
    if gpu_type and gpu_count and machine_type.startswith("n1-"):
        selection["guestAccelerators"] = [{"acceleratorType": gpu_type, "acceleratorCount": gpu_count}]
    distribution: dict = {"targetShape": "ANY_SINGLE_ZONE"}
    if zone:
        distribution["zones"] = [{"zone": f"zones/{zone}"}]
    advice = {
        "instanceProperties": {"scheduling": {"provisioningModel": "SPOT"}},
        "size": 1,
        "instanceFlexibilityPolicy": {"instanceSelections": {"job": selection}},
        "distributionPolicy": distribution,
    }
    history = None
    if has_history(machine_type, gpu_type):
        history = {
            "instanceProperties": {"machineType": machine_type, "scheduling": {"provisioningModel": "SPOT"}},
            "types": ["PREEMPTION"],
        }
        if zone:
            history["locationPolicy"] = {"location": f"zones/{zone}"}
    return advice, history


class Fallback:
    """Says once per process, for each place and reason, that a decision goes without capacity data
    (the data is an input, never a requirement)."""

    def __init__(self) -> None:
        self.said: set[tuple[str, str]] = set()

    def say(self, where: str, why: str) -> None:
        """Logs the fallback the first time `where` has no data for `why`."""
        kind = why.split(":", 1)[0]
        if (where, kind) in self.said:
            return
        self.said.add((where, kind))
        log.warning("no capacity data: deciding with the rule without it", place=where, reason=why[:300])


FALLBACK = Fallback()


def read_outlooks(
    ask_advice: Callable[[str, dict], dict],
    ask_history: Callable[[str, dict], dict],
    places: list[tuple[str, tuple[str, str | None, int], str | None]],
    *,
    fallback: Fallback = FALLBACK,
) -> dict[int, Outlook]:
    """The outlook of each place (region, (machine type, GPU type, GPU count), zone or None) by its index in
    `places`, asked with `ask_advice(region, body)` / `ask_history(region, body)` (a `Compute`'s
    `capacity_advice` / `capacity_history`); a place whose advice fails is left out (said once);
    a history that fails leaves the place with its advice only."""
    from survivor.cloud.compute import ComputeError

    out: dict[int, Outlook] = {}
    for i, (region, machine, zone) in enumerate(places):
        advice_body, history_body = request_bodies(*machine, zone=zone)
        try:
            advice = ask_advice(region, advice_body)
        except ComputeError as exc:
            fallback.say(f"{region} {machine[0]}", f"advice.capacity: {exc}")
            continue
        history = None
        if history_body is not None:
            try:
                history = ask_history(region, history_body)
            except ComputeError as exc:
                fallback.say(f"{region} {machine[0]}", f"advice.capacityHistory: {exc}")
        found = outlook_from(advice, history)
        if found is None:
            fallback.say(f"{region} {machine[0]}", "advice.capacity: no scores in the answer")
            continue
        out[i] = found
    return out
