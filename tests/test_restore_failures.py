"""Committed work is never thrown away by a restore or a job dir that misbehaves,
shown through real agent processes: only a snapshot that fails verification is skipped;
a restore that fails for any other reason ends the boot (exit 1) and the next boot resumes from the
same snapshot; a damaged manifest or attempt record is skipped with a warning naming it; a full job
dir during the final commit after a notice closes the attempt and leaves no temporary files."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import uuid

import pytest

from survivor.jobdir.journal import Journal
from survivor.jobdir.snapshot import scan
from survivor.jobdir.status import job_summary, read_job
from survivor.jobdir.storage import open_storage
from survivor.jobdir.store import CheckpointStore, manifest_name
from tests.conftest import PYTHON, dummy_spec, executed_steps
from tests.waiting import PATIENCE, wait_until


@contextlib.contextmanager
def small_disk(path, size: str, read_only: bool = False):
    """A tmpfs of `size` mounted at `path`: a boot disk or a job dir's file system that fills up."""
    os.makedirs(path, exist_ok=True)
    options = f"size={size}" + (",ro" if read_only else "")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.decode().strip()}")
    try:
        yield str(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def commit_snapshot(job_dir: str, tmp_path, step: int, data_bytes: int = 0) -> str:
    """Commits a dummy-trainer snapshot at `step` (with a `data_bytes` state file) from outside."""
    local = tmp_path / f"seed-{uuid.uuid4().hex[:6]}"
    local.mkdir()
    (local / f"dummy-checkpoint-{step}.json").write_text(json.dumps({"step": step, "state": step * 7 % 1000}))
    if data_bytes:
        (local / f"dummy-checkpoint-{step}.data").write_bytes(os.urandom(data_bytes))
    return CheckpointStore(open_storage(job_dir)).commit(str(local), scan(str(local)), attempt=1).manifest.name


def state_of(job_dir):
    return Journal(open_storage(job_dir)).state()


def messages(vm, severity=None):
    return [line for line in vm.log_lines() if severity is None or line.get("severity") == severity]


def no_traceback(vm):
    text = open(vm.log_path(), encoding="utf-8", errors="replace").read()
    assert "Traceback" not in text, text[-3000:]


# -- 1. a restore that fails for a reason other than the snapshot --------------------------------------


def test_a_boot_disk_too_small_for_the_snapshot_ends_the_boot_and_the_next_boot_resumes_from_it(
    job_dir, tmp_path, instance_factory
):
    name = commit_snapshot(job_dir, tmp_path, 20, data_bytes=3 << 20)
    vm = instance_factory(dummy_spec(job_dir, tmp_path, train_steps=40, checkpoint_steps=10))
    with small_disk(os.path.join(vm.root, "disk"), "1m"):
        vm.boot()
        code = vm.wait(60)
    assert code == 1, open(vm.log_path()).read()[-3000:]  # systemd restarts it; nothing was trained
    assert executed_steps(tmp_path) == []
    errors = [line for line in messages(vm, "ERROR") if "boot disk" in json.dumps(line)]
    assert errors and name in json.dumps(errors[0]), messages(vm, "ERROR")
    attempt = state_of(job_dir).attempts[-1]
    assert attempt.outcome == "failed" and "boot disk" in attempt.reason and attempt.restored_step is None
    assert CheckpointStore(open_storage(job_dir)).latest().name == name  # nothing was collected
    no_traceback(vm)

    vm.boot(wipe=True)  # a boot disk with room: the same snapshot
    assert vm.wait(60) == 0, open(vm.log_path()).read()[-3000:]
    state = state_of(job_dir)
    assert state.attempts[-1].restored_step == 20
    assert state.done["step"] == 40
    assert executed_steps(tmp_path)[0] == 21


def test_a_read_only_boot_disk_ends_the_boot_with_the_reason(tmp_path, instance_factory):
    job_dir = str(tmp_path / "jobdir")
    commit_snapshot(job_dir, tmp_path, 20)
    vm = instance_factory(dummy_spec(job_dir, tmp_path, train_steps=40))
    with small_disk(os.path.join(vm.root, "disk"), "4m") as disk:
        os.makedirs(vm.workdir)
        subprocess.run(["mount", "-o", "remount,ro", disk], check=True)
        vm.boot()
        assert vm.wait(60) == 1
    attempt = state_of(job_dir).attempts[-1]
    assert attempt.outcome == "failed" and "Read-only file system" in attempt.reason, attempt
    assert executed_steps(tmp_path) == []
    no_traceback(vm)


@pytest.mark.parametrize("status", ["400", pytest.param("503", marks=pytest.mark.slow)])
def test_a_snapshot_that_cannot_be_downloaded_ends_the_boot_instead_of_starting_over(
    status, gcs_server, bucket, tmp_path, instance_factory, monkeypatch
):
    from harness.fault_proxy import FaultPlan, FaultProxy

    job_dir = f"gs://{bucket}/undownloadable"
    name = commit_snapshot(job_dir, tmp_path, 20, data_bytes=100_000)
    # every download of a checkpoint's blob fails: at once (400, not worth a retry), or after the
    # retries (503, ~20 s); the manifests, the journal and the lease are fine
    plan = FaultPlan(rate=1.0, kinds=(status,), paths=r"/o/.*survivor/blobs/.*alt=media")
    proxy = FaultProxy(gcs_server.url, plan).start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
    try:
        vm = instance_factory(dummy_spec(job_dir, tmp_path, train_steps=40, checkpoint_steps=10))
        vm.boot()
        assert vm.wait(120) == 1, open(vm.log_path()).read()[-3000:]
        assert proxy.count[status] >= 1
        assert executed_steps(tmp_path) == []
        attempt = state_of(job_dir).attempts[-1]
        assert attempt.outcome == "interrupted" and name in attempt.reason, attempt
        assert CheckpointStore(open_storage(job_dir)).latest().name == name
        no_traceback(vm)

        plan.enabled = False  # the network is back
        vm.boot(wipe=True)
        assert vm.wait(60) == 0, open(vm.log_path()).read()[-3000:]
    finally:
        proxy.stop()
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server.url)
    state = state_of(job_dir)
    assert state.attempts[-1].restored_step == 20 and state.done["step"] == 40


