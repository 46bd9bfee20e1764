"""docs/operator-guide.md, walked from zero: every `survivor` command of its ```bash blocks, in the
guide's order, run as written against the stand-ins the guide itself starts (`survivor emulate
compute` and `survivor emulate storage`, as subprocesses), with the exit code and the output the
guide promises. A command the guide adds must be classified here (run, or skipped with a reason),
and every one, run or not, must parse with the CLI: the guide and the code cannot drift apart.
Then the hostile new user: each bad input the guide's rules name gets one line naming it, before
anything is sent. The whole file takes about 30 s (the walk about 15 s, one TensorFlow import)."""

from __future__ import annotations

import io
import json
import os
import pathlib
import pickle
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest

from survivor.commands import main as cli

ROOT = pathlib.Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "operator-guide.md"


@dataclass(frozen=True)
class Line:
    """One command of a ```bash block: its words, its trailing comment, the heading it is under."""

    text: str
    comment: str
    section: str

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.text)


def guide_lines(markdown: str) -> list[Line]:
    """The commands of the guide's ```bash blocks, continuation lines joined, in order."""
    out, section, block, pending = [], "", None, ""
    for raw in markdown.splitlines():
        if block is None:
            if raw.startswith("#"):
                section = raw.lstrip("# ").strip()
            if raw.strip() == "```bash":
                block = []
            continue
        if raw.strip() == "```":
            block = None
            continue
        text = pending + raw.strip()
        if text.endswith("\\"):
            pending = text[:-1] + " "
            continue
        pending = ""
        command, _, comment = text.partition("  #")  # a comment follows two spaces at least
        command = re.sub(r"\s*&\s*$", "", command.strip())
        if command and not command.startswith("#"):
            out.append(Line(command, comment.strip(), section))
    return out


def quoted(comment: str) -> str | None:
    """The "text" a comment promises the command prints, as a regex ("..." matches anything)."""
    m = re.search(r'"([^"]+)"', comment)
    return None if m is None else ".*?".join(re.escape(part) for part in m.group(1).split("..."))


#: survivor commands of the guide that this walk does not run, and why; every other one is run.
NOT_RUN = {
    "logs --vertex": "a Vertex AI job: docs/scaling-out.md and tests/test_vertex.py",
}
#: flags dropped before running a line: --follow reads the serial port until Ctrl-C
DROPPED = ("--follow",)


def not_run_reason(line: Line) -> str | None:
    words = line.argv[1:]
    for key, reason in NOT_RUN.items():
        command, flag = key.split()
        if words and words[0] == command and flag in words:
            return reason
    return None


def survivor_lines() -> list[Line]:
    return [line for line in guide_lines(GUIDE.read_text()) if line.argv[0] == "survivor"]


# -- what every line of the guide must satisfy -----------------------------------------------------


def test_the_guide_has_commands_in_every_part_a_new_operator_walks_through():
    sections = {line.section for line in survivor_lines()}
    for part in (
        "Rehearse it on your machine first",
        "Before anything is spent: `survivor preflight`",
        "1. Data",
        "3. Template and group",
        "4. Watch it",
        "5. Stop, start, finish, delete",
    ):
        assert part in sections, f"no survivor command under '{part}' of the guide"


@pytest.mark.parametrize("line", survivor_lines(), ids=lambda line: line.text[:70])
def test_every_survivor_command_in_the_guide_parses(line, capsys):
    try:
        cli.build_parser().parse_args(line.argv[1:])
    except SystemExit as exc:
        pytest.fail(f"the guide's `{line.text}` does not parse: {capsys.readouterr().err.strip()} (exit {exc.code})")


# -- the walk --------------------------------------------------------------------------------------


