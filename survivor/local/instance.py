"""A local stand-in for one Spot VM: an agent process with its own metadata emulator and boot disk.

    >>> vm = LocalInstance(attributes={"survivor-job": spec_yaml}, root="/tmp/vm").boot()
    >>> vm.wait_for_step(20)
    >>> vm.preempt()                 # preempted=TRUE, SIGTERM (ACPI soft off), SIGKILL 30 s later
    >>> vm.boot(wipe=True)           # the MIG recreates it: a fresh boot disk, same name

`state_disk=True` gives it a state disk as a stateful MIG keeps one (a job with `state_disk_gb`):
a directory beside the boot disk, which `boot(wipe=True)` leaves as it is, mounted where the agent
looks (SURVIVOR_STATE_DISK) with the marker startup.sh would write.

`metadata_firewall=("nobody",)` closes its metadata emulator to those users' processes, as
startup.sh's firewall rule closes a VM's metadata server to the trainer's user (for a spec whose
`user` is one of them, under an agent run as root). Its trainer is given no address of the emulator
either: the agent points it at a metadata server of its own (survivor/agent/trainer_metadata.py).

Depends on nothing in the agent: it starts `python -m survivor agent` as a process, as the
systemd unit would, and acts on it only from outside (metadata, signals, files).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from typing import IO

from survivor.agent.finish import POWER_OFF_ENV
from survivor.local.metadata_server import MetadataServer
from survivor.agent.trainer import progress_path, read_progress
from survivor.jobdir.disk_tier import MARKER, STATE_DISK_ENV


class LocalInstance:
    """One simulated VM. `boot()` starts the agent; `preempt()`/`kill()` end it like GCE would."""

    def __init__(
        self,
        attributes: dict[str, str],
        root: str,
        *,
        name: str = "survivor-local-1",
        zone: str = "us-west1-b",
        project: str = "survivor-local",
        env: dict[str, str] | None = None,
        agent_args: tuple[str, ...] = ("--allow-root-trainer",),
        python: str = sys.executable,
        state_disk: bool = False,
        wrapper: tuple[str, ...] = (),
        metadata_firewall: tuple[str, ...] = (),
    ):
        self.root = os.path.abspath(root)
        self.name = name
        self.zone = zone
        self.metadata = MetadataServer(attributes=attributes, name=name, zone=zone, project=project)
        for user in metadata_firewall:
            self.metadata.refuse_uid(pwd.getpwnam(user).pw_uid)
        self.metadata.start()
        self.env = dict(env or {})
        self.agent_args = tuple(agent_args)
        self.python = python
        self.state_disk = os.path.join(self.root, "state-disk") if state_disk else None
        self.wrapper = tuple(wrapper)  # e.g. unshare(1): the agent as in a container on the VM
        self.process: subprocess.Popen | None = None
        self.boots = 0
        self._log: IO[bytes] | None = None

    @property
    def workdir(self) -> str:
        """The agent's work dir: on the boot disk, so a recreated VM starts without it."""
        return os.path.join(self.root, "disk", "var-lib-survivor")

    def log_path(self, boot: int | None = None) -> str:
        """The file the agent of boot `boot` (default: the latest) writes its log to."""
        return os.path.join(self.root, f"agent-boot-{boot or self.boots}.log")

    def boot(self, wipe: bool = False) -> "LocalInstance":
        """Starts the agent on a (re)booted VM. `wipe`: the boot disk is new (MIG recreation)."""
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError("the instance is still running")
        if wipe:
            shutil.rmtree(os.path.join(self.root, "disk"), ignore_errors=True)
        os.makedirs(self.workdir, exist_ok=True)
        if self.state_disk is not None:  # as startup.sh mounts it: the marker on the disk itself
            os.makedirs(self.state_disk, exist_ok=True)
            open(os.path.join(self.state_disk, MARKER), "a").close()
            self.env[STATE_DISK_ENV] = self.state_disk
        self.metadata.set("instance/preempted", "FALSE")
        self.metadata.set("instance/maintenance-event", "NONE")
        if os.path.exists(self.power_off_path):
            os.remove(self.power_off_path)
        self.boots += 1
        # its kernel is the host's: say when this "VM" powered on, as a guest's uptime would
        env = {
            **os.environ,
            **self.env,
            "GCE_METADATA_HOST": self.metadata.host,
            "PYTHONUNBUFFERED": "1",
            "SURVIVOR_GUEST_BOOTED": f"{time.time():.3f}",
            POWER_OFF_ENV: self.power_off_path,
        }
        self._log = open(self.log_path(), "wb")
        # cwd: its work dir, as the unit's WorkingDirectory=/var/lib/survivor (startup/survivor-agent.service),
        # and so the cwd of an argv trainer; never the caller's, since `python -m survivor` from a directory
        # that holds a `survivor/` folder (a clone's parent) would import that folder instead of the package
        self.process = subprocess.Popen(
            [
                *self.wrapper,
                self.python,
                "-m",
                "survivor",
                "agent",
                "--workdir",
                os.path.abspath(self.workdir),
                "--log-format",
                "json",
                *self.agent_args,
            ],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=os.path.abspath(self.workdir),
        )
        return self

    @property
    def power_off_path(self) -> str:
        """The file whose appearance is this stand-in VM powering itself off (`agent.finish.power_off`)."""
        return os.path.join(self.root, "powered-off")

    def powered_off(self) -> bool:
        """Whether the agent powered this "VM" off (a guest shutdown) since it last booted."""
        return os.path.exists(self.power_off_path)

    @property
    def returncode(self) -> int | None:
        """The agent's exit code: None while it runs, or before the first boot."""
        return self.process.returncode if self.process is not None else None

    def running(self) -> bool:
        """True while this VM's agent process runs."""
        return self.process is not None and self.process.poll() is None

    def progress(self) -> int | None:
        """The step the trainer last reported, read from the boot disk."""
        return read_progress(progress_path(self.workdir))

    def wait_for_step(self, step: int, timeout: float = 120.0) -> int:
        """Waits until the trainer reports `step` or more; returns the reported step."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            reached = self.progress()
            if reached is not None and reached >= step:
                return reached
            if not self.running():
                reached = self.progress()  # it may have reported the step as it exited, since the read above
                if reached is not None and reached >= step:
                    return reached
                raise RuntimeError(f"the agent exited ({self.returncode}) before step {step}; see {self.log_path()}")
            time.sleep(0.02)
        raise TimeoutError(f"step {step} not reached in {timeout} s; see {self.log_path()}")

    def wait_for_message(self, message: str, timeout: float = 30.0) -> dict:
        """Waits until this boot's agent logs `message`; returns that line."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = next((line for line in self.log_lines() if line.get("message") == message), None)
            if line is not None:
                return line
            time.sleep(0.1)
        raise TimeoutError(f"the agent did not log {message!r} in {timeout} s; see {self.log_path()}")

    def set_preempted(self) -> None:
        """What GCE does first on a Spot preemption (with a notice duration, before the soft off)."""
        self.metadata.set("instance/preempted", "TRUE")

    def soft_off(self) -> None:
        """ACPI soft off: systemd stops the unit, which sends SIGTERM to the agent."""
        if self.process is not None and self.running():
            os.kill(self.process.pid, signal.SIGTERM)

    def preempt(self, notice_seconds: float = 0.0, hard_off_after: float = 30.0, soft_off: bool = True) -> int | None:
        """A Spot preemption: `preempted=TRUE`, after `notice_seconds` the soft off (SIGTERM), and the
        hard power-off (SIGKILL of everything) `hard_off_after` seconds later. Returns the exit code."""
        self.set_preempted()
        if notice_seconds:
            code = self.wait(notice_seconds)
            if code is not None:
                return code
        if soft_off:
            self.soft_off()
        code = self.wait(hard_off_after)
        if code is None:
            self.kill()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        """Waits for the agent to exit; returns its code, or None after `timeout`."""
        if self.process is None:
            raise RuntimeError("the instance has not booted")
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        if self._log:
            self._log.close()
        return code

    def kill(self) -> None:
        """Hard power-off: SIGKILL the agent and its trainer at once."""
        pids = [self.process.pid] if self.process else []
        try:
            # behind a wrapper (a pid namespace) the file holds a pid of that namespace, which may name
            # another process here; the namespace's processes die with its first one, the agent
            if not self.wrapper:
                with open(os.path.join(self.workdir, "trainer.pid"), encoding="utf-8") as f:
                    pids.append(int(f.read().strip()))
        except (OSError, ValueError):
            pass
        for pid in pids:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self.process:
            self.process.wait()

    def log_lines(self, boot: int | None = None) -> list[dict]:
        """The agent's JSON log lines of a boot."""
        out = []
        with open(self.log_path(boot), encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
        return out

    def close(self) -> None:
        """Kills the agent if it still runs and stops the VM's metadata emulator."""
        if self.running():
            self.kill()
        self.metadata.stop()
