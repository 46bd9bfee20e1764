"""docs/scaling-out.md, walked (every command a guide names works after its install): every
`survivor` line of its ```bash blocks, in the guide's order, run by the installed `survivor` console
script as a subprocess, in a temp dir holding the guide's own job.yaml, against the stand-ins (the
Vertex AI fake, the Cloud Logging fake, fake-gcs-server) named by their SURVIVOR_*_ENDPOINT and
STORAGE_EMULATOR_HOST overrides (survivor/cloud/endpoints.py), with the exit code and the output the
guide promises. The lines are read from the markdown: a line the guide changes is run as changed.
Then the newcomer's mistakes: one bad input per command, each one line naming it, never a traceback.

The walk itself runs in tests/test_docs_commands.py, with the console script of a fresh install of the
guide's own extras (it ran here too, with this venv's, until 2026-11-27: the same lines and checks a
second time, 40 s of the suite). It writes a real checkpoint with the built-in mlp trainer (one
TensorFlow import)."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest
import yaml

from tests.test_operator_guide import Line, guide_lines, quoted

# found, not imported: the clients take a second to import in every test process that collects this file
pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("google.cloud.aiplatform_v1", "google.cloud.logging")),
    reason="the vertex extra is not installed",
)

ROOT = pathlib.Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "scaling-out.md"
SURVIVOR = str(pathlib.Path(sys.executable).parent / "survivor")  # the venv's console script

#: The guide's placeholders, and what the walk puts in their place: a custom job's name is the one
#: the walk's own submit printed (None here); IMAGE-gpu.VERSION is a prebuilt image newer than
#: survivor's table (a hypothetical name, as the guide means it).
PLACEHOLDERS = {
    r"^projects/(\.\.\.|P)/.*customJobs/123$": None,
    r"IMAGE-gpu\.VERSION\.": "tf-gpu.2-99.",
}


def survivor_lines() -> list[Line]:
    return [line for line in guide_lines(GUIDE.read_text()) if line.argv[0] == "survivor"]


def guide_job_spec() -> str:
    """The guide's ```yaml block that starts `# job.yaml`."""
    found = re.search(r"```yaml\n(# job\.yaml\n.*?)```", GUIDE.read_text(), re.S)
    assert found, "the guide no longer shows its job.yaml"
    return found.group(1)


def guide_prose() -> str:
    return re.sub(r"\s+", " ", GUIDE.read_text())


def as_run(line: Line, job: str | None) -> list[str]:
    """The line's words after `survivor`, its placeholders filled in."""
    words = []
    for word in line.argv[1:]:
        for pattern, value in PLACEHOLDERS.items():
            if re.search(pattern, word):
                assert value is not None or job, f"`{line.text}` names a job before the guide submitted one"
                word = job if value is None else re.sub(pattern, value, word)
        words.append(word)
    return words


def run(
    argv: list[str],
    cwd: pathlib.Path,
    env: dict[str, str],
    *,
    python: list[str] | None = None,
    survivor: str = SURVIVOR,
    timeout: float = 120,
) -> tuple[int, str, str]:
    """`survivor ARGV` (or `python` + ARGV) in `cwd` with `env`: its exit code, stdout and stderr."""
    done = subprocess.run(
        (python or [survivor]) + argv, capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout
    )
    return done.returncode, done.stdout, done.stderr


def one_error_line(code: int, out: str, err: str, expected: str) -> None:
    """A bad input's answer: a failing exit, nothing on stdout, and one `error:` line containing `expected`."""
    assert code in (1, 2) and out == "", (code, out, err)
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and "Traceback" not in err, err
    assert expected in err, err


# -- what every line of the guide must satisfy -----------------------------------------------------


