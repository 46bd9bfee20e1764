"""The agent's read buffers: an upload thread's read of a checkpoint file reuses memory paged in at
start instead of faulting in fresh pages on the way to safety."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from survivor.agent import memory

glibc_only = pytest.mark.skipif(memory._glibc_mallopt() is None or not sys.platform.startswith("linux"),
                                reason="glibc's mallopt is what is tuned")

# A fresh process (as the agent is) uploads a 10 MB file through GcsStorage's upload threads,
# with or without warm_read_buffers() first; it prints the page faults the upload took.
CHILD = r"""
import json, os, resource, sys
from survivor.agent import memory
warmed = sys.argv[3] == "warm" and memory.warm_read_buffers(background=False)
from survivor.jobdir.storage import GcsStorage
storage = GcsStorage(sys.argv[1])
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
storage.upload([(sys.argv[2], "blob")])
print(json.dumps({"warmed": warmed, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
"""


def _upload_faults(bucket: str, path: str, mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, f"gs://{bucket}/memory-{mode}", path, mode],
                         capture_output=True, text=True, timeout=120, env=os.environ.copy())
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@glibc_only
def test_an_upload_after_warming_reads_into_pages_already_there(bucket, tmp_path):
    path = tmp_path / "ckpt.data"
    path.write_bytes(os.urandom(10_000_000))
    cold = _upload_faults(bucket, str(path), "cold")
    warm = _upload_faults(bucket, str(path), "warm")
    assert warm["warmed"] is True and cold["warmed"] is False
    # 10 MB of fresh memory is ~2,440 faults of 4 KiB; warmed, the read buffer needs none of them
    assert cold["faults"] > 2000
    assert warm["faults"] < cold["faults"] - 2000


def test_without_glibc_settings_nothing_changes():
    calls = []

    def musl_like(param: int, value: int) -> int:
        calls.append(param)
        return 0  # musl's mallopt accepts nothing

    assert memory.warm_read_buffers(mallopt=musl_like, background=False) is False
    assert memory.keep_heap_memory(mallopt=musl_like) is False
    assert calls and set(calls) <= {memory.M_ARENA_MAX, memory.M_MMAP_THRESHOLD, memory.M_TRIM_THRESHOLD}


def test_every_setting_is_asked_for():
    asked = {}

    def glibc_like(param: int, value: int) -> int:
        asked[param] = value
        return 1

    assert memory.warm_read_buffers(nbytes=1 << 20, mallopt=glibc_like, background=False) is True
    assert asked == {memory.M_ARENA_MAX: 1, memory.M_MMAP_THRESHOLD: memory.HEAP_ALLOCATION_LIMIT,
                     memory.M_TRIM_THRESHOLD: memory.KEEP_FREED}