# -- 2 and 3. a manifest that fails verification --------------------------------------------------------


def _files_of(job_dir):
    return json.loads(open_storage(job_dir).read(CheckpointStore(open_storage(job_dir)).manifest_names()[0]).data)


#: Manifests that do not parse into the exact schema, or claim a step the job cannot have reached.
#: Each is stored as the newest manifest (step 50, or the step it claims) over a good one at step 20.
BAD_MANIFESTS = {
    "NaN step": lambda good: b'{"format": 2, "step": NaN, "attempt": 9, "seq": 1, "files": []}',
    # the whole-file format of a store never released: every blob it names is stored and verifies
    "format 1": lambda good: json.dumps(
        {
            **good,
            "format": 1,
            "step": 50,
            "attempt": 9,
            "seq": 1,
            "files": [
                {k: v for k, v in f.items() if k != "chunks"} | {"object": f["chunks"][0]["object"]}
                for f in good["files"]
            ],
        }
    ).encode(),
    "infinite size": lambda good: (
        json.dumps({**good, "step": 50, "attempt": 9, "seq": 1})
        .replace(f'"size": {good["files"][0]["size"]}', '"size": Infinity', 1)
        .encode()
    ),
    "nested 100000 deep": lambda good: b'{"step": 50, "files": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "files is a number": lambda good: json.dumps({**good, "step": 50, "attempt": 9, "seq": 1, "files": 7}).encode(),
    "a path that is an object": lambda good: json.dumps(
        {**good, "step": 50, "attempt": 9, "seq": 1, "files": [{**good["files"][0], "path": {"a": 1}}]}
    ).encode(),
    "step as a string": lambda good: json.dumps({**good, "step": "50", "attempt": 9, "seq": 1}).encode(),
    "step as a float": lambda good: json.dumps({**good, "step": 50.5, "attempt": 9, "seq": 1}).encode(),
    "size as a boolean": lambda good: json.dumps(
        {**good, "step": 50, "attempt": 9, "seq": 1, "files": [{**good["files"][0], "size": True}]}
    ).encode(),
    "a list, not an object": lambda good: b"[1, 2, 3]",
    "not UTF-8": lambda good: b"\xff\xfe\x00garbage",
    "empty, with a huge step": lambda good: json.dumps(
        {**good, "step": 999_999_999, "attempt": 9, "seq": 1, "files": []}
    ).encode(),
    "a negative step": lambda good: json.dumps({**good, "step": -5, "attempt": 9, "seq": 1}).encode(),
    "a step beyond train_steps": lambda good: json.dumps({**good, "step": 5000, "attempt": 9, "seq": 1}).encode(),
    # files that cannot exist together: a file and a file inside it (EEXIST/ENOTDIR at restore), and one
    # path twice once normalised; every object they name is stored and verifies
    "a file inside a file": lambda good: json.dumps(
        {
            **good,
            "step": 50,
            "attempt": 9,
            "seq": 1,
            "files": [good["files"][0], {**good["files"][0], "path": good["files"][0]["path"] + "/x"}],
        }
    ).encode(),
    "a directory that is also a file": lambda good: json.dumps(
        {
            **good,
            "step": 50,
            "attempt": 9,
            "seq": 1,
            "files": [{**good["files"][0], "path": "d/x"}, {**good["files"][0], "path": "d"}],
        }
    ).encode(),
    "one path twice": lambda good: json.dumps(
        {
            **good,
            "step": 50,
            "attempt": 9,
            "seq": 1,
            "files": [{**good["files"][0], "path": "d/x"}, {**good["files"][0], "path": "d/./x"}],
        }
    ).encode(),
}


