"""Where survivor's code runs: every image the templates boot and every Vertex AI prebuilt training
image `survivor submit` may name, with the Python each one brings. Pure data.

    >>> VM_IMAGE_FAMILIES["common-cu128-ubuntu-2204-nvidia-570"].python
    (3, 10)

The package's floor (`requires-python` in pyproject.toml) must admit every Python here;
tests/test_python_floor.py holds the two together.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass

#: The oldest Python survivor supports; pyproject.toml says `requires-python = ">=3.10"`.
PYTHON_FLOOR = (3, 10)


@dataclass(frozen=True)
class VmImageFamily:
    """A Compute Engine image family a template may boot, and the python3 its OS ships."""

    family: str
    project: str
    os: str
    python: tuple[int, int]


# Deep Learning VM families: https://cloud.google.com/deep-learning-vm/docs/images (family names
# `common-cuXYZ-ubuntu-YYMM-nvidia-DRIVER`). The python3 of each Ubuntu release:
# https://packages.ubuntu.com/jammy/python3 (22.04: 3.10), https://packages.ubuntu.com/noble/python3
# (24.04: 3.12). The agent's venv is made with that python3 (startup/startup.sh: `python3 -m venv`).
_DLVM = "deeplearning-platform-release"
VM_IMAGE_FAMILIES: dict[str, VmImageFamily] = {
    f.family: f
    for f in (
        VmImageFamily("common-cu128-ubuntu-2204-nvidia-570", _DLVM, "Ubuntu 22.04", (3, 10)),
        VmImageFamily("common-cu129-ubuntu-2204-nvidia-580", _DLVM, "Ubuntu 22.04", (3, 10)),
        VmImageFamily("common-cu128-ubuntu-2404-nvidia-570", _DLVM, "Ubuntu 24.04", (3, 12)),
        VmImageFamily("common-cu129-ubuntu-2404-nvidia-580", _DLVM, "Ubuntu 24.04", (3, 12)),
    )
}


@dataclass(frozen=True)
class VertexImage:
    """One row of Google's table of prebuilt containers for custom training."""

    uri: str  # the us- URI; europe- and asia- serve the same image
    framework: str
    accelerator: str  # "cpu" or "gpu"
    python: tuple[int, int]
    end_of_support: _dt.date  # "End of patch and support date"
    end_of_availability: _dt.date  # "End of availability"

    def supported_on(self, day: _dt.date) -> bool:
        """Google still patches it on `day`."""
        return day < self.end_of_support

    def available_on(self, day: _dt.date) -> bool:
        """Google still lists it on `day`."""
        return day < self.end_of_availability


# Google's table, TensorFlow rows with Python >= 3.10 (the ones survivor's trainers can run on):
# https://cloud.google.com/vertex-ai/docs/training/pre-built-containers (now served as
# https://docs.cloud.google.com/gemini-enterprise-agent-platform/machine-learning/training/pre-built-containers),
# read 2026-11-23. TensorFlow 2.17 is the newest TensorFlow row there; no TensorFlow row is supported
# or available after 2026-07-11. Rows of Python 3.7/3.8 (TF 2.11 and older, `tf-*.2-11:latest`)
# carry no `.pyXYZ` tag and are left out: the floor refuses them.
_TRAINING = "us-docker.pkg.dev/vertex-ai/training"
VERTEX_TRAINING_IMAGES: tuple[VertexImage, ...] = (
    VertexImage(
        f"{_TRAINING}/tf-cpu.2-17.py310:latest",
        "tensorflow 2.17",
        "cpu",
        (3, 10),
        _dt.date(2025, 7, 11),
        _dt.date(2026, 7, 11),
    ),
    VertexImage(
        f"{_TRAINING}/tf-gpu.2-17.py310:latest",
        "tensorflow 2.17",
        "gpu",
        (3, 10),
        _dt.date(2025, 7, 11),
        _dt.date(2026, 7, 11),
    ),
    VertexImage(
        f"{_TRAINING}/tf-cpu.2-16.py310:latest",
        "tensorflow 2.16",
        "cpu",
        (3, 10),
        _dt.date(2025, 6, 28),
        _dt.date(2026, 6, 28),
    ),
    VertexImage(
        f"{_TRAINING}/tf-gpu.2-16.py310:latest",
        "tensorflow 2.16",
        "gpu",
        (3, 10),
        _dt.date(2025, 6, 28),
        _dt.date(2026, 6, 28),
    ),
)
#: The Artifact Registry hosts Google serves each prebuilt image from (same table).
VERTEX_IMAGE_HOSTS = ("us-docker.pkg.dev", "europe-docker.pkg.dev", "asia-docker.pkg.dev")
