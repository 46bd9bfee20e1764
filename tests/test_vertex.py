"""Beyond one machine: the job spec and the seeds' Cloud ML Engine configs as Vertex AI custom jobs,
sent by the real google-cloud-aiplatform client (REST, enums as integers) to a fake endpoint."""

import datetime as dt
import importlib.util
import json

import pytest

from survivor.commands import main as cli
from survivor.spec import JobSpec, SpecError
from survivor.cloud.vertex import Pool, custom_job_body, prebuilt_image, submit, translate_training_input

# found, not imported: the client takes a second to import in every test process that collects this file
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("google.cloud.aiplatform_v1") is None, reason="the vertex extra is not installed"
)

SPEC = """
name: mnist-dist
job_dir: gs://my-project-ml/mnist
data_dir: gs://cloud-ml-data/mnist
train_steps: 5000
trainer: {module: trainer.task, package: gs://my-project-ml/packages/trainer-0.1.tar.gz}
hyperparameters: {learning-rate: 0.01}
vertex:
  region: us-central1
  spot: true
  chief: {machine_type: n1-standard-8, accelerator: "nvidia-tesla-t4:1"}
  workers: {count: 2, machine_type: n1-standard-8, accelerator: "nvidia-tesla-t4:1"}
"""


def test_the_seed_multiworker_config_translates_and_says_what_it_cannot_keep():
    # seeds/000: scaleTier CUSTOM, standard_gpu master + 9 workers, 3 standard parameter servers, TF 1.12
    pools, notes = translate_training_input(
        {
            "runtimeVersion": "1.12",
            "scaleTier": "CUSTOM",
            "masterType": "standard_gpu",
            "workerCount": 9,
            "workerType": "standard_gpu",
            "parameterServerCount": 3,
            "parameterServerType": "standard",
        }
    )
    assert pools == [
        Pool("chief", "n1-standard-8", 1, "NVIDIA_TESLA_T4", 1),
        Pool("worker", "n1-standard-8", 9, "NVIDIA_TESLA_T4", 1),
        Pool("parameter server", "n1-standard-4", 3, None, 0),
    ]
    assert any("NVIDIA_TESLA_K80 is retired" in n for n in notes)
    assert any("runtimeVersion 1.12" in n and "cannot be kept" in n for n in notes)


def test_a_scale_tier_becomes_its_machines():
    pools, notes = translate_training_input({"scaleTier": "STANDARD_1"})  # seeds/004
    assert [(p.role, p.replicas) for p in pools] == [("chief", 1), ("worker", 4), ("parameter server", 3)]
    assert notes and "STANDARD_1" in notes[0]


def test_bad_legacy_values_are_named():
    from survivor.spec import SpecError

    with pytest.raises(SpecError, match="scaleTier = 'HUGE'"):
        translate_training_input({"scaleTier": "HUGE"})
    with pytest.raises(SpecError, match="machine type 'quantum_gpu'"):
        translate_training_input({"scaleTier": "CUSTOM", "masterType": "quantum_gpu"})


IMAGE = "gcr.io/my-project/trainer:1"  # a custom container with the trainer (and survivor-train) installed
SUPPORTED_DAY = dt.date(2025, 6, 1)  # Google's table still supported TF 2.17 (until 2025-07-11)
TODAY = dt.date(2026, 11, 23)  # no TensorFlow prebuilt training image is supported any more
BUILTIN = "job_dir: gs://b-1/x\ntrain_steps: 1\ntrainer: {builtin: cifar10}\n"
SDIST = "gs://b-1/survivor_train-0.1.0.tar.gz"


