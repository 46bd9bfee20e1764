"""The trainer as a child process: started with one call, argv built in one place, never a shell, never root.

    >>> trainer = launch(spec, "/var/lib/survivor", python="/opt/venv/bin/python", allow_root=False,
    ...                  metadata=MetadataClient(), gpu_wait_seconds=900)
    >>> trainer.request_save(signal.SIGUSR1)  # "save a checkpoint now and keep training"
    >>> trainer.terminate()                   # "save a checkpoint now and exit"
    >>> trainer.wait(timeout=15)              # its exit code, or None while it still runs

`launch` is everything between a restored job dir and a running trainer: the GPUs to use, the user
to run as, the trainer's code (`delivery`), its argv and environment, the dirs it may write, the
process itself and its pid file.

The contract (docs/trainer-contract.md): the trainer gets `--job-dir` (a local directory the agent
mirrors to the job dir), `--train-steps`, and only the flags the spec names: `--data-dir`,
`--checkpoint-steps`, `--num-gpus` (also passed to a built-in trainer, which declares it), each
hyperparameter as `--kebab-case value`. A flag the spec does not name is never invented: the
recipe's own trainer refuses any it does not know. SIGTERM means save now and exit; the trainer's
declared save signal (SIGUSR1 for the built-in ones) means save now and keep training; exit 0
without a notice means training finished. It reports its progress in `$SURVIVOR_PROGRESS_FILE`.
Its stdout/stderr are forwarded line by line into the agent's structured log (`\r` ends a line
too, and a line is cut at MAX_LINE_BYTES: memory stays bounded whatever it writes).

On a VM the agent runs as root and the trainer as `survivor-trainer` (the unit's `--trainer-user`),
or as the spec's own `user`. It gets a metadata server of its own (`trainer_metadata`):
`GCE_METADATA_HOST` points its clients there, where the only token is one that reads its data
bucket; the VM's own metadata server is closed to its user (startup.sh for survivor-trainer,
`close_metadata_server` for a spec's own user).

The trainer runs in its own session and process group; when it exits, whatever it left running in
them is killed, so nothing writes into the job dir after the agent's last commit.

A trainer running as another user than the agent (root) gets only the local job dir and its state
dir (where the progress file is); the agent's work dir and everything the agent itself writes stay
root's, and no link the trainer plants is ever followed by the agent (`give_to`, `write_pid_file`,
`read_progress`).
"""

from __future__ import annotations

import collections
import os
import pwd
import re
import select
import shutil
import signal
import stat
import subprocess
import threading
import time
from typing import Iterable, Sequence

from survivor import log as logs
from survivor.agent.delivery import deliver
from survivor.agent.gpus import gpus_for
from survivor.agent.metadata_firewall import FirewallError, close_to
from survivor.agent.trainer_metadata import TrainerMetadataServer, data_bucket, metadata_env
from survivor.metadata import DEFAULT_HOST, MetadataClient, MetadataError
from survivor.spec import BUILTIN_SAVE_SIGNAL, BUILTIN_WARM_START, JobSpec, TrainerSpec, trainer_argv
from survivor.trainers.contract import PROGRESS_ENV, START_GATE_ENV, START_GATE_GO, parse_record, plausible_step

log = logs.get("trainer")


class TrainerUserError(Exception):
    """The trainer would run as root, or as a user that does not exist."""


def warm_start(trainer: TrainerSpec) -> bool:
    """Pure decision: whether this trainer is started before the restore and waits at the start gate
    (a built-in TensorFlow trainer: its imports and devices overlap the download)."""
    return trainer.builtin_name in BUILTIN_WARM_START