def tiny_cifar_archive(path: pathlib.Path) -> None:
    """A cifar-10-python.tar.gz in the official layout (pickled CHW batches), 4 images per batch."""
    rng = np.random.default_rng(0)
    with tarfile.open(path, "w:gz") as tar:
        for batch in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
            data = pickle.dumps(
                {b"data": rng.integers(0, 255, size=(4, 3072), dtype=np.uint8), b"labels": [0, 1, 2, 3]}
            )
            info = tarfile.TarInfo(f"cifar-10-batches-py/{batch}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


class StandIn:
    """A `survivor emulate ...` line of the guide, run as a subprocess on a free port."""

    def __init__(self, argv: list[str], python: str = sys.executable):
        from survivor.local.http import free_port

        self.process = subprocess.Popen(
            [python, "-m", "survivor", *argv[1:], "--port", str(free_port())],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.output = self.process.stdout.readline()  # the line with the export, once it serves
        found = re.search(r"export (\w+)=(\S+)", self.output)
        if found is None:
            self.stop()
            pytest.fail(f"`{' '.join(argv)}` printed no variable to export: {self.output}{self.process.stdout.read()}")
        self.variable, self.value = found.groups()

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(30)


def run(capsys, argv: list[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


Runner = Callable[[list[str]], tuple[int, str, str]]


def in_process(capsys) -> Runner:
    """Runs a command line through the CLI in this process (the default walk: fast)."""
    return lambda argv: run(capsys, argv)


#: Runs command lines through the CLI of the interpreter it is started with, one JSON [argv,
#: environment, cwd] a line in (each line as the shell would run it there), one JSON [code, stdout,
#: stderr] a line out: a clean venv's install, imported once.
_DRIVER = r"""
import contextlib, io, json, os, sys
from survivor.commands import main as cli
for line in sys.stdin:
    argv, env, cwd = json.loads(line)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    sys.__stdout__.write(json.dumps([code, out.getvalue(), err.getvalue()]) + "\n")
    sys.__stdout__.flush()
"""


def installed(bin_dir: pathlib.Path) -> Runner:
    """Runs command lines through the CLI of another install (a clean venv): its `survivor` console
    script starts (checked once), then one interpreter of that venv runs each line, as the in-process
    walk does here, so the venv's imports are paid once, not once a line."""
    started = subprocess.run([str(bin_dir / "survivor"), "--help"], capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stderr[-2000:]
    driver = subprocess.Popen(
        [str(bin_dir / "python"), "-c", _DRIVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=os.getcwd(),
    )

    def runner(argv: list[str]) -> tuple[int, str, str]:
        driver.stdin.write(json.dumps([argv, dict(os.environ), os.getcwd()]) + "\n")
        driver.stdin.flush()
        answer = driver.stdout.readline()
        assert answer, f"the venv's interpreter ended on {argv}"
        code, out, err = json.loads(answer)
        return code, out, err

    runner.close = lambda: (driver.stdin.close(), driver.wait(30))  # type: ignore[attr-defined]
    return runner


def guide_example(after: str) -> list[str]:
    """The lines of the first untyped ``` block after the sentence containing `after`."""
    text = GUIDE.read_text()
    block = text[text.index(after) :].split("```\n", 2)[1]
    return block.strip().splitlines()


def guide_alternative() -> tuple[str, str]:
    """The regional `make-group` the guide offers instead of its zonal line (in its prose, not in a
    block: a reader running the blocks line by line makes one group), and the refusal it quotes for
    running it after the zonal one."""
    prose = re.sub(r"\s+", " ", GUIDE.read_text())
    alternative = re.search(r"\(`(survivor make-group cifar10 --template cifar10 --region [\w-]+)`\)", prose)
    refusal = re.search(r"``(error: group cifar10: already exists in [^`]*`[^`]*`[^`]*)``", prose)
    assert alternative and refusal, "the guide no longer offers the regional group instead, with its refusal"
    return alternative.group(1), refusal.group(1)


def job_instances(compute, job: str) -> list[tuple[str, str]]:
    """(zone, name) of every VM of the job's groups, wherever they are."""
    found = []
    for group, _ in compute.list_groups():
        if group.name == job:
            found += [(member["zone"], member["name"]) for member in compute.managed_instances(group)]
    return found


def test_the_operator_guide_walked_from_zero_against_the_stand_ins(tmp_path, monkeypatch, capsys):
    walk(in_process(capsys), sys.executable, tmp_path, monkeypatch)


def walk(runner: Runner, python: str, tmp_path: pathlib.Path, monkeypatch, then=None) -> list[str]:
    """Walks the guide's `survivor` lines with `runner` against the stand-ins its `emulate` lines
    start (with `python`); `then(runner, tmp_path)`, if given, runs while they still serve.
    Returns the lines run."""
    monkeypatch.chdir(tmp_path)
    for variable in ("SURVIVOR_COMPUTE_ENDPOINT", "STORAGE_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT"):
        monkeypatch.delenv(variable, raising=False)
    # the rehearsal's `export` lines say which project (its endpoints come from what the stand-ins print)
    exports = dict(
        word.split("=", 1)
        for line in guide_lines(GUIDE.read_text())
        if line.argv[0] == "export"
        for word in line.argv[1:]
    )
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", exports["GOOGLE_CLOUD_PROJECT"])
    shutil.copy(ROOT / "templates" / "cifar10-4gpu.yaml", "my-job.yaml")  # section 2: copy it, set your buckets
    tiny_cifar_archive(tmp_path / "cifar-10-python.tar.gz")
    data_out = str(tmp_path / "cifar-10-data")
    stand_ins: list[StandIn] = []
    ran: list[str] = []
    try:
        for line in survivor_lines():
            argv = [data_out if word == "/tmp/cifar-10-data" else word for word in line.argv if word not in DROPPED]
            words = argv[1:]
            if not_run_reason(line):
                continue
            if words[0] == "emulate":
                stand_in = StandIn(argv, python)
                stand_ins.append(stand_in)
                monkeypatch.setenv(stand_in.variable, stand_in.value)
                ran.append(line.text)
                continue
            check_line(runner, line, words, tmp_path)
            ran.append(line.text)
        if then is not None:
            then(runner, tmp_path)
        for stand_in in stand_ins:
            assert stand_in.stop() == 0, f"{stand_in.output}: did not end cleanly on SIGTERM"
        stand_ins = []
    finally:
        for stand_in in stand_ins:
            stand_in.stop()
    assert len(ran) == len([line for line in survivor_lines() if not not_run_reason(line)])
    return ran


def check_line(run: Runner, line: Line, words: list[str], tmp_path: pathlib.Path) -> None:
    """Runs one command of the guide and holds it to what the guide says it does."""
    from survivor.cloud.compute import Compute
    from survivor.cloud.compute import GroupRef

    compute = Compute(os.environ["GOOGLE_CLOUD_PROJECT"])
    command = words[0]
    if command == "make-image":  # the fake's builder does what startup.sh's build mode does
        code, out, err = run(words + ["--poll-seconds", "0.2"])  # the default looks every 15 s
        assert code == 0, err
        # make-template, earlier in the guide, built it already; a guide read in another order builds it here
        assert re.search(
            r"already built for this wheel and lock|image survivor-\S+: created in family survivor-", out
        ), out
        return
    job_vms = job_instances(compute, "cifar10") if command == "delete" else []
    code, out, err = run(words)
    said = out + err
    assert code == 0, f"`{line.text}` exited {code}:\n{said}"
    promised = quoted(line.comment)
    if promised and "again:" in line.comment:
        code, out, err = run(words)
        said = out + err
        assert code == 0, said
    if promised:
        assert re.search(promised, said), f"`{line.text}`: the guide promises {line.comment!r}; it said:\n{said}"
    if command == "preflight":
        assert out.splitlines() and all(row.startswith("ok: ") for row in out.splitlines()), out
        assert "ok: bucket my-project-cifar-10-checkpoints exists" in out
        assert "ok: bucket my-project-cifar-10-data exists" in out
    elif command == "data":
        assert out.startswith("train.tfrecords: 16 validation.tfrecords: 4 eval.tfrecords: 4"), out
        assert sorted(os.listdir(tmp_path / "cifar-10-data")) == [
            "eval.tfrecords",
            "train.tfrecords",
            "validation.tfrecords",
        ]
    elif command == "make-template" and "--dry-run" in words:
        body = json.loads(out)
        assert body["name"] == words[1] and body["properties"]["scheduling"]["provisioningModel"] == "SPOT"
        assert compute.get_template(words[1]) is None, "--dry-run sent the template"
    elif command == "make-template":
        assert compute.get_template(words[1]) is not None
    elif command == "make-group" and "--zone" in words:
        prose = re.sub(r"\s+", " ", GUIDE.read_text())
        promised = re.search(r"`(group cifar10: created \(zone us-west1-b\); its VM is RUNNING in us-west1-b)`", prose)
        assert promised, "the guide no longer quotes what make-group prints"
        promised = promised.group(1)
        assert out.strip() == promised
        # the guide's stockout example, from the zone the rehearsal stocked out, by a group of another
        # job (a copy of the template under another name: a job has one group)
        made = compute.get_template("cifar10")
        compute.insert_template({"name": "rehearsal", "properties": made["properties"]})
        code, _, err = run(
            [
                "make-group",
                "stocked",
                "--template",
                "rehearsal",
                "--zone",
                "us-west1-a",
                "--wait-seconds",
                "3",
                "--poll-seconds",
                "0.2",
            ]
        )
        assert code == 1
        example = guide_example("or the group reports why it cannot create it")
        said = err.replace("us-west1-a", "us-west1-b").replace("stocked", "cifar10")
        pattern = r"\s*".join(".*?".join(re.escape(p) for p in row.split("...")) for row in example)
        assert re.search(pattern, said, re.S), f"the guide's stockout example:\n{example}\nmake-group said:\n{said}"
        assert run(["delete", "stocked", "--zone", "us-west1-a", "--template", "keep-it"])[0] == 0
        # the guide's regional alternative (a group in any zone of the region offering the T4), as a
        # group of another job: us-west1-a is stocked out, us-west1-c has no T4
        code, out, err = run(["make-group", "regional", "--template", "rehearsal", "--region", "us-west1"])
        assert code == 0, err
        group = compute.get_group(GroupRef(compute.project, "regional", region="us-west1"))
        assert group["distributionPolicy"]["targetShape"] == "ANY"
        zones = {z["zone"].rsplit("/", 1)[-1] for z in group["distributionPolicy"]["zones"]}
        assert zones == {"us-west1-a", "us-west1-b"}, "only the zones that offer the T4"
        assert "its VM is RUNNING in us-west1-b" in out
        assert run(["delete", "regional", "--region", "us-west1"])[0] == 0  # and its template
        # the guide's regional line for the job itself, run after the zonal one as a reader going
        # line by line would: refused in the words the guide quotes, nothing made
        alternative, refusal = guide_alternative()
        code, out, err = run(shlex.split(alternative)[1:])
        assert code == 1 and out == "" and err.strip() == refusal, err
        assert [(g.name, g.zone, g.region) for g, _ in compute.list_groups()] == [("cifar10", "us-west1-b", None)]
    elif command == "status" and "--json" in words:
        report = json.loads(out)
        assert report["group"]["target_size"] == 1 and report["instances"][0]["status"] == "RUNNING"
        assert report["machine"] == {
            "machine_type": "n1-standard-16",
            "gpu_type": "nvidia-tesla-t4",
            "gpu_count": 4,
            "spot": True,
        }
        assert report["job"]["state"] == "NOT STARTED"  # the fake's VM runs no agent
    elif command == "status" and "--job-dir" in words:
        assert "NOT STARTED" in out
    elif command == "status":
        assert "group target size 1, template cifar10" in out and "RUNNING" in out
    elif command == "logs":
        assert "booted" in out
    elif command in ("stop", "start"):
        group = compute.get_group(GroupRef(compute.project, words[1], zone=words[words.index("--zone") + 1]))
        assert group["targetSize"] == (0 if command == "stop" else 1)
    elif command == "report":
        written = tmp_path / f"survivor-report-{words[1]}"
        assert (written / "report.md").read_text().startswith("# Job report"), out
        assert (written / "timeline.png").read_bytes().startswith(b"\x89PNG")
        assert "Goodput" in out and "| so far |" in out, out
    elif command == "delete":
        assert out.splitlines() == ["group cifar10: deleted", "template cifar10: deleted", "the job dir is untouched"]
        assert compute.get_template("cifar10") is None
        assert compute.get_template("cifar10-v2") is not None  # another template of the job is left alone
        # the rehearsal ends with no group anywhere in the project and no VM of the job
        assert job_vms and compute.list_groups() == []
        assert all(compute.get_instance(zone, name) is None for zone, name in job_vms)
    else:
        pytest.fail(f"`{line.text}`: this walk does not know what the guide promises for it; add it here or to NOT_RUN")


# -- a hostile new user: each bad input gets one line naming it, before anything is sent ----------

PROJECT = "survivor-local"


def spec_file(tmp_path: pathlib.Path, text: str | None = None) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(text if text is not None else (ROOT / "templates" / "cifar10-4gpu.yaml").read_text())
    return str(path)


@pytest.mark.parametrize(
    "flags, expected",
    [
        (
            ["--machine-type", "g2-standard-8", "--gpu", "nvidia-tesla-t4:4"],
            "compute.gpu nvidia-tesla-t4:4 with machine_type g2-standard-8: g2 machines carry their own GPUs",
        ),
        (
            ["--machine-type", "a2-highgpu-1g", "--gpu", "none"],
            "num_gpus 4 with machine_type a2-highgpu-1g: it carries 1 x nvidia-tesla-a100; use machine_type a2-highgpu-4g",
        ),
        (["--preemption-notice", "30"], "compute.preemption_notice 30: Compute Engine accepts 120 seconds only"),
        (
            ["--machine-type", "n1-standrd-16"],
            "machine_type n1-standrd-16: not an N1 machine type (n1-standard-{1,2,4,",
        ),
        (["--machine-type", "n1-standard-17"], "machine_type n1-standard-17: not an N1 machine type"),
        (["--disk-gb", "-5"], "compute.disk_gb -5: expected a whole number of GB >= 10"),
        (
            ["--zone", "us-west1"],
            "--zone us-west1: not a zone; a zone is a region and a letter, e.g. us-west1-b; "
            "for the whole region use --region us-west1",
        ),
        (
            ["--region", "us-west1-b"],
            "--region us-west1-b: not a region (e.g. us-west1); for that one zone use --zone us-west1-b",
        ),
        (["--gpu", "nvidia-tesla-t4"], "gpu = 'nvidia-tesla-t4': expected TYPE:COUNT"),
        (["--gpu", ":4"], "gpu = ':4': expected TYPE:COUNT"),  # no type is no GPU "none"
        (
            ["--zone", "us-west1-b", "--region", "us-central1"],
            "--zone us-west1-b and --region us-central1: give one (as make-group takes)",
        ),
    ],
)
def test_a_contradictory_or_malformed_template_request_is_one_line_naming_it(flags, expected, tmp_path, capsys):
    code, out, err = run(capsys, ["make-template", "cifar10", "--config", spec_file(tmp_path), "--dry-run", *flags])
    assert code == 2 and out == ""
    assert any(line.startswith(f"error: {expected}") for line in err.splitlines()), err
    assert all(line.startswith("error: ") for line in err.splitlines()) and "Traceback" not in err


def test_n1_standard_1_takes_four_t4s(tmp_path, capsys):
    # no vCPU floor for a T4 (https://cloud.google.com/compute/docs/gpus): not refused, as the API would not
    code, out, err = run(
        capsys,
        [
            "make-template",
            "small",
            "--config",
            spec_file(tmp_path),
            "--dry-run",
            "--machine-type",
            "n1-standard-1",
            "--gpu",
            "nvidia-tesla-t4:4",
        ],
    )
    assert code == 0, err
    assert json.loads(out)["properties"]["guestAccelerators"] == [
        {"acceleratorType": "nvidia-tesla-t4", "acceleratorCount": 4}
    ]


@pytest.mark.parametrize(
    "name, expected",
    [
        (
            "MyJob",
            "template 'MyJob': Compute Engine names are lower-case letters, digits and hyphens, starting with a "
            "letter, at most 63 characters; e.g. myjob",
        ),
        ("9lives", "template '9lives': Compute Engine names are"),
    ],
)
def test_a_name_compute_engine_refuses_is_refused_before_any_call(name, expected, tmp_path, capsys):
    code, out, err = run(capsys, ["make-template", name, "--config", spec_file(tmp_path), "--dry-run"])
    assert code == 2 and out == "" and err.startswith(f"error: {expected}") and len(err.splitlines()) == 1, err


def test_a_job_name_longer_than_a_migs_base_instance_name_is_refused(capsys, monkeypatch):
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    code, _, err = run(capsys, ["make-group", "j" * 59, "--template", "t", "--zone", "us-west1-b", "--dry-run"])
    assert code == 1 and "at most 58 characters" in err


@pytest.mark.parametrize(
    "text, expected",
    [
        (None, "nosuch.yaml: cannot read the job spec (No such file or directory)"),
        ("job_dir: gs://b/x\ntrain_stpes: 10\ntrainer: {builtin: dummy}\n", "train_stpes: unknown key"),
    ],
)
def test_a_spec_that_is_missing_or_misspelt_is_one_line_per_problem(text, expected, tmp_path, capsys):
    path = "nosuch.yaml" if text is None else spec_file(tmp_path, text)
    code, _, err = run(capsys, ["make-template", "t", "--config", path, "--dry-run"])
    assert code == 2 and any(
        line == f"error: {expected}" or line.startswith(f"error: {expected}") for line in err.splitlines()
    ), err
    assert "Traceback" not in err


def test_the_fake_refuses_a_name_the_api_refuses_in_the_apis_words(compute_server):
    from google.api_core import exceptions as gexc
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import compute_v1

    client = compute_v1.InstanceTemplatesClient(
        credentials=AnonymousCredentials(), client_options={"api_endpoint": compute_server.endpoint}
    )
    template = compute_v1.InstanceTemplate(
        name="MyJob", properties=compute_v1.InstanceProperties(machine_type="e2-small")
    )
    with pytest.raises(gexc.BadRequest) as caught:
        client.insert(project=PROJECT, instance_template_resource=template)
    assert (
        "Invalid value for field 'resource.name': 'MyJob'. Must be a match of regex "
        "'(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'"
    ) in caught.value.message


@pytest.mark.parametrize(
    "argv",
    [
        ["status", "j", "--zone", "us-west1-b"],
        ["make-group", "j", "--template", "t", "--zone", "us-west1-b"],
        ["preflight", "j", "--config", "SPEC", "--zone", "us-west1-b"],
        ["stop", "j", "--zone", "us-west1-b"],
    ],
    ids=lambda argv: argv[0],
)
def test_without_credentials_every_command_says_how_to_get_them(argv, tmp_path, capsys, monkeypatch):
    """One command a test: google-auth pings the metadata server about 3 s before it says there are
    no credentials, so four commands in one test would wait 12 s on one worker."""
    for variable in ("SURVIVOR_COMPUTE_ENDPOINT", "STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))  # no gcloud login either
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")  # and not on a VM (nothing listens there)
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    argv = [spec_file(tmp_path) if word == "SPEC" else word for word in argv]
    code, _, err = run(capsys, argv)
    assert code == 1, (argv, err)
    assert err.strip().splitlines()[-1] == (
        "error: no Google Cloud credentials: run `gcloud auth application-default "
        "login` (on a VM: give it a service account with the compute scope), or "
        "point SURVIVOR_COMPUTE_ENDPOINT at survivor's Compute fake"
    ), (argv, err)


def test_a_rerun_of_make_group_reports_its_vm_instead_of_already_exists(compute_server, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    job = spec_file(tmp_path, "job_dir: /tmp/local-only\ntrain_steps: 1\ntrainer: {builtin: dummy}\n")
    assert run(capsys, ["make-template", "t", "--config", job])[0] == 0
    compute_server.fail_instance_creation("ZONE_RESOURCE_POOL_EXHAUSTED", zone="us-west1-a")
    wait = ["--wait-seconds", "1", "--poll-seconds", "0.1"]
    assert run(capsys, ["make-group", "g", "--template", "t", "--zone", "us-west1-a", *wait])[0] == 1
    code, out, err = run(
        capsys, ["make-group", "g", "--template", "t", "--zone", "us-west1-a", *wait]
    )  # after a Ctrl-C
    assert code == 1 and out == "" and "has no capacity for this machine and GPU type right now (a stockout)" in err
    code, _, err = run(capsys, ["make-group", "g", "--template", "other", "--zone", "us-west1-a"])
    assert code == 1 and err.strip() == (
        "error: group g: already exists with template t, not other; delete it first "
        "(`survivor delete g --zone us-west1-a --template t`) or use another name"
    )
    code, out, _ = run(capsys, ["stop", "g", "--zone", "us-west1-a"])
    assert code == 0 and "`survivor start g --zone us-west1-a` resumes" in out
    code, out, _ = run(capsys, ["make-group", "g", "--template", "t", "--zone", "us-west1-a"])
    assert code == 0 and out.strip() == (
        "group g: already exists, stopped (target size 0); `survivor start g --zone us-west1-a` starts it"
    )


def test_an_instance_needs_its_zone_in_one_line(capsys, monkeypatch, compute_server):
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    for command in ("stop", "start"):
        code, _, err = run(capsys, [command, "j", "--instance", "vm-1"])
        assert code == 1 and err.strip() == "error: --instance vm-1: give its --zone too"
    code, _, err = run(capsys, ["logs", "--instance", "vm-1"])
    assert code == 1 and err.strip() == "error: --instance vm-1: give its --zone too"
    compute_server.add_instance(PROJECT, "us-west1-b", "vm-1")
    code, out, _ = run(capsys, ["logs", "--instance", "vm-1", "--zone", "us-west1-b"])  # no job name needed
    assert code == 0 and "vm-1 booted" in out


def test_preflight_checks_the_data_bucket_and_the_boot_disk_against_the_image(
    compute_server, gcs_server, tmp_path, capsys, monkeypatch
):
    from survivor.local.bucket_iam import BucketIam
    from survivor.local.compute_server import PROJECT_NUMBER

    gcs_server.create_bucket("guide-ckpt")
    with BucketIam(upstream=gcs_server.url, project=PROJECT) as iam:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", iam.endpoint)
        iam.set_bindings(
            "guide-ckpt",
            [
                {
                    "role": "roles/storage.objectUser",
                    "members": [f"serviceAccount:{PROJECT_NUMBER}-compute@developer.gserviceaccount.com"],
                }
            ],
        )
        job = spec_file(
            tmp_path,
            "job_dir: gs://guide-ckpt/run\ndata_dir: gs://guide-no-data\ntrain_steps: 1\n"
            "trainer: {builtin: dummy}\ncompute: {disk_gb: 30}\n",
        )
        code, out, _ = run(capsys, ["preflight", "j", "--config", job, "--project", PROJECT, "--zone", "us-west1-b"])
    assert code == 1
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: bucket guide-no-data (data_dir) does not exist: create it (gcloud storage buckets create "
        "gs://guide-no-data --location REGION) or fix data_dir",
        "error: compute.disk_gb 30: image family deeplearning-platform-release/common-cu129-ubuntu-2404-nvidia-580 "
        "needs a boot disk of at least 50 GB; set compute.disk_gb (or --disk-gb) to 50 or more",
    ]


def test_the_emulators_refuse_bad_flags_in_one_line():
    for argv, expected in (
        (["compute", "--quota", "bogus"], "error: --quota 'bogus': expected REGION:METRIC=LIMIT"),
        (["storage", "--grant", "b"], "error: --grant 'b': expected BUCKET=ROLE"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "survivor", "emulate", *argv, "--port", "0"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 1 and done.stderr.strip().startswith(expected), done.stderr


def builders_play(compute_server, monkeypatch, job_dir: str, outcomes: list[str]) -> None:
    """Each builder make-image creates from now on writes its boot record with the next of `outcomes`
    and powers off, as the request that creates it returns (no race with make-image's polling)."""
    from survivor.jobdir.storage import open_storage

    insert = compute_server._instances_insert

    def insert_and_build(params, query, body):
        operation = insert(params, query, body)
        if body["name"].endswith("-builder") and outcomes:
            now = time.time_ns()  # startup.sh's `date -u +%Y%m%dT%H%M%S%N`
            stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now // 10**9)) + f"{now % 10**9:09d}"
            open_storage(job_dir).write(f"survivor/boots/{stamp}-{body['name']}-{outcomes.pop(0)}.json", b"{}")
            compute_server.power_off(params["project"], params["zone"], body["name"])
        return operation

    monkeypatch.setattr(compute_server, "_instances_insert", insert_and_build)


def test_make_image_after_a_failed_build_or_an_interrupted_one_builds_afresh(
    compute_server, gcs_server, bucket, tmp_path, capsys, monkeypatch
):
    job_dir = f"gs://{bucket}/img"
    job = spec_file(tmp_path, f"job_dir: {job_dir}\ntrain_steps: 1\ntrainer: {{builtin: dummy}}\n")
    image_cmd = ["make-image", "--config", job, "--project", PROJECT, "--zone", "us-west1-b", "--poll-seconds", "0.05"]
    builders_play(compute_server, monkeypatch, job_dir, ["not-built", "built", "built"])
    code, _, err = run(capsys, image_cmd)
    assert code == 1 and "could not install" in err
    # the failed builder's record stays in the job dir; a second try is judged on its own builder's record
    code, out, err = run(capsys, image_cmd)
    assert code == 0, err
    family = out.split("created in family ")[1].split(";")[0]
    # an interrupted make-image left its builder running: the next one replaces it instead of failing on it
    del compute_server.images[(PROJECT, family)]
    leftover = compute_server.add_instance(PROJECT, "us-west1-b", f"{family}-builder")
    code, out, err = run(capsys, image_cmd)
    assert code == 0, err
    assert "left by an earlier make-image; deleting it to start again" in err
    assert leftover["id"] not in {vm["id"] for vm in compute_server.instances.values()}


def test_a_changed_job_names_what_changed_and_a_stuck_vm_says_why(compute_server, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    job = spec_file(tmp_path, "job_dir: /tmp/local-only\ntrain_steps: 1\ntrainer: {builtin: dummy}\n")
    assert run(capsys, ["make-template", "t", "--config", job])[0] == 0
    job = spec_file(tmp_path, "job_dir: /tmp/local-only\ntrain_steps: 2\ntrainer: {builtin: dummy}\n")
    code, _, err = run(capsys, ["make-template", "t", "--config", job])
    assert code == 1 and "(differs in: metadata survivor-job)" in err and "`survivor delete t --zone ZONE`" in err
    compute_server.fail_instance_creation("ZONE_RESOURCE_POOL_EXHAUSTED", zone="us-west1-a")
    assert run(capsys, ["make-group", "g", "--template", "t", "--zone", "us-west1-a", "--wait-seconds", "0"])[0] == 0
    code, out, _ = run(capsys, ["status", "g", "--zone", "us-west1-a"])
    flat = " ".join(out.split())
    assert (
        code == 0
        and "not created yet (CREATING); the group's last attempt failed: ZONE_RESOURCE_POOL_EXHAUSTED" in flat
    )
    assert "nothing committed of 1" in flat
    code, _, err = run(capsys, ["logs", "g", "--zone", "us-west1-a"])
    assert code == 1 and len(err.splitlines()) == 1
    assert "is not created yet, so it has no serial port (the group's last attempt: ZONE_RESOURCE_POOL_EXHAUSTED" in err


def test_the_guides_spec_defaults_and_its_bad_spec_example_are_what_survivor_does(tmp_path, capsys):
    from survivor.spec import JobSpec

    text = GUIDE.read_text()
    spec = JobSpec.from_yaml("job_dir: gs://bkt/x\ntrain_steps: 1\ntrainer: {builtin: dummy}\n")
    rows = re.findall(r"^\| `(\w+)` \| [^|]+ \| `?([\w.]+)`? \|$", text, re.M)
    defaults = {key: value for key, value in rows if re.fullmatch(r"\d+(\.\d+)?|auto", value)}
    assert set(defaults) >= {
        "keep",
        "grace_seconds",
        "max_failed_attempts",
        "sync_seconds",
        "lease_seconds",
        "on_finish",
    }
    for key, value in defaults.items():
        assert str(getattr(spec, key)).removesuffix(".0") == value, f"the guide's default for {key}: {value}"
    example = re.search(r"one line per problem:\s+`(error: (\w+) = '(\w+)': [^`]+)`", text)
    assert example, "the guide's bad spec example is gone"
    line, key, value = example.groups()
    job = spec_file(tmp_path, f"job_dir: gs://bkt/x\n{key}: {value}\ntrainer: {{builtin: dummy}}\n")
    code, _, err = run(capsys, ["make-template", "t", "--config", job, "--dry-run"])
    assert code == 2 and err.splitlines() == [line]


def test_a_region_as_the_specs_zone_is_named_as_the_spec_key(tmp_path, capsys):
    text = (ROOT / "templates" / "cifar10-4gpu.yaml").read_text() + "  zone: us-west1\n"
    code, _, err = run(capsys, ["preflight", "c", "--config", spec_file(tmp_path, text)])
    assert code == 2 and err.strip() == (
        "error: compute.zone us-west1: not a zone; a zone is a region and a letter, "
        "e.g. us-west1-b; for the whole region use compute.region us-west1"
    )
