"""A trainer is contained: it cannot reach root's files through the agent, flood the agent's memory,
outlive itself, or keep an old repository's code. Each class runs through the real `survivor agent`
process; the pure decisions behind them are tested alone below."""

import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

import pytest

from survivor.agent.delivery import git_plan
from survivor.jobdir.snapshot import scan
from survivor.jobdir.storage import LocalStorage, crc32c_of_file
from survivor.jobdir.store import CheckpointStore
from survivor.agent.trainer import MAX_LINE_BYTES, OutputLines, give_to, read_progress, session_members, write_pid_file
from survivor.trainers.contract import progress_record
from tests.waiting import PATIENCE, wait_until

SYSTEM_PYTHON = "/usr/bin/python3"  # one an unprivileged user can execute (this venv may live under /root)
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="a trainer of another user needs a root agent")
system_python = pytest.mark.skipif(not os.access(SYSTEM_PYTHON, os.X_OK), reason="needs a system python3")


@pytest.fixture
def base(request):
    """A dir the unprivileged trainer user can reach (tmp_path is under root's 0700 dirs)."""
    path = tempfile.mkdtemp(prefix="survivor-isolation-", dir="/tmp")
    request.addfinalizer(lambda: shutil.rmtree(path, ignore_errors=True))
    os.chmod(path, 0o755)
    return path


def agent(base: str, workdir: str, spec: dict, *, stdout=None, name: str = "spec") -> subprocess.Popen:
    """Starts `survivor agent` on `spec` (JSON is YAML) as the VM's systemd unit would."""
    spec_file = os.path.join(base, f"{name}.yaml")
    with open(spec_file, "w") as f:
        json.dump({"on_finish": "keep-alive", **spec}, f)
    args = [
        sys.executable,
        "-m",
        "survivor",
        "agent",
        "--workdir",
        workdir,
        "--config",
        spec_file,
        "--log-format",
        "json",
    ]
    if os.geteuid() == 0 and "user" not in spec:
        args.append("--allow-root-trainer")
    env = {k: v for k, v in os.environ.items() if k != "GCE_METADATA_HOST"}
    if os.environ.get("SURVIVOR_AGENT_SOURCE"):  # an older commit's tree: shows these tests fail without the fix
        env["PYTHONPATH"] = os.environ["SURVIVOR_AGENT_SOURCE"]
    # cwd: not the checkout, so PYTHONPATH decides which survivor runs
    return subprocess.Popen(
        args, cwd=base, env=env, stdout=stdout or subprocess.DEVNULL, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
    )


def run_agent(base: str, workdir: str, spec: dict, timeout: float = 120, **kw) -> tuple[int, str]:
    log_path = os.path.join(base, f"{kw.get('name', 'spec')}-{time.monotonic_ns()}.log")
    with open(log_path, "wb") as log:
        proc = agent(base, workdir, spec, stdout=log, **kw)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError(f"the agent hung for {timeout} s; see {log_path}") from None
    return code, open(log_path, encoding="utf-8", errors="replace").read()


def script(base: str, name: str, text: str) -> str:
    path = os.path.join(base, name)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o644)
    return path


def done(job_dir: str) -> dict | None:
    path = os.path.join(job_dir, "survivor", "DONE")
    return json.load(open(path)) if os.path.exists(path) else None


# -- 4. a trainer of another user cannot take root's files ----------------------------------------

PLANTER = """
import os, sys
job = sys.argv[sys.argv.index("--job-dir") + 1]
work = os.path.dirname(job)
victim, secret, marks = sys.argv[1:4]
boot = len(os.listdir(marks))
open(os.path.join(marks, "boot-%d" % boot), "w").close()
if boot == 0:
    # the first boot plants links where the agent (root) writes, chowns and reads, then fails
    for link, target in [(os.path.join(work, "trainer.pid"), victim), (os.path.join(work, "evil"), victim),
                         (os.path.join(job, "ckpt-7.index"), secret), (os.path.join(job, "events.out.tfevents.1"), secret)]:
        try:
            if os.path.lexists(link):
                os.remove(link)
            os.symlink(target, link)
        except OSError as exc:
            print("could not plant", link, exc, flush=True)
    sys.exit(3)
found = []
for dirpath, _, files in os.walk(job):
    for name in files:
        try:
            if "TOP-SECRET" in open(os.path.join(dirpath, name), errors="replace").read():
                found.append(name)
        except OSError:
            pass
open(os.path.join(marks, "read-by-trainer"), "w").write(",".join(found))
open(os.path.join(job, "ckpt-8.index"), "w").write("8")
"""