def test_dry_run_prints_the_custom_job(tmp_path, capsys):
    (tmp_path / "job.yaml").write_text(SPEC)
    assert cli.main(["submit", "--config", str(tmp_path / "job.yaml"), "--container-image", IMAGE, "--dry-run"]) == 0
    body = json.loads(capsys.readouterr().out)
    pools = body["jobSpec"]["workerPoolSpecs"]
    assert [p["replicaCount"] for p in pools] == ["1", "2"]
    assert pools[0]["machineSpec"] == {
        "machineType": "n1-standard-8",
        "acceleratorType": "NVIDIA_TESLA_T4",
        "acceleratorCount": 1,
    }
    container = pools[0]["containerSpec"]
    assert container["imageUri"] == IMAGE and container["command"] == ["python3", "-m", "trainer.task"]
    assert container["args"][:2] == ["--job-dir", "gs://my-project-ml/mnist/checkpoints"]
    assert "--learning-rate" in container["args"]
    assert body["jobSpec"]["scheduling"] == {"restartJobOnWorkerRestart": True, "strategy": "SPOT"}
    assert body["jobSpec"]["baseOutputDirectory"] == {"outputUriPrefix": "gs://my-project-ml/mnist"}


def test_each_pool_gets_the_image_and_gpu_count_of_its_own_machine():
    spec = JobSpec.from_yaml(BUILTIN)
    pools = [
        Pool("chief", "n1-standard-8", 1, "NVIDIA_TESLA_T4", 2),
        Pool("worker", "n1-standard-8", 2, "NVIDIA_TESLA_T4", 2),
        Pool("parameter server", "n1-standard-4", 3),
    ]
    body = custom_job_body(spec, pools, package_uri=SDIST, today=SUPPORTED_DAY)
    chief, worker, server = body["jobSpec"]["workerPoolSpecs"]
    for gpu_pool in (chief, worker):
        package = gpu_pool["pythonPackageSpec"]
        assert package["executorImageUri"] == "us-docker.pkg.dev/vertex-ai/training/tf-gpu.2-17.py310:latest"
        assert package["args"][package["args"].index("--num-gpus") + 1] == "2"
    package = server["pythonPackageSpec"]
    assert server["machineSpec"] == {"machineType": "n1-standard-4"}
    assert package["executorImageUri"] == "us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-17.py310:latest"
    assert package["args"][package["args"].index("--num-gpus") + 1] == "0"
    assert package["packageUris"] == [SDIST] and package["pythonModule"] == "survivor.trainers.cifar10"


def test_the_newest_image_google_still_supports_is_chosen_and_none_once_support_ended():
    assert prebuilt_image("gpu", dt.date(2025, 6, 27)).endswith("tf-gpu.2-17.py310:latest")
    assert prebuilt_image("cpu", dt.date(2025, 7, 10)).endswith("tf-cpu.2-17.py310:latest")
    with pytest.raises(SpecError) as refused:
        prebuilt_image("gpu", TODAY)
    (line,) = refused.value.problems
    assert "tf-gpu.2-17.py310" in line and "2025-07-11" in line and "2026-07-11" in line
    assert "--container-image" in line and "--executor-image" in line


