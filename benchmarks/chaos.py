"""Chaos: random kill points with storage and metadata faults; counts corrupt restores, lost commits
and the worst-case lost work.

    python -m benchmarks.chaos [--kills 100] [--fault-rate 0.05] [--seed 1]

Each round boots the agent (half the time on a fresh disk), maybe makes the metadata server answer
503s or garbage, waits a random 0.3-2.5 s, then SIGKILLs the agent, the trainer, or both -- no notice,
the worst case. After each kill the job dir is restored and checked: the restored snapshot must be
at least as new as the newest commit seen before the kill, and every file must verify.
"""

from __future__ import annotations

import argparse

from benchmarks.common import machine, scratch_dir, table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--fault-rate", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    from survivor.local.chaos import run_chaos

    r = run_chaos(args.kills, args.fault_rate, args.seed, scratch_dir("bench-chaos-"))
    print(f"machine: {machine()}\n")
    print(table(f"chaos: {args.kills} random SIGKILLs, {100 * args.fault_rate:.0f}% storage faults, seed {args.seed}",
                ["kills", "corrupt restores", "committed checkpoints lost", "snapshots skipped at restore",
                 "agents slow to exit (>30 s)", "worst-case lost steps (no notice, 0.01 s steps)", "faults injected",
                 "minutes"],
                [[r.kills, r.corrupt_restores, r.lost_commits, r.skipped_snapshots, r.exit_waits, r.worst_lost_steps,
                  " ".join(f"{k}:{v}" for k, v in sorted(r.faults.items())), r.seconds / 60]]))
    return 0 if r.corrupt_restores == 0 and r.lost_commits == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