@as_root
@system_python
def test_links_a_trainer_plants_never_give_it_roots_files(base):
    """Boot 1's trainer (nobody) plants links to root-only files where the agent writes trainer.pid,
    chowns, and reads checkpoints; boot 2's agent follows none of them."""
    victim = script(base, "victim", "root's own file\n")
    secret = script(base, "secret", "TOP-SECRET root only\n")
    os.chmod(victim, 0o600)
    os.chmod(secret, 0o600)
    marks = os.path.join(base, "marks")
    os.makedirs(marks)
    os.chmod(marks, 0o777)
    planter = script(base, "planter.py", PLANTER)
    job_dir, workdir = os.path.join(base, "jobdir"), os.path.join(base, "work")
    spec = {
        "job_dir": job_dir,
        "train_steps": 8,
        "user": "nobody",
        "sync_seconds": 0.2,
        "trainer": {"argv": [SYSTEM_PYTHON, planter, victim, secret, marks]},
    }

    first, _ = run_agent(base, workdir, spec)
    assert first == 1  # the planter failed on purpose: the next boot uses the same work dir
    second, log = run_agent(base, workdir, spec)

    assert second == 0, log[-2000:]
    assert sorted(os.listdir(marks))[:2] == ["boot-0", "boot-1"]
    for path, text in [(victim, "root's own file\n"), (secret, "TOP-SECRET root only\n")]:
        st = os.lstat(path)
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o600), f"{path} was given away"
        assert open(path).read() == text, f"{path} was written through a link"
    assert open(os.path.join(marks, "read-by-trainer")).read() == ""
    stored = [os.path.join(d, n) for d, _, files in os.walk(job_dir) for n in files]
    assert not any(b"TOP-SECRET" in open(p, "rb").read() for p in stored), "a link's target was uploaded"
    assert os.lstat(workdir).st_uid == 0 and not os.lstat(workdir).st_mode & 0o022
    assert done(job_dir)["step"] == 8


@as_root
@system_python
def test_a_blob_that_is_a_link_in_a_local_job_dir_is_never_restored(base):
    """A job dir's blob swapped for a link to a root-only file (whose checksum even matches) is a
    snapshot that fails verification: the agent restores the one before, never the link's target."""
    secret = script(base, "secret", "TOP-SECRET root only\n")
    os.chmod(secret, 0o600)
    job_dir = os.path.join(base, "jobdir")
    store = CheckpointStore(LocalStorage(job_dir))
    local = os.path.join(base, "local")
    os.makedirs(local)
    for step in (1, 2):
        with open(os.path.join(local, f"dummy-checkpoint-{step}.json"), "w") as f:
            f.write(f"step {step}\n" if step == 1 else "TOP-SECRET root only\n")
        store.commit(local, scan(local), attempt=1)
    newest = store.latest()
    assert newest.step == 2 and crc32c_of_file(secret) in {e.crc32c for e in newest.files}
    for entry in newest.files:
        if entry.path == "dummy-checkpoint-2.json":
            blob = os.path.join(job_dir, entry.chunks[0].object)  # its one chunk
            os.remove(blob)
            os.symlink(secret, blob)
    marks = os.path.join(base, "marks")
    os.makedirs(marks)
    os.chmod(marks, 0o777)
    reader = script(base, "reader.py", PLANTER)
    open(os.path.join(marks, "boot-0"), "w").close()  # straight to the reading boot
    code, log = run_agent(
        base,
        os.path.join(base, "work"),
        {
            "job_dir": job_dir,
            "train_steps": 8,
            "user": "nobody",
            "trainer": {"argv": [SYSTEM_PYTHON, reader, secret, secret, marks]},
        },
    )
    assert code == 0, log[-2000:]
    assert "skipping a snapshot that does not verify" in log
    assert '"step": 1' in log.split("restored", 1)[1][:300]
    assert open(os.path.join(marks, "read-by-trainer")).read() == ""


def test_a_fifo_or_link_in_the_job_dir_never_hangs_or_leaks_through_the_agent(base, tmp_path):
    """A FIFO (opening one blocks until a writer comes) and a link among the checkpoints: the agent
    commits the real checkpoint and finishes; neither is opened."""
    outside = tmp_path / "outside-the-job-dir"
    outside.write_text("not the trainer's\n")
    trainer = script(
        base,
        "fifo.py",
        f"""
import os, sys
job = sys.argv[sys.argv.index("--job-dir") + 1]
os.makedirs(job, exist_ok=True)
os.mkfifo(os.path.join(job, "ckpt-9.data-00000-of-00001"))
os.mkfifo(os.path.join(job, ".ckpt-9.tmp"))
os.mkfifo(os.path.join(job, "events.out.tfevents.fifo"))
os.symlink({str(outside)!r}, os.path.join(job, "dummy-checkpoint-9.json"))
open(os.path.join(job, "dummy-checkpoint-5.json"), "w").write("5")
""",
    )
    job_dir = os.path.join(base, "jobdir")
    code, log = run_agent(
        base,
        os.path.join(base, "work"),
        {"job_dir": job_dir, "train_steps": 5, "sync_seconds": 0.2, "trainer": {"argv": [sys.executable, trainer]}},
        timeout=60,
    )
    assert code == 0, log[-2000:]
    assert done(job_dir)["step"] == 5
    manifests = [m for m in CheckpointStore(LocalStorage(job_dir)).committed()]
    assert manifests and all([f.path for f in m.files] == ["dummy-checkpoint-5.json"] for m in manifests)


# -- 9. output without line ends -----------------------------------------------------------------


