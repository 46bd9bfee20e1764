"""How long a boot takes to reach the first training step: survivor's image vs the wheel path.

    sudo python -m benchmarks.boot [--wheel-boots 3] [--image-boots 5]

Uses the boot rehearsal (survivor/local/boot.py): survivor/startup/startup.sh run for real as root in
a sandbox root against the metadata emulator and fake-gcs-server, then the unit's ExecStart as
systemd runs it (root), training the dummy trainer (as survivor-trainer). Two ways to boot:

- wheel path: a fresh root (a MIG's recreated VM) with metadata naming the staged wheel and lock;
  the script downloads both and pip installs them into a new venv;
- image path: a root that already holds the venv (made once by the script's build mode, as
  `survivor make-image` makes survivor's image) with metadata as make-template gives for the image:
  no wheel, nothing to install.

Timed from the script's start and from the unit's start (the script's end, when systemd would start
the unit) to the first step the trainer executes (its step log appearing). The lock is this
machine's closure of survivor-train with its wheels in a local wheelhouse, so the wheel path here
has no network in it: on a VM, downloading TensorFlow's CUDA wheels (~3 GB) comes on top.
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import statistics
import textwrap
import time
import uuid

from benchmarks.common import ROOT, machine, table
from survivor.operator import image
from survivor.local.boot import SandboxRoot, default_cache_dir, machine_lock, wheelhouse_env
from survivor.local.gcs import StorageEmulator
from survivor.local.metadata_server import MetadataServer
from survivor.spec import JobSpec
from survivor.cloud.template import MachineOptions, template_body

DOC = os.path.join(ROOT, "docs", "benchmarks.md")
#: The dummy trainer's step log, where only the trainer's user (survivor-trainer) may write.
STEPS_LOG = "/var/log/boot-bench/steps.log"
SECTION = "## Boot to the first step: survivor's image vs the wheel path"


def attributes(job_dir: str, steps_log: str, install) -> dict[str, str]:
    spec = JobSpec.from_mapping(
        {
            "name": "boot-bench",
            "job_dir": job_dir,
            "train_steps": 20,
            "checkpoint_steps": 10,
            "grace_seconds": 5,
            "sync_seconds": 0.3,
            "on_finish": "keep-alive",
            "trainer": {"builtin": "dummy"},
            "hyperparameters": {"step-seconds": "0.02", "step-log": steps_log},
        }
    )
    body = template_body("boot-bench", spec, MachineOptions.from_spec(spec), install=install)
    return {item["key"]: item["value"] for item in body["properties"]["metadata"]["items"]}


def one_boot(
    root: SandboxRoot, metadata: MetadataServer, env: dict[str, str], gcs_url: str, log_dir: str
) -> tuple[float, float, str]:
    """(script start -> first step, unit start -> first step, the script's output) for one boot."""
    steps_log = root.at(STEPS_LOG)
    shutil.rmtree(root.at("/var/lib/survivor"), ignore_errors=True)  # the agent's state: not on the image
    shutil.rmtree(os.path.dirname(steps_log), ignore_errors=True)
    started = time.monotonic()
    boot = root.run_startup(metadata.host, env=env)
    if boot.returncode != 0:
        raise RuntimeError(f"the startup script failed:\n{boot.output}")
    os.makedirs(os.path.dirname(steps_log))  # the trainer's (startup.sh made the user)
    os.chown(os.path.dirname(steps_log), pwd.getpwnam("survivor-trainer").pw_uid, -1)
    unit_started = time.monotonic()
    agent = root.start_agent(
        {"GCE_METADATA_HOST": metadata.host, "STORAGE_EMULATOR_HOST": gcs_url},
        os.path.join(log_dir, f"agent-{uuid.uuid4().hex[:6]}.log"),
    )
    try:
        while not os.path.exists(steps_log):
            if agent.poll() is not None:
                raise RuntimeError(f"the agent exited ({agent.returncode}) before a step; see {log_dir}")
            time.sleep(0.005)
        first_step = time.monotonic()
        agent.wait(120)
    finally:
        if agent.poll() is None:
            agent.kill()
    return first_step - started, first_step - unit_started, boot.output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel-boots", type=int, default=3)
    parser.add_argument("--image-boots", type=int, default=5)
    parser.add_argument("--no-doc", action="store_true", help="print the table only; leave docs/benchmarks.md")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("the startup script runs as root: run this as root")

    cache = default_cache_dir()
    wheel, lock = image.build_wheel(), machine_lock(cache)
    pip_env = wheelhouse_env(cache)
    log_dir = os.path.join(cache, "boot-bench-logs")
    os.makedirs(log_dir, exist_ok=True)
    results: dict[str, list[tuple[float, float]]] = {"wheel": [], "image": []}
    with StorageEmulator() as gcs:
        bucket = f"boot-bench-{uuid.uuid4().hex[:8]}"
        gcs.create_bucket(bucket)
        env = {**pip_env, "STORAGE_EMULATOR_HOST": gcs.url}

        def metadata_for(root: SandboxRoot, install, name: str) -> MetadataServer:
            job_dir = f"gs://{bucket}/runs/{uuid.uuid4().hex[:8]}"
            staged = image.stage_install(job_dir, image.LocalInstall(wheel, lock)) if install else None
            return MetadataServer(attributes=attributes(job_dir, root.at(STEPS_LOG), staged), name=name).start()

        for _ in range(args.wheel_boots):  # each a fresh disk
            root = SandboxRoot.create()
            metadata = metadata_for(root, True, "boot-bench-wheel")
            try:
                results["wheel"].append(one_boot(root, metadata, env, gcs.url, log_dir)[:2])
            finally:
                metadata.stop()
                root.remove()
            print(f"wheel path: {results['wheel'][-1][0]:.1f} s", flush=True)

        # survivor's image: the build mode's disk, booted with the metadata make-template gives the image
        image_root = SandboxRoot.create()
        try:
            builder = metadata_for(image_root, True, "boot-bench-builder")
            builder.set("instance/attributes/survivor-mode", "build")
            built = image_root.run_startup(builder.host, env=env)
            builder.stop()
            if built.returncode != 0:
                raise RuntimeError(f"build mode failed:\n{built.output}")
            for _ in range(args.image_boots):
                metadata = metadata_for(image_root, False, "boot-bench-image")
                try:
                    timing = one_boot(image_root, metadata, env, gcs.url, log_dir)
                    assert "using the survivor already in" in timing[2], timing[2]
                    results["image"].append(timing[:2])
                finally:
                    metadata.stop()
                print(f"image path: {results['image'][-1][0]:.1f} s", flush=True)
        finally:
            image_root.remove()

    rows = []
    for path, label in (("image", "survivor's image (venv on the disk)"), ("wheel", "wheel path (fresh disk)")):
        script = [r[0] for r in results[path]]
        unit = [r[1] for r in results[path]]
        rows.append([label, len(script), statistics.median(script), max(script), statistics.median(unit), max(unit)])
    text = table(
        "Boot to the first training step (seconds)",
        ["boot", "boots", "script start: median", "worst", "unit start: median", "worst"],
        rows,
    )
    speedup = rows[1][2] / rows[0][2]
    summary = (
        f"Machine: {machine()}. The wheel path's pip install is from a local wheelhouse (no network); "
        f"the image path reaches the first step {speedup:.1f}x sooner from the script's start."
    )
    print(text)
    print(summary)
    if not args.no_doc:
        write_section(text, summary)


def write_section(text: str, summary: str) -> None:
    with open(DOC, encoding="utf-8") as f:
        doc = f.read()
    intro = (
        "`sudo python -m benchmarks.boot` (the boot rehearsal of tests/test_boot_rehearsal.py, timed): "
        "survivor/startup/startup.sh as root in a sandbox root against the metadata emulator and "
        "fake-gcs-server, then the unit's ExecStart as systemd runs it (root), to the dummy trainer's first step "
        "(as `survivor-trainer`). "
        "The wheel path boots a fresh disk: it downloads the staged wheel and lock and pip installs them "
        "(`--require-hashes`) into a new venv. The image path boots a disk that already holds the venv "
        "(made by the script's build mode, as `survivor make-image` makes survivor's image) with the "
        "metadata make-template gives such an image: nothing to install."
    )
    after = (
        f"{summary} On a VM the wheel path also downloads the lock's wheels from the package index on "
        "every fresh disk (gigabytes: TensorFlow's own wheel is 572 MB, and tensorflow[and-cuda] adds the "
        "CUDA libraries), which is what the image removes. The unit-start column is the same work on both "
        "paths (the agent and the trainer starting); the machine was shared with other test runs."
    )
    body = f"{SECTION}\n\n{textwrap.fill(intro, 100, break_on_hyphens=False)}\n\n{text}\n{textwrap.fill(after, 100, break_on_hyphens=False)}\n"
    if SECTION in doc:
        start = doc.index(SECTION)
        end = doc.find("\n## ", start + len(SECTION))
        doc = doc[:start] + body + (doc[end + 1 :] if end != -1 else "")
    else:
        doc = doc.rstrip("\n") + "\n\n" + body
    with open(DOC, "w", encoding="utf-8") as f:
        f.write(doc)


if __name__ == "__main__":
    main()