def _stored_name(body: bytes) -> str:
    """Where the bad manifest goes: under the name its step claims (so it sorts newest), else 50's."""
    try:
        raw = json.loads(body)
        step = raw["step"] if isinstance(raw["step"], int) and raw["step"] >= 0 else 50
    except Exception:
        step = 50
    return manifest_name(step, 9, 1)


@pytest.mark.usefixtures("gc_off")  # parses 100,000-deep JSON in this process
@pytest.mark.parametrize("kind", list(BAD_MANIFESTS))
def test_a_manifest_that_fails_verification_is_skipped_for_the_previous_one(kind, job_dir, tmp_path, instance_factory):
    commit_snapshot(job_dir, tmp_path, 20)
    body = BAD_MANIFESTS[kind](_files_of(job_dir))
    bad = _stored_name(body)
    open_storage(job_dir).write(bad, body)
    assert job_summary(read_job(job_dir, train_steps=40))["committed_step"] == 20  # `survivor status` reads past it too

    vm = instance_factory(dummy_spec(job_dir, tmp_path, train_steps=40, checkpoint_steps=10))
    vm.boot()
    assert vm.wait(60) == 0, open(vm.log_path()).read()[-3000:]
    warnings = [line for line in messages(vm, "WARNING") if line.get("manifest") == bad]
    assert warnings, messages(vm, "WARNING")
    state = state_of(job_dir)
    assert state.attempts[-1].restored_step == 20
    assert state.done["step"] == 40  # not the bogus step
    assert executed_steps(tmp_path) == list(range(21, 41))
    no_traceback(vm)


# -- 8. job-dir errors ----------------------------------------------------------------------------------