def _peak_rss_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def test_output_without_line_ends_keeps_the_agents_memory_bounded(base):
    """200 MB with no line end (a progress bar gone wrong): the agent's peak memory stays where a
    quiet trainer's is, not three times the output."""
    trainer = script(
        base,
        "flood.py",
        """
import os, sys, time
block = b"x" * (1 << 20)
for _ in range(200):
    os.write(1, block)
job = sys.argv[sys.argv.index("--job-dir") + 1]
open(os.path.join(job, "dummy-checkpoint-1.json"), "w").write("1")
time.sleep(1.0)  # the agent's peak is read while it still runs
""",
    )
    job_dir = os.path.join(base, "jobdir")
    proc = agent(
        base,
        os.path.join(base, "work"),
        {"job_dir": job_dir, "train_steps": 1, "trainer": {"argv": [sys.executable, trainer]}},
    )
    peak = 0.0
    deadline = time.monotonic() + 180
    while proc.poll() is None and time.monotonic() < deadline:  # sampled until the agent exits
        peak = max(peak, _peak_rss_mb(proc.pid) or 0.0)
        time.sleep(0.05)
    if proc.poll() is None:
        proc.kill()
        raise AssertionError("the agent forwarding 200 MB of output: no exit within 180 s")
    assert proc.wait() == 0
    assert done(job_dir)["step"] == 1
    assert 0 < peak < 150, f"the agent peaked at {peak:.0f} MB forwarding 200 MB of output"


def test_a_progress_bar_is_forwarded_one_redraw_per_log_line(base):
    trainer = script(
        base,
        "bar.py",
        """
import os, sys
for pct in (10, 50, 100):
    sys.stdout.write("\\rloading %d%%" % pct)
    sys.stdout.flush()
sys.stdout.write("\\n" + "y" * 20000 + "\\n")
job = sys.argv[sys.argv.index("--job-dir") + 1]
open(os.path.join(job, "dummy-checkpoint-1.json"), "w").write("1")
""",
    )
    code, log = run_agent(
        base,
        os.path.join(base, "work"),
        {"job_dir": os.path.join(base, "jobdir"), "train_steps": 1, "trainer": {"argv": [sys.executable, trainer]}},
    )
    assert code == 0
    messages = [json.loads(line).get("message", "") for line in log.splitlines() if line.startswith("{")]
    assert [m for m in messages if m.startswith("loading")] == ["loading 10%", "loading 50%", "loading 100%"]
    ys = [m for m in messages if m and set(m) == {"y"}]
    assert [len(m) for m in ys] == [MAX_LINE_BYTES, MAX_LINE_BYTES, 20000 - 2 * MAX_LINE_BYTES]


# -- 10. what a trainer leaves running -------------------------------------------------------------

SPAWNER = """
import os, signal, subprocess, sys, time
job = sys.argv[sys.argv.index("--job-dir") + 1]
marks = sys.argv[1]
child = '''
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if sys.argv[1] == "own-group":
    os.setpgid(0, 0)
open(os.path.join(sys.argv[3], sys.argv[1] + ".pid"), "w").write(str(os.getpid()))
while True:
    with open(os.path.join(sys.argv[2], "written-by-" + sys.argv[1]), "a") as f:
        f.write("x")
    time.sleep(0.02)
'''
for kind in ("same-group", "own-group"):
    subprocess.Popen([sys.executable, "-c", child, kind, job, marks], stdout=subprocess.DEVNULL)
while len(os.listdir(marks)) < 2:
    time.sleep(0.01)
open(os.path.join(job, "dummy-checkpoint-1.json"), "w").write("1")
if sys.argv[2] == "wait-for-notice":
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    open(os.path.join(marks, "ready"), "w").close()
    while not stop:
        time.sleep(0.01)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("ending", ["done", "notice"])
def test_nothing_a_trainer_started_outlives_it(base, ending):
    """Children that ignore SIGTERM, one in a process group of its own, write into the job dir
    until killed: when the trainer exits (finished, or saved after a notice) they are gone too."""
    marks = os.path.join(base, "marks")
    os.makedirs(marks)
    spawner = script(base, "spawner.py", SPAWNER)
    job_dir = os.path.join(base, "jobdir")
    workdir = os.path.join(base, "work")
    mode = "wait-for-notice" if ending == "notice" else "finish"
    proc = agent(
        base,
        workdir,
        {
            "job_dir": job_dir,
            "train_steps": 1,
            "sync_seconds": 0.2,
            "trainer": {"argv": [sys.executable, spawner, marks, mode]},
        },
    )
    pids = []

    def both_pids() -> list[int] | None:  # a pid file just created may not hold its pid yet
        texts = [open(os.path.join(marks, n)).read() for n in os.listdir(marks) if n.endswith(".pid")]
        return [int(t) for t in texts] if len(texts) == 2 and all(t.strip().isdigit() for t in texts) else None

    try:
        pids = wait_until(both_pids, PATIENCE, "both children's pid files", 0.02)
        if ending == "notice":
            ready = os.path.join(marks, "ready")
            wait_until(lambda: os.path.exists(ready), PATIENCE, "the trainer ready for its notice", 0.02)
            proc.send_signal(signal.SIGTERM)
        assert proc.wait(PATIENCE) == 0
        # killed with the agent's exit: gone within moments; the bound is a loaded machine's
        wait_until(lambda: not any(_alive(pid) for pid in pids), 30, "the trainer's children gone with it", 0.02)
        local_job = os.path.join(workdir, "job")
        sizes = {n: os.path.getsize(os.path.join(local_job, n)) for n in os.listdir(local_job) if "written-by" in n}
        time.sleep(0.3)  # a window in which a live child would write (every 0.02 s): nothing to wait for
        assert sizes and sizes == {n: os.path.getsize(os.path.join(local_job, n)) for n in sizes}
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            proc.kill()


# -- 12. the checkout follows the spec's URL -------------------------------------------------------


def _git(*args, cwd):
    subprocess.run(
        ["git", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        env={
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
        },
    )


def _repo(path: str, name: str) -> str:
    os.makedirs(os.path.join(path, "mytrainer"))
    with open(os.path.join(path, "mytrainer", "__main__.py"), "w") as f:
        f.write(
            "import os, sys\n"
            f"print('trainer from repository {name}', flush=True)\n"
            "job = sys.argv[sys.argv.index('--job-dir') + 1]\n"
            "open(os.path.join(job, 'dummy-checkpoint-1.json'), 'w').write('1')\n"
        )
    _git("init", "-q", "-b", "main", cwd=path)
    _git("add", ".", cwd=path)
    _git("commit", "-qm", name, cwd=path)
    return path


@pytest.mark.parametrize("ref", [None, "main"])
def test_a_changed_git_url_is_followed_by_the_next_boot(base, ref):
    """trainerGitPath changed between two boots of one VM: the second runs the new repository's code,
    not a fetch of the old checkout's origin."""
    first = _repo(os.path.join(base, "first"), "first")
    second = _repo(os.path.join(base, "second"), "second")
    workdir = os.path.join(base, "work")
    logs = []
    for n, url in enumerate([first, second]):
        trainer = {"module": "mytrainer", "git_url": url, **({"git_ref": ref} if ref else {})}
        code, log = run_agent(
            base,
            workdir,
            {"job_dir": os.path.join(base, f"jobdir-{n}"), "train_steps": 1, "trainer": trainer},
            name=f"spec-{n}",
        )
        assert code == 0, log[-2000:]
        logs.append(log)
    assert "trainer from repository first" in logs[0]
    assert "trainer from repository second" in logs[1] and "repository first" not in logs[1]


