"""Shared fixtures: the stand-ins for Google Cloud, each started and stopped by the tests themselves."""

from __future__ import annotations

import gc
import json
import os
import random
import sys
import uuid

import pytest

from tests import line_coverage

line_coverage.start()  # before the first import of survivor: its probes go in at import

from survivor.local.metadata_server import MetadataServer  # noqa: E402

PYTHON = sys.executable

# Bytecode for the suite's Python processes. A machine whose environment sets PYTHONDONTWRITEBYTECODE
# (this one's does) otherwise compiles survivor's source again in every process the suite starts
# (hundreds of agents, trainers and CLI runs, about 0.1 s of CPU each) and rewrites every test
# module's asserts again in every xdist worker. Unset here, before xdist starts its workers, so they
# and every child inherit it: survivor's and the tests' bytecode goes to their __pycache__ (ignored
# by git, by the wheel and by image staging); an installed package's is the one pip wrote. (Until
# 2026-11-27 the suite set PYTHONPYCACHEPREFIX instead, to keep the tree clean: Python then reads
# bytecode only under the prefix, so every package pip had compiled was compiled again, once per
# venv and per fresh clone -- 12 CPU-s for TensorFlow's first import alone, and again in every
# fresh venv the docs and boot tests make.) The product is unaffected: pip compiles what it installs.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None or sys.dont_write_bytecode:
    sys.dont_write_bytecode = False


#: What the tests' random choices (a step to preempt at, a chaos seed) are drawn from, one seed a
#: test: printed with a failure, so `SURVIVOR_TEST_SEED=N python -m pytest ...` replays its draws.
SEED_ENV = "SURVIVOR_TEST_SEED"


@pytest.fixture(autouse=True)
def test_seed(request):
    """Seeds `random` for the test (SURVIVOR_TEST_SEED, else a fresh seed) and keeps the seed in the
    test's report (`pytest_runtest_makereport` shows it with a failure)."""
    seed = int(os.environ.get(SEED_ENV) or random.SystemRandom().randrange(1 << 32))
    random.seed(seed)
    request.node.user_properties.append(("seed", seed))
    return seed


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        seeds = [value for key, value in item.user_properties if key == "seed"]
        if seeds:
            report.sections.append(("seed", f"replay this test's random draws with {SEED_ENV}={seeds[0]}"))


@pytest.fixture
def gc_off():
    """For a test that parses 100,000-deep JSON in this process: earlier garbage collected first, at a
    shallow stack, and no collection during the test. A finalizer the collector runs at the parse's
    depth cannot even format its own error, and pytest fails the test for that unraisable exception
    (seen in CI, 2026-11-23, where a gc.collect() before the parse was the first fix)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.fixture
def metadata_server():
    """A metadata-server emulator on 127.0.0.1, torn down after the test."""
    server = MetadataServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def gcs_server():
    """fake-gcs-server on 127.0.0.1; STORAGE_EMULATOR_HOST points the real client (and children) at it."""
    from survivor.local.gcs import StorageEmulator

    with StorageEmulator() as server:
        yield server


@pytest.fixture
def bucket(gcs_server):
    """A fresh bucket in fake-gcs-server; returns its name."""
    name = f"test-{uuid.uuid4().hex[:12]}"
    gcs_server.create_bucket(name)
    return name


@pytest.fixture(params=["local", "gcs"])
def job_dir(request, tmp_path):
    """A job dir URL, once on the local file system and once in fake-gcs-server."""
    if request.param == "local":
        return str(tmp_path / "jobdir")
    bucket = request.getfixturevalue("bucket")
    return f"gs://{bucket}/runs/{uuid.uuid4().hex[:8]}"


def dummy_spec(
    job_dir: str,
    tmp_path,
    *,
    train_steps: int = 60,
    on_sigterm: str = "save",
    checkpoint_steps: int = 1000,
    step_seconds: float = 0.03,
    extra_args=(),
    **fields,
) -> str:
    """A job spec YAML running the dummy trainer, which logs every step it executes to steps.log."""
    import yaml

    argv = [
        PYTHON,
        "-m",
        "survivor.trainers.dummy",
        "--on-sigterm",
        on_sigterm,
        "--step-seconds",
        str(step_seconds),
        "--step-log",
        str(tmp_path / "steps.log"),
        *extra_args,
    ]
    spec = {
        "job_dir": job_dir,
        "train_steps": train_steps,
        "checkpoint_steps": checkpoint_steps,
        "grace_seconds": 5,
        "sync_seconds": 0.3,
        "on_finish": "keep-alive",
        "trainer": {"argv": argv},
    }
    spec.update(fields)
    return yaml.safe_dump(spec)


def executed_steps(tmp_path) -> list[int]:
    """Every step the dummy trainer executed, across all its processes, in order."""
    path = tmp_path / "steps.log"
    if not path.exists():
        return []
    return [int(line) for line in path.read_text().split()]


@pytest.fixture
def instance_factory(tmp_path):
    """Makes LocalInstances (an agent process + its own metadata emulator) and cleans them up."""
    from survivor.local.instance import LocalInstance

    made = []

    def make(spec_yaml: str, **kwargs) -> LocalInstance:
        vm = LocalInstance({"survivor-job": spec_yaml}, str(tmp_path / f"vm{len(made)}"), python=PYTHON, **kwargs)
        made.append(vm)
        return vm

    yield make
    for vm in made:
        vm.close()


def pytest_configure(config):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    line_coverage.configure()


def pytest_sessionfinish(session, exitstatus):
    line_coverage.worker_finish()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The run's line coverage, its last line (tests/line_coverage.py), and coverage.json."""
    coverage = line_coverage.merged()
    if coverage is not None:
        line_coverage.REPORT.write_text(json.dumps(coverage))
        terminalreporter.write_line(line_coverage.summary_line(coverage))


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # an unknown hook when xdist is off (-p no:xdist)
def pytest_xdist_make_scheduler(config, log):
    """Work stealing when the slow tests are deselected: nothing long is dealt out, and it hands the
    short ones out in fewer messages (-m "not slow": 2:48 against 3:02 one at a time). Otherwise
    pyproject's `--dist load --maxschedchunk 1`."""
    if "not slow" in " ".join((config.getoption("markexpr") or "").split()) and config.getvalue("dist") == "load":
        from xdist.scheduler import WorkStealingScheduling

        return WorkStealingScheduling(config, log)
    return None


def pytest_collection_modifyitems(config, items):
    """The slow tests first (a stable sort: each group keeps its order): handed out one at a time
    (pyproject's `--dist load --maxschedchunk 1`), the workers start the minutes-long runs (fresh
    installs, TensorFlow end to end, the chaos runs) first and share the short ones out after them,
    instead of finishing the suite on one long test started last."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture
def compute_server(monkeypatch):
    """survivor's fake Compute REST API; SURVIVOR_COMPUTE_ENDPOINT points the real client at it."""
    from survivor.local.compute_server import ComputeServer

    server = ComputeServer().start()
    monkeypatch.setenv("SURVIVOR_COMPUTE_ENDPOINT", server.endpoint)
    yield server
    server.stop()
