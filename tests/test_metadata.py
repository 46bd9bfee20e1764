"""The metadata client against the emulator: headers, hanging GETs, retries, and refusing impostors."""

import threading
import time

import pytest
import requests

from survivor.metadata import MetadataClient, MetadataError, MetadataNotFound


def test_reads_identity_and_attributes(metadata_server):
    metadata_server.set("instance/attributes/survivor-job", "job_dir: /x")
    metadata_server.set("instance/attributes/created-by", "projects/1/zones/us-west1-b/instanceGroupManagers/g")
    md = MetadataClient(metadata_server.host)
    who = md.identity()
    assert (who.project, who.zone, who.name, who.region) == ("survivor-local", "us-west1-b", "survivor-local-1", "us-west1")
    assert who.created_by.endswith("instanceGroupManagers/g")
    assert md.attributes()["survivor-job"] == "job_dir: /x"


def test_honours_gce_metadata_host(metadata_server, monkeypatch):
    monkeypatch.setenv("GCE_METADATA_HOST", metadata_server.host)
    assert MetadataClient().get("instance/preempted") == "FALSE"


def test_emulator_requires_the_flavor_header(metadata_server):
    url = f"http://{metadata_server.host}/computeMetadata/v1/instance/name"
    assert requests.get(url).status_code == 403
    answer = requests.get(url, headers={"Metadata-Flavor": "Google"})
    assert answer.text == "survivor-local-1" and answer.headers["Metadata-Flavor"] == "Google"


def test_missing_key_is_not_found(metadata_server):
    md = MetadataClient(metadata_server.host)
    with pytest.raises(MetadataNotFound):
        md.get("instance/attributes/nope")
    assert md.get_or("instance/attributes/nope", "dflt") == "dflt"


def test_hanging_get_returns_at_once_for_a_stale_etag_and_waits_for_a_change(metadata_server):
    md = MetadataClient(metadata_server.host)
    value, etag = md.wait_for_change("instance/preempted", "NONE", timeout_sec=5)
    assert value == "FALSE" and etag != "NONE"
    threading.Timer(0.3, metadata_server.set, args=("instance/preempted", "TRUE")).start()
    started = time.monotonic()
    value2, etag2 = md.wait_for_change("instance/preempted", etag, timeout_sec=10)
    assert value2 == "TRUE" and etag2 != etag
    assert 0.2 < time.monotonic() - started < 5


def test_hanging_get_returns_the_current_value_at_its_timeout(metadata_server):
    md = MetadataClient(metadata_server.host)
    _, etag = md.wait_for_change("instance/preempted")
    value, etag2 = md.wait_for_change("instance/preempted", etag, timeout_sec=1)
    assert (value, etag2) == ("FALSE", etag)


def test_503_is_retried(metadata_server):
    metadata_server.fault("503", count=2)
    assert MetadataClient(metadata_server.host).get("instance/name") == "survivor-local-1"


def test_an_answer_without_the_flavor_header_is_refused(metadata_server):
    metadata_server.fault("no-flavor", count=1)
    with pytest.raises(MetadataError, match="lacks the header Metadata-Flavor"):
        MetadataClient(metadata_server.host).get("instance/name")


def test_garbage_is_refused(metadata_server):
    metadata_server.fault("garbage", count=1)
    with pytest.raises(MetadataError, match="not a metadata server"):
        MetadataClient(metadata_server.host).get("instance/name")


def test_unreachable_server_is_an_error_naming_the_url():
    from survivor import retry

    md = MetadataClient("127.0.0.1:9", retrying=lambda: retry.policy(attempts=2, deadline=1, initial=0.01))
    with pytest.raises(MetadataError, match=r"127\.0\.0\.1:9/computeMetadata/v1/instance/name: cannot connect"):
        md.get("instance/name")


def test_guest_attributes_are_written_from_inside(metadata_server):
    md = MetadataClient(metadata_server.host)
    md.put_guest_attribute("survivor", "step", "1200")
    assert metadata_server.get("instance/guest-attributes/survivor/step") == "1200"
    assert md.get_json("instance/guest-attributes/") == {"survivor": {"step": "1200"}}


def test_directory_listing_and_recursive_json(metadata_server):
    md = MetadataClient(metadata_server.host)
    listing = md.get("instance/").split()
    assert "attributes/" in listing and "preempted" in listing
    tree = md.get_json("instance/")
    assert tree["preempted"] == "FALSE" and isinstance(tree["attributes"], dict)
