"""`survivor agent`: the daemon a VM's startup script runs (resume, train, save on notice, finish).

    $ survivor agent                                  # the job spec from instance metadata
    $ survivor agent --config job.yaml --workdir /tmp/vm   # locally, against the metadata emulator

The handler sets up logging and the debug signal, then hands typed `AgentOptions` to
`survivor.agent.boot.run`, which reads as the story of one boot.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import signal

from survivor.commands import flags

#: SIGTERM/SIGINT that came before the agent's own handlers: `note_early_signals` records them from
#: main's first line (a preemption can come while the imports still run, and dying then leaves no
#: record), and the agent ends its boot at once when it sees one (`agent.Boot.run`).
early_signals: list[str] = []


def note_early_signals() -> None:
    """Records SIGTERM and SIGINT in `early_signals` until the agent installs its own handlers."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: early_signals.append(signal.Signals(signum).name))


def run_agent(args: argparse.Namespace) -> int:
    """`survivor agent`: runs one boot of the daemon; its exit code is the agent's."""
    from survivor import log as logs
    from survivor.agent import boot as agent

    logs.setup(args.log_format, args.log_level)
    # `kill -USR1 <agent pid>` prints every thread's stack to the journal: how to debug a stuck agent.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    code = agent.run(
        agent.AgentOptions(
            workdir=args.workdir,
            spec_file=args.config,
            allow_root_trainer=args.allow_root_trainer,
            trainer_user=args.trainer_user,
            gpu_wait_seconds=args.gpu_wait_seconds,
            early_signals=early_signals,
        )
    )
    # The boot is over and its exit code decided. Python's finalization puts SIGTERM and SIGINT back
    # to their default (signalmodule.c, _PySignal_Fini), and the soft off that follows an agent's own
    # leaving of its group, or a notice it has already saved on, then killed the exiting process: the
    # unit's status said "killed by TERM" instead of the code the agent chose (a flaky test, a demo
    # boot shown as "agent exit -15"). Nothing is left for a signal to stop.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    return code


def add_commands(sub) -> None:
    """Adds `survivor agent` to the command line's subparsers."""
    p = flags.command(
        sub,
        "agent",
        help="the daemon a VM's startup script runs: resume, train, save on notice, finish",
        description="One boot of a training VM: reads the job spec from instance metadata (or --config), "
        "restores the newest committed checkpoint from the job dir, runs the trainer, mirrors its "
        "checkpoints, saves and commits on a preemption notice, and at the end writes DONE or FAILED "
        "and leaves its group. The VM's startup script runs it under systemd; exit 0: nothing more to "
        "do on this boot, 1: retry, 2: an invalid spec.",
        examples=[
            "survivor agent                                        # on the VM: the spec from metadata",
            "survivor agent --config job.yaml --workdir /tmp/vm    # here, against `survivor emulate metadata`",
        ],
    )
    p.add_argument(
        "--workdir",
        default=os.environ.get("SURVIVOR_WORKDIR", "/var/lib/survivor"),
        help="local state: the trainer's job dir, delivered code (default /var/lib/survivor)",
    )
    p.add_argument("--config", help="read the job spec from this YAML file instead of instance metadata")
    p.add_argument(
        "--allow-root-trainer",
        action="store_true",
        help="let the trainer run as root when the agent does (local use only)",
    )
    p.add_argument(
        "--trainer-user",
        metavar="USER",
        help="as root, run the trainer as USER when the spec names no user (the VM's unit: "
        "survivor-trainer, to whom startup.sh closes the metadata server)",
    )
    p.add_argument(
        "--gpu-wait-seconds",
        type=float,
        default=900.0,
        help="how long to wait for the NVIDIA driver on a first boot (default 900)",
    )
    p.add_argument(
        "--log-format",
        choices=["auto", "json", "text"],
        default="auto",
        help="json: one object per line for Cloud Logging (default when not a terminal)",
    )
    p.add_argument(
        "--log-level",
        default="INFO",
        help="the least severe log lines shown: DEBUG, INFO, WARNING, ERROR (default %(default)s)",
    )
    p.set_defaults(func=run_agent)
