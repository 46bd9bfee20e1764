"""Chaos: random SIGKILLs, damaged manifests, full disks, a slow metadata server and a second agent in
another pid namespace, with storage faults; counts inputs tried, faults injected, corrupt restores,
lost commits, hangs, leases stolen from a live agent and lost steps.

    python -m benchmarks.chaos [--kills 50] [--manifests 34] [--full-disks 10] [--slow-metadata 10]
                               [--pid-namespaces 6] [--fault-rate 0.05] [--seed 1]

The rounds are harness/chaos.py's (its docstring says what each does and what counts as a
corrupt restore, a lost commit and a hang). The defaults take about 10 minutes on 2 shared cores
(a round is 5-6 s: a boot, the fault, a restore to check; a pid-namespace round about 15 s, the
second agent waiting out two lease ttls); every damaged-manifest kind is tried twice. The full-disk
rounds mount tmpfs and the pid-namespace rounds unshare(1) a pid namespace, so they need root
(otherwise the row says they did not run). Exit 1 if any restore was corrupt, any commit lost, any
agent hung or any lease was taken from a live agent.
"""

from __future__ import annotations

import argparse

from benchmarks.common import machine, scratch_dir, table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--manifests", type=int, default=34, help="damaged manifests, one round each")
    parser.add_argument("--full-disks", type=int, default=10, help="preemptions with a full job dir or boot disk")
    parser.add_argument("--slow-metadata", type=int, default=10, help="boots with a metadata server that drips")
    parser.add_argument(
        "--overlapped", type=int, default=20, help="SIGKILLs while a large notice save is uploaded as it is written"
    )
    parser.add_argument("--damaged-chunks", type=int, default=10, help="stored chunks damaged while the agent trains")
    parser.add_argument(
        "--contract-breakers",
        type=int,
        default=10,
        help="SIGKILLs of a trainer that truncates each checkpoint after renaming it",
    )
    parser.add_argument("--state-disks", type=int, default=10, help="boots after a state disk made hostile")
    parser.add_argument(
        "--pid-namespaces",
        type=int,
        default=6,
        help="a second agent of the VM in another pid namespace, one round each",
    )
    parser.add_argument(
        "--save-orders",
        type=int,
        default=10,
        help="jobs of a trainer saving state file first or last, an export after its end",
    )
    parser.add_argument("--cuts", type=int, default=30, help="watches SIGKILLed at a random call of a move or a switch")
    parser.add_argument("--fault-rate", type=float, default=0.05, help="share of storage requests that fail")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    from harness.chaos import run_chaos
    from harness.chaos import table as chaos_table

    r = run_chaos(
        args.kills,
        args.fault_rate,
        args.seed,
        scratch_dir("bench-chaos-"),
        manifests=args.manifests,
        full_disks=args.full_disks,
        slow_metadata=args.slow_metadata,
        overlapped=args.overlapped,
        damaged_chunks=args.damaged_chunks,
        contract_breakers=args.contract_breakers,
        state_disks=args.state_disks,
        pid_namespaces=args.pid_namespaces,
        save_orders=args.save_orders,
        cuts=args.cuts,
    )
    header, rows = chaos_table(r)
    rows.append(
        [
            "all",
            sum(t.inputs for t in r.tallies.values()),
            sum(sum(t.faults.values()) for t in r.tallies.values()),
            r.corrupt_restores,
            r.lost_commits,
            r.hangs,
            r.tracebacks,
            r.leaked_temp_files,
            r.stolen_leases,
            r.wrong_groups,
            "",
            "",
        ]
    )
    print(f"machine: {machine()}\n")
    print(
        table(
            f"chaos: seed {args.seed}, {100 * args.fault_rate:.0f}% storage faults, {r.seconds / 60:.1f} minutes",
            header,
            rows,
        )
    )
    print(
        f"snapshots skipped at restore (files that did not verify): {r.skipped_snapshots}; "
        f"FAILED written: {r.failed_marker}"
    )
    for problem in r.problems:
        print(f"problem: {problem}")
    return (
        0
        if r.corrupt_restores == 0
        and r.lost_commits == 0
        and r.hangs == 0
        and r.stolen_leases == 0
        and r.wrong_groups == 0
        else 1
    )


if __name__ == "__main__":
    raise SystemExit(main())