@pytest.mark.parametrize("line", survivor_lines(), ids=lambda line: line.text[:70])
def test_every_survivor_command_in_the_guide_parses(line, capsys):
    from survivor.commands import main as cli

    try:
        cli.build_parser().parse_args(as_run(line, "projects/p/locations/us-central1/customJobs/1"))
    except SystemExit as exc:
        pytest.fail(f"the guide's `{line.text}` does not parse: {capsys.readouterr().err.strip()} (exit {exc.code})")


def test_the_guides_job_spec_is_a_job_spec_survivor_reads():
    from survivor.spec import JobSpec

    spec = JobSpec.from_yaml(guide_job_spec())
    assert spec.job_dir.startswith("gs://") and spec.extra["vertex"]["container_image"]


# -- the walk --------------------------------------------------------------------------------------


@pytest.fixture
def stand_ins(tmp_path):
    """The Vertex AI and Cloud Logging fakes and fake-gcs-server, and the environment pointing at them
    (no project of the developer's: the guide's job.yaml names its own)."""
    from survivor.local.gcs import StorageEmulator
    from survivor.local.logging_server import LoggingServer
    from survivor.local.vertex_server import VertexServer

    vertex, logging = VertexServer().start(), LoggingServer().start()
    storage = StorageEmulator().start()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT", "GOOGLE_APPLICATION_CREDENTIALS")
    }
    env.update(
        SURVIVOR_VERTEX_ENDPOINT=vertex.endpoint,
        SURVIVOR_LOGGING_ENDPOINT=logging.endpoint,
        STORAGE_EMULATOR_HOST=storage.url,
        PYTHONUNBUFFERED="1",
    )
    try:
        yield vertex, logging, storage, env
    finally:
        storage.stop()
        logging.stop()
        vertex.stop()


