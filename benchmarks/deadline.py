"""Deadlines met and cost against on-demand, per policy, over seeded Spot traces.

    $ .venv/bin/python benchmarks/deadline.py [--traces 60] [--write]

A job of L = 12 training hours, a deadline drawn from 1.2L to 2L, and Spot weather from calm to
harsh: preemptions 0.02-0.8 per hour, each followed with probability 0-0.8 by a stockout whose
length averages 0.5-6 h (and, as often as half that probability, a stockout at the very start).
Each trace is replayed by survivor/local/traces.py, a pure event simulation at one-minute ticks in
which survivor's policy is survivor/policy/deadline.py `decide`, the function the agent calls at
every boot and `survivor watch` every 15 minutes. Every policy decides at the same moments (each
boot, and each look of the watch: 15 minutes, or 1 minute in the rows that say so: Cloud
Scheduler's unix-cron runs a job at most once a minute) from the same measurements; only uniform
progress also gets an oracle of Spot availability (whether the MIG could create a Spot VM now),
which survivor cannot know while it runs on-demand. Prices: pricing's table (n1-standard-8 with one T4). `--write` puts the table
and a plot into docs/benchmarks.md and docs/benchmarks/deadline.png.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from survivor.local import traces  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOURS = 12.0
MINUTE = 1 / 60
#: name -> (the policy's maker, how often the watch looks in hours)
POLICIES = {
    "survivor (deadline.decide), watch every 15 min": (traces.survivor_policy, 0.25),
    "survivor (deadline.decide), watch every 1 min": (traces.survivor_policy, MINUTE),
    "always Spot": (lambda: traces.always(traces.SPOT), 0.25),
    "always on-demand": (lambda: traces.always(traces.ON_DEMAND), 0.25),
    "fall back after 2 preemptions": (lambda: traces.fallback_after(2), 0.25),
    "uniform progress (NSDI'24, Spot oracle), every 15 min": (traces.uniform_progress, 0.25),
    "uniform progress (NSDI'24, Spot oracle), every 1 min": (traces.uniform_progress, MINUTE),
}


def cases(n: int, first: int = 0):
    """`n` seeded (trace, job) pairs from calm to harsh, from seed `first` (60 and on: held out)."""
    for seed in range(first, first + n):
        rng = random.Random(1000 + seed)
        rate = rng.choice([0.02, 0.05, 0.1, 0.2, 0.4, 0.8])
        chance = rng.choice([0.0, 0.2, 0.5, 0.8])
        gap = rng.choice([0.5, 2.0, 6.0])
        due = HOURS * rng.uniform(1.2, 2.0)
        yield traces.make_trace(seed, due * 4, rate, chance, gap), traces.Job(hours=HOURS, deadline_hours=due)


def run(n: int, first: int = 0) -> dict[str, list]:
    """Per policy: (met, cost relative to always on-demand, run) for every case."""
    out: dict[str, list] = {name: [] for name in POLICIES}
    for trace, job in cases(n, first):
        base = traces.replay(trace, job, traces.always(traces.ON_DEMAND)).cost_usd
        for name, (make, every) in POLICIES.items():
            result = traces.replay(trace, job, make(), check_every_hours=every)
            out[name].append((result.met, result.cost_usd / base, result))
    return out


def table(results: dict[str, list]) -> str:
    """The Markdown table: deadlines met, mean and worst cost against on-demand, switches."""
    lines = [
        "| policy | deadlines met | mean cost vs on-demand | worst cost | mean switches |",
        "|---|---|---|---|---|",
    ]
    for name, rows in results.items():
        met = sum(1 for m, _, _ in rows if m)
        costs = [c for _, c, _ in rows]
        lines.append(
            f"| {name} | {met}/{len(rows)} ({met / len(rows):.0%}) | {statistics.mean(costs):.4f} | "
            f"{max(costs):.3f} | {statistics.mean(r.switches for _, _, r in rows):.1f} |"
        )
    return "\n".join(lines)


def plot(results: dict[str, list], path: str) -> None:
    """Cost against on-demand per trace, policies side by side; a missed deadline is a red cross."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 4.5))
    for i, rows in enumerate(results.values()):
        xs = [i + (j / len(rows) - 0.5) * 0.7 for j in range(len(rows))]
        ax.scatter([x for x, (m, _, _) in zip(xs, rows) if m], [c for m, c, _ in rows if m], s=8)
        ax.scatter(
            [x for x, (m, _, _) in zip(xs, rows) if not m],
            [c for m, c, _ in rows if not m],
            s=30,
            marker="x",
            color="red",
        )
    ax.set_xticks(range(len(results)))
    ax.set_xticklabels([n.replace(" (", "\n(").replace(", ", ",\n") for n in results], fontsize=7)
    ax.set_ylabel("cost / always on-demand")
    ax.set_title(
        f"{len(next(iter(results.values())))} seeded Spot traces, a {HOURS:g} h job, deadlines 1.2-2x "
        "(red x: deadline missed)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    """Runs the benchmark, prints the table, and with --write updates the docs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=60)
    parser.add_argument("--first-seed", type=int, default=0, help="60 with --traces 200: the held-out seeds")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    results = run(args.traces, args.first_seed)
    text = table(results)
    print(text)
    if args.write:
        os.makedirs(os.path.join(ROOT, "docs", "benchmarks"), exist_ok=True)
        plot(results, os.path.join(ROOT, "docs", "benchmarks", "deadline.png"))
        print("plot: docs/benchmarks/deadline.png")


if __name__ == "__main__":
    main()