def test_a_full_job_dir_during_the_final_commit_after_a_notice_closes_the_attempt_and_leaks_nothing(
    tmp_path, instance_factory
):
    with small_disk(tmp_path / "jobfs", "8m") as fs:
        job_dir = os.path.join(fs, "job")
        vm = instance_factory(
            dummy_spec(
                job_dir,
                tmp_path,
                train_steps=400,
                checkpoint_steps=10,
                keep=2,
                extra_args=["--checkpoint-bytes", "400000"],
            )
        )
        vm.boot()
        vm.wait_for_step(25)
        store = CheckpointStore(open_storage(job_dir))
        committed = wait_until(
            lambda: (latest := store.latest()) is not None and latest.step >= 20 and latest.step,
            PATIENCE,
            "a commit of step 20 or later",
        )
        free = os.statvfs(fs)
        filler = os.path.join(fs, "filler")
        with open(filler, "wb") as f:  # leaves ~100 KB: an attempt record fits, a checkpoint does not
            f.write(b"\0" * max(0, free.f_bavail * free.f_frsize - 100_000))
        code = vm.preempt()
        assert code == 0, open(vm.log_path()).read()[-3000:]  # after a notice: nothing more on this boot
        leaked = [os.path.join(d, f) for d, _, files in os.walk(job_dir) for f in files if f.startswith(".tmp-")]
        assert leaked == []
        attempt = state_of(job_dir).attempts[-1]
        assert attempt.outcome in ("preempted", "stopped"), attempt
        assert "no space left" in attempt.reason and attempt.end_step >= committed
        assert attempt.steps_lost and attempt.steps_lost > 0  # said, not hidden
        errors = [line for line in messages(vm, "ERROR") if "no space left" in json.dumps(line)]
        assert errors and job_dir in json.dumps(errors[0])
        no_traceback(vm)

        os.remove(filler)
        vm.boot(wipe=True)
        vm.wait_for_step(attempt.end_step + 3)
        assert vm.preempt() == 0
        assert state_of(job_dir).attempts[-1].restored_step == attempt.end_step


def test_a_read_only_job_dir_is_one_clear_error_not_a_traceback(tmp_path, instance_factory):
    with small_disk(tmp_path / "rofs", "1m", read_only=True) as fs:
        vm = instance_factory(dummy_spec(fs, tmp_path), env={"SURVIVOR_PERMISSION_WAIT_SECONDS": "1"})
        vm.boot()
        assert vm.wait(60) == 0  # no restart makes it writable: finished as FAILED, not a systemd burst
    errors = messages(vm, "ERROR")
    assert errors and "Read-only file system" in errors[0]["message"], errors
    assert executed_steps(tmp_path) == []
    no_traceback(vm)


def test_a_job_dir_under_a_file_is_one_clear_error_not_a_traceback(tmp_path, instance_factory):
    (tmp_path / "a-file").write_text("not a directory")
    vm = instance_factory(dummy_spec(str(tmp_path / "a-file" / "job"), tmp_path))
    vm.boot()
    assert vm.wait(60) == 1
    errors = messages(vm, "ERROR")
    assert errors and "a-file" in json.dumps(errors[0]), errors
    no_traceback(vm)


#: Attempt records that do not parse; each stored as attempt 1 of a job that then runs.
BAD_RECORDS = {
    "nested 100000 deep": b'{"number": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "NaN number": b'{"number": NaN, "instance": "x", "started": "2026-01-01T00:00:00"}',
    "number as a string": b'{"number": "1", "instance": "x", "started": "2026-01-01T00:00:00"}',
    "outcome as a list": b'{"number": 1, "instance": "x", "started": "t", "outcome": ["failed"]}',
    "a number that is not its name": b'{"number": 7, "instance": "x", "started": "t", "outcome": "failed"}',
    "truncated": b'{"number": 1, "instance": "x", "sta',
    "timings of infinity": b'{"number": 1, "instance": "x", "started": "t", "timings": {"restore": Infinity}}',
}


