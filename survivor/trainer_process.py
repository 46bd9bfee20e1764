"""The trainer as a child process: argv built in one place, never a shell, never root.

    >>> argv = trainer_argv(spec, python="/opt/venv/bin/python", job_dir="/var/lib/survivor/job",
    ...                     data_dir="gs://bucket/data", num_gpus=4)
    >>> proc = TrainerProcess.start(argv, env=trainer_env(progress_file), user="trainer")
    >>> proc.request_save(signal.SIGUSR1)  # "save a checkpoint now and keep training"
    >>> proc.terminate()                   # "save a checkpoint now and exit"

The contract (docs/trainer-contract.md): the trainer gets `--job-dir` (a local directory the agent
mirrors to the job dir), `--train-steps`, and only the flags the spec names: `--data-dir`,
`--checkpoint-steps`, `--num-gpus` (also passed to a built-in trainer, which declares it), each
hyperparameter as `--kebab-case value`. A flag the spec does not name is never invented: the
recipe's own trainer refuses any it does not know. SIGTERM means save now and exit; the trainer's
declared save signal (SIGUSR1 for the built-in ones) means save now and keep training; exit 0
without a notice means training finished. Its stdout/stderr are forwarded line by line into the
agent's structured log.
"""

from __future__ import annotations

import collections
import os
import pwd
import select
import signal
import subprocess
import threading
import time
from typing import Sequence

from survivor import log as logs
from survivor.spec import BUILTIN_FLAGS, BUILTIN_SAVE_SIGNAL, BUILTIN_TRAINERS, JobSpec, TrainerSpec
from survivor.trainers.contract import parse_progress

log = logs.get("trainer")


class TrainerUserError(Exception):
    """The trainer would run as root, or as a user that does not exist."""


def trainer_argv(
    spec: JobSpec,
    *,
    python: str,
    job_dir: str,
    data_dir: str | None,
    num_gpus: int,
    module: str | None = None,
) -> list[str]:
    """The one place trainer argv is built. `module` overrides the spec's (e.g. a delivered package).

    Every flag is one the spec names (job_dir and train_steps it always does), or one a built-in
    trainer declares: `--num-gpus` goes to a built-in trainer always (the count the agent found), to
    any other only when the spec names num_gpus (numGpus).
    """
    trainer = spec.trainer
    if trainer.argv:
        argv = list(trainer.argv)
    else:
        name = module or trainer.module or BUILTIN_TRAINERS[trainer.builtin or ""]
        argv = [python, "-m", name]
    argv += ["--job-dir", job_dir]
    if data_dir:
        argv += ["--data-dir", data_dir]
    argv += ["--train-steps", str(spec.train_steps)]
    if spec.num_gpus_named or (trainer.builtin_name is not None and "--num-gpus" in BUILTIN_FLAGS):
        argv += ["--num-gpus", str(num_gpus)]
    if spec.checkpoint_steps:
        argv += ["--checkpoint-steps", str(spec.checkpoint_steps)]
    for name, value in spec.hyperparameters:
        # an empty value is a bare flag (`no-export: ""` or `no-export:` -> `--no-export`)
        argv += [f"--{name}", value] if value != "" else [f"--{name}"]
    return argv


def save_signal(trainer: TrainerSpec) -> int | None:
    """Pure decision: the signal that asks this trainer to save now and keep training, or None when
    it declares none (then it must not get one: SIGUSR1's default action ends a process)."""
    name = trainer.save_signal or (BUILTIN_SAVE_SIGNAL if trainer.builtin_name else None)
    return int(getattr(signal, name)) if name else None


def decide_user(euid: int, requested: str | None, allow_root: bool) -> str | None:
    """Pure decision: the user to run the trainer as (None: as the agent itself).

    The trainer never runs as root: an agent running as root needs a user in the spec (`gceUser`),
    unless root was explicitly allowed (the local demo on a machine where everything is root).
    """
    if requested:
        if requested == "root" and not allow_root:
            raise TrainerUserError("user = 'root': the trainer never runs as root; name another user")
        return requested if euid == 0 else None
    if euid == 0 and not allow_root:
        raise TrainerUserError(
            "the agent runs as root and the spec names no user: set user (gceUser) so the trainer does not run as root"
        )
    return None


def read_progress(path: str) -> int | None:
    """The step a trainer last reported in its progress file, if any."""
    try:
        with open(path, "rb") as f:
            return parse_progress(f.read())
    except OSError:
        return None


class TrainerProcess:
    """A running trainer. Its own process group, so a terminal's Ctrl-C reaches only the agent."""

    def __init__(self, popen: subprocess.Popen, argv: Sequence[str]):
        self.popen = popen
        self.argv = list(argv)
        self.terminated_at: float | None = None
        self.killed = False
        self.tail: collections.deque[str] = collections.deque(maxlen=20)
        self._pump = threading.Thread(target=self._forward_output, name="trainer-output", daemon=True)
        self._pump.start()

    @classmethod
    def start(cls, argv: Sequence[str], *, env: dict[str, str], cwd: str | None = None,
              user: str | None = None) -> "TrainerProcess":
        """Starts the trainer from an argv list (no shell), optionally as `user`."""
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
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **kwargs,
        )
        log.info("trainer started", pid=popen.pid, argv=" ".join(argv), user=user or "")
        return cls(popen, argv)

    def _forward_output(self) -> None:
        assert self.popen.stdout is not None
        for raw in iter(self.popen.stdout.readline, b""):
            line = raw.decode(errors="replace").rstrip()
            if line:
                self.tail.append(line)
                log.info(line, source="trainer")

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()

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
        """SIGKILL the trainer's whole process group."""
        if self.popen.poll() is None:
            self.killed = True
            self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.popen.pid, sig)
        except ProcessLookupError:
            pass

    def wait(self, timeout: float | None = None) -> int | None:
        """Waits up to `timeout` seconds; returns the exit code or None if still running.

        The exit is seen the moment it happens (a pidfd becomes readable), not at the next of
        `Popen.wait`'s polls, which back off to 50 ms: on the way to safety every one counts.
        """
        if timeout is not None and not _exited_within(self.popen, timeout):
            return None
        try:
            code = self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self._pump.join(timeout=2)
        return code

    def last_words(self) -> str:
        """The trainer's last output line that says something (for a failure reason)."""
        for line in reversed(self.tail):
            if line.strip(" ^~") and not line.startswith("  File "):
                return line.strip()[:300]
        return ""


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
