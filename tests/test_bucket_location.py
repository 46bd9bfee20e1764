"""The job dir's and data dir's buckets against placement.regions. Which regions read and
write a bucket across locations (survivor/cloud/locations.py, pure) and the warning `survivor preflight`
states for it, read through the real google-cloud-storage client from fake-gcs-server behind
survivor's bucket stand-in (fake-gcs-server itself reports one location for every bucket)."""

import uuid

import pytest

from survivor.cloud import locations
from survivor.commands import main as cli
from survivor.local.bucket_iam import BucketIam
from survivor.local.compute_server import PROJECT_NUMBER
from survivor.operator import preflight

PROJECT = "survivor-local"
VM_ACCOUNT = f"{PROJECT_NUMBER}-compute@developer.gserviceaccount.com"


# -- the rule --------------------------------------------------------------------------------------


def test_a_region_bucket_is_read_across_locations_from_every_other_region():
    assert locations.crossing_regions("US-WEST1", "region", ["us-west1", "us-central1"]) == ("us-central1",)
    assert locations.crossing_regions("US-WEST1", "region", ["us-west1"]) == ()
    level, line = locations.crossing_finding("ckpt", "job_dir", "US-WEST1", "region", ["us-west1", "us-central1"])
    assert level == "warning"
    assert line.startswith(
        "bucket ckpt (job_dir) is in US-WEST1 (region): a job in us-central1 reads and writes it across locations"
    )
    assert "us-west1 and" in line and line.endswith("or accept the data transfer")


def test_a_multi_region_is_read_across_locations_from_every_region():
    """Reads from a multi-region are charged from a region on its continent (pricing-announce#network)."""
    assert locations.crossing_regions("US", "multi-region", ["us-west1", "us-central1"]) == ("us-west1", "us-central1")
    level, line = locations.crossing_finding("data", "data_dir", "US", "multi-region", ["us-west1", "us-central1"])
    assert level == "warning" and "reads from a multi-region are charged from every region" in line


def test_a_dual_region_holds_its_two_regions_predefined_or_configured():
    assert locations.crossing_regions("NAM4", "dual-region", ["us-central1", "us-east1"]) == ()
    assert locations.crossing_finding("b", "job_dir", "NAM4", "dual-region", ["us-east1", "us-central1"])[0] == "ok"
    assert locations.crossing_regions("NAM4", "dual-region", ["us-central1", "us-west1"]) == ("us-west1",)
    assert (
        locations.crossing_regions(
            "US", "dual-region", ["us-west1", "us-east4"], data_locations=["US-WEST1", "US-EAST4"]
        )
        == ()
    )


def test_the_fix_names_a_predefined_dual_region_when_one_holds_every_region():
    level, line = locations.crossing_finding("b", "job_dir", "US-EAST1", "region", ["us-east1", "us-central1"])
    assert level == "warning" and "use a bucket in the dual-region NAM4 (it holds us-central1, us-east1)" in line
    line = locations.crossing_finding("b", "job_dir", "US-EAST1", "region", ["us-east1", "us-west1", "us-central1"])[1]
    assert "placement.regions cut to its two regions (no dual-region holds more" in line
    line = locations.crossing_finding("b", "job_dir", "US-EAST1", "region", ["us-west1"])[1]
    assert "a job in us-west1" in line and "use a bucket in us-west1, or accept" in line


def test_a_dual_region_fix_says_its_writes_pay_replication_and_its_storage_costs_more():
    """A dual-region spares the reads of a move, not the writes: each checkpoint is
    replicated to its second region, and its storage is billed in both."""
    for regions in (["us-east1", "us-central1"], ["us-east1", "us-west1"]):
        line = locations.crossing_finding("b", "job_dir", "US-EAST1", "region", regions)[1]
        assert "each checkpoint included, pays inter-region replication" in line
        assert "storage costs about twice a region's" in line
    line = locations.crossing_finding("b", "job_dir", "US-EAST1", "region", ["us-west1"])[1]
    assert "replication" not in line  # a region bucket: no replication to warn of


def test_an_unknown_dual_region_is_said_to_be_unknown_not_guessed():
    assert locations.crossing_regions("EUR7", "dual-region", ["europe-west1"]) is None
    level, line = locations.crossing_finding("b", "job_dir", "EUR7", "dual-region", ["europe-west1"])
    assert level == "warning" and "whose regions survivor does not know" in line


