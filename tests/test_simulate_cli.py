"""`survivor simulate` used carelessly, through the real CLI process: an
existing --workdir that is not an earlier simulation's is never deleted (it was rmtree'd whole), a
missing or unreadable config, a bad duration and a relative --workdir are one line each, never a
traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.conftest import PYTHON, dummy_spec
from tests.waiting import PATIENCE, wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def simulate(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, "-m", "survivor", "simulate", *args], cwd=cwd, capture_output=True, text=True, timeout=240
    )


def test_an_existing_directory_that_is_not_a_simulation_is_never_deleted(tmp_path):
    (tmp_path / "spec.yaml").write_text(dummy_spec("jobdir", tmp_path, train_steps=5))
    precious = tmp_path / "my-project"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    run = simulate("--config", "spec.yaml", "--workdir", str(precious), cwd=tmp_path)
    assert run.returncode == 2, run.stdout + run.stderr
    assert (precious / "thesis.tex").read_text() == "years of work"
    assert "Traceback" not in run.stderr and str(precious) in run.stderr and len(run.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    "args, expected",
    [
        (("--config", "nope.yaml"), "nope.yaml"),
        (("--config", "."), "."),
        (("--config", "spec.yaml", "--preempt-every", "banana"), "--preempt-every"),
        (("--config", "spec.yaml", "--preempt-every", "0"), "--preempt-every"),
        (("--config", "bad.yaml"), "train_steps"),
    ],
)
def test_bad_arguments_are_one_line(args, expected, tmp_path):
    (tmp_path / "spec.yaml").write_text(dummy_spec("jobdir", tmp_path, train_steps=5))
    (tmp_path / "bad.yaml").write_text(
        dummy_spec("jobdir", tmp_path, train_steps=5).replace("train_steps: 5", "train_steps: lots")
    )
    run = simulate(*args, "--workdir", "sim", cwd=tmp_path)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "Traceback" not in run.stderr and expected in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) <= 2, run.stderr


def write_trace(folder, zone: str, points: list) -> None:
    """One zone's Spot capacity as github.com/skypilot-org/spot-traces publishes it, a point a minute."""
    import json

    folder.mkdir(exist_ok=True)
    (folder / f"{zone}_v100_1.json").write_text(json.dumps({"metadata": {"gap_seconds": 60}, "data": points}))


@pytest.mark.parametrize(
    "args, expected",
    [
        (("--capacity-traces", "nowhere"), "traces folder nowhere: cannot list it"),
        (("--capacity-traces", "traces", "--trace-zone", "us-east-1a"), "expected TRACE_ZONE=ZONE"),
        (
            ("--capacity-traces", "traces", "--trace-zone", "eu-west-9z=us-west1-b"),
            "the traces have no zone eu-west-9z",
        ),
        (
            (
                "--capacity-traces",
                "traces",
                "--trace-zone",
                "us-east-1a=us-west1-b",
                "--trace-zone",
                "us-east-1a=us-west1-c",
            ),
            "us-east-1a is mapped twice",
        ),
        (("--capacity-traces", "traces", "--trace-start", "3h"), "--trace-start 3h: expected 0 or more and before"),
        (("--capacity-traces", "traces", "--trace-start", "soon"), "--trace-start 'soon'"),
        (("--watch-every", "0"), "--watch-every"),
    ],
)
def test_bad_capacity_trace_arguments_are_one_line(args, expected, tmp_path):
    (tmp_path / "spec.yaml").write_text(dummy_spec("jobdir", tmp_path, train_steps=5))
    write_trace(tmp_path / "traces", "us-east-1a", [1] * 60)  # one hour
    run = simulate("--config", "spec.yaml", "--workdir", "sim", *args, cwd=tmp_path)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "Traceback" not in run.stderr and expected in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) <= 2, run.stderr
    assert not (tmp_path / "sim").exists()  # refused before anything was made


