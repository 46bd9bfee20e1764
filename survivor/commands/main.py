"""The `survivor` command line: the agent, the demo, the emulators and the operator commands."""

from __future__ import annotations

import argparse
import faulthandler
import signal
import json
import os
import sys

from survivor import __version__
from survivor import log as logs


#: SIGTERM/SIGINT that came before the agent's own handlers: `main` notes them from its first line
#: (a preemption can come while the imports still run, and dying then leaves no record), and the
#: agent ends its boot at once when it sees one (`agent.Boot.run`).
_early_signals: list[str] = []


def _note_early_signals() -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: _early_signals.append(signal.Signals(signum).name))


def _agent(args: argparse.Namespace) -> int:
    early = _early_signals
    from survivor.agent import boot as agent
    from survivor.agent import memory

    logs.setup(args.log_format, args.log_level)
    # Before any thread starts: upload reads reuse memory paged in now, not on the way to safety.
    memory.warm_read_buffers()
    # `kill -USR1 <agent pid>` prints every thread's stack to the journal: how to debug a stuck agent.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    options = agent.AgentOptions(
        workdir=args.workdir,
        spec_file=args.config,
        allow_root_trainer=args.allow_root_trainer,
        gpu_wait_seconds=args.gpu_wait_seconds,
        early_signals=early,
    )
    return agent.run(options)


def _demo(args: argparse.Namespace) -> int:
    from survivor.local import demo

    return demo.main(args)


def _emulate(args: argparse.Namespace) -> int:
    from survivor.local.metadata_server import serve_forever

    attributes = {}
    if args.config:
        with open(args.config, encoding="utf-8") as f:
            attributes["survivor-job"] = f.read()
    for item in args.attribute or []:
        key, _, value = item.partition("=")
        attributes[key] = value
    serve_forever(args.port, attributes, name=args.name, zone=args.zone, project=args.project)
    return 0


def _submit(args: argparse.Namespace) -> int:
    import yaml

    from survivor.cloud import vertex
    from survivor.spec import JobSpec, SpecError

    try:
        spec = JobSpec.from_file(args.config)
        section = spec.extra.get("vertex", {})
        legacy = spec.extra.get("trainingInput")
        if args.training_input:
            with open(args.training_input, encoding="utf-8") as f:
                loaded = yaml.safe_load(f) or {}
            legacy = loaded.get("trainingInput", loaded)
        notes: list[str] = []
        if legacy:
            pools, notes = vertex.translate_training_input(legacy)
        else:
            pools = vertex.pools_from_spec(spec)
        spot = args.spot if args.spot is not None else bool(section.get("spot", False))
        body = vertex.custom_job_body(spec, pools, package_uri=args.package or section.get("package"),
                                      container_image=args.container_image or section.get("container_image"),
                                      executor_images=args.executor_image or section.get("executor_images") or (),
                                      spot=spot)
        region = args.region or section.get("region") or "us-central1"
        project = args.project or section.get("project") or os.environ.get("GOOGLE_CLOUD_PROJECT")
    except SpecError as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if args.dry_run:
        print(json.dumps(body, indent=2))
        return 0
    if not project:
        print("error: project: give --project, vertex.project in the spec, or set GOOGLE_CLOUD_PROJECT", file=sys.stderr)
        return 2
    try:
        created = vertex.submit(body, project, region)
    except Exception as exc:
        message = getattr(exc, "message", None) or str(exc)
        print(f"error: submitting the custom job failed: {message}", file=sys.stderr)
        return 1
    print(f"submitted {created['name']}")
    print(f"watch it: survivor status --vertex {created['name']} --job-dir {spec.job_dir}")
    return 0


