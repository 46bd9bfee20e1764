"""Helpers for the bit-for-bit resume tests: run a trainer module, preempt it, compare checkpoints."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np


def run_trainer(module: str, job_dir: str, args: list[str], *, stop_at: int | None = None, timeout: float = 300) -> str:
    """Runs `python -m module`; with `stop_at`, sends SIGTERM once it reports that step. Returns its output."""
    progress = os.path.join(os.path.dirname(job_dir.rstrip("/")), f"progress-{os.path.basename(job_dir)}.json")
    if os.path.exists(progress):
        os.remove(progress)
    env = {**os.environ, "SURVIVOR_PROGRESS_FILE": progress, "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.Popen(
        [sys.executable, "-m", module, "--job-dir", job_dir, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + timeout
    if stop_at is not None:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with open(progress) as f:
                    if json.load(f)["step"] >= stop_at:
                        proc.send_signal(signal.SIGTERM)
                        break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.005)
    out, _ = proc.communicate(timeout=max(1, deadline - time.monotonic()))
    if proc.returncode != 0:
        raise AssertionError(f"{module} exited {proc.returncode}:\n{out.decode(errors='replace')[-3000:]}")
    return out.decode(errors="replace")


def checkpoint_values(directory: str) -> dict[str, np.ndarray]:
    """Every saved tensor of the latest checkpoint in `directory`, read with stock TensorFlow."""
    import tensorflow as tf

    path = tf.train.latest_checkpoint(directory)
    assert path, f"no checkpoint in {directory}"
    reader = tf.train.load_checkpoint(path)
    dtypes = reader.get_variable_to_dtype_map()
    return {
        name: reader.get_tensor(name)
        for name, dtype in dtypes.items()
        if dtype not in (tf.variant, tf.resource) and "save_counter" not in name
    }


def assert_bitwise_equal(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert sorted(a) == sorted(b)
    differing = [name for name in a if not np.array_equal(np.asarray(a[name]), np.asarray(b[name]))]
    assert not differing, f"differ: {differing}"