def launch(
    spec: JobSpec,
    workdir: str,
    *,
    python: str,
    allow_root: bool,
    metadata: MetadataClient | None,
    gpu_wait_seconds: float,
    stop: threading.Event | None = None,
    gated: bool = False,
    detected_gpus: int | None = None,
    trainer_user: str | None = None,
) -> "TrainerProcess":
    """Starts the spec's trainer on this VM, on the local job dir under `workdir`; returns it running.
    `gated`: the job dir is not restored yet; the trainer waits at the start gate until
    `TrainerProcess.open_gate` (only for a trainer that has one: `warm_start`). `detected_gpus`: what
    `gpus.count_gpus` just said, if the caller asked (else it is asked here). `trainer_user`: whom a
    root agent runs the trainer as when the spec names no `user` (the unit's `--trainer-user`, the
    user startup.sh closed the metadata server to).

    Raises TrainerUserError (it would run as root, its user does not exist, or the metadata server
    cannot be closed to it), DeliveryError (its code could not be fetched or installed) or OSError
    (the work dir, the process); a StorageError of a package fetch other than a missing package goes
    up as it is.
    """
    num_gpus = gpus_for(spec.num_gpus, metadata, gpu_wait_seconds, stop=stop, detected=detected_gpus)
    user = decide_user(os.geteuid(), spec.user, allow_root, default=trainer_user)
    if user and user != trainer_user:  # a spec's own user: startup.sh's rule does not name it
        close_metadata_server(user, metadata)
    claim_workdir(workdir)  # the agent's alone: the trainer gets only what is below
    delivered = deliver(spec.trainer, workdir)
    argv = trainer_argv(spec, python=python, job_dir=local_job_dir(workdir), data_dir=spec.data_dir, num_gpus=num_gpus)
    env = trainer_env(progress_path(workdir), delivered.pythonpath)
    if gated:  # started before this agent holds the job: its dirs are handed over at the gate
        env[START_GATE_ENV] = "stdin"
    else:
        hand_over(workdir, user)
    served = serve_metadata(spec, metadata)
    if served is not None:
        env = metadata_env(env, served.host)
    try:
        trainer = TrainerProcess.start(argv, env=env, cwd=delivered.cwd, user=user, gated=gated)
    except BaseException:
        if served is not None:
            served.stop()
        raise
    trainer.metadata_server = served
    trainer.workdir = workdir
    write_pid_file(os.path.join(workdir, "trainer.pid"), trainer.pid)
    return trainer


def hand_over(workdir: str, user: str | None) -> None:
    """What a trainer may write, made ready for it: its state dir emptied (last boot's progress),
    and that and the local job dir given to its user."""
    prepare_state_dir(state_dir(workdir), user)
    if user:
        give_to(user, local_job_dir(workdir))


def trainer_env(progress_file: str, pythonpath: list[str]) -> dict[str, str]:
    """The trainer's environment: the agent's, plus where it reports progress and where its
    delivered code is (ahead of any PYTHONPATH the agent has)."""
    env = dict(os.environ)
    env[PROGRESS_ENV] = progress_file
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(pythonpath + [p for p in [env.get("PYTHONPATH")] if p])
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def serve_metadata(spec: JobSpec, metadata: MetadataClient | None) -> TrainerMetadataServer | None:
    """The trainer's own metadata server, started, when the agent has one to hide (on a VM, real or
    simulated): a token that reads the spec's data bucket, or none without a gs:// data dir."""
    if metadata is None:
        return None
    try:
        project = metadata.get_or("project/project-id", deadline=5.0)
    except MetadataError:
        project = None
    return TrainerMetadataServer(data_bucket(spec.data_dir), project=project, notices=metadata).start()


def save_signal(trainer: TrainerSpec) -> int | None:
    """Pure decision: the signal that asks this trainer to save now and keep training, or None when
    it declares none (then it must not get one: SIGUSR1's default action ends a process)."""
    name = trainer.save_signal or (BUILTIN_SAVE_SIGNAL if trainer.builtin_name else None)
    return int(getattr(signal, name)) if name else None


def decide_user(euid: int, requested: str | None, allow_root: bool, default: str | None = None) -> str | None:
    """Pure decision: the user to run the trainer as (None: as the agent itself).

    The trainer never runs as root: an agent running as root runs it as the spec's user (`gceUser`),
    else as `default` (on a VM the unit's `--trainer-user survivor-trainer`), unless root was
    explicitly allowed (the local demo on a machine where everything is root). An agent that is not
    root cannot switch users: the trainer runs as the agent.
    """
    if requested:
        if requested == "root" and not allow_root:
            raise TrainerUserError("user = 'root': the trainer never runs as root; name another user")
        return requested if euid == 0 else None
    if euid != 0:
        return None
    if default:
        return default
    if not allow_root:
        raise TrainerUserError(
            "the agent runs as root and the spec names no user: set user (gceUser) so the trainer does not run as root"
        )
    return None


def close_metadata_server(user: str, metadata: MetadataClient | None) -> None:
    """On a VM, the metadata server closed to `user` (a spec's own user, which startup.sh's rule does
    not name) before a trainer runs as it: the same iptables rule, added by the agent as root. Not
    where the metadata server is a stand-in (the simulator's emulator refuses its own users, and the
    host's firewall is not the test's), nor off Compute Engine. TrainerUserError if it cannot be closed:
    the trainer then does not start, rather than start with the VM's token in reach."""
    if metadata is None or metadata.host != DEFAULT_HOST:
        return
    try:
        close_to(pwd.getpwnam(user).pw_uid)
    except KeyError:
        raise TrainerUserError(f"user {user!r} does not exist on this VM") from None
    except FirewallError as exc:
        raise TrainerUserError(f"the metadata server cannot be closed to user {user!r}: {exc}") from None
    log.info("the metadata server is closed to the trainer's user", user=user)