# -- the pure decisions ----------------------------------------------------------------------------


def test_output_lines_end_at_cr_or_lf_and_are_cut_at_the_limit():
    lines = OutputLines(limit=8)
    assert lines.feed(b"a\r") == ["a"]
    assert lines.feed(b"bb") == []
    assert lines.feed(b"\r\n\nccc\rdd") == ["bb", "ccc"]
    assert lines.feed(b"0123456789abcdefghij") == ["dd012345", "6789abcd"]
    assert len(lines._pending) <= 8
    assert lines.flush() == ["efghij"] and lines.flush() == []
    utf8 = OutputLines(limit=7)
    assert utf8.feed("ééééé\n".encode()) == ["ééé", "éé"]  # never half a character


def test_session_members_come_from_the_fields_after_the_command_name():
    stats = [
        (100, "100 (python) S 1 100 100 0 -1"),  # the trainer itself
        (101, "101 (worker) S 100 100 100 0 -1"),  # its process group
        (102, "102 (a (b) c) S 101 102 100 0 -1"),  # own group, same session; parentheses in its name
        (103, "103 (daemon) S 1 103 103 0 -1"),  # a session of its own: out of reach
        (104, "104 (bash) S 1 104 104 0 -1"),  # unrelated
        (105, "garbage"),
    ]
    assert session_members(stats, 100) == [101, 102]


def test_git_plan_updates_only_a_checkout_of_the_same_url():
    same = git_plan("https://h/new.git", None, "/w/src", origin="https://h/new.git")
    assert not same.fresh and same.commands[0][-1] == "origin"
    moved = git_plan("https://h/new.git", "v2", "/w/src", origin="https://h/old.git")
    assert moved.fresh and moved.commands[0] == ["git", "clone", "--quiet", "--", "https://h/new.git", "/w/src"]
    assert moved.commands[1:] == [
        ["git", "-C", "/w/src", "checkout", "--quiet", "--detach", "v2"],
        ["git", "-C", "/w/src", "reset", "--quiet", "--hard", "v2"],
    ]
    assert git_plan("-u", None, "/w/src", origin=None).commands[0][3:5] == ["--", "-u"]


def test_read_progress_reads_only_a_regular_file_and_only_its_start(tmp_path):
    real = tmp_path / "real"
    real.write_bytes(progress_record(42))
    assert read_progress(str(real)) == 42
    link = tmp_path / "link"
    link.symlink_to(real)
    assert read_progress(str(link)) is None  # not through a link
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    started = time.monotonic()
    assert read_progress(str(fifo)) is None and time.monotonic() - started < 5  # a FIFO does not block (for ever)
    big = tmp_path / "big"
    big.write_bytes(b'{"step": 7, "pad": "' + b"x" * 10_000_000 + b'"}')
    assert read_progress(str(big)) is None  # not read whole (whole, it would parse)


def test_the_pid_file_is_never_written_through_a_link(tmp_path):
    target = tmp_path / "target"
    target.write_text("keep\n")
    pid_file = tmp_path / "trainer.pid"
    pid_file.symlink_to(target)
    write_pid_file(str(pid_file), 1234)
    assert target.read_text() == "keep\n" and not pid_file.is_symlink() and pid_file.read_text() == "1234"


