"""The dummy trainer, saving a state whose every MiB is its own: what the benchmarks of large states stop.

    python -m benchmarks.state_trainer --job-dir /tmp/job --checkpoint-bytes 4000000000 [--frozen 0.9]

`survivor.trainers.dummy` pads its checkpoint with one random MiB written over and over. A store
that names chunks by their contents would hold that file as two or three chunks and upload almost
nothing, which measures nothing. Here each MiB carries its index (and, beyond the `--frozen`
fraction, the step) in its first 16 bytes, so no two chunks of a save are alike, and the first
`--frozen` fraction of the file is the same in every save, as a model's frozen layers are. Writing
it costs what the dummy's write costs; everything else is the dummy trainer's own.
"""

from __future__ import annotations

import os
import re
import sys

from survivor.trainers import dummy

_BLOCK = bytearray(os.urandom(1 << 20))
_SMALL_FILE_SAVE = dummy.save  # the dummy's own, for the step's small file


def save(job_dir: str, step: int, padding: int = 0, frozen: float = 0.0) -> None:
    """The dummy's save, with a state file of distinct MiBs (see the module docstring)."""
    if padding:
        tmp = os.path.join(job_dir, f".dummy-checkpoint-{step}.data.tmp")
        fixed = int(padding * frozen) >> 20
        with open(tmp, "wb") as f:
            for index in range((padding + (1 << 20) - 1) >> 20):
                _BLOCK[:16] = index.to_bytes(8, "big") + (0 if index < fixed else step).to_bytes(8, "big")
                f.write(_BLOCK[: min(1 << 20, padding - (index << 20))])
        os.replace(tmp, os.path.join(job_dir, f"dummy-checkpoint-{step}.data"))
        for name in os.listdir(job_dir):  # keep only the newest state file, like CheckpointManager
            m = re.fullmatch(r"dummy-checkpoint-(\d+)\.data", name)
            if m and int(m.group(1)) < step:
                os.remove(os.path.join(job_dir, name))
    _SMALL_FILE_SAVE(job_dir, step, 0)  # the step's small file, renamed into place right after the state file


def main(argv: list[str]) -> int:
    """Runs the dummy trainer with this module's save; `--frozen F` is taken out of `argv` here."""
    frozen = 0.0
    if "--frozen" in argv:
        at = argv.index("--frozen")
        frozen = float(argv[at + 1])
        argv = argv[:at] + argv[at + 2 :]
    dummy.save = lambda job_dir, step, padding=0: save(job_dir, step, padding, frozen)
    return dummy.main(argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