#: The most the agent reads of a progress file: a record is 128 bytes; a trainer cannot make the
#: agent read a gigabyte, nor a FIFO, nor through a link.
PROGRESS_READ_LIMIT = 4096


def read_progress(path: str) -> int | None:
    """The step a trainer last reported in its progress file, if any (see `read_record`)."""
    record = read_record(path)
    return None if record is None else plausible_step(record[0])


def read_saved(path: str) -> int | None:
    """The step of the checkpoint the trainer reported complete after a stop request
    (`contract.report_saved`), if it reported one and trained nothing since; else None."""
    record = read_record(path)
    if record is None or record[1] is None or record[1] < record[0]:
        return None
    return record[1]


def read_record(path: str) -> tuple[int, int | None] | None:
    """(step, saved) as the trainer last reported them in its progress file, if any. The file lives
    in a dir the trainer writes: a link there is not followed, and only a regular file is read (a
    FIFO would block the agent), at most PROGRESS_READ_LIMIT bytes of it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return parse_record(os.read(fd, PROGRESS_READ_LIMIT))
    except OSError:
        return None
    finally:
        os.close(fd)


# -- what the trainer may write, and what it may not ----------------------------------------------


#: Under the agent's work dir, the one dir besides the local job dir the trainer may write.
STATE_DIR = "trainer-state"


def local_job_dir(workdir: str) -> str:
    """The local job dir under `workdir`: the trainer's `--job-dir`, which the agent restores into
    and mirrors to the job dir."""
    return os.path.join(workdir, "job")


def state_dir(workdir: str) -> str:
    """The trainer's state dir under `workdir` (its progress file; it may write there atomically)."""
    return os.path.join(workdir, STATE_DIR)


def progress_path(workdir: str) -> str:
    """Where the trainer reports its progress (`$SURVIVOR_PROGRESS_FILE`)."""
    return os.path.join(state_dir(workdir), "progress.json")


def claim_workdir(path: str) -> None:
    """Makes the agent's work dir a real directory that only the agent writes: an earlier version
    gave it to the trainer's user, who could then swap any file the agent writes there for a link."""
    os.makedirs(path, exist_ok=True)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise OSError(f"{path}: the work dir is not a directory")
    if os.geteuid() == 0 and st.st_uid != 0:
        os.chown(path, 0, 0, follow_symlinks=False)
    if st.st_mode & 0o022:
        os.chmod(path, stat.S_IMODE(st.st_mode) & ~0o022)


def give_to(user: str, top: str) -> None:
    """Gives `top` and everything under it to `user`, never following a link: a link is chowned
    itself (its target stays whose it was), and `os.fwalk` walks by directory descriptors, so a
    directory swapped for a link during the walk is not entered either."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:  # before the trainer starts: the same one line as TrainerProcess.start's
        raise TrainerUserError(f"user {user!r} does not exist on this VM") from None
    os.chown(top, entry.pw_uid, entry.pw_gid, follow_symlinks=False)
    for _, dirnames, filenames, dirfd in os.fwalk(top, follow_symlinks=False):
        for name in dirnames + filenames:
            try:
                os.chown(name, entry.pw_uid, entry.pw_gid, dir_fd=dirfd, follow_symlinks=False)
            except FileNotFoundError:
                pass


def prepare_state_dir(path: str, user: str | None) -> None:
    """The trainer's state dir (its progress file), emptied, and the trainer's user's when it has one."""
    if os.path.lexists(path) and (os.path.islink(path) or not os.path.isdir(path)):
        os.remove(path)
    os.makedirs(path, exist_ok=True)
    for name in os.listdir(path):  # last boot's progress: removed, never followed
        full = os.path.join(path, name)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full)
        else:
            os.remove(full)
    if user:
        give_to(user, path)


def write_pid_file(path: str, pid: int) -> None:
    """Writes `pid` to a new file at `path`: never through a link someone left there."""
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(str(pid))


# -- the trainer's output -------------------------------------------------------------------------

#: The longest line forwarded as one log entry; a longer one (no line end for megabytes) is cut.
MAX_LINE_BYTES = 8192
_LINE_END = re.compile(rb"[\r\n]")