@as_root
def test_give_to_chowns_links_not_their_targets(tmp_path):
    target = tmp_path / "roots-file"
    target.write_text("root's\n")
    tree = tmp_path / "job"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "ckpt").write_text("1")
    (tree / "link").symlink_to(target)
    (tree / "dirlink").symlink_to(tmp_path)
    give_to("nobody", str(tree))
    nobody = pwd.getpwnam("nobody").pw_uid
    assert os.stat(target).st_uid == 0 and os.stat(tmp_path).st_uid == 0
    assert {
        os.lstat(p).st_uid for p in [tree, tree / "sub", tree / "sub" / "ckpt", tree / "link", tree / "dirlink"]
    } == {nobody}


def test_a_trainers_file_is_opened_through_no_link_it_could_have_made(tmp_path):
    """`open_regular`, how the agent (root on a VM) opens every file of the local job dir: below a
    directory another user may write (the trainer's job dir; here /tmp's) no link is followed, not
    even in a parent; nor is the file itself a link; a FIFO is refused at once, not waited on.
    A link in a directory only the agent may write is followed: nobody else could have made it."""
    from survivor.jobdir.trainer_files import Refused, open_regular

    secret = tmp_path / "secret"
    (secret / "ckpt").mkdir(parents=True)
    (secret / "ckpt" / "model.data").write_text("TOP-SECRET")
    job = tmp_path / "job"
    (job / "ckpt").mkdir(parents=True)
    (job / "ckpt" / "model.data").write_text("weights")
    (job / "via").symlink_to(secret / "ckpt")
    (job / "model.index").symlink_to(secret / "ckpt" / "model.data")
    os.mkfifo(job / "events.out.tfevents.1")
    fd = open_regular(str(job / "ckpt" / "model.data"))
    assert os.read(fd, 64) == b"weights"
    os.close(fd)
    started = time.monotonic()
    for path in [job / "via" / "model.data", job / "model.index", job / "events.out.tfevents.1", job / "ckpt"]:
        with pytest.raises(Refused):
            open_regular(str(path))
    assert time.monotonic() - started < 5

    own = tempfile.mkdtemp(dir=os.path.expanduser("~"))  # the agent's own: only its user (or root) writes there
    try:
        os.mkdir(os.path.join(own, "real"))
        with open(os.path.join(own, "real", "file"), "w") as f:
            f.write("mine")
        os.symlink("real", os.path.join(own, "link"))
        fd = open_regular(os.path.join(own, "link", "file"))
        assert os.read(fd, 64) == b"mine"
        os.close(fd)
        os.chmod(own, 0o777)  # now another user could have made that link
        with pytest.raises(Refused):
            open_regular(os.path.join(own, "link", "file"))
    finally:
        shutil.rmtree(own)


@pytest.fixture
def read_by_uploads(monkeypatch) -> list[bytes]:
    """Every byte an upload of a checkpoint's chunks reads from the local job dir."""
    from survivor.jobdir import storage

    seen: list[bytes] = []

    class Recording(storage._FileRange):
        def read(self, n: int = -1) -> bytes:
            data = super().read(n)
            seen.append(data)
            return data

    monkeypatch.setattr(storage, "_FileRange", Recording)
    return seen


@pytest.mark.parametrize("swapped", ["the file", "its directory"])
def test_a_checkpoint_swapped_for_a_link_after_the_scan_is_never_read_by_the_commit(tmp_path, swapped, read_by_uploads):
    """The trainer swaps a scanned file (or the directory holding it) for a link to a file of the
    same name and size that only root may read: the commit does not read through it (it used to
    read the target and upload it, then delete it on the checksum), and commits nothing."""
    from survivor.jobdir.snapshot import scan
    from survivor.jobdir.store import SnapshotChanged

    secret = tmp_path / "secret"
    (secret / "ckpt-7").mkdir(parents=True)
    (secret / "ckpt-7" / "model.data").write_text("TOP-SECRET")
    job = tmp_path / "job"
    (job / "ckpt-7").mkdir(parents=True)
    (job / "ckpt-7" / "model.data").write_text("weights-07")  # the same size as the secret
    (job / "ckpt-7.index").write_text("7")
    store = CheckpointStore(LocalStorage(str(tmp_path / "jobdir")))
    snapshot = scan(str(job))
    assert snapshot.step == 7 and len(snapshot.files) == 2
    if swapped == "the file":
        os.rename(job / "ckpt-7" / "model.data", tmp_path / "kept")
        os.symlink(secret / "ckpt-7" / "model.data", job / "ckpt-7" / "model.data")
    else:
        os.rename(job / "ckpt-7", tmp_path / "kept")
        os.symlink(secret / "ckpt-7", job / "ckpt-7")
    with pytest.raises(SnapshotChanged):
        store.commit(str(job), snapshot, attempt=1)
    assert not any(b"TOP-SECRET" in data for data in read_by_uploads)
    assert store.latest() is None


def test_an_event_file_swapped_for_a_link_is_never_uploaded(tmp_path):
    """Event files are uploaded as they are, with no checksum of a scan to compare: one the trainer
    swapped for a link after the listing used to be uploaded whole, the link's target in its place."""
    from survivor.jobdir.trainer_files import Refused

    (tmp_path / "secret").write_text("TOP-SECRET")
    job = tmp_path / "job"
    job.mkdir()
    (job / "events.out.tfevents.1").symlink_to(tmp_path / "secret")
    storage = LocalStorage(str(tmp_path / "jobdir"))
    with pytest.raises(Refused):
        storage.upload([(str(job / "events.out.tfevents.1"), "events.out.tfevents.1")])
    assert storage.read("events.out.tfevents.1") is None