@pytest.mark.slow
def test_simulate_follows_capacity_traces_and_the_job_moves_to_its_next_region(tmp_path):
    """`survivor simulate` replays published capacity traces: the trace standing for the
    job's first zone runs out 5 simulated minutes after --trace-start and stays out; the watch (a
    look a simulated minute) moves the job to its next region, where it finishes DONE."""
    spec = dummy_spec("jobdir", tmp_path, train_steps=600, checkpoint_steps=20, on_finish="auto")
    spec += "placement: {regions: [us-west1, us-central1], move_after_minutes: 1}\n"
    (tmp_path / "spec.yaml").write_text(spec)
    write_trace(tmp_path / "traces", "us-east-1a", [0] * 30 + [1] * 5 + [0] * 600)
    run = simulate(
        "--config",
        "spec.yaml",
        "--workdir",
        "sim",
        "--capacity-traces",
        "traces",
        "--trace-zone",
        "us-east-1a=us-west1-b",
        "--trace-start",
        "30m",
        "--timeout",
        "150",
        cwd=tmp_path,
    )
    said = run.stdout + run.stderr
    assert run.returncode == 0, said[-3000:]
    assert '"done": true' in run.stdout
    assert " stockout " in run.stderr and " move " in run.stderr, said[-3000:]
    assert "us-central1" in run.stderr, said[-3000:]
    assert "us-west1-b has Spot capacity again" not in run.stderr, said[-3000:]  # the trace never says so


@pytest.mark.slow
def test_a_relative_workdir_and_job_dir_run_to_done_and_a_rerun_replaces_the_simulation(tmp_path):
    (tmp_path / "spec.yaml").write_text(dummy_spec("jobdir", tmp_path, train_steps=20, on_finish="auto"))
    for _ in range(2):  # the second run deletes the first one's simulation: it is marked as one
        run = simulate(
            "--config", "spec.yaml", "--workdir", "sim", "--preempt-every", "1h", "--timeout", "120", cwd=tmp_path
        )
        assert run.returncode == 0, run.stdout + run.stderr[-3000:]
        assert '"done": true' in run.stdout
    assert (tmp_path / "sim" / "jobdir" / "survivor" / "DONE").exists()