class OutputLines:
    r"""Splits a trainer's output into log lines with bounded memory.

        >>> lines = OutputLines(limit=10)
        >>> lines.feed(b"epoch 1\r 10%\r 20%") + lines.feed(b"\nabcdefghijklmnop")
        ['epoch 1', '10%', '20%', 'abcdefghij']

    `\n` and `\r` both end a line (a progress bar redraws itself with `\r`); a line longer than
    `limit` bytes is cut into pieces of that size, at a UTF-8 character boundary; blank lines are
    dropped. What is kept between calls is never more than `limit` bytes.
    """

    def __init__(self, limit: int = MAX_LINE_BYTES):
        self.limit = limit
        self._pending = b""

    def feed(self, chunk: bytes) -> list[str]:
        """The lines `chunk` completes."""
        parts = _LINE_END.split(self._pending + chunk)
        self._pending = parts.pop()
        out: list[str] = []
        for part in parts:
            out += self._pieces(part, keep_rest=False)
        out += self._pieces(self._pending, keep_rest=True)
        return out

    def flush(self) -> list[str]:
        """The last line, when the output ended without a line end."""
        rest, self._pending = self._pending, b""
        return self._pieces(rest, keep_rest=False)

    def _pieces(self, data: bytes, keep_rest: bool) -> list[str]:
        out = []
        while len(data) > self.limit or (data and not keep_rest):
            cut = min(len(data), self.limit)
            while 0 < cut < len(data) and cut > self.limit - 4 and data[cut] & 0xC0 == 0x80:
                cut -= 1  # not inside a multi-byte character
            piece, data = data[:cut], data[cut:]
            text = piece.decode(errors="replace").strip()
            if text:
                out.append(text)
        if keep_rest:
            self._pending = data
        return out


# -- the trainer's session ------------------------------------------------------------------------


def session_members(stats: Iterable[tuple[int, str]], leader: int) -> list[int]:
    """Pure decision: the pids whose `/proc/PID/stat` puts them in the session or process group
    `leader` started; `stats` are (pid, stat text) pairs. The command name may hold spaces and
    parentheses, so fields are counted after its last `)` (proc(5): state, ppid, pgrp, session)."""
    members = []
    for pid, text in stats:
        fields = text.rpartition(")")[2].split()
        try:
            pgrp, session = int(fields[2]), int(fields[3])
        except (IndexError, ValueError):
            continue
        if pid != leader and leader in (pgrp, session):
            members.append(pid)
    return members


def _proc_stats() -> list[tuple[int, str]]:
    stats = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="utf-8", errors="replace") as f:
                stats.append((int(name), f.read()))
        except OSError:
            continue
    return stats


