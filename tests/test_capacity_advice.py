"""Compute Engine's capacity data from the Compute fake, through the real `compute_v1.AdviceClient`:
`advice.capacity` and `advice.capacityHistory` answered from a Spot trace's past only, and refused
where the API refuses (docs/capacity-data.md)."""

import json

import pytest
from google.api_core import exceptions as gexc
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from survivor.local import capacity_advice
from survivor.local.traces import load

PROJECT = "survivor-local"


def write_trace(folder, zone: str, gap_seconds: float, points: list) -> None:
    (folder / f"{zone}_v100_1.json").write_text(json.dumps({"metadata": {"gap_seconds": gap_seconds}, "data": points}))


def _client(server) -> compute_v1.AdviceClient:
    return compute_v1.AdviceClient(
        credentials=AnonymousCredentials(), client_options={"api_endpoint": server.endpoint}, transport="rest"
    )


def _capacity(
    client, region: str, zones=(), machine="n1-standard-8", gpu=("nvidia-tesla-v100", 1), size=1, model="SPOT"
):
    selection = {"machineTypes": [machine]}
    if gpu:
        selection["guestAccelerators"] = [{"acceleratorType": gpu[0], "acceleratorCount": gpu[1]}]
    body = {
        "instanceProperties": {"scheduling": {"provisioningModel": model}},
        "size": size,
        "instanceFlexibilityPolicy": {"instanceSelections": {"job": selection}},
        "distributionPolicy": {"targetShape": "ANY_SINGLE_ZONE", "zones": [{"zone": f"zones/{z}"} for z in zones]},
    }
    request = compute_v1.CapacityAdviceRequest.from_json(json.dumps(body))
    return client.capacity(project=PROJECT, region=region, capacity_advice_request_resource=request)


def _history(client, region: str, machine="g2-standard-8", location=None, model="SPOT", gpu=None):
    body: dict = {
        "instanceProperties": {"machineType": machine, "scheduling": {"provisioningModel": model}},
        "types": ["PREEMPTION", "PRICE"],
    }
    if gpu:
        body["instanceProperties"]["guestAccelerators"] = [{"acceleratorType": gpu, "acceleratorCount": 1}]
    if location:
        body["locationPolicy"] = {"location": location}
    request = compute_v1.CapacityHistoryRequest.from_json(json.dumps(body))
    return client.capacity_history(project=PROJECT, region=region, capacity_history_request_resource=request)


# -- the figures from a trace's past --------------------------------------------------------------


def test_scores_see_the_past_and_present_never_the_future(tmp_path):
    # 10-minute points: capacity for an hour, out for 30 minutes, back for good
    write_trace(tmp_path, "us-west1-b", 600, [1] * 6 + [0] * 3 + [1] * 30)
    zones = load(str(tmp_path))
    before = capacity_advice.scores(zones, "us-west1-b", 0.95)  # the last point before the outage
    assert before.obtainability == 1.0  # the outage that starts at hour 1.0 is not seen coming
    during = capacity_advice.scores(zones, "us-west1-b", 1.2)
    assert during.obtainability <= 0.4 and during.uptime_seconds == 60
    after = capacity_advice.scores(zones, "us-west1-b", 1.6)
    assert 0.5 < after.obtainability < 1.0 and after.uptime_seconds == 3600  # back, with a bad hour behind it


def test_a_zone_that_flaps_every_half_hour_has_a_short_uptime_and_a_steady_one_an_hour(tmp_path):
    write_trace(tmp_path, "us-west1-b", 600, ([1] * 3 + [0] * 3) * 20)
    write_trace(tmp_path, "us-central1-a", 600, [1] * 120)
    zones = load(str(tmp_path))
    assert capacity_advice.scores(zones, "us-west1-b", 10.1).uptime_seconds == 600
    assert capacity_advice.scores(zones, "us-central1-a", 10.1).uptime_seconds == 3600


def test_preemption_history_counts_the_capacity_losses_of_each_past_day(tmp_path):
    day = 24 * 6  # 10-minute points
    write_trace(tmp_path, "us-west1-b", 600, [1] * day + ([1] * 5 + [0]) * 24 + [1] * day)
    zones = load(str(tmp_path))
    history = capacity_advice.preemption_history(zones, ["us-west1-b"], at_hours=60.0)
    assert [(s, e) for s, e, _ in history] == [(0.0, 24.0), (24.0, 48.0), (48.0, 60.0)]
    calm, flapping, today = (r for _, _, r in history)
    assert calm == 0.0 and today == 0.0 and flapping > 0.9
    assert capacity_advice.preemption_history(zones, ["us-west1-b"], at_hours=30.0)[-1][1] == 30.0  # no future


# -- through the real client -------------------------------------------------------------------------