def test_demo_never_deletes_a_workdir_that_is_not_an_earlier_demos(tmp_path):
    precious = tmp_path / "my-project"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    run = subprocess.run(
        [PYTHON, "-m", "survivor", "demo", "--trainer", "dummy", "--workdir", str(precious)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 2, run.stdout + run.stderr
    assert (precious / "thesis.tex").read_text() == "years of work"
    assert "Traceback" not in run.stderr and str(precious) in run.stderr


@pytest.mark.slow
def test_the_shipped_example_simulates_in_about_a_minute_even_asking_for_gpus(tmp_path):
    """The README's simulate line names a spec that ships (templates/simulate.yaml);
    a spec that asks for GPUs does not leave its simulated agents waiting 900 s for a driver, and
    the timeline shows while it runs."""
    import yaml

    spec = yaml.safe_load(open(os.path.join(ROOT, "templates", "simulate.yaml")))
    assert "templates/simulate.yaml" in open(os.path.join(ROOT, "README.md")).read()
    spec["num_gpus"] = 4
    config = tmp_path / "gpus.yaml"
    config.write_text(yaml.safe_dump(spec))
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "survivor",
            "simulate",
            "--config",
            str(config),
            "--preempt-every",
            "15s",
            "--max-preemptions",
            "1",
            "--workdir",
            str(tmp_path / "sim"),
            "--offline",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert time.monotonic() - started < 120
    assert "a simulated VM has none and installs no driver" in done.stderr
    assert " boot " in done.stderr and "DONE at step 300" in done.stdout


@pytest.mark.slow
def test_sigterm_to_simulate_ends_every_agent_and_trainer_it_started(tmp_path):
    """The agents and trainers of a simulation run in sessions of their own; a
    SIGTERM to `survivor simulate` left them running, re-parented to init."""
    import signal

    import yaml

    spec = yaml.safe_load(open(os.path.join(ROOT, "templates", "simulate.yaml")))
    spec["train_steps"] = 100_000
    config = tmp_path / "long.yaml"
    config.write_text(yaml.safe_dump(spec))
    workdir = tmp_path / "sim"
    entry = os.path.join(os.path.dirname(sys.executable), "survivor")
    process = subprocess.Popen(
        [entry, "simulate", "--config", str(config), "--workdir", str(workdir), "--offline"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        for line in process.stderr:  # the timeline as it happens
            if " boot " in line:
                break
        wait_until(lambda: _processes_under(workdir, "trainers.dummy"), PATIENCE, "the simulated VM's trainer", 0.2)
        process.send_signal(signal.SIGTERM)
        process.wait(60)
    finally:
        if process.poll() is None:
            process.kill()
    wait_until(
        lambda: not _processes_under(workdir),
        PATIENCE,
        "no process of the simulation left",
        0.2,
        instead=lambda: _processes_under(workdir),
    )


def _processes_under(workdir, what: str = "") -> list[str]:
    """The command lines of processes that name `workdir` (and `what`, if given)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                line = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read().decode(errors="replace")
        except OSError:
            continue
        if (str(workdir) in line or str(workdir) in environ) and what in line and str(os.getpid()) != pid:
            found.append(line)
    return found


def _children(pid: int, name: str) -> list[int]:
    """The pids of `pid`'s direct children whose command is `name`."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        if int(fields[1]) == pid and name in comm:
            out.append(int(entry))
    return out


def _started_simulation(tmp_path) -> subprocess.Popen:
    """`simulate --gcs` of a long job, once its storage emulator runs and its first VM boots."""
    (tmp_path / "spec.yaml").write_text(dummy_spec("jobdir", tmp_path, train_steps=100_000))
    import signal

    # a suite started in the background by a shell without job control (`bash .ci/run &`) ignores
    # SIGINT, a child inherits an ignored signal (signal(7)), and Python then installs no
    # KeyboardInterrupt for it: the simulation a terminal's Ctrl-C reaches has the default
    sim = subprocess.Popen(
        [
            PYTHON,
            "-m",
            "survivor",
            "simulate",
            "--config",
            "spec.yaml",
            "--workdir",
            "sim",
            "--gcs",
            "--offline",
            "--timeout",
            "10m",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )

    def trained() -> bool:
        if (tmp_path / "steps.log").exists():
            return True
        assert sim.poll() is None, sim.communicate()
        return False

    wait_until(trained, PATIENCE, "the simulated VM's first step", 0.1)
    return sim


def test_simulate_gcs_stops_with_one_line_when_its_storage_emulator_dies(tmp_path):
    """58 boots in 11 minutes against a dead fake-gcs-server, until the 2 h timeout."""
    import signal

    sim = _started_simulation(tmp_path)
    emulators = _children(sim.pid, "fake-gcs")
    assert emulators, "no fake-gcs-server child"
    os.kill(emulators[0], signal.SIGKILL)
    out, err = sim.communicate(timeout=60)
    assert sim.returncode == 1, (out, err)
    assert "Traceback" not in err and "fake-gcs-server) exited with code -9" in err.splitlines()[-1], err


def test_ctrl_c_ends_simulate_gcs_at_once_with_130(tmp_path):
    import signal

    sim = _started_simulation(tmp_path)
    began = time.monotonic()
    sim.send_signal(signal.SIGINT)
    out, err = sim.communicate(timeout=60)
    assert sim.returncode == 130 and time.monotonic() - began < 10, (sim.returncode, err[-2000:])
    assert "Traceback" not in err


def test_on_a_terminal_simulate_shows_its_timeline_once(tmp_path):
    """The events went to stderr as they came, and the table at the end held them again."""
    import pty

    (tmp_path / "spec.yaml").write_text(dummy_spec("jobdir", tmp_path, train_steps=5, on_finish="auto"))
    parent, child = pty.openpty()
    sim = subprocess.Popen(
        [
            PYTHON,
            "-m",
            "survivor",
            "simulate",
            "--config",
            "spec.yaml",
            "--workdir",
            "sim",
            "--offline",
            "--max-preemptions",
            "0",
        ],
        cwd=tmp_path,
        stdout=child,
        stderr=child,
        stdin=subprocess.DEVNULL,
    )
    os.close(child)
    shown = b""
    while True:
        try:
            chunk = os.read(parent, 65536)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        shown += chunk
    assert sim.wait(240) == 0, shown.decode(errors="replace")
    text = shown.decode(errors="replace")
    assert text.count("DONE at step 5") == 1, text
    assert "boot restored" in " ".join(text.split())  # the per-boot table is still there