def test_an_unreadable_location_is_a_warning():
    [finding] = preflight.location_findings("b", "job_dir", ("us-west1",), None, error="403 forbidden")
    assert finding.level == "warning" and "could not read its location (403 forbidden)" in finding.message


# -- preflight, through the real client ------------------------------------------------------------


@pytest.fixture
def bucket_iam(gcs_server, monkeypatch):
    with BucketIam(upstream=gcs_server.url, project=PROJECT) as iam:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", iam.endpoint)
        yield iam


@pytest.fixture
def data_bucket(gcs_server):
    name = f"data-{uuid.uuid4().hex[:12]}"
    gcs_server.create_bucket(name)
    return name


def _preflight(capsys, tmp_path, bucket, data_bucket, placement: str) -> list[str]:
    path = tmp_path / "job.yaml"
    path.write_text(
        f"job_dir: gs://{bucket}/run\ndata_dir: gs://{data_bucket}/data\ntrain_steps: 1\n"
        f"trainer: {{builtin: dummy}}\n{placement}"
    )
    code = cli.main(["preflight", "job", "--config", str(path), "--project", PROJECT, "--zone", "us-west1-b"])
    out = capsys.readouterr().out
    assert code == 0, out  # a location is a warning, never a stop
    return out.splitlines()


def test_fake_gcs_server_reports_one_location_for_every_bucket(bucket, bucket_iam):
    """Why the stand-in sets locations: fake-gcs-server ignores the one asked for at creation."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(project=PROJECT, credentials=AnonymousCredentials())
    made = client.create_bucket(f"asked-{uuid.uuid4().hex[:8]}", location="us-west1")
    assert (made.location, made.location_type) == ("US-CENTRAL1", "region")
    bucket_iam.set_location(bucket, "US", "multi-region")
    found = client.get_bucket(bucket)
    assert (found.location, found.location_type) == ("US", "multi-region")


def test_preflight_warns_of_the_regions_that_reach_a_bucket_across_locations(
    compute_server, bucket, data_bucket, bucket_iam, capsys, tmp_path
):
    bucket_iam.set_location(bucket, "US-WEST1", "region")
    bucket_iam.set_location(data_bucket, "NAM4", "dual-region")
    lines = _preflight(capsys, tmp_path, bucket, data_bucket, "placement:\n  regions: [us-west1, us-central1]\n")
    found = [line for line in lines if "(job_dir) is in" in line or "(data_dir) is in" in line]
    assert found[0].startswith(
        f"warning: bucket {bucket} (job_dir) is in US-WEST1 (region): a job in us-central1 "
        "reads and writes it across locations"
    )
    assert found[1].startswith(
        f"warning: bucket {data_bucket} (data_dir) is in NAM4 (dual-region): a job in us-west1 reads and writes it"
    )
    assert len(found) == 2


def test_preflight_finds_a_bucket_holding_every_region_fine_and_says_nothing_without_placement(
    compute_server, bucket, data_bucket, bucket_iam, capsys, tmp_path
):
    bucket_iam.set_location(bucket, "US-CENTRAL1", "region")
    bucket_iam.set_location(data_bucket, "NAM4", "dual-region")
    lines = _preflight(capsys, tmp_path, bucket, data_bucket, "placement:\n  regions: [us-central1]\n")
    assert f"ok: bucket {bucket} (job_dir) is in US-CENTRAL1 (region), which holds every placement region" in lines
    assert f"ok: bucket {data_bucket} (data_dir) is in NAM4 (dual-region), which holds every placement region" in lines
    lines = _preflight(capsys, tmp_path, bucket, data_bucket, "")
    assert not [line for line in lines if " is in " in line]


def test_preflight_warns_of_a_multi_region_bucket(compute_server, bucket, data_bucket, bucket_iam, capsys, tmp_path):
    bucket_iam.set_location(bucket, "US", "multi-region")
    bucket_iam.set_location(data_bucket, "US", "multi-region")
    lines = _preflight(capsys, tmp_path, bucket, data_bucket, "placement:\n  regions: [us-west1, us-central1]\n")
    assert (
        f"warning: bucket {bucket} (job_dir) is in US (multi-region): a job in us-west1, us-central1 reads and "
        "writes it across locations (reads from a multi-region are charged from every region)"
    ) in "\n".join(lines)


# -- report: the bytes a move's restore read across locations --------------------------------------


def test_each_move_is_matched_with_the_restore_after_it():
    from survivor.jobdir.journal import Attempt
    from survivor.jobdir.moves import Move
    from survivor.operator.report import move_transfers, transfer_line

    moves = [
        Move(time="2026-11-24T10:00:00+00:00", from_place="zones/us-west1-b", to_place="regions/us-central1"),
        Move(time="2026-11-24T12:00:00+00:00", from_place="regions/us-central1", to_place="zones/us-west1-a"),
    ]
    attempts = [
        Attempt(1, "vm-a", "2026-11-24T09:00:00+00:00", restored_from=""),
        Attempt(2, "vm-b", "2026-11-24T10:05:00+00:00", restored_step=50, restored_from="snap-50"),
        Attempt(3, "vm-c", "2026-11-24T12:07:00+00:00", restored_step=90, restored_from="snap-90"),
    ]
    first, second = move_transfers(moves, attempts, {"snap-50": 3 * 2**30}, ("us-central1",))
    assert (first.region, first.restored, first.bytes, first.across) == ("us-central1", "snap-50", 3 * 2**30, True)
    assert (second.region, second.restored, second.bytes, second.across) == ("us-west1", "snap-90", None, False)
    assert transfer_line(first, "US-WEST1 (region)").startswith(
        "to us-central1: the restore read 3.00 GiB (3221225472 bytes) from the job dir's bucket (US-WEST1 (region)) "
        "across locations: data transfer between locations, not priced here"
    )
    assert "size is not known" in transfer_line(second) and "within its location" in transfer_line(second)
    [unknown] = move_transfers(moves[:1], attempts, {"snap-50": 10}, None)
    assert transfer_line(unknown).endswith("whether across locations is not known")


def test_report_states_the_bytes_a_move_restored_across_locations(bucket, bucket_iam, tmp_path, capsys):
    import json
    from dataclasses import asdict

    from survivor.jobdir.journal import Attempt, _dump
    from survivor.jobdir.moves import Move, record_move
    from survivor.jobdir.snapshot import scan
    from survivor.jobdir.storage import open_storage
    from survivor.jobdir.store import CheckpointStore

    bucket_iam.set_location(bucket, "US-WEST1", "region")
    job_dir = f"gs://{bucket}/run"
    storage = open_storage(job_dir)
    local = tmp_path / "local"
    local.mkdir()
    (local / "dummy-checkpoint-50.json").write_bytes(b"x" * 300_000)
    manifest = CheckpointStore(storage).commit(str(local), scan(str(local)), 1).manifest
    for attempt in (
        Attempt(
            1,
            "vm-a",
            "2026-11-24T09:00:00+00:00",
            restored_from="",
            ended="2026-11-24T09:30:00+00:00",
            outcome="preempted",
            end_step=50,
        ),
        Attempt(2, "vm-b", "2026-11-24T10:05:00+00:00", restored_step=50, restored_from=manifest.name),
    ):
        storage.write(attempt.name, _dump(asdict(attempt)))
    record_move(
        storage,
        Move(
            time="2026-11-24T10:00:00+00:00",
            from_place="zones/us-west1-b",
            to_place="regions/us-central1",
            reason="stockout",
            by="watch",
        ),
    )
    assert cli.main(["report", "--job-dir", job_dir, "--out", str(tmp_path / "out"), "--offline"]) == 0
    md = (tmp_path / "out" / "report.md").read_text()
    assert (
        f"- to us-central1: the restore read 0.00 GiB ({manifest.size} bytes) from the job dir's bucket "
        "(US-WEST1 (region)) across locations: data transfer between locations, not priced here"
    ) in md
    assert manifest.size >= 300_000
    capsys.readouterr()
    assert cli.main(["report", "--job-dir", job_dir, "--out", str(tmp_path / "o2"), "--offline", "--json"]) == 0
    [transfer] = json.loads(capsys.readouterr().out)["transfers"]
    assert transfer == {
        "time": "2026-11-24T10:00:00+00:00",
        "region": "us-central1",
        "restored": manifest.name,
        "bytes": manifest.size,
        "across": True,
    }