@pytest.mark.usefixtures("gc_off")  # parses 100,000-deep JSON in this process
@pytest.mark.parametrize("kind", list(BAD_RECORDS))
def test_an_unreadable_attempt_record_is_treated_as_absent(kind, job_dir, tmp_path, instance_factory):
    record = "survivor/attempts/000001.json"
    open_storage(job_dir).write(record, BAD_RECORDS[kind])
    vm = instance_factory(dummy_spec(job_dir, tmp_path, train_steps=20))
    vm.boot()
    assert vm.wait(60) == 0, open(vm.log_path()).read()[-3000:]
    assert any(line.get("record") == record for line in messages(vm, "WARNING"))
    state = state_of(job_dir)
    assert [a.number for a in state.attempts] == [2]  # the unreadable one keeps its number
    assert state.done["step"] == 20
    assert job_summary(read_job(job_dir))["attempts"] == 1
    no_traceback(vm)


# -- 13. `survivor status` on a fresh start -------------------------------------------------------------


def test_status_says_fresh_start_and_reads_past_damaged_objects(job_dir, tmp_path, instance_factory):
    vm = instance_factory(dummy_spec(job_dir, tmp_path, train_steps=20))
    vm.boot()
    assert vm.wait(60) == 0
    storage = open_storage(job_dir)
    storage.write(manifest_name(90, 9, 1), b'{"step": 90, "files": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    storage.write("survivor/attempts/000005.json", b'{"number": Infinity}')
    done = subprocess.run(
        [PYTHON, "-m", "survivor", "status", "--job-dir", job_dir],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "fresh start" in done.stdout
    assert "None" not in done.stdout and "Traceback" not in done.stderr
    as_json = subprocess.run(
        [PYTHON, "-m", "survivor", "status", "--job-dir", job_dir, "--json"], capture_output=True, text=True, timeout=60
    )
    assert as_json.returncode == 0, as_json.stderr[-2000:]
    summary = json.loads(as_json.stdout)
    assert summary["committed_step"] == 20 and summary["history"][0]["restored"] == "fresh start"


# -- a trainer that broke the write-then-rename contract ------------------------------

STRICT_TRAINER = """
import argparse, json, os, sys, time
from survivor.trainers.contract import StopRequest, report_progress, report_saved
p = argparse.ArgumentParser()
p.add_argument("--job-dir"); p.add_argument("--train-steps", type=int)
p.add_argument("--truncate-after-rename", action="store_true")
args, _ = p.parse_known_args()
os.makedirs(args.job_dir, exist_ok=True)
stop = StopRequest.install()
def save(step):
    final = os.path.join(args.job_dir, f"ckpt-{step}.json")
    with open(final + ".tmp", "w") as f:
        json.dump({"step": step, "weights": "w" * 500}, f)
    os.replace(final + ".tmp", final)
    if args.truncate_after_rename:  # the contract broken: the committed file changes after its rename
        time.sleep(0.3)
        with open(final, "r+") as f:
            f.truncate(10)
steps = [int(n[5:-5]) for n in os.listdir(args.job_dir) if n.startswith("ckpt-") and n.endswith(".json")]
start = max(steps, default=0)
if start:
    json.load(open(os.path.join(args.job_dir, f"ckpt-{start}.json")))  # a torn checkpoint: exit 1
for step in range(start + 1, args.train_steps + 1):
    time.sleep(0.01)
    report_progress(step)
    if step % 10 == 0 or step == args.train_steps:
        save(step)
    if stop.requested:
        save(step); report_saved(step); break
"""


def _strict_spec(job_dir, tmp_path, train_steps, *extra):
    import yaml

    script = tmp_path / "strict_trainer.py"
    script.write_text(STRICT_TRAINER)
    return yaml.safe_dump(
        {
            "job_dir": job_dir,
            "train_steps": train_steps,
            "checkpoint_steps": 10,
            "sync_seconds": 0.2,
            "grace_seconds": 5,
            "on_finish": "keep-alive",
            "trainer": {"argv": [PYTHON, str(script), *extra]},
        }
    )


def test_a_snapshot_the_trainer_fails_on_is_passed_over_once_and_the_job_trains_on(job_dir, tmp_path, instance_factory):
    """The newest committed snapshot holds a checkpoint the trainer cannot read (a trainer that
    truncated its file after the rename, committed before the mirror could tell): the first boot's
    trainer fails on it; the next boot passes over it for the snapshot before, and the job finishes
    DONE instead of ending FAILED with a good snapshot below."""
    storage = open_storage(job_dir)
    store = CheckpointStore(storage)
    local = tmp_path / "committed"
    local.mkdir()
    (local / "ckpt-10.json").write_text(json.dumps({"step": 10, "weights": "w"}))
    store.commit(str(local), scan(str(local)), attempt=1)
    (local / "ckpt-20.json").write_text('{"step": 2')  # torn
    store.commit(str(local), scan(str(local)), attempt=1)
    vm = instance_factory(_strict_spec(job_dir, tmp_path, 40))
    vm.boot()
    assert vm.wait(60) == 1  # the trainer failed on step 20's checkpoint: systemd restarts the agent
    vm.boot()
    assert vm.wait(60) == 0, open(vm.log_path()).read()[-3000:]
    state = state_of(job_dir)
    assert [(a.outcome, a.restored_step) for a in state.attempts] == [("failed", 20), ("finished", 10)]
    assert state.done["step"] == 40 and state.failed is None
    assert [line for line in messages(vm, "WARNING") if "passing over" in line["message"]]


def test_a_trainer_that_truncates_its_checkpoint_after_the_rename_loses_no_commit(tmp_path, instance_factory):
    """Each save is renamed into place and then truncated. While it trains, the mirror commits a
    step while it is whole and never commits the same step again once its files changed. On the
    notice it saves, truncates and exits 0: what it left is committed too (the agent cannot tell a
    truncation from a second save of the step, which TensorFlow writes partly in place), beside the
    whole commit, and the next boots pass over the torn one for it: DONE, nothing committed lost."""
    job_dir = str(tmp_path / "jobdir")
    vm = instance_factory(_strict_spec(job_dir, tmp_path, 60, "--truncate-after-rename"))
    vm.boot()
    vm.wait_for_step(35)
    assert vm.preempt(soft_off=True) == 0
    assert [line for line in vm.log_lines(1) if "files of a committed step changed" in line.get("message", "")]
    store = CheckpointStore(open_storage(job_dir))
    manifests = [store.load(n) for n in store.manifest_names()]
    steps = [m.step for m in manifests]
    saved = steps[0]
    assert steps[1:].count(saved) <= 1 and len(steps[1:]) == len(set(steps[1:])), steps  # twice at most: the last
    newest = tmp_path / "newest"
    store.restore(str(newest))
    try:  # the agent may end the trainer once the notice's save is committed, before its truncation
        json.loads((newest / f"ckpt-{saved}.json").read_text())
        torn = False
    except ValueError:
        torn = True
    # the whole commit the job resumes from: the newest, else the first commit of its step, else the one before
    whole = saved if not torn or steps.count(saved) == 2 else steps[1]
    vm.boot(wipe=True)
    code = vm.wait(60)
    if code == 1:  # the trainer failed on the torn commit: systemd starts the agent again, which passes it over
        vm.boot()
        code = vm.wait(60)
    assert code == 0, open(vm.log_path()).read()[-3000:]
    state = state_of(job_dir)
    assert state.done["step"] == 60 and [a.outcome for a in state.attempts][-1] == "finished"
    assert state.attempts[-1].restored_step == whole, [(a.outcome, a.restored_step) for a in state.attempts]