def test_the_real_advice_client_reads_scores_that_follow_the_trace(compute_server, tmp_path):
    write_trace(tmp_path, "us-west1-b", 600, [1] * 6 + [0] * 6 + [1] * 6)
    write_trace(tmp_path, "us-west1-a", 600, [0] * 18)
    now = [0.0]
    compute_server.follow_capacity(load(str(tmp_path)), speed=3600.0, clock=lambda: now[0])
    client = _client(compute_server)
    now[0] = 0.5
    found = _capacity(client, "us-west1", zones=("us-west1-a", "us-west1-b"))
    [recommendation] = found.recommendations
    # up for half an hour so far, no stretch ended yet: at least ten minutes
    assert recommendation.scores.obtainability == 1.0 and recommendation.scores.estimated_uptime == "600s"
    assert recommendation.shards[0].zone == "us-west1-b" and recommendation.shards[0].instance_count == 1
    now[0] = 1.5  # both zones out
    out = _capacity(client, "us-west1", zones=("us-west1-a", "us-west1-b")).recommendations[0].scores
    assert out.obtainability <= 0.3 and out.estimated_uptime == "60s"


def test_history_for_a_zone_and_a_region_with_the_spot_list_price(compute_server, tmp_path):
    write_trace(tmp_path, "us-west1-b", 600, ([1] * 5 + [0]) * 24 * 3)
    now = [0.0]
    compute_server.follow_capacity(load(str(tmp_path)), speed=3600.0, clock=lambda: now[0])
    now[0] = 50.0  # hour 50 of the trace: two whole days and the third in progress
    client = _client(compute_server)
    zonal = _history(client, "us-west1", location="zones/us-west1-b")
    assert zonal.location.endswith("/zones/us-west1-b") and len(zonal.preemption_history) == 3
    assert all(0.0 < r.preemption_rate <= 1.0 for r in zonal.preemption_history)
    assert not zonal.price_history  # price history is regional
    regional = _history(client, "us-west1")
    assert regional.location.endswith("/regions/us-west1")
    [price] = regional.price_history
    assert price.list_price.currency_code == "USD" and price.list_price.units == 0 and price.list_price.nanos > 0


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda c: _history(c, "us-west1", model="STANDARD"), "must be set to SPOT"),
        (
            lambda c: _history(c, "us-west1", machine="n1-standard-8", gpu="nvidia-tesla-t4"),
            "N1 machine types with GPUs",
        ),
        (lambda c: _history(c, "us-west1", machine="custom-8-32768"), "custom machine types"),
        (lambda c: _history(c, "us-west1", location="zones/us-central1-a"), "is not in region us-west1"),
        (lambda c: _capacity(c, "us-west1", machine="ct5lp-hightpu-4t", gpu=None), "TPUs"),
        (lambda c: _capacity(c, "us-west1", zones=("us-central1-a",)), "is not in region us-west1"),
        (lambda c: _capacity(c, "us-west1", size=0), "resource.size"),
    ],
)
def test_the_fake_refuses_what_the_api_refuses(compute_server, call, words):
    with pytest.raises(gexc.BadRequest, match=words):
        call(_client(compute_server))


def test_each_method_needs_its_permission_which_compute_viewer_grants(compute_server):
    account = "serviceAccount:runner@p.iam.gserviceaccount.com"
    compute_server.caller = account
    compute_server.set_project_policy(PROJECT, [{"role": "roles/compute.instanceAdmin.v1", "members": [account]}])
    with pytest.raises(gexc.Forbidden, match="compute.advice.capacity"):
        _capacity(_client(compute_server), "us-west1")
    with pytest.raises(gexc.Forbidden, match="compute.advice.capacityHistory"):
        _history(_client(compute_server), "us-west1")
    compute_server.set_project_policy(PROJECT, [{"role": "roles/compute.viewer", "members": [account]}])
    assert _capacity(_client(compute_server), "us-west1").recommendations[0].scores.obtainability == 1.0
    assert _history(_client(compute_server), "us-west1").preemption_history


def test_preflight_reads_the_capacity_data_and_only_warns_when_it_cannot(compute_server):
    from survivor.cloud.compute import Compute
    from survivor.operator.preflight import Target, capacity_data_findings

    target = Target(
        "n1-standard-8",
        "nvidia-tesla-v100",
        1,
        spot=True,
        image_project=None,
        image_family=None,
        service_account="default",
        job_dir=None,
        moves=True,
    )
    compute = Compute(PROJECT, endpoint=compute_server.endpoint)
    found = capacity_data_findings(compute, target, ["us-west1", "us-central1"])
    assert [(f.level, f.message) for f in found] == [
        ("ok", "capacity data in us-west1: Spot obtainability 1.00, estimated uptime 60 min"),
        ("ok", "capacity data in us-central1: Spot obtainability 1.00, estimated uptime 60 min"),
    ]
    account = "serviceAccount:runner@p.iam.gserviceaccount.com"
    compute_server.caller = account
    compute_server.set_project_policy(PROJECT, [{"role": "roles/compute.instanceAdmin.v1", "members": [account]}])
    [refused] = capacity_data_findings(compute, target, ["us-west1", "us-central1"])  # said once, not a region each
    assert refused.level == "warning" and "roles/compute.viewer" in refused.message
    assert "decide without it" in refused.message
