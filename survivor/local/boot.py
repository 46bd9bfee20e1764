"""A VM's boot rehearsed on this machine: survivor/startup/startup.sh run for real, as root, in a
sandbox root, against the metadata emulator and fake-gcs-server; then the unit's own ExecStart line,
run as its User= (root: it names none), starts the agent.

    >>> lock = machine_lock(cache_dir)                 # this machine's closure of survivor-train, hashed
    >>> root = SandboxRoot.create()                    # a fresh boot disk
    >>> boot = root.run_startup(metadata_host, env=wheelhouse_env(cache_dir))
    >>> agent = root.start_agent(env={...})            # what systemd does with the unit

The script reaches the stand-ins the way google-auth and google-cloud-storage would
(GCE_METADATA_HOST, STORAGE_EMULATOR_HOST) and finds its paths under SURVIVOR_ROOT; nothing else
about it changes. The VM's lock (survivor/startup/vm-lock.txt) is universal from Python 3.10, with CUDA; the
rehearsal installs the same way from a lock of this machine's own versions, with hashes of wheels
kept in a local wheelhouse (pip is pointed at it with PIP_* variables, as pip honours them), so a
run downloads nothing after the first.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata as importlib_metadata

from survivor import retry
from survivor.operator.image import sha256_of

STARTUP = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "startup", "startup.sh")
UNIT = "etc/systemd/system/survivor-agent.service"
#: The unit's absolute paths that live on the boot disk (mapped into the sandbox root)
DISK_PATHS = ("/opt/survivor", "/var/lib/survivor")
#: The PATH systemd gives a service (systemd.exec(5), "Environment variables in spawned processes")
SERVICE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


# -- a lock of this machine's versions, from a local wheelhouse -----------------------------------


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def dependency_closure(distribution: str = "survivor-train") -> dict[str, str]:
    """{name: version} of every installed distribution `distribution` needs (its own extras left out,
    the extras it asks of others followed), read from this environment's metadata."""
    from packaging.requirements import Requirement

    found: dict[str, str] = {}
    seen: set[tuple[str, str]] = set()
    todo: list[tuple[str, str]] = [(distribution, "")]
    root = _normal(distribution)
    while todo:
        name, extra = todo.pop()
        for text in importlib_metadata.distribution(name).requires or []:
            requirement = Requirement(text)
            if requirement.marker and not requirement.marker.evaluate({"extra": extra}):
                continue
            needed = _normal(requirement.name)
            if needed != root:
                found[needed] = importlib_metadata.version(requirement.name)
            for wanted in ("", *sorted(requirement.extras)):  # google-api-core[grpc] brings grpcio-status
                if (needed, wanted) not in seen:
                    seen.add((needed, wanted))
                    todo.append((requirement.name, wanted))
    return found