def _data(args: argparse.Namespace) -> int:
    from survivor.trainers import cifar10_data

    import tarfile

    try:
        if args.archive:
            counts = cifar10_data.from_python_archive(args.archive, args.out)
        else:
            counts = cifar10_data.synthetic(args.synthetic, args.out, seed=args.seed)
    except (OSError, tarfile.TarError, EOFError) as exc:
        print(f"error: {args.archive or args.out}: {exc}; expected the official cifar-10-python.tar.gz "
              "(https://www.cs.toronto.edu/~kriz/cifar.html)", file=sys.stderr)
        return 1
    print(" ".join(f"{split}.tfrecords: {n}" for split, n in counts.items()) + f" (in {args.out})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="survivor",
        description="TensorFlow training on Spot VMs that survives preemption and finishes exactly once.",
    )
    parser.add_argument("--version", action="version", version=f"survivor {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("agent", help="the daemon a VM's startup script runs: resume, train, save on notice, finish")
    p.add_argument("--workdir", default=os.environ.get("SURVIVOR_WORKDIR", "/var/lib/survivor"),
                   help="local state: the trainer's job dir, delivered code (default /var/lib/survivor)")
    p.add_argument("--config", help="read the job spec from this YAML file instead of instance metadata")
    p.add_argument("--allow-root-trainer", action="store_true",
                   help="let the trainer run as root when the agent does (local use only)")
    p.add_argument("--gpu-wait-seconds", type=float, default=900.0,
                   help="how long to wait for the NVIDIA driver on a first boot (default 900)")
    p.add_argument("--log-format", choices=["auto", "json", "text"], default="auto",
                   help="json: one object per line for Cloud Logging (default when not a terminal)")
    p.add_argument("--log-level", default="INFO")
    p.set_defaults(func=_agent)

    p = sub.add_parser("demo", help="the whole lifecycle on this machine: train, get preempted, resume, finish")
    p.add_argument("--steps", type=int, default=None, help="training steps (default: the trainer's demo size)")
    p.add_argument("--preemptions", type=int, default=3, help="how many preemptions to inflict (default 3)")
    p.add_argument("--trainer", choices=["cifar10", "mlp", "dummy"], default="cifar10",
                   help="built-in trainer: cifar10 (ResNet-8 on synthetic images, the default), mlp, or dummy")
    p.add_argument("--gcs", action="store_true", help="keep the job dir in fake-gcs-server instead of a local dir")
    p.add_argument("--workdir", default=None, help="where to keep the demo's files (default: a temporary dir)")
    p.add_argument("--seed", type=int, default=None, help="seed for the preemption schedule")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_demo)

    p = sub.add_parser("simulate", help="run a job through a local MIG simulator with Spot-style preemptions")
    p.add_argument("--config", required=True, help="the job spec YAML (a relative job_dir goes under --workdir)")
    p.add_argument("--preempt-every", default="90s", help="mean time between preemptions (90s, 2m, ...)")
    p.add_argument("--jitter", default="0s", help="uniform +- jitter on that interval")
    p.add_argument("--hard-off-after", default="30s", help="SIGKILL this long after the soft off (Spot: 30s)")
    p.add_argument("--recreate-delay", default="2s", help="how long the MIG takes to recreate the VM")
    p.add_argument("--max-preemptions", type=int, default=None)
    p.add_argument("--timeout", default="2h")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gcs", action="store_true", help="keep the job dir in the Cloud Storage emulator")
    p.add_argument("--workdir", help="where the simulated VMs' disks and logs go (default ./survivor-simulation)")
    p.set_defaults(func=lambda args: __import__("survivor.local.simulator", fromlist=["main"]).main(args))

    p = sub.add_parser("submit", help="run the job on Vertex AI custom jobs (many workers, managed restarts)")
    p.add_argument("--config", required=True, help="the job spec YAML")
    p.add_argument("--training-input", help="a Cloud ML Engine config.yaml (trainingInput: scaleTier, masterType...)")
    p.add_argument("--project")
    p.add_argument("--region", default=None, help="Vertex region (default: vertex.region or us-central1)")
    p.add_argument("--package", help="gs:// sdist holding the trainer (survivor_train-VERSION.tar.gz for a builtin trainer)")
    p.add_argument("--container-image", help="run this image instead of a Python package")
    p.add_argument("--executor-image", action="append", default=None, metavar="URI",
                   help="a prebuilt training image newer than survivor's table (once for -cpu., once for -gpu.)")
    p.add_argument("--spot", action="store_true", default=None, help="Spot VMs for every worker pool")
    p.add_argument("--dry-run", action="store_true", help="print the request; send nothing")
    p.set_defaults(func=_submit)

    p = sub.add_parser("emulate", help="run a local stand-in for a Google Cloud service")
    esub = p.add_subparsers(dest="service", required=True)
    e = esub.add_parser("metadata", help="the metadata-server emulator on 127.0.0.1")
    e.add_argument("--port", type=int, default=8089)
    e.add_argument("--config", help="a job spec YAML to serve as the survivor-job attribute")
    e.add_argument("--attribute", action="append", metavar="KEY=VALUE", help="an instance attribute (repeatable)")
    e.add_argument("--name", default="survivor-local-1")
    e.add_argument("--zone", default="us-west1-b")
    e.add_argument("--project", default="survivor-local")
    e.set_defaults(func=_emulate)
    e = esub.add_parser("compute", help="survivor's Compute Engine fake on 127.0.0.1 (templates, MIGs, quotas, GPUs)")
    e.add_argument("--port", type=int, default=8090)
    e.add_argument("--project", default=os.environ.get("GOOGLE_CLOUD_PROJECT", "survivor-local"),
                   help="the project --quota applies to (default $GOOGLE_CLOUD_PROJECT or survivor-local)")
    e.add_argument("--stockout", action="append", default=[], metavar="ZONE",
                   help="a MIG's VM cannot be created in ZONE (ZONE_RESOURCE_POOL_EXHAUSTED; repeatable)")
    e.add_argument("--quota", action="append", default=[], metavar="REGION:METRIC=LIMIT",
                   help="a regional quota, e.g. us-west1:PREEMPTIBLE_NVIDIA_T4_GPUS=0 (GPU quotas default to 8)")
    e.add_argument("--image-family", action="append", default=[], metavar="PROJECT/FAMILY",
                   help="an image family that resolves (the Deep Learning VM family always does)")
    e.set_defaults(func=lambda a: __import__("survivor.local.compute_server", fromlist=["serve_forever"]).serve_forever(
        a.port, project=a.project, stockouts=a.stockout, quotas=a.quota, image_families=a.image_family))
    e = esub.add_parser("storage", help="fake-gcs-server with bucket IAM in front, on 127.0.0.1")
    e.add_argument("--port", type=int, default=4443)
    e.add_argument("--project", default=os.environ.get("GOOGLE_CLOUD_PROJECT", "survivor-local"))
    e.add_argument("--bucket", action="append", default=[], metavar="NAME", help="create this bucket (repeatable)")
    e.add_argument("--grant", action="append", default=[], metavar="BUCKET=ROLE",
                   help="bind ROLE on BUCKET to the Compute fake's default service account (repeatable)")
    e.set_defaults(func=lambda a: __import__("survivor.local.bucket_iam", fromlist=["serve_forever"]).serve_forever(
        a.port, project=a.project, buckets=a.bucket, grants=a.grant))

    p = sub.add_parser("data", help="write training data in the layout the built-in trainers read")
    dsub = p.add_subparsers(dest="dataset", required=True)
    d = dsub.add_parser("cifar10", help="CIFAR-10 TFRecords (train/validation/eval), as the estimator example's")
    source = d.add_mutually_exclusive_group(required=True)
    source.add_argument("--from", dest="archive", help="the official cifar-10-python.tar.gz")
    source.add_argument("--synthetic", type=int, metavar="N", help="N deterministic fake training images")
    d.add_argument("--out", required=True, help="output directory")
    d.add_argument("--seed", type=int, default=0)
    d.set_defaults(func=_data)

    from survivor.commands import group as operator

    operator.add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    if (sys.argv[1:] if argv is None else argv)[:1] == ["agent"]:
        _note_early_signals()  # before the parser, which imports every command's module
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
