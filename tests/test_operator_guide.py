"""docs/operator-guide.md, walked from zero: every `survivor` command of its ```bash blocks, in the
guide's order, run as written against the stand-ins the guide itself starts (`survivor emulate
compute` and `survivor emulate storage`, as subprocesses), with the exit code and the output the
guide promises. A command the guide adds must be classified here (run, or skipped with a reason),
and every one, run or not, must parse with the CLI: the guide and the code cannot drift apart."""

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
import threading
import time
from dataclasses import dataclass

import numpy as np
import pytest

from survivor import cli

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
    for part in ("Rehearse it on your machine first", "Before anything is spent: `survivor preflight`", "1. Data",
                 "3. Template and group", "4. Watch it", "5. Stop, start, finish, delete"):
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
            data = pickle.dumps({b"data": rng.integers(0, 255, size=(4, 3072), dtype=np.uint8),
                                 b"labels": [0, 1, 2, 3]})
            info = tarfile.TarInfo(f"cifar-10-batches-py/{batch}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


class StandIn:
    """A `survivor emulate ...` line of the guide, run as a subprocess on a free port."""

    def __init__(self, argv: list[str]):
        from survivor.local.http import free_port

        self.process = subprocess.Popen([sys.executable, "-m", "survivor", *argv[1:], "--port", str(free_port())],
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
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


def builder_name(job_dir: str) -> str:
    """The builder VM make-image boots for this checkout's wheel and lock (survivor/image.py)."""
    from survivor import image

    local = image.local_install()
    family = image.family_name(image.install_for(job_dir, local), image.tensorflow_version(local.lock))
    return f"{family}-builder"[:63].rstrip("-")


def play_builder(job_dir: str, zone: str, stop: threading.Event) -> threading.Thread:
    """What make-image's builder VM does by itself (tests/test_boot_rehearsal.py runs it for real):
    its boot record in the job dir, then its power-off, here through the Compute API."""
    from survivor.compute import Compute
    from survivor.storage import open_storage

    name = builder_name(job_dir)
    compute = Compute(os.environ["GOOGLE_CLOUD_PROJECT"])

    def run():
        while not stop.is_set():
            vm = compute.get_instance(zone, name)
            if vm is not None and vm["status"] == "RUNNING":
                stamp = time.strftime("%Y%m%dT%H%M%S000000000", time.gmtime())
                open_storage(job_dir).write(f"survivor/boots/{stamp}-{name}-built.json", b'{"outcome": "built"}')
                compute.stop_instance(compute.project, zone, name)
                return
            stop.wait(0.1)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def run(capsys, argv: list[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def guide_example(after: str) -> list[str]:
    """The lines of the first untyped ``` block after the sentence containing `after`."""
    text = GUIDE.read_text()
    block = text[text.index(after):].split("```\n", 2)[1]
    return block.strip().splitlines()


def test_the_operator_guide_walked_from_zero_against_the_stand_ins(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for variable in ("SURVIVOR_COMPUTE_ENDPOINT", "STORAGE_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT"):
        monkeypatch.delenv(variable, raising=False)
    # the rehearsal's `export` lines say which project (its endpoints come from what the stand-ins print)
    exports = dict(word.split("=", 1) for line in guide_lines(GUIDE.read_text()) if line.argv[0] == "export"
                   for word in line.argv[1:])
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
                stand_in = StandIn(argv)
                stand_ins.append(stand_in)
                monkeypatch.setenv(stand_in.variable, stand_in.value)
                ran.append(line.text)
                continue
            check_line(capsys, line, words, tmp_path)
            ran.append(line.text)
        for stand_in in stand_ins:
            assert stand_in.stop() == 0, f"{stand_in.output}: did not end cleanly on SIGTERM"
        stand_ins = []
    finally:
        for stand_in in stand_ins:
            stand_in.stop()
    assert len(ran) == len([line for line in survivor_lines() if not not_run_reason(line)])


def check_line(capsys, line: Line, words: list[str], tmp_path: pathlib.Path) -> None:
    """Runs one command of the guide and holds it to what the guide says it does."""
    from survivor.compute import Compute
    from survivor.finish import GroupRef

    compute = Compute(os.environ["GOOGLE_CLOUD_PROJECT"])
    command = words[0]
    if command == "make-image":
        stop = threading.Event()
        builder = play_builder("gs://my-project-cifar-10-checkpoints/cifar10", words[words.index("--zone") + 1], stop)
        try:
            code, out, err = run(capsys, words + ["--poll-seconds", "0.2"])  # the default looks every 15 s
        finally:
            stop.set()
            builder.join(10)
        assert code == 0, err
        assert re.search(r"image survivor-\S+: created in family survivor-", out), out
        return
    code, out, err = run(capsys, words)
    said = out + err
    assert code == 0, f"`{line.text}` exited {code}:\n{said}"
    promised = quoted(line.comment)
    if promised and "again:" in line.comment:
        code, out, err = run(capsys, words)
        said = out + err
        assert code == 0, said
    if promised:
        assert re.search(promised, said), f"`{line.text}`: the guide promises {line.comment!r}; it said:\n{said}"
    if command == "preflight":
        assert out.splitlines() and all(l.startswith("ok: ") for l in out.splitlines()), out
        assert "ok: bucket my-project-cifar-10-checkpoints exists" in out
        assert "ok: bucket my-project-cifar-10-data exists" in out
    elif command == "data":
        assert out.startswith("train.tfrecords: 16 validation.tfrecords: 4 eval.tfrecords: 4"), out
        assert sorted(os.listdir(tmp_path / "cifar-10-data")) == ["eval.tfrecords", "train.tfrecords",
                                                                   "validation.tfrecords"]
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
        # the guide's stockout example, from the zone the rehearsal stocked out
        code, _, err = run(capsys, ["make-group", "stocked", "--template", "cifar10", "--zone", "us-west1-a",
                                    "--wait-seconds", "3", "--poll-seconds", "0.2"])
        assert code == 1
        example = guide_example("or the group reports why it cannot create it")
        said = err.replace("us-west1-a", "us-west1-b").replace("stocked", "cifar10")
        pattern = r"\s*".join(".*?".join(re.escape(p) for p in l.split("...")) for l in example)
        assert re.search(pattern, said, re.S), f"the guide's stockout example:\n{example}\nmake-group said:\n{said}"
        assert run(capsys, ["delete", "stocked", "--zone", "us-west1-a", "--template", "keep-it"])[0] == 0
    elif command == "make-group":  # the guide's alternative: a regional group instead
        group = compute.get_group(GroupRef(compute.project, words[1], region=words[words.index("--region") + 1]))
        assert group["distributionPolicy"]["targetShape"] == "ANY"
        zones = {z["zone"].rsplit("/", 1)[-1] for z in group["distributionPolicy"]["zones"]}
        assert zones == {"us-west1-a", "us-west1-b"}, "only the zones that offer the T4"
        assert "its VM is RUNNING in us-west1-b" in out  # us-west1-a is stocked out
        # instead, not as well: the zonal group of the line before stays the job's
        assert run(capsys, ["delete", words[1], "--region", words[words.index("--region") + 1],
                            "--template", "keep-it"])[0] == 0
    elif command == "status" and "--json" in words:
        report = json.loads(out)
        assert report["group"]["target_size"] == 1 and report["instances"][0]["status"] == "RUNNING"
        assert report["machine"] == {"machine_type": "n1-standard-16", "gpu_type": "nvidia-tesla-t4", "gpu_count": 4,
                                     "spot": True}
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
    elif command == "delete":
        assert out.splitlines() == ["group cifar10: deleted", "template cifar10: deleted", "the job dir is untouched"]
        assert compute.get_template("cifar10") is None
        assert compute.get_template("cifar10-v2") is not None  # another template of the job is left alone
    else:
        pytest.fail(f"`{line.text}`: this walk does not know what the guide promises for it; add it here or to NOT_RUN")
