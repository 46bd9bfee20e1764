"""How many GPUs the VM has, from `nvidia-smi -L`, waiting for the driver on a first boot.

Deep Learning VM images install the NVIDIA driver on first boot (`install-nvidia-driver=True`),
which takes minutes: until then `nvidia-smi` is missing or lists nothing.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from typing import Callable

from survivor import log as logs
from survivor.metadata import MetadataClient

log = logs.get("gpus")


def parse_nvidia_smi_list(output: str) -> int:
    """Counts `GPU 0: Tesla T4 (UUID: ...)` lines."""
    return sum(1 for line in output.splitlines() if re.match(r"^GPU \d+:", line.strip()))


def count_gpus(run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> int:
    """The number of GPUs `nvidia-smi -L` lists; 0 when it is absent or fails."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        result = run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return parse_nvidia_smi_list(result.stdout) if result.returncode == 0 else 0


def decide_gpu_count(requested: int | None, detected: int) -> int:
    """Pure decision: the spec's count when given (capped by what exists, if any exist), else all."""
    if requested is None:
        return detected
    if detected and requested > detected:
        log.warning(
            "the spec asks for more GPUs than the VM has; using all it has", requested=requested, detected=detected
        )
        return detected
    return requested


def wait_for_gpus(
    expected: int,
    timeout: float,
    counter: Callable[[], int] = count_gpus,
    poll: float = 10.0,
    stop: threading.Event | None = None,
) -> int:
    """Waits until `expected` GPUs are listed (the driver is installing), `timeout`, or `stop` is set
    (a notice or SIGTERM: the VM is going); returns the count."""
    stop = stop or threading.Event()
    deadline = time.monotonic() + timeout
    count = counter()
    while count < expected and time.monotonic() < deadline and not stop.is_set():
        log.info("waiting for the GPU driver", found=count, expected=expected)
        if stop.wait(poll):
            log.info("stopped waiting for the GPU driver: the VM is going")
            break
        count = counter()
    return count


def gpus_for(
    requested: int | None,
    metadata: MetadataClient | None,
    wait_seconds: float,
    stop: threading.Event | None = None,
    detected: int | None = None,
) -> int:
    """The number of GPUs the trainer gets on this VM: the spec's count (`requested`, None for all)
    against what `nvidia-smi` lists (`detected`, when the caller has just counted), after waiting up
    to `wait_seconds` for the driver when the VM installs it on this boot (the
    `install-nvidia-driver` attribute) and fewer than asked are there."""
    detected = count_gpus() if detected is None else detected
    if requested and driver_pending(requested, detected, metadata):
        detected = wait_for_gpus(requested, wait_seconds, stop=stop)
    count = decide_gpu_count(requested, detected)
    log.info("GPUs", detected=detected, using=count)
    return count


def driver_pending(requested: int | None, detected: int, metadata: MetadataClient | None) -> bool:
    """Whether fewer GPUs than `requested` are there because this boot still installs the driver
    (the `install-nvidia-driver` attribute): then `gpus_for` waits for them."""
    if not requested or detected >= requested or metadata is None:
        return False
    return (metadata.get_or("instance/attributes/install-nvidia-driver", "") or "").lower() == "true"