def real_checkpoints(where: pathlib.Path, steps: int) -> None:
    """What a built-in trainer writes in its --job-dir: the mlp trainer, run for `steps`."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "survivor.trainers.mlp",
            "--job-dir",
            str(where),
            "--train-steps",
            str(steps),
            "--checkpoint-steps",
            str(steps),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def upload(storage, local: pathlib.Path, url: str) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage as gcs

    bucket_name, _, prefix = url[len("gs://") :].partition("/")
    client = gcs.Client(
        project="test", credentials=AnonymousCredentials(), client_options={"api_endpoint": storage.url}
    )
    bucket = client.bucket(bucket_name)
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        bucket.blob(f"{prefix}/{path.relative_to(local)}".lstrip("/")).upload_from_filename(str(path))


def walk(stand_ins, tmp_path: pathlib.Path, survivor: str = SURVIVOR) -> list[str]:
    """Runs the guide's `survivor` lines in order with the console script `survivor` (this venv's, or a
    clean install's) against `stand_ins`, holding each to what the guide says; returns the lines run."""
    vertex, logging, storage, env = stand_ins
    spec_text = guide_job_spec()
    (tmp_path / "job.yaml").write_text(spec_text)
    spec = yaml.safe_load(spec_text)
    section = spec["vertex"]
    bucket = spec["job_dir"][len("gs://") :].split("/")[0]
    storage.create_bucket(bucket)
    lines = survivor_lines()
    # "copied to the bucket": the sdist each --package line names (its bytes are Vertex's business)
    for line in lines:
        if "--package" in line.argv:
            package = line.argv[line.argv.index("--package") + 1]
            (tmp_path / "sdist").mkdir(exist_ok=True)
            (tmp_path / "sdist" / package.rsplit("/", 1)[1]).write_bytes(b"an sdist")
            upload(storage, tmp_path / "sdist", package.rsplit("/", 1)[0])
    job = None
    trained = False
    ran = []
    for line in lines:
        words = as_run(line, job)
        command = words[0]
        if command in ("status", "logs") and line.section.startswith("Logs") and not trained:
            # the trainer has run: its checkpoints and its replicas' lines, as Vertex AI keeps them
            real_checkpoints(tmp_path / "checkpoints", 20)
            upload(storage, tmp_path / "checkpoints", f"{spec['job_dir']}/checkpoints")
            job_id = job.rsplit("/", 1)[1]
            logging.add(
                section["project"],
                job_id,
                "workerpool0-0",
                "worker 0 of 3 (chief:0, chief)",
                timestamp="2026-11-22T00:00:05Z",
            )
            logging.add(
                section["project"],
                job_id,
                "workerpool1-1",
                "step 20/5000 loss 2.1",
                severity="WARNING",
                timestamp="2026-11-22T00:00:07Z",
            )
            trained = True
        sent_before = len(vertex.requests)
        code, out, err = run(words, tmp_path, env, survivor=survivor)
        said = out + err
        assert code == 0, f"`{line.text}` exited {code}:\n{said}"
        assert "Traceback" not in said, said
        promised = quoted(line.comment)
        if promised:
            assert re.search(promised, said), f"`{line.text}`: the guide promises {line.comment!r}; it said:\n{said}"
        if command == "submit" and "--dry-run" in words:
            body = json.loads(out)
            assert len(vertex.requests) == sent_before, "--dry-run sent the job"
            pools = body["jobSpec"]["workerPoolSpecs"]
            assert [p["replicaCount"] for p in pools] == ["1", str(section["workers"]["count"])]
            assert {p["containerSpec"]["imageUri"] for p in pools} == {section["container_image"]}
            assert body["jobSpec"]["scheduling"] == {"restartJobOnWorkerRestart": True, "strategy": "SPOT"}
            assert body["jobSpec"]["baseOutputDirectory"] == {"outputUriPrefix": spec["job_dir"]}
        elif command == "submit":
            found = re.fullmatch(
                r"submitted (projects/(\S+)/locations/(\S+)/customJobs/\d+)\n"
                r"watch it: survivor status --vertex \1 --job-dir (\S+)\n",
                out,
            )
            assert found, out
            job = found.group(1)
            assert found.groups()[1:] == (section["project"], section["region"], spec["job_dir"])
            sent = vertex.jobs[job]["jobSpec"]["workerPoolSpecs"]
            if "--container-image" in words:
                assert {p["containerSpec"]["imageUri"] for p in sent} == {words[words.index("--container-image") + 1]}
            elif "--package" in words:  # the command line's package wins over the spec's container image
                assert all("containerSpec" not in p for p in sent), sent
                assert {p["pythonPackageSpec"]["executorImageUri"] for p in sent} == {
                    words[words.index("--executor-image") + 1]
                }
                assert {p["pythonPackageSpec"]["packageUris"][0] for p in sent} == {words[words.index("--package") + 1]}
        elif command == "status":
            state, rest = out.splitlines()[0].split(" (", 1)
            assert state.startswith(f"{spec['name']}: JOB_STATE_") and rest == f"{job})", out
            assert state.split(": ")[1] in re.findall(r"`(JOB_STATE_\w+)`", guide_prose()), out
            checkpoints = f"{spec['job_dir']}/checkpoints"
            if trained:
                assert f"  job dir: newest checkpoint at step 20: {checkpoints}/ckpt-20" in out.splitlines(), out
            else:
                assert f"  job dir: no checkpoint yet in {checkpoints}" in out.splitlines(), out
        elif command == "logs":
            promised = re.search(r"prints `(TIMESTAMP workerpoolN-I SEVERITY: text)`", guide_prose())
            assert promised, "the guide no longer says what logs --vertex prints"
            assert out.splitlines() == [
                "2026-11-22T00:00:05Z workerpool0-0 INFO: worker 0 of 3 (chief:0, chief)",
                "2026-11-22T00:00:07Z workerpool1-1 WARNING: step 20/5000 loss 2.1",
            ], out
        ran.append(line.text)
    assert ran == [line.text for line in lines] and trained
    assert {"submit", "status", "logs"} <= {line.argv[1] for line in lines}
    return ran


