"""Shared by the benchmarks: the machine's description, tables, plots, and running a trainer."""

from __future__ import annotations

import atexit
import importlib.metadata
import json
import os
import random
import platform
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Where plots go: docs/benchmarks, or SURVIVOR_BENCHMARK_PLOTS (the suite's smoke runs, which must
#: not overwrite the published figures).
PLOTS = os.environ.get("SURVIVOR_BENCHMARK_PLOTS") or os.path.join(ROOT, "docs", "benchmarks")

_failed: list[BaseException] = []  # set by the hook below: the run ended with an exception


def _note_failure(kind, value, tb, _previous=sys.excepthook) -> None:
    _failed.append(value)
    _previous(kind, value, tb)


sys.excepthook = _note_failure


def _remove_unless_failed(root: str) -> None:
    if _failed:
        print(f"the run failed: its files and the agents' logs are kept in {root}", file=sys.stderr)
    else:
        shutil.rmtree(root, ignore_errors=True)


def scratch_dir(prefix: str) -> str:
    """A temporary directory for one benchmark run, removed when the run ends (agents' work dirs
    with gigabyte checkpoints add up over a few runs), and kept, with where it is said, when the
    run ends with an exception: the agents' logs in it say why."""
    root = tempfile.mkdtemp(prefix=prefix)
    atexit.register(_remove_unless_failed, root)
    return root


def machine() -> str:
    """One line about where the figures come from."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            models = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        cpu = f"{len(models)} x {models[0]}" if models else cpu
    except OSError:
        pass
    try:  # the installed distribution's version: importing TensorFlow costs a benchmark 3 CPU-s
        tf_version = importlib.metadata.version("tensorflow")
    except importlib.metadata.PackageNotFoundError:
        tf_version = "?"
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{cpu}, {mem:.0f} GiB, Python {platform.python_version()}, TensorFlow {tf_version}, no GPU"


def table(title: str, header: list[str], rows: list[list]) -> str:
    """A Markdown table (what the benchmarks print and docs/benchmarks.md quotes)."""
    out = [f"### {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        out.append("| " + " | ".join(_fmt(v) for v in row) + " |")
    return "\n".join(out) + "\n"


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def plot_bars(
    path: str, title: str, labels: list[str], series: dict[str, list[float]], ylabel: str, stacked: bool = False
) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig, ax = plt.subplots(figsize=(8, 3.8))
    width = 0.8 / (1 if stacked else max(len(series), 1))
    bottom = [0.0] * len(labels)
    for i, (name, values) in enumerate(series.items()):
        xs = [x + (0 if stacked else i * width) for x in range(len(labels))]
        ax.bar(xs, values, width, label=name, bottom=bottom if stacked else None)
        if stacked:
            bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_xticks([x + (0 if stacked else width * (len(series) - 1) / 2) for x in range(len(labels))])
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def parse_timing(text: str) -> dict[str, float]:
    """The loop's closing `timing steps N seconds S steps_per_second R saves K ...` line, as numbers."""
    line = next((row for row in text.splitlines() if "timing steps " in row), None)
    if line is None:
        raise ValueError("no timing line in the trainer's output")
    words = line[line.index("timing steps ") :].split()[1:]
    values = {key: float(value) for key, value in zip(words[::2], words[1::2])}
    return {**values, "steps": int(values["steps"]), "saves": int(values["saves"])}


def run(argv: list[str], env: dict | None = None, timeout: float = 1800) -> str:
    out = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **(env or {})},
    )
    if out.returncode != 0:
        raise RuntimeError(f"{argv[:4]} exited {out.returncode}: {out.stdout[-2000:]}{out.stderr[-2000:]}")
    return out.stdout + out.stderr


def agent_log_text(path: str) -> str:
    """The trainer's lines from an agent's JSON log, as plain text."""
    lines = []
    with open(path) as f:
        for line in f:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            lines.append(entry.get("message", ""))
    return "\n".join(lines)


def schedule(seed: int, every: float, jitter: float, horizon: float) -> list[float]:
    """Pure: preemption times (s since the job's first boot) up to `horizon`, the same for every
    strategy (benchmarks/goodput.py) and every row (benchmarks/peers/run.py)."""
    rng, t, out = random.Random(seed), 0.0, []
    while t < horizon:
        t += every + rng.uniform(-jitter, jitter)
        out.append(t)
    return out