def machine_lock(cache_dir: str) -> str:
    """Writes (once per set of versions) a lock of this machine's closure of survivor-train: each
    `name==version --hash=sha256:...` of a wheel kept in `cache_dir`/wheelhouse. Returns its path."""
    closure = dependency_closure()
    pins = sorted(f"{name}=={version}" for name, version in closure.items())
    key = hashlib.sha256("\n".join(pins).encode()).hexdigest()[:12]
    wheelhouse = os.path.join(cache_dir, "wheelhouse")
    lock = os.path.join(cache_dir, f"machine-lock-{key}.txt")
    if os.path.exists(lock):
        return lock
    os.makedirs(wheelhouse, exist_ok=True)
    missing = [pin for pin in pins if not _wheel_for(wheelhouse, *pin.split("=="))]
    if missing:  # the package index can fail for a moment (seen once in a suite run): retried, then raised
        for attempt in retry.Policy(
            "pip download of the rehearsal's wheelhouse",
            attempts=3,
            deadline=120.0,
            attempt_seconds=300.0,
            initial=5.0,
            maximum=20.0,
            retry_on=_pip_failed,
        ):
            with attempt:
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "pip",
                        "download",
                        "--quiet",
                        "--no-deps",
                        "--only-binary",
                        ":all:",
                        "--disable-pip-version-check",
                        "--dest",
                        wheelhouse,
                        *missing,
                    ],
                    check=True,
                )
    lines = [f"# this machine's closure of survivor-train ({sys.version.split()[0]}), for the boot rehearsal"]
    for pin in pins:
        name, version = pin.split("==")
        wheel = _wheel_for(wheelhouse, name, version)
        if wheel is None:
            raise RuntimeError(f"no wheel of {pin} in {wheelhouse}")
        lines.append(f"{pin} --hash=sha256:{sha256_of(os.path.join(wheelhouse, wheel))}")
    with open(lock + ".tmp", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(lock + ".tmp", lock)
    return lock


def _wheel_for(wheelhouse: str, name: str, version: str) -> str | None:
    for file in os.listdir(wheelhouse):
        parts = file.split("-")
        if file.endswith(".whl") and len(parts) >= 2 and _normal(parts[0]) == _normal(name) and parts[1] == version:
            return file
    return None


def _pip_failed(exc: BaseException) -> bool:
    """A pip download that exited non-zero: worth another try (the index or the network, for a moment)."""
    return isinstance(exc, subprocess.CalledProcessError)


def wheelhouse_env(cache_dir: str) -> dict[str, str]:
    """pip's own environment variables: the local wheelhouse only, and no machine-wide pip config."""
    return {
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": os.path.join(cache_dir, "wheelhouse"),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }


def default_cache_dir() -> str:
    """Where rehearsals keep the wheelhouse they build once (the user's cache dir)."""
    return os.path.join(os.path.expanduser("~"), ".cache", "survivor", "rehearsal")


# -- a boot disk -----------------------------------------------------------------------------------


@dataclass
class Boot:
    """One run of the startup script: its exit code, output and wall time."""

    returncode: int
    output: str
    seconds: float


class SandboxRoot:
    """A boot disk's root in a directory every user can traverse (the trainer runs as `survivor-trainer`)."""

    def __init__(self, path: str):
        self.path = path

    @classmethod
    def create(cls, parent: str | None = None) -> "SandboxRoot":
        """A new, empty sandbox root (mode 0755, so the unit's User= can walk it) under `parent`."""
        path = tempfile.mkdtemp(prefix="survivor-root-", dir=parent)
        os.chmod(path, 0o755)
        return cls(path)

    def at(self, absolute: str) -> str:
        """The sandbox's path for an absolute path on the VM."""
        return os.path.join(self.path, absolute.lstrip("/"))

    def run_startup(self, metadata_host: str, env: dict[str, str] | None = None, timeout: float = 600.0) -> Boot:
        """Runs startup.sh as Compute Engine would (root, every boot), with its paths under this root."""
        environment = {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": "/root",
            "SURVIVOR_ROOT": self.path,
            "GCE_METADATA_HOST": metadata_host,
            **(env or {}),
        }
        started = time.monotonic()
        result = subprocess.run(
            ["/bin/bash", STARTUP], env=environment, capture_output=True, text=True, timeout=timeout
        )
        return Boot(result.returncode, result.stdout + result.stderr, time.monotonic() - started)

    def unit_text(self) -> str:
        """The systemd unit as startup.sh installed it in the sandbox."""
        with open(self.at(UNIT), encoding="utf-8") as f:
            return f.read()

    def unit_value(self, key: str, default: str | None = None) -> str:
        """A key of the unit's [Service] section (the last one set, as systemd takes it), or
        `default` when the unit does not set it."""
        values = re.findall(rf"^{re.escape(key)}=(.*)$", self.unit_text(), re.M)
        if not values:
            if default is not None:
                return default
            raise KeyError(f"{key}= is not in {self.at(UNIT)}")
        return values[-1].strip()

    def exec_start(self) -> list[str]:
        """The unit's ExecStart argv, its boot-disk paths mapped into this root."""
        return [self._mapped(word) for word in shlex.split(self.unit_value("ExecStart"))]

    def _mapped(self, word: str) -> str:
        for disk in DISK_PATHS:
            if word == disk or word.startswith(disk + "/"):
                return self.at(word)
        return word

    def start_agent(self, env: dict[str, str], log_path: str) -> subprocess.Popen:
        """What systemd does with the unit: its StateDirectory= owned by its User= (root when it
        names none, as systemd.exec(5) defaults), then ExecStart as that user in WorkingDirectory=,
        with Environment= added to what the stand-ins need."""
        user = self.unit_value("User", default="root")
        account = pwd.getpwnam(user)
        state = self.at("/var/lib/" + self.unit_value("StateDirectory"))
        os.makedirs(state, exist_ok=True)
        os.chown(state, account.pw_uid, account.pw_gid)
        key, _, value = self.unit_value("Environment").partition("=")
        environment = {"PATH": SERVICE_PATH, "HOME": account.pw_dir, "USER": user, key: value, **env}
        log = open(log_path, "ab")
        try:
            return subprocess.Popen(
                self.exec_start(),
                cwd=self._mapped(self.unit_value("WorkingDirectory")),
                env=environment,
                user=account.pw_uid,
                group=account.pw_gid,
                extra_groups=[],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        finally:
            log.close()

    def verify_unit(self) -> subprocess.CompletedProcess:
        """`systemd-analyze verify` of the written unit inside this root (with the host's system units,
        which the unit's dependencies name)."""
        units = self.at("/usr/lib/systemd/system")
        if not os.path.isdir(units):
            shutil.copytree("/usr/lib/systemd/system", units, symlinks=True)
        return subprocess.run(
            ["systemd-analyze", "verify", f"--root={self.path}", "/" + UNIT], capture_output=True, text=True
        )

    def remove(self) -> None:
        """Deletes the sandbox root and everything the boot put in it."""
        shutil.rmtree(self.path, ignore_errors=True)