def test_scan_leaves_out_links_and_fifos(tmp_path):
    (tmp_path / "dummy-checkpoint-3.json").write_text("3")
    (tmp_path / "dummy-checkpoint-9.json").symlink_to(tmp_path / "dummy-checkpoint-3.json")
    os.mkfifo(tmp_path / "ckpt-12.data")
    os.mkfifo(tmp_path / ".growing.tmp")
    snapshot = scan(str(tmp_path))
    assert snapshot.step == 3 and [f.path for f in snapshot.files] == ["dummy-checkpoint-3.json"]


# -- 13. the trainer is not the VM -----------------------------------------------------------------

PROBE = """
import json, os, sys, urllib.request
site, vm_metadata, job_bucket = sys.argv[1:4]
sys.path.insert(0, site)  # google-auth and google-cloud-storage, from the suite's venv
job = sys.argv[sys.argv.index("--job-dir") + 1]
data = sys.argv[sys.argv.index("--data-dir") + 1]
report = {"env_names_the_vm": sorted(k for k, v in os.environ.items() if vm_metadata in v),
          "metadata_host": os.environ.get("GCE_METADATA_HOST")}
# (a) the VM's metadata server: its address is in no variable here, but a hostile trainer finds it
request = urllib.request.Request("http://%s/computeMetadata/v1/instance/service-accounts/default/token" % vm_metadata,
                                 headers={"Metadata-Flavor": "Google"})
try:
    report["vm_token"] = urllib.request.urlopen(request, timeout=10).read().decode()
except Exception as exc:
    report["vm_token"] = None
    report["vm_token_error"] = type(exc).__name__
# (b) its data, with the credentials google-auth finds through GCE_METADATA_HOST
import google.auth
from google.api_core import exceptions
from google.cloud import storage
credentials, project = google.auth.default()
client = storage.Client(project=project, credentials=credentials)
bucket, _, prefix = data[len("gs://"):].partition("/")
report["credentials"] = type(credentials).__module__ + "." + type(credentials).__name__
report["read"] = client.bucket(bucket).blob(prefix + "/shard-0").download_as_bytes().decode()
report["listed"] = [blob.name for blob in client.list_blobs(bucket, prefix=prefix)]
# (c) anything else
def attempt(name, call):
    try:
        call()
        report[name] = "allowed"
    except exceptions.Forbidden:
        report[name] = 403
    except Exception as exc:
        report[name] = "%s: %s" % (type(exc).__name__, exc)
attempt("write_data", lambda: client.bucket(bucket).blob(prefix + "/planted").upload_from_string(b"x"))
attempt("delete_data", lambda: client.bucket(bucket).blob(prefix + "/shard-0").delete())
attempt("read_job_dir", lambda: list(client.list_blobs(job_bucket)))
attempt("read_job_object", lambda: client.bucket(job_bucket).blob("run/survivor/lease").download_as_bytes())
attempt("bucket_get", lambda: client.get_bucket(bucket))
print("PROBE " + json.dumps(report), flush=True)
open(os.path.join(job, "dummy-checkpoint-1.json"), "w").write("1")
"""