@pytest.mark.slow
def test_a_python_package_today_stops_with_the_one_line_the_guide_quotes(stand_ins, tmp_path):
    _, _, storage, env = stand_ins
    quote = re.search(r'one line saying so \("([^"]+)"\)', guide_prose())
    assert quote, "the guide no longer quotes the line"
    (tmp_path / "job.yaml").write_text(guide_job_spec())
    package = next(line.argv[line.argv.index("--package") + 1] for line in survivor_lines() if "--package" in line.argv)
    code, out, err = run(["submit", "--config", "job.yaml", "--package", package, "--dry-run"], tmp_path, env)
    one_error_line(code, out, err, quote.group(1))


# -- the newcomer's mistakes: one line each ---------------------------------------------------------

#: Runs the CLI with google-cloud-aiplatform and google-cloud-logging hidden: an install without the
#: `vertex` extra (the same code path as a venv that never installed them).
WITHOUT_VERTEX_EXTRA = r"""
import sys
class Hidden:
    def find_spec(self, name, path=None, target=None):
        if name.startswith(("google.cloud.aiplatform", "google.cloud.logging")):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Hidden())
from survivor.commands.main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_each_guide_command_given_a_newcomers_mistake_says_so_in_one_line(stand_ins, tmp_path):
    vertex, _, storage, env = stand_ins
    spec_text = guide_job_spec()
    spec = yaml.safe_load(spec_text)
    (tmp_path / "job.yaml").write_text(spec_text)
    storage.create_bucket(spec["job_dir"][len("gs://") :].split("/")[0])
    (tmp_path / "nobucket.yaml").write_text(spec_text.replace(spec["job_dir"], "gs://no-such-bucket/mnist"))
    lines = {
        (
            line.argv[1],
            "--dry-run" in line.argv,
            "--package" in line.argv,
            "--container-image" in line.argv,
            "--follow" in line.argv,
        ): line
        for line in survivor_lines()
    }
    dry_run = as_run(lines["submit", True, False, False, False], None)
    create = as_run(lines["submit", False, False, False, False], None)
    container = as_run(lines["submit", False, False, True, False], None)
    package = as_run(lines["submit", False, True, False, False], None)
    without_extra = [sys.executable, "-c", WITHOUT_VERTEX_EXTRA]

    # a zone for the region
    code, out, err = run(dry_run + ["--region", "us-central1-b"], tmp_path, env)
    one_error_line(
        code,
        out,
        err,
        "--region us-central1-b: a zone, not a region; Vertex AI runs custom jobs in a region: us-central1",
    )
    # a job dir in a bucket not created yet
    code, out, err = run([w if w != "job.yaml" else "nobucket.yaml" for w in create], tmp_path, env)
    one_error_line(
        code,
        out,
        err,
        "job_dir gs://no-such-bucket/mnist: the bucket gs://no-such-bucket does not exist: "
        "create it (gcloud storage buckets create gs://no-such-bucket --location REGION)",
    )
    # the operator install without the vertex extra
    code, out, err = run(container, tmp_path, env, python=without_extra)
    one_error_line(
        code,
        out,
        err,
        "needs the Python package 'google.cloud.aiplatform_v1', which this install lacks: pip install -e '.[vertex]'",
    )
    # the sdist not uploaded
    code, out, err = run(package, tmp_path, env)
    name = package[package.index("--package") + 1]
    one_error_line(code, out, err, f"package {name}: no such object; upload it first (gcloud storage cp dist/")
    assert not vertex.jobs, "a refused submit sent a job"

    code, out, _ = run(container, tmp_path, env)
    assert code == 0
    job = out.split()[1]
    status = next(line for line in survivor_lines() if line.argv[1] == "status")
    # the guide's own placeholder, copied as it is
    code, out, err = run(status.argv[1:], tmp_path, env)
    one_error_line(code, out, err, "expected projects/PROJECT/locations/REGION/customJobs/ID")
    # a job dir whose bucket is not there
    code, out, err = run(["status", "--vertex", job, "--job-dir", "gs://no-such-bucket/mnist"], tmp_path, env)
    one_error_line(code, out, err, "gs://no-such-bucket: the bucket does not exist")
    # a misspelt region in the job's name
    logs = as_run(lines["logs", False, False, False, True], job)
    code, out, err = run([w.replace("/us-central1/", "/us-central/") for w in logs], tmp_path, env)
    one_error_line(
        code, out, err, "location us-central: not a region; Vertex AI runs custom jobs in a region, e.g. us-central1"
    )
    # a job that is not there
    code, out, err = run([w.replace(job.rsplit("/", 1)[1], "404") for w in logs], tmp_path, env)
    one_error_line(code, out, err, "customJobs/404 not found")
    # the logs without the vertex extra
    code, out, err = run(logs, tmp_path, env, python=without_extra)
    one_error_line(code, out, err, "pip install -e '.[vertex]'")


def test_the_command_lines_way_of_running_the_trainer_wins_over_the_specs(tmp_path):
    from survivor.cloud.vertex import SubmitRequest, prepare

    (tmp_path / "job.yaml").write_text(guide_job_spec())
    config = str(tmp_path / "job.yaml")
    image = "us-docker.pkg.dev/vertex-ai/training/tf-gpu.2-99.py311:latest"
    body = prepare(SubmitRequest(config, package="gs://b/survivor_train-0.1.0.tar.gz", executor_images=(image,))).body
    assert {p["pythonPackageSpec"]["executorImageUri"] for p in body["jobSpec"]["workerPoolSpecs"]} == {image}
    body = prepare(SubmitRequest(config)).body  # nothing on the command line: the spec's image
    assert all("containerSpec" in p for p in body["jobSpec"]["workerPoolSpecs"])


def test_the_seeds_training_input_the_guide_shows_becomes_the_pools_and_notes_it_says(tmp_path):
    """`--training-input config.yaml` on the guide's own trainingInput block (a dry run: no stand-in)."""
    text = GUIDE.read_text()
    block = re.search(r"```yaml\n(trainingInput:.*?)```", text, re.S)
    assert block, "the guide no longer shows the seeds' trainingInput"
    (tmp_path / "config.yaml").write_text(block.group(1))
    (tmp_path / "job.yaml").write_text(guide_job_spec())
    env = {k: v for k, v in os.environ.items() if not k.startswith("SURVIVOR_")}
    code, out, err = run(
        ["submit", "--config", "job.yaml", "--training-input", "config.yaml", "--dry-run"], tmp_path, env
    )
    assert code == 0, err
    pools = [(p["machineSpec"], p["replicaCount"]) for p in json.loads(out)["jobSpec"]["workerPoolSpecs"]]
    # "becomes a chief and 9 workers on `n1-standard-8` with one GPU each, and 3 parameter servers on `n1-standard-4`"
    said = re.search(
        r"becomes a chief and (\d+) workers on `([\w-]+)` with one GPU each, and (\d+) parameter "
        r"servers on `([\w-]+)`",
        guide_prose(),
    )
    assert said, "the guide no longer says what the seed's config becomes"
    workers, worker_type, servers, server_type = said.groups()
    t4 = {"acceleratorType": "NVIDIA_TESLA_T4", "acceleratorCount": 1}
    assert pools == [
        ({"machineType": worker_type, **t4}, "1"),
        ({"machineType": worker_type, **t4}, workers),
        ({"machineType": server_type}, servers),
    ]
    # "the K80 is retired on Vertex AI (a T4 stands in); TF 1.12 cannot be kept"
    notes = [line for line in err.splitlines() if line.startswith("note: ")]
    assert len(notes) == len(err.splitlines()), err
    assert any("NVIDIA_TESLA_K80 is retired on Vertex AI; using NVIDIA_TESLA_T4" in n for n in notes), err
    assert any("runtimeVersion 1.12" in n and "cannot be kept" in n for n in notes), err