class TrainerProcess:
    """A running trainer. Its own session and process group, so a terminal's Ctrl-C reaches only the
    agent, and what it leaves running when it exits can be found and ended (`end_group`)."""

    def __init__(self, popen: subprocess.Popen, argv: Sequence[str], user: str | None = None):
        self.popen = popen
        self.argv = list(argv)
        self.user = user
        self.workdir: str | None = None  # the agent's work dir (`open_gate` hands its trainer's part over)
        self.metadata_server: TrainerMetadataServer | None = None  # the trainer's own (`serve_metadata`)
        self.gate = popen.stdin  # the start gate of a trainer started before the restore, until opened
        self.terminated_at: float | None = None
        self.killed = False
        self.group_ended = False
        self.tail: collections.deque[str] = collections.deque(maxlen=20)
        self._pump = threading.Thread(target=self._forward_output, name="trainer-output", daemon=True)
        self._pump.start()

    @classmethod
    def start(
        cls,
        argv: Sequence[str],
        *,
        env: dict[str, str],
        cwd: str | None = None,
        user: str | None = None,
        gated: bool = False,
    ) -> "TrainerProcess":
        """Starts the trainer from an argv list (no shell), optionally as `user`; `gated`: its stdin
        is the start gate (contract.wait_at_start_gate), else it has none."""
        kwargs: dict = {}
        if user:
            try:
                entry = pwd.getpwnam(user)
            except KeyError:
                raise TrainerUserError(f"user {user!r} does not exist on this VM") from None
            kwargs.update(user=entry.pw_uid, group=entry.pw_gid, extra_groups=[])
            env = {**env, "HOME": entry.pw_dir, "USER": user, "LOGNAME": user}
        popen = subprocess.Popen(
            list(argv),
            env=env,
            cwd=cwd,
            stdin=subprocess.PIPE if gated else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **kwargs,
        )
        log.info(
            "trainer started",
            pid=popen.pid,
            argv=" ".join(argv),
            user=user or "",
            **({"waits_for": "the restore"} if gated else {}),
        )
        return cls(popen, argv, user)

    def open_gate(self) -> None:
        """Lets a trainer started before the restore go on: its state dir and the restored job dir
        are handed over first (`hand_over`: the restore wrote the job dir as the agent, and before
        the lease another agent's trainer may have used them). Nothing for a trainer without a gate."""
        if self.gate is None:
            return
        if self.workdir:
            hand_over(self.workdir, self.user)
        self._close_gate(START_GATE_GO)

    def _close_gate(self, say: bytes = b"") -> None:
        """Says `say` at the start gate (nothing: the boot ended) and closes it, once."""
        gate, self.gate = self.gate, None
        if gate is None:
            return
        try:
            gate.write(say)
            gate.close()
        except (BrokenPipeError, ValueError):  # it has exited already: its exit code tells why
            pass

    def _forward_output(self) -> None:
        assert self.popen.stdout is not None
        fd = self.popen.stdout.fileno()
        lines = OutputLines()
        while True:
            chunk = os.read(fd, 65536)  # what is there, up to 64 KiB: never waits for a line end
            for line in lines.feed(chunk) if chunk else lines.flush():
                self.tail.append(line)
                log.info(line, source="trainer")
            if not chunk:
                return

    @property
    def pid(self) -> int:
        """The trainer's process id, which is also its process group's and session's."""
        return self.popen.pid

    def poll(self) -> int | None:
        """The exit code once the trainer has exited (and what it left running is ended), else None."""
        if self.popen.returncode is None and _exited(self.popen.pid):
            self.end_group()  # while the exited trainer is unreaped its pid, the group's id, cannot be reused
        return self.popen.poll()

    def end_group(self) -> None:
        """SIGKILLs what the trainer left running: its process group, and anything in its session
        that moved to a group of its own. A process that started a session of its own has left
        both; on a VM the unit's cgroup ends it when the agent exits (docs/reliability.md)."""
        if self.group_ended:
            return
        self.group_ended = True
        leftovers = session_members(_proc_stats(), self.popen.pid)
        for kill, target in [(os.killpg, self.popen.pid)] + [(os.kill, pid) for pid in leftovers]:
            try:
                kill(target, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if leftovers:
            log.warning("the trainer left processes running; killed them", pids=" ".join(map(str, leftovers)))

    def request_save(self, sig: int) -> None:
        """Asks for a checkpoint now, training going on: `sig` to the trainer itself only, not its
        process group (a helper process it started may not handle it)."""
        if self.popen.poll() is None and self.terminated_at is None:
            try:
                os.kill(self.popen.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        """SIGTERM: save a checkpoint now and exit."""
        if self.popen.poll() is None and self.terminated_at is None:
            self.terminated_at = time.monotonic()
            self._signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL the trainer's whole process group (and what it left running, if it has exited),
        and stop its metadata server."""
        if self.popen.poll() is None:
            self.killed = True
            self._signal(signal.SIGKILL)
        self.end_group()
        self._close_gate()
        if self.metadata_server is not None:
            self.metadata_server.stop()

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.popen.pid, sig)
        except ProcessLookupError:
            pass

    def wait(self, timeout: float | None = None) -> int | None:
        """Waits up to `timeout` seconds; returns the exit code or None if still running.

        The exit is seen on the trainer's pidfd before the trainer is reaped: until then its pid,
        its process group's id, cannot be reused, so what it left running is ended first
        (`end_group`) and no other process is hit.
        """
        if timeout is not None and not _exited_within(self.popen, timeout):
            return None
        if self.popen.returncode is None and _exited(self.popen.pid):
            self.end_group()
        try:
            code = self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self.end_group()
        self._pump.join(timeout=2)
        return code

    def last_words(self) -> str:
        """The trainer's last output line that says something (for a failure reason)."""
        for line in reversed(self.tail):
            if line.strip(" ^~") and not line.startswith("  File "):
                return line.strip()[:300]
        return ""


def _exited(pid: int) -> bool:
    """True once `pid` (our child) has exited, without reaping it."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _exited_within(popen: subprocess.Popen, timeout: float) -> bool:
    """True once `popen` has exited, waiting at most `timeout` seconds on its pidfd; where pidfds
    are not available (not Linux, or a kernel before 5.3) it answers True and `Popen.wait` polls."""
    if popen.returncode is not None:
        return True
    try:
        fd = os.pidfd_open(popen.pid)
    except (AttributeError, OSError):
        return True
    try:
        readable, _, _ = select.select([fd], [], [], max(0.0, timeout))
        return bool(readable)
    finally:
        os.close(fd)