def _same_python(python: str) -> bool:
    """Whether `python` is this interpreter's version (it imports the venv's packages)."""
    done = subprocess.run([python, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True)
    return done.stdout.strip() == str(sys.version_info[:2])


@as_root
@system_python
def test_a_trainer_gets_no_token_of_the_vm_and_reads_only_its_data_bucket(base, gcs_server):
    """In the simulator (a LocalInstance: the real agent, root, running the trainer as `nobody`, its
    metadata emulator closed to `nobody` as startup.sh closes a VM's to the trainer's user), a
    trainer asks the VM's metadata server for a token and gets none, reads its data bucket through
    google-cloud-storage with what google-auth finds, and is refused a write there, a read of the
    job dir's bucket, and anything else, by the storage stand-in that enforces the token's boundary."""
    import sysconfig

    from survivor.local.bucket_iam import BucketIam
    from survivor.local.instance import LocalInstance
    from survivor.local.sts_server import StsServer

    if not _same_python(SYSTEM_PYTHON):
        pytest.skip("the system python3 is not this venv's version: it cannot import the venv's packages")
    data_bucket, job_bucket = (f"{kind}-{os.urandom(4).hex()}" for kind in ("data", "jobs"))
    for bucket in (data_bucket, job_bucket):
        gcs_server.create_bucket(bucket)
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    storage.Client(project="p", credentials=AnonymousCredentials()).bucket(data_bucket).blob(
        "train/shard-0"
    ).upload_from_string(b"the trainer's data")
    probe = script(base, "probe.py", PROBE)
    with StsServer() as sts, BucketIam(upstream=gcs_server.url, sts=sts) as iam:
        env = {"STORAGE_EMULATOR_HOST": iam.endpoint, "SURVIVOR_STS_ENDPOINT": sts.endpoint}
        if os.environ.get("SURVIVOR_AGENT_SOURCE"):  # an older commit's agent: shows this test fails without the fix
            env["PYTHONPATH"] = os.environ["SURVIVOR_AGENT_SOURCE"]
        vm = LocalInstance({}, os.path.join(base, "vm"), python=sys.executable, metadata_firewall=("nobody",), env=env)
        try:
            argv = [SYSTEM_PYTHON, probe, sysconfig.get_paths()["purelib"], vm.metadata.host, job_bucket]
            vm.metadata.set(
                "instance/attributes/survivor-job",
                json.dumps(
                    {
                        "job_dir": f"gs://{job_bucket}/run",
                        "data_dir": f"gs://{data_bucket}/train",
                        "train_steps": 1,
                        "user": "nobody",
                        "on_finish": "keep-alive",
                        "sync_seconds": 0.2,
                        "trainer": {"argv": argv},
                    }
                ),
            )
            vm.boot()
            code = vm.wait(120)
            lines = vm.log_lines()
        finally:
            vm.close()
        refused = list(iam.refused)
    assert code == 0, open(vm.log_path()).read()[-3000:]
    probes = [
        json.loads(line["message"][len("PROBE ") :]) for line in lines if line.get("message", "").startswith("PROBE ")
    ]
    assert len(probes) == 1, [line.get("message") for line in lines][-30:]
    report = probes[0]
    assert report["env_names_the_vm"] == [] and report["metadata_host"] != vm.metadata.host
    assert report["vm_token"] is None and vm.metadata.refused >= 1  # (a) no token of the VM's
    assert report["credentials"] == "google.auth.compute_engine.credentials.Credentials"  # found as on GCE
    assert report["read"] == "the trainer's data" and report["listed"] == ["train/shard-0"]  # (b)
    assert {
        k: report[k] for k in ("write_data", "delete_data", "read_job_dir", "read_job_object", "bucket_get")
    } == dict.fromkeys(("write_data", "delete_data", "read_job_dir", "read_job_object", "bucket_get"), 403)  # (c)
    assert sorted({permission for _, _, permission in refused}) == [
        "storage.buckets.get",
        "storage.objects.create",
        "storage.objects.delete",
        "storage.objects.get",
        "storage.objects.list",
    ]
    assert sts.issued >= 1


class _VmToken:
    """A stand-in for the VM's credentials: a fixed token, as the metadata server would give."""

    token, expiry, valid, service_account_email = "the-vm-token", None, True, "vm@p.iam.gserviceaccount.com"

    def refresh(self, request) -> None:
        pass


def _ask(host: str, path: str, **headers: str) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"http://{host}{path}", headers={"Metadata-Flavor": "Google", **headers})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_trainers_metadata_server_hands_out_only_a_downscoped_data_token():
    from survivor.agent.trainer_metadata import READ_ROLE, TrainerMetadataServer
    from survivor.local.metadata_server import MetadataServer
    from survivor.metadata import MetadataClient
    from survivor.local.sts_server import StsServer

    token_path = "/computeMetadata/v1/instance/service-accounts/default/token"
    with StsServer() as sts, MetadataServer() as vm:
        vm.set("instance/preempted", "TRUE")
        served = TrainerMetadataServer(
            "data", project="p", notices=MetadataClient(vm.host), source=_VmToken(), sts_endpoint=sts.endpoint
        ).start()
        try:
            status, body = _ask(served.host, token_path)
            assert (
                status == 200 and json.loads(body)["token_type"] == "Bearer" and json.loads(body)["expires_in"] > 3000
            )
            assert sts.boundary_of(json.loads(body)["access_token"]) == [
                {
                    "availableResource": "//storage.googleapis.com/projects/_/buckets/data",
                    "availablePermissions": [f"inRole:{READ_ROLE}"],
                }
            ]
            assert _ask(served.host, "/")[0] == 200  # google-auth's ping
            info = json.loads(
                _ask(served.host, "/computeMetadata/v1/instance/service-accounts/default/?recursive=true")[1]
            )
            assert info["email"] == "vm@p.iam.gserviceaccount.com"
            assert _ask(served.host, "/computeMetadata/v1/project/project-id") == (200, "p")
            assert _ask(served.host, "/computeMetadata/v1/instance/preempted") == (200, "TRUE")
            for path in (
                "/computeMetadata/v1/instance/attributes/",
                "/computeMetadata/v1/instance/name",
                "/computeMetadata/v1/instance/service-accounts/default/identity?audience=x",
                "/computeMetadata/v1/instance/service-accounts/other/token",
            ):
                assert _ask(served.host, path)[0] == 404, path
            assert _ask(served.host, token_path, **{"Metadata-Flavor": "nope"})[0] == 403
            assert _ask(served.host, token_path, **{"X-Forwarded-For": "10.0.0.1"})[0] == 403
        finally:
            served.stop()
    no_bucket = TrainerMetadataServer(None, source=_VmToken()).start()
    try:
        assert _ask(no_bucket.host, token_path)[0] == 404  # a job without a gs:// data dir: no token at all
    finally:
        no_bucket.stop()


