"""The metadata client against the emulator: headers, hanging GETs, retries, and refusing impostors."""

import threading
import time

import pytest
import requests

from survivor.metadata import MetadataClient, MetadataError, MetadataNotFound
from tests.waiting import PATIENCE, wait_until


def test_reads_identity_and_attributes(metadata_server):
    metadata_server.set("instance/attributes/survivor-job", "job_dir: /x")
    metadata_server.set("instance/attributes/created-by", "projects/1/zones/us-west1-b/instanceGroupManagers/g")
    md = MetadataClient(metadata_server.host)
    who = md.identity()
    assert (who.project, who.zone, who.name, who.region) == (
        "survivor-local",
        "us-west1-b",
        "survivor-local-1",
        "us-west1",
    )
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
    set_at: list[float] = []

    def change():
        set_at.append(time.monotonic())
        metadata_server.set("instance/preempted", "TRUE")

    threading.Timer(0.3, change).start()
    value2, etag2 = md.wait_for_change("instance/preempted", etag, timeout_sec=10)
    answered = time.monotonic()
    assert value2 == "TRUE" and etag2 != etag
    assert set_at and set_at[0] <= answered < set_at[0] + 5  # it waited for the change, then answered it


def test_hanging_get_returns_the_current_value_at_its_timeout(metadata_server):
    md = MetadataClient(metadata_server.host)
    _, etag = md.wait_for_change("instance/preempted")
    value, etag2 = md.wait_for_change("instance/preempted", etag, timeout_sec=1)
    assert (value, etag2) == ("FALSE", etag)


def test_503_is_retried(metadata_server):
    metadata_server.fault("503", count=2)
    assert metadata_server.faults_left() == 2
    assert MetadataClient(metadata_server.host).get("instance/name") == "survivor-local-1"
    assert metadata_server.faults_left() == 0  # the chaos harness counts what was injected this way


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


def test_a_server_that_drips_bytes_is_cut_off_at_the_calls_deadline(metadata_server):
    """A byte every 0.3 s beats any timeout per read; each call still ends at its total deadline."""
    from survivor import retry

    metadata_server.fault("drip", count=1000, interval=0.3)
    md = MetadataClient(
        metadata_server.host,
        timeout=1.0,
        deadline=2.0,
        wait_margin=1.0,
        retrying=lambda: retry.policy(attempts=10, deadline=60, initial=0.05, maximum=0.1),
    )
    calls = [
        (lambda: md.get("instance/name"), 2.0),
        (lambda: md.attributes(), 2.0),
        (lambda: md.put_guest_attribute("survivor", "state", "training"), 1.0),  # one attempt, nothing waits on it
        (lambda: md.wait_for_change("instance/preempted", "NONE", timeout_sec=1), 2.0),
    ]  # timeout_sec + margin
    for call, limit in calls:
        started = time.monotonic()
        with pytest.raises(MetadataError, match="no complete answer in time"):
            call()
        assert time.monotonic() - started < limit + 1.0  # the deadline, plus a loaded machine's scheduling
    metadata_server.fault("ok")
    assert md.get("instance/name") == "survivor-local-1"


def test_an_answer_larger_than_any_metadata_is_refused(metadata_server):
    metadata_server.set("instance/attributes/huge", "x" * (5 * 1024 * 1024))
    with pytest.raises(MetadataError, match="larger than"):
        MetadataClient(metadata_server.host).get("instance/attributes/huge")


def _agent_on_a_dripping_server(tmp_path, instance_factory):
    from tests.conftest import dummy_spec

    vm = instance_factory(dummy_spec(str(tmp_path / "jobdir"), tmp_path, train_steps=20))
    vm.metadata.fault("drip", count=1_000_000, interval=2.0)  # every answer: a byte every 2 s
    return vm.boot()


def test_a_sigterm_while_the_boot_waits_on_a_dripping_metadata_server_ends_it_at_once(tmp_path, instance_factory):
    """The early signal handler used to only record the SIGTERM: the boot went on waiting for an
    answer that never completes. Now the boot ends within a second, with nothing to save."""
    vm = _agent_on_a_dripping_server(tmp_path, instance_factory)

    def asked() -> bool:  # imports done (a start-up under the suite's load can take seconds)
        assert vm.running(), f"the agent exited ({vm.returncode}); see {vm.log_path()}"
        return vm.metadata.faults_left() < 1_000_000

    wait_until(asked, PATIENCE, "the agent's first metadata call")
    time.sleep(0.5)  # well inside that call (a byte every 2 s): a moment to be in, not a thing to wait for
    assert vm.running()
    vm.soft_off()
    started = time.monotonic()
    assert vm.wait(5.0) == 0, "the agent must end its boot within the grace budget after SIGTERM"
    assert time.monotonic() - started < 5.0
    lines = vm.log_lines()
    assert any(line["message"].startswith("stopped during boot") and line.get("signal") == "SIGTERM" for line in lines)
    assert not any("Traceback" in line.get("exception", "") for line in lines)


@pytest.mark.slow
def test_a_boot_on_a_dripping_metadata_server_gives_up_in_bounded_time(tmp_path, instance_factory):
    """Each metadata call has a total deadline (5 s an attempt, 20 s with retries; the spec read is
    retried for 30 s): the boot ends with exit 1 and the URL named, for systemd to restart later,
    instead of hanging for as long as the server keeps dripping."""
    vm = _agent_on_a_dripping_server(tmp_path, instance_factory)
    code = vm.wait(75.0)
    assert code == 1, "the boot must give up within 75 s"
    errors = [line for line in vm.log_lines() if line["message"] == "cannot read the job from the metadata server"]
    assert errors and "no complete answer in time" in errors[0]["error"]


def test_a_call_can_be_given_a_shorter_deadline(metadata_server):
    metadata_server.fault("drip", count=1000, interval=0.3)
    md = MetadataClient(metadata_server.host)  # 5 s an attempt, 20 s a call
    started = time.monotonic()
    with pytest.raises(MetadataError, match="no complete answer in time"):
        md.get("instance/preempted", deadline=1.0)
    assert time.monotonic() - started < 4.0  # against 5 s an attempt without it (a loaded machine's slack)