def test_submitting_a_builtin_trainer_today_says_no_prebuilt_image_is_supported(tmp_path, capsys):
    (tmp_path / "job.yaml").write_text(BUILTIN)
    code = cli.main(["submit", "--config", str(tmp_path / "job.yaml"), "--package", SDIST, "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "no TensorFlow GPU prebuilt training image" in err


def test_a_builtin_trainer_runs_from_survivor_trains_own_sdist():
    spec = JobSpec.from_yaml(BUILTIN)
    with pytest.raises(SpecError, match="survivor's own sdist"):
        custom_job_body(spec, [Pool("chief", "n1-standard-8", 1)], today=SUPPORTED_DAY)
    with pytest.raises(SpecError, match="survivor's distribution is survivor-train"):
        custom_job_body(
            spec, [Pool("chief", "n1-standard-8", 1)], package_uri="gs://b-1/survivor-0.1.0.tar.gz", today=SUPPORTED_DAY
        )
    with pytest.raises(SpecError, match="from Cloud Storage"):
        custom_job_body(
            spec,
            [Pool("chief", "n1-standard-8", 1)],
            package_uri="dist/survivor_train-0.1.0.tar.gz",
            today=SUPPORTED_DAY,
        )
    body = custom_job_body(spec, [Pool("chief", "n1-standard-8", 1)], package_uri=SDIST, today=SUPPORTED_DAY)
    assert body["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]["pythonModule"] == "survivor.trainers.cifar10"


def test_a_hand_chosen_executor_image_must_carry_a_python_the_package_installs_on():
    spec = JobSpec.from_yaml(BUILTIN)
    pools = [Pool("chief", "n1-standard-8", 1, "NVIDIA_TESLA_T4", 1), Pool("parameter server", "n1-standard-4", 1)]
    training = "us-docker.pkg.dev/vertex-ai/training"
    for image, why in (
        (f"{training}/tf-gpu.2-11:latest", "no .pyXYZ tag"),  # the table's Python 3.7 row
        (f"{training}/tf-gpu.2-99.py39:latest", "Python 3.9"),
        (f"{training}/tf-gpu.2-17.py310:latest", "end of availability|ended its availability"),
        ("gcr.io/p/trainer:1", "custom images go in --container-image"),
        (f"{training}/tf-gpu.2-99.py311", "expected a prebuilt training image"),
    ):
        with pytest.raises(SpecError, match=why):
            custom_job_body(spec, pools, package_uri=SDIST, executor_images=[image], today=TODAY)
    # images newer than survivor's table (hypothetical names): the -gpu. one serves GPU pools, the -cpu. one the rest
    newer = [
        f"{training}/tf-gpu.2-99.py311:latest",
        "europe-docker.pkg.dev/vertex-ai/training/tf-cpu.2-99.py311:latest",
    ]
    chief, server = custom_job_body(spec, pools, package_uri=SDIST, executor_images=newer, today=TODAY)["jobSpec"][
        "workerPoolSpecs"
    ]
    assert chief["pythonPackageSpec"]["executorImageUri"] == newer[0]
    assert server["pythonPackageSpec"]["executorImageUri"] == newer[1]


def test_a_builtin_trainer_in_a_container_runs_its_module():
    spec = JobSpec.from_yaml(BUILTIN)
    (pool,) = custom_job_body(spec, [Pool("chief", "n1-standard-4", 1)], container_image=IMAGE, today=TODAY)["jobSpec"][
        "workerPoolSpecs"
    ]
    assert pool["containerSpec"]["command"] == ["python3", "-m", "survivor.trainers.cifar10"]
    assert pool["containerSpec"]["args"][:2] == ["--job-dir", "gs://b-1/x/checkpoints"]
    assert "--num-gpus" in pool["containerSpec"]["args"] and "pythonPackageSpec" not in pool


@pytest.fixture
def vertex_server(monkeypatch, gcs_server):
    """The Vertex AI fake, and the job dir's bucket in fake-gcs-server (submit checks it is there)."""
    from google.api_core.exceptions import Conflict

    from survivor.local.vertex_server import VertexServer

    try:
        gcs_server.create_bucket("my-project-ml")
    except Conflict:  # the session's server has it from an earlier test
        pass
    server = VertexServer().start()
    monkeypatch.setenv("SURVIVOR_VERTEX_ENDPOINT", server.endpoint)
    yield server
    server.stop()


def test_submit_with_the_real_client_and_the_legacy_config_then_status(vertex_server, tmp_path, capsys):
    (tmp_path / "job.yaml").write_text(SPEC)
    (tmp_path / "config.yaml").write_text("trainingInput:\n  scaleTier: STANDARD_1\n")
    code = cli.main(
        [
            "submit",
            "--config",
            str(tmp_path / "job.yaml"),
            "--training-input",
            str(tmp_path / "config.yaml"),
            "--project",
            "my-project",
            "--container-image",
            IMAGE,
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "note: scaleTier STANDARD_1" in out.err
    method, path, body = vertex_server.requests[-1]
    assert path.startswith("/v1/projects/my-project/locations/us-central1/customJobs")
    assert "enum-encoding%3Dint" in path or "enum-encoding=int" in path
    assert body["jobSpec"]["scheduling"]["strategy"] == 4  # SPOT, sent as its number
    assert [p["replicaCount"] for p in body["jobSpec"]["workerPoolSpecs"]] == ["1", "4", "3"]
    name = next(iter(vertex_server.jobs))
    assert cli.main(["status", "--vertex", name, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["vertex_job"] == name and report["state"] in ("JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED")


def test_the_real_client_sends_each_pool_its_own_image_and_args(monkeypatch):
    from survivor.local.vertex_server import VertexServer

    server = VertexServer(today=SUPPORTED_DAY).start()
    monkeypatch.setenv("SURVIVOR_VERTEX_ENDPOINT", server.endpoint)
    try:
        spec = JobSpec.from_yaml(BUILTIN)
        pools, _ = translate_training_input(
            {
                "scaleTier": "CUSTOM",
                "masterType": "standard_gpu",
                "parameterServerCount": 2,
                "parameterServerType": "standard",
            }
        )
        created = submit(custom_job_body(spec, pools, package_uri=SDIST, today=SUPPORTED_DAY), "p", "us-central1")
        assert created["name"].startswith("projects/p/locations/us-central1/customJobs/")
        sent = server.requests[-1][2]["jobSpec"]["workerPoolSpecs"]
        images = [p["pythonPackageSpec"]["executorImageUri"].split("/")[-1] for p in sent]
        assert images == ["tf-gpu.2-17.py310:latest", "tf-cpu.2-17.py310:latest"]
        assert "acceleratorType" not in sent[1]["machineSpec"]
        assert sent[1]["pythonPackageSpec"]["args"][sent[1]["pythonPackageSpec"]["args"].index("--num-gpus") + 1] == "0"
    finally:
        server.stop()


def test_the_fake_refuses_an_image_past_its_end_of_availability_through_the_real_client(monkeypatch):
    from survivor.local.vertex_server import VertexServer

    server = VertexServer(today=TODAY).start()
    monkeypatch.setenv("SURVIVOR_VERTEX_ENDPOINT", server.endpoint)
    try:
        body = custom_job_body(
            JobSpec.from_yaml(BUILTIN), [Pool("chief", "n1-standard-4", 1)], package_uri=SDIST, today=SUPPORTED_DAY
        )  # built while 2.17 was supported, sent after it was withdrawn
        with pytest.raises(Exception, match="tf-cpu.2-17.py310:latest' reached its end of availability on 2026-07-11"):
            submit(body, "p", "us-central1")
        assert not server.jobs
        body["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]["executorImageUri"] = "python:3.10"
        with pytest.raises(Exception, match="is not a prebuilt container for training"):
            submit(body, "p", "us-central1")
    finally:
        server.stop()


def test_a_body_the_api_would_reject_fails_at_the_fake(vertex_server):
    import requests

    answer = requests.post(
        f"{vertex_server.endpoint}/v1/projects/p/locations/r/customJobs",
        json={"displayName": "x", "jobSpec": {"workerPoolSpecz": []}},
    )
    assert answer.status_code == 400 and "workerPoolSpecz" in answer.json()["error"]["message"]


@pytest.fixture
def logging_server(monkeypatch):
    pytest.importorskip("google.cloud.logging")
    from survivor.local.logging_server import LoggingServer

    with LoggingServer() as server:
        monkeypatch.setenv("SURVIVOR_LOGGING_ENDPOINT", server.endpoint)
        yield server


def submitted_job(vertex_server, tmp_path) -> str:
    (tmp_path / "job.yaml").write_text(SPEC)
    assert (
        cli.main(
            ["submit", "--config", str(tmp_path / "job.yaml"), "--project", "my-project", "--container-image", IMAGE]
        )
        == 0
    )
    return next(iter(vertex_server.jobs))


def test_logs_of_a_vertex_job_come_from_cloud_logging_through_the_real_client(
    vertex_server, logging_server, tmp_path, capsys
):
    name = submitted_job(vertex_server, tmp_path)
    job_id = name.rsplit("/", 1)[1]
    logging_server.add(
        "my-project", job_id, "workerpool0-0", "worker 0 of 2 (chief:0, chief)", timestamp="2026-11-22T00:00:05Z"
    )
    logging_server.add("my-project", job_id, "workerpool1-0", "step 10/5000 loss 2.1", timestamp="2026-11-22T00:00:07Z")
    logging_server.add("my-project", "999", "workerpool0-0", "another job's line", timestamp="2026-11-22T00:00:06Z")
    logging_server.add("other-project", job_id, "workerpool0-0", "another project's line")
    logging_server.max_page = 2  # the lines come in three pages
    for i in range(3):
        logging_server.add(
            "my-project", job_id, "workerpool0-0", f"line {i}", severity="WARNING", timestamp=f"2026-11-22T00:01:0{i}Z"
        )
    capsys.readouterr()
    assert cli.main(["logs", "--vertex", name]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "2026-11-22T00:00:05Z workerpool0-0 INFO: worker 0 of 2 (chief:0, chief)"
    assert lines[1].endswith("workerpool1-0 INFO: step 10/5000 loss 2.1")
    assert [line.split(": ", 1)[1] for line in lines[2:]] == ["line 0", "line 1", "line 2"]
    assert len(logging_server.requests) == 3 and logging_server.requests[-1]["pageToken"] == "4"
    sent = logging_server.requests[-1]
    assert sent["resourceNames"] == ["projects/my-project"]
    assert (
        f'resource.labels.job_id="{job_id}"' in sent["filter"] and 'timestamp>="2026-11-22T00:00:00' in sent["filter"]
    )


def test_following_a_vertex_job_prints_each_line_once_until_it_ends(vertex_server, logging_server, tmp_path, capsys):
    name = submitted_job(vertex_server, tmp_path)
    job_id = name.rsplit("/", 1)[1]
    logging_server.add("my-project", job_id, "workerpool0-0", "first", timestamp="2026-11-22T00:00:05Z")
    logging_server.add("my-project", job_id, "workerpool0-0", "same second", timestamp="2026-11-22T00:00:05Z")
    capsys.readouterr()
    # the fake job goes pending -> running -> succeeded as it is read: the command stops by itself
    assert cli.main(["logs", "--vertex", name, "--follow", "--interval", "0.01"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert [line.rsplit(": ", 1)[1] for line in printed] == ["first", "same second"]
    assert len(logging_server.requests) >= 2, "it asked again while the job ran"


def test_logs_of_a_malformed_or_missing_job_say_what_is_wrong(vertex_server, logging_server, capsys):
    assert cli.main(["logs", "--vertex", "customJobs/12"]) != 0
    assert "expected projects/PROJECT/locations/REGION/customJobs/ID" in capsys.readouterr().err
    assert cli.main(["logs", "--vertex", "projects/p/locations/us-central1/customJobs/404"]) != 0
    assert "not found" in capsys.readouterr().err
    assert cli.main(["logs"]) != 0
    assert "name the job" in capsys.readouterr().err


def test_the_fake_refuses_filters_it_does_not_understand(logging_server):
    import requests

    answer = requests.post(
        f"{logging_server.endpoint}/v2/entries:list",
        json={"resourceNames": ["projects/p"], "filter": 'resource.type:"ml_job"'},
    )
    assert answer.status_code == 400 and "unsupported filter clause" in answer.json()["error"]["message"]


def test_the_checkpoint_state_file_names_the_newest_checkpoint_and_its_step():
    from survivor.operator.vertex_job import newest_checkpoint

    written = (
        'model_checkpoint_path: "ckpt-20"\nall_model_checkpoint_paths: "ckpt-10"\n'
        'all_model_checkpoint_paths: "ckpt-20"\n'
    )  # what tf.train.CheckpointManager writes
    assert newest_checkpoint(written) == ("ckpt-20", 20)
    assert newest_checkpoint('model_checkpoint_path: "gs://b/x/checkpoints/model.ckpt-7"\n') == ("model.ckpt-7", 7)
    assert newest_checkpoint('model_checkpoint_path: "final"\n') == ("final", None)
    assert newest_checkpoint("") is None


@pytest.mark.parametrize(
    "region, expected",
    [
        ("us-central1", None),
        (
            "us-central1-a",
            "--region us-central1-a: a zone, not a region; Vertex AI runs custom jobs in a region: us-central1",
        ),
        ("us-central", "--region us-central: not a region; Vertex AI runs custom jobs in a region, e.g. us-central1"),
        ("global", "--region global: not a region"),
    ],
)
def test_a_custom_job_runs_in_a_region_never_a_zone_or_global(region, expected):
    from survivor.cloud.vertex import region_problems

    problems = region_problems(region, "--region")
    assert problems == [] if expected is None else (len(problems) == 1 and problems[0].startswith(expected))


def test_a_package_on_the_command_line_wins_over_the_specs_container_image(tmp_path):
    from survivor.cloud.vertex import SubmitRequest, prepare

    (tmp_path / "job.yaml").write_text(BUILTIN + f"vertex: {{container_image: {IMAGE}}}\n")
    config = str(tmp_path / "job.yaml")
    image = "us-docker.pkg.dev/vertex-ai/training/tf-gpu.2-99.py311:latest"
    (pool,) = prepare(SubmitRequest(config, package=SDIST, executor_images=(image,)), today=TODAY).body["jobSpec"][
        "workerPoolSpecs"
    ]
    assert pool["pythonPackageSpec"]["executorImageUri"] == image and "containerSpec" not in pool
    (pool,) = prepare(SubmitRequest(config), today=TODAY).body["jobSpec"]["workerPoolSpecs"]
    assert pool["containerSpec"]["imageUri"] == IMAGE  # nothing on the command line: the spec's image


# -- flex-start and the deadline policy ------------------------------------------------------------

A100 = """
name: a100-job
job_dir: gs://my-project-ml/a100
train_steps: 1000
trainer: {module: trainer.task, package: gs://my-project-ml/packages/trainer-0.1.tar.gz}
vertex:
  region: us-central1
  chief: {machine_type: a2-highgpu-1g, accelerator: "nvidia-tesla-a100:1"}
"""
DEADLINE = "deadline: 36h\nfallback: {flex_start: true, flex_start_wait_hours: 2}\n"


def _submit(tmp_path, spec: str, *flags: str) -> int:
    (tmp_path / "job.yaml").write_text(spec)
    args = ["submit", "--config", str(tmp_path / "job.yaml"), "--project", "my-project"]
    return cli.main(args + ["--container-image", IMAGE, *flags])


def test_flex_start_reaches_vertex_with_its_max_wait_through_the_real_client(vertex_server, tmp_path, capsys):
    assert _submit(tmp_path, A100, "--flex-start", "--max-wait", "6") == 0, capsys.readouterr().err
    scheduling = vertex_server.requests[-1][2]["jobSpec"]["scheduling"]
    assert scheduling == {"restartJobOnWorkerRestart": True, "strategy": 6, "maxWaitDuration": "21600s"}
    assert len(vertex_server.jobs) == 1  # FLEX_START is 6 in aiplatform_v1 Scheduling.Strategy


def test_survivor_refuses_what_flex_start_cannot_be_before_sending(vertex_server, tmp_path, capsys):
    t4 = A100.replace("a2-highgpu-1g", "n1-standard-8").replace("nvidia-tesla-a100", "nvidia-tesla-t4")
    mixed = A100 + '  workers: {count: 2, machine_type: g2-standard-8, accelerator: "nvidia-l4:1"}\n'
    cases = [
        (t4, ["--flex-start"], "flex-start runs only jobs with L4, A100, H100, H200 or B200 GPUs"),
        (mixed, ["--flex-start"], "flex-start needs the same machine configuration for every worker pool"),
        (A100, ["--max-wait", "6"], "Vertex AI waits for machines only with flex-start"),
        (A100, ["--flex-start", "--max-wait", "-1"], "max wait -1.0: expected hours >= 0"),
        (A100, ["--flex-start", "--spot"], "--spot and --flex-start"),
    ]
    for spec, flags, expected in cases:
        assert _submit(tmp_path, spec, *flags) != 0
        assert expected in capsys.readouterr().err
    assert vertex_server.requests == []  # nothing was sent


def test_the_fake_refuses_flex_start_where_vertex_documents_it_does_not_run(vertex_server):
    from survivor.cloud import vertex

    spec = JobSpec.from_yaml(A100)

    def flex(pools, **scheduling):
        body = custom_job_body(spec, pools, container_image=IMAGE, strategy=vertex.FLEX_START, max_wait_hours=1)
        body["jobSpec"]["scheduling"].update(scheduling)
        return body

    a100 = Pool("chief", "a2-highgpu-1g", 1, "NVIDIA_TESLA_A100", 1)
    with pytest.raises(vertex.VertexError, match="accelerator_type NVIDIA_TESLA_T4: FLEX_START needs L4"):
        submit(flex([Pool("chief", "n1-standard-8", 1, "NVIDIA_TESLA_T4", 1)]), "p", "us-central1")
    with pytest.raises(vertex.VertexError, match="the same machine configuration for every pool"):
        submit(flex([a100, Pool("worker", "g2-standard-8", 2, "NVIDIA_L4", 1)]), "p", "us-central1")
    with pytest.raises(vertex.VertexError, match="FLEX_START jobs run for 7 days at most"):
        submit(flex([a100], timeout=f"{8 * 24 * 3600}s"), "p", "us-central1")
    # not a Duration: the client's own parse refuses it, and so does the fake's for a hand-made request
    with pytest.raises(Exception, match="Duration must end with letter"):
        submit(flex([a100], maxWaitDuration="90m"), "p", "us-central1")
    import requests

    answer = requests.post(
        f"{vertex_server.endpoint}/v1/projects/p/locations/us-central1/customJobs",
        json=flex([a100], maxWaitDuration="90m"),
    )
    assert answer.status_code == 400 and "maxWaitDuration" in answer.json()["error"]["message"]
    assert not vertex_server.jobs
    submit(flex([a100, Pool("worker", "a2-highgpu-1g", 2, "NVIDIA_TESLA_A100", 1)]), "p", "us-central1")
    assert len(vertex_server.jobs) == 1


def test_a_max_wait_is_sent_only_with_flex_start():
    from survivor.cloud import vertex

    spec, pools = JobSpec.from_yaml(A100), [Pool("chief", "a2-highgpu-1g", 1, "NVIDIA_TESLA_A100", 1)]
    for strategy in (vertex.SPOT, vertex.STANDARD, None):
        body = custom_job_body(spec, pools, container_image=IMAGE, strategy=strategy, max_wait_hours=3)
        assert "maxWaitDuration" not in body["jobSpec"]["scheduling"]
    body = custom_job_body(spec, pools, container_image=IMAGE, strategy=vertex.FLEX_START, max_wait_hours=0)
    assert body["jobSpec"]["scheduling"]["maxWaitDuration"] == "0s"  # 0: wait until the machines come


NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc)
A100_POOLS = [Pool("chief", "a2-highgpu-1g", 1, "NVIDIA_TESLA_A100", 1)]


@pytest.mark.parametrize(
    "deadline, hours, preemptions, ratio, expected",
    [
        # room at the uniform-progress line and no preemptions to plan with: Spot
        (DEADLINE, 10, None, 0.6, "SPOT"),
        # the training and a margin no longer fit: the safety net, on-demand (STANDARD)
        (DEADLINE, 35.9, None, 0.6, "STANDARD"),
        # Spot's expected restarts put it behind; flex-start allowed, cheaper, and its queue fits
        (DEADLINE, 10, 1.0, 0.6, "FLEX_START"),
        # the same, but the spec does not allow flex-start
        (DEADLINE.replace("flex_start: true", "flex_start: false"), 10, 1.0, 0.6, "STANDARD"),
        # the same, but flex-start is not cheaper than on-demand
        (DEADLINE, 10, 1.0, 1.0, "STANDARD"),
        # the same, but a 2 h queue, 34 h of training and the margin do not fit in 36 h
        (DEADLINE, 34, 1.0, 0.6, "STANDARD"),
    ],
)
def test_the_deadline_policy_chooses_a_vertex_jobs_strategy(deadline, hours, preemptions, ratio, expected):
    from survivor.policy import deadline as policy
    from survivor.operator.vertex_job import deadline_strategy

    spec = JobSpec.from_yaml(A100 + deadline)
    choice = deadline_strategy(
        spec, A100_POOLS, training_hours=hours, now=NOW, spot_preemptions_per_hour=preemptions, price_ratio=ratio
    )
    assert choice.strategy == expected, choice.decision.reason
    assert choice.max_wait_hours == (2.0 if expected == "FLEX_START" else None)
    # the decision is the Compute Engine group's own, not a copy of it
    situation = policy.Situation(
        hours_left=36.0,
        window_hours=36.0,
        switch_back=False,
        flex_start=policy.FlexStart(allowed="flex_start: true" in deadline, wait_hours=2.0, price_ratio=ratio),
        spot_hazard_per_hour=preemptions,
    )
    assert choice.decision == policy.decide(policy.Measured(0, 1000, 1000 / hours), situation)


def test_the_deadline_policy_needs_a_deadline_and_hours():
    from survivor.operator.vertex_job import deadline_strategy

    with pytest.raises(SpecError, match="needs the spec's deadline"):
        deadline_strategy(JobSpec.from_yaml(A100), A100_POOLS, training_hours=10, now=NOW)
    with pytest.raises(SpecError, match="expected hours > 0"):
        deadline_strategy(JobSpec.from_yaml(A100 + DEADLINE), A100_POOLS, training_hours=0, now=NOW)


def test_submit_with_training_hours_sends_what_the_deadline_policy_chose(vertex_server, tmp_path, capsys):
    flags = ["--training-hours", "10", "--spot-preemptions-per-hour", "1"]
    assert _submit(tmp_path, A100 + DEADLINE, *flags) == 0  # the offline table prices a2-highgpu-1g flex-start
    err = capsys.readouterr().err
    assert "note: deadline policy: FLEX_START: behind:" in err
    scheduling = vertex_server.requests[-1][2]["jobSpec"]["scheduling"]
    assert scheduling["strategy"] == 6 and scheduling["maxWaitDuration"] == "7200s"  # the 2 h queue planned with
    assert _submit(tmp_path, A100 + DEADLINE, "--training-hours", "10") == 0
    assert vertex_server.requests[-1][2]["jobSpec"]["scheduling"]["strategy"] == 4  # SPOT
    assert _submit(tmp_path, A100 + DEADLINE, "--training-hours", "10", "--spot") != 0
    assert "drop --spot/--flex-start" in capsys.readouterr().err