def test_the_sts_stand_in_refuses_what_the_security_token_service_refuses():
    from survivor.local.sts_server import ACCESS_TOKEN_TYPE, GRANT_TYPE, StsServer

    rule = {
        "availableResource": "//storage.googleapis.com/projects/_/buckets/b",
        "availablePermissions": ["inRole:roles/storage.objectViewer"],
    }

    def form(rules=(rule,), **fields) -> dict[str, str]:
        return {
            "grant_type": GRANT_TYPE,
            "requested_token_type": ACCESS_TOKEN_TYPE,
            "subject_token": "vm-token",
            "subject_token_type": ACCESS_TOKEN_TYPE,
            "options": json.dumps({"accessBoundary": {"accessBoundaryRules": list(rules)}}),
            **fields,
        }

    sts = StsServer()
    status, answer = sts.exchange(form(), authorized=False)
    assert status == 200 and answer["issued_token_type"] == ACCESS_TOKEN_TYPE and answer["token_type"] == "Bearer"
    token = answer["access_token"]
    assert sts.boundary_of(token) == [rule]
    payload = token.split(".")[1]
    widened = token.replace(payload, payload[:-2] + ("AA" if payload[-2:] != "AA" else "BB"))
    assert sts.boundary_of(widened) is None and StsServer().boundary_of(token) is None  # no forgery, no other issuer
    refused = [
        form(rules=[rule] * 11),
        form(rules=[]),
        form(rules=[{**rule, "availablePermissions": ["storage.objects.get"]}]),
        form(rules=[{**rule, "availabilityCondition": {"expression": "true"}}]),
        form(grant_type="password"),
        form(subject_token=token),
        form(options=""),
        form(subject_token_type="urn:ietf:params:oauth:token-type:jwt"),
    ]
    for fields in refused:
        assert sts.exchange(fields, authorized=False)[0] == 400, fields
    assert sts.exchange(form(), authorized=True)[0] == 400  # "do not send the Authorization HTTP header"


def test_a_bounded_token_may_only_read_its_bucket():
    from survivor.local.bucket_iam import boundary_denies

    rules = [
        {
            "availableResource": "//storage.googleapis.com/projects/_/buckets/data",
            "availablePermissions": ["inRole:roles/storage.objectViewer"],
        }
    ]
    assert boundary_denies(rules, "GET", "/download/storage/v1/b/data/o/train%2Fx?alt=media") is None
    assert boundary_denies(rules, "GET", "/storage/v1/b/data/o?prefix=train") is None
    assert boundary_denies(rules, "GET", "/storage/v1/b/data/o/train%2Fx") is None
    for method, path, permission in [
        ("POST", "/upload/storage/v1/b/data/o?uploadType=multipart", "storage.objects.create"),
        ("PUT", "/upload/storage/v1/b/data/o?uploadType=resumable&upload_id=1", "storage.objects.create"),
        ("DELETE", "/storage/v1/b/data/o/x", "storage.objects.delete"),
        ("PATCH", "/storage/v1/b/data/o/x", "storage.objects.update"),
        ("POST", "/storage/v1/b/data/o/x/rewriteTo/b/jobs/o/y", "storage.objects.create"),
        ("GET", "/storage/v1/b/data", "storage.buckets.get"),
        ("GET", "/storage/v1/b?project=p", "storage.buckets.list"),
        ("GET", "/storage/v1/b/jobs/o", "storage.objects.list"),
        ("GET", "/download/storage/v1/b/jobs/o/x?alt=media", "storage.objects.get"),
        ("GET", "/data/x", "storage.objects.get"),
    ]:  # not a JSON API path: refused too
        assert boundary_denies(rules, method, path) == permission, (method, path)


def test_the_metadata_emulator_closed_to_a_user_answers_that_user_nothing():
    from survivor.metadata import MetadataClient, MetadataError
    from survivor.local.metadata_server import MetadataServer

    with MetadataServer() as vm:
        vm.refuse_uid(os.getuid() + 1)  # another user's rule: this process is served
        assert MetadataClient(vm.host).get("instance/name") == "survivor-local-1"
        vm.refuse_uid(os.getuid())
        with pytest.raises(MetadataError):
            MetadataClient(vm.host, deadline=3.0).get("instance/name")
        assert vm.refused >= 1


def test_the_trainers_environment_names_only_its_own_metadata_server():
    from survivor.agent.trainer_metadata import metadata_env

    env = metadata_env(
        {"GCE_METADATA_HOST": "127.0.0.1:1", "GCE_METADATA_ROOT": "127.0.0.1:1", "PATH": "/bin"}, "127.0.0.1:2"
    )
    assert env == {"GCE_METADATA_HOST": "127.0.0.1:2", "GCE_METADATA_IP": "127.0.0.1:2", "PATH": "/bin"}


def test_the_trainers_metadata_server_closes_idle_connections_and_prints_no_tracebacks(monkeypatch, capsys):
    """A hostile review: 300 half-open connections pinned 300 agent threads for good, and each reset
    printed a traceback on the agent's stderr."""
    import socket

    from survivor.agent import trainer_metadata

    monkeypatch.setattr(trainer_metadata, "IDLE_SECONDS", 0.5)
    served = trainer_metadata.TrainerMetadataServer(None, source=_VmToken()).start()
    try:
        host, port = served.host.split(":")
        idle = [socket.create_connection((host, int(port))) for _ in range(20)]
        for conn in idle[:10]:
            conn.send(b"GET / HTTP/1.1\r\n")  # a request never finished
        reset = socket.create_connection((host, int(port)))
        reset.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        reset.send(b"GET / HTTP/1.1\r\n")
        reset.close()  # a reset mid-request
        for conn in idle:
            conn.settimeout(30)
            # closed by the server once idle: its handler's thread returned (a timeout here fails the test)
            assert conn.recv(1024) == b""
            conn.close()
        assert _ask(served.host, "/")[0] == 200  # and it goes on serving
    finally:
        served.stop()
    assert "Traceback" not in capsys.readouterr().err
