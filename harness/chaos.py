"""Chaos rounds: boot the agent, hurt it, check the job dir.

    >>> result = run_chaos(kills=50, fault_rate=0.05, seed=1, root="/tmp/chaos",
    ...                    manifests=20, full_disks=6, slow_metadata=6)
    >>> result.corrupt_restores, result.lost_commits, result.hangs
    (0, 0, 0)
    >>> result.tallies["damaged manifest"].inputs
    20

Classes of fault, each round drawn at random (the full-disk and overlapped-upload rounds run on
a VM of their own):

- **kill**: a boot (half the time on a fresh disk), sometimes with the metadata server answering
  503s or garbage, then a SIGKILL of the agent, the trainer, or both -- no notice, the worst case --
  half the time 0.3-2.5 s into the boot, half the time up to 1.5 s after the trainer started.
- **damaged manifest**: between two boots, a manifest that must never be followed (each kind of
  `DAMAGES` in turn: truncated, non-finite or huge numbers, nesting 100,000 deep, wrong types, no
  files with a huge step, a step below 0 or beyond `train_steps`, a path leaving the job dir, a good
  manifest copied under a newer name) is stored as the newest one. The boot must restore the newest good snapshot
  and train; then it is SIGKILLed.
- **full disk**: a job whose local job dir and boot disk are size-limited tmpfs (needs root to
  mount). After a commit one of them, or both, is filled to a random few hundred KB and the VM is
  preempted (preempted=TRUE, SIGTERM): the final commit fails, the agent must be gone before the
  hard off, leave no temporary upload behind, and the next boot must restore the last commit.
- **overlapped upload**: a job whose trainer writes 12 MiB of state on the notice at 12 MiB/s under a
  temporary name, in 1 MiB chunks (`SURVIVOR_CHUNK_MIB=1`), so that the agent uploads its whole chunks
  while it is written and commits at its rename. The agent, or the agent and the trainer,
  is SIGKILLed at a random moment 0-1.8 s after the notice: before, during and after the overlapped
  upload, at the rename and at the commit. The next restore must be the newest commit seen before
  the kill or newer, every file intact.
- **slow metadata**: the metadata server drips its next 1-3 answers a byte every 2 s (the
  emulator's `drip` fault). The boot must reach training, or end by itself, within `BOOT_DEADLINE`;
  half the time a soft off (SIGTERM) comes during it, and the agent must be gone before the hard off.
- **pid namespace**: while the VM's agent trains, a second agent of the same instance name, zone
  and kernel boot starts in another pid namespace (`unshare --pid`, as in a container on the VM; half
  the time the trainer's agent is the one in the namespace): neither can see the other's pid. The
  second must leave the job to the live holder (exit 1 within `BOOT_DEADLINE`, the holder still
  running and named by the lease); a lease it takes is a stolen lease. Then a SIGKILL of the VM.
  Needs root (otherwise the row says it did not run).
- **save orders**: a trainer survivor did not write (`harness/foreign_trainer.py`) saves its
  TensorFlow state file before its shards, after them or not at all, in one data shard or three
  (the last first), half the time with an export after its final save; a SIGTERM or a SIGKILL while it trains, then a boot to the job's end. The boot after
  the fault restores the newest whole commit or newer, the job ends DONE at its last step, and the
  final commit is whole and holds the export.
- **cut moves and switches**: a `survivor watch` SIGKILLed before a random Compute Engine call of a
  move or a switch (`harness/cuts.py`), then the next looks, half the time two at once: one group,
  running one VM, where the job's records say.

All of it with a share of the storage requests failing (429, 503, resets, stalls, truncated bodies)
through `FaultProxy`. Counted per class: inputs tried, faults injected, corrupt restores (the
snapshot restored after a round has a file missing or wrong, or the agent restored a manifest it
must not follow), lost commits (the snapshot restored is older than the newest commit seen before
the fault), stolen leases (taken from an agent that still ran), hangs (`HARD_OFF` after a SIGTERM or after its trainer died, or `BOOT_DEADLINE` after a
boot, the agent still runs without training), tracebacks in the agent's log, and the worst steps
lost. Used by tests/test_simulator.py, tests/test_chaos.py and benchmarks/chaos.py.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import yaml

from harness.fault_proxy import FaultPlan, FaultProxy
from survivor.local.gcs import StorageEmulator
from survivor.local.instance import LocalInstance

#: GCE's soft off to hard off on a preemption: an agent still running then is killed mid-work.
HARD_OFF = 30.0
#: How long a boot may take to train or end by itself: the spec read's 30 s of retries with one
#: 20 s metadata call in flight, the lease and a restore, with room to spare on 2 shared cores.
BOOT_DEADLINE = 90.0
#: how long the damaged-chunk round waits, once training, for a commit with two chunks to damage: a
#: bound, not a pace (the round goes on at the first such commit), as long as a boot may take, since
#: on 2 cores kept busy by other work a first commit took over 30 s
CHUNK_ROUND_COMMIT_WAIT = BOOT_DEADLINE
#: Far beyond any step the chaos jobs reach; a manifest may claim up to it.
TRAIN_STEPS = 10_000_000
CLASSES = (
    "kill",
    "damaged manifest",
    "damaged chunk",
    "full disk",
    "slow metadata",
    "overlapped upload",
    "contract breaker",
    "hostile state disk",
    "pid namespace",
    "save orders",
    "cut moves and switches",
)
#: How a round starts an agent in a pid namespace of its own, as in a container on the VM (root only).
UNSHARE_PID = ("unshare", "--pid", "--fork", "--mount-proc")


@dataclass
class Tally:
    """What one class of fault was put through and what it got."""

    inputs: int = 0
    faults: Counter = field(default_factory=Counter)
    corrupt_restores: int = 0
    lost_commits: int = 0
    hangs: int = 0
    tracebacks: int = 0
    leaked_temp_files: int = 0
    #: Leases taken from an agent that still ran and renewed them (two writers on one job: must be 0).
    stolen_leases: int = 0
    #: Jobs left with other than one group running one VM where their records say (must be 0).
    wrong_groups: int = 0
    worst_lost_steps: int = 0
    #: The longest wait a hang is judged on: SIGTERM (or the trainer's death) to the agent's exit,
    #: or a boot to its training; how far each class stayed from its deadline.
    slowest_seconds: float = 0.0
    #: One line per non-zero count above: what happened, with the seed and round to replay it.
    problems: list[str] = field(default_factory=list)
    skipped: str = ""  # why the class did not run (no tmpfs without root)


@dataclass
class ChaosResult:
    """What a chaos run found: each class's tallies, the faults injected and how long it took."""

    tallies: dict[str, Tally] = field(default_factory=lambda: {name: Tally() for name in CLASSES})
    skipped_snapshots: int = 0  # "skipping a snapshot that does not verify" in the agents' logs
    failed_marker: bool = False
    faults: Counter = field(default_factory=Counter)  # the storage faults the proxy injected
    seconds: float = 0.0
    check_seconds: float = 0.0  # time spent restoring and verifying after the rounds

    @property
    def kills(self) -> int:
        """How many agents were killed at random moments."""
        return self.tallies["kill"].inputs

    @property
    def exit_waits(self) -> int:
        """Agents still running `HARD_OFF` after their trainer was killed."""
        return self.tallies["kill"].hangs

    @property
    def worst_lost_steps(self) -> int:
        """The steps a SIGKILL (no notice) lost at worst."""
        return self.tallies["kill"].worst_lost_steps

    def _total(self, name: str) -> int:
        return sum(getattr(t, name) for t in self.tallies.values())

    @property
    def corrupt_restores(self) -> int:
        """Restores that produced state no commit ever had (must be 0)."""
        return self._total("corrupt_restores")

    @property
    def lost_commits(self) -> int:
        """Commits that were acknowledged and then not restorable (must be 0)."""
        return self._total("lost_commits")

    @property
    def hangs(self) -> int:
        """Agents that did not end within their deadline (must be 0)."""
        return self._total("hangs")

    @property
    def tracebacks(self) -> int:
        """Agent logs with a Python traceback (must be 0)."""
        return self._total("tracebacks")

    @property
    def leaked_temp_files(self) -> int:
        """Temporary uploads left in the job dir after the run (must be 0)."""
        return self._total("leaked_temp_files")

    @property
    def stolen_leases(self) -> int:
        """Leases taken from a live agent (must be 0)."""
        return self._total("stolen_leases")

    @property
    def wrong_groups(self) -> int:
        """Jobs left with two groups, no running VM, or a group the records do not name (must be 0)."""
        return self._total("wrong_groups")

    @property
    def problems(self) -> list[str]:
        """Every problem of every class, one line each, prefixed with its class."""
        return [f"{name}: {p}" for name, t in self.tallies.items() for p in t.problems]


# -- damaged manifests (pure) ---------------------------------------------------------------------


def _with(good: dict, **changes) -> bytes:
    return json.dumps({**good, **changes}).encode()


def _with_file(good: dict, **changes) -> bytes:
    return json.dumps({**good, "files": [{**good["files"][0], **changes}, *good["files"][1:]]}).encode()


#: Manifests that must never be followed, made from a good one's body (a dict) and the step to claim.
DAMAGES: dict[str, Callable[[dict, bytes, int], bytes]] = {
    "truncated": lambda good, raw, step: raw[: max(1, len(raw) * (step % 9 + 1) // 10)],
    "infinite size": lambda good, raw, step: _with_file(good, size=0).replace(b'"size": 0', b'"size": Infinity', 1),
    "NaN step": lambda good, raw, step: _with(good, step=0).replace(b'"step": 0', b'"step": NaN', 1),
    "a 400-digit size": lambda good, raw, step: _with_file(good, size=10**400),
    "nested 100000 deep": lambda good, raw, step: (
        b'{"format": 2, "step": %d, "attempt": 999999, "files": ' % step + b"[" * 100_000 + b"]" * 100_000 + b"}"
    ),
    "step as a string": lambda good, raw, step: _with(good, step=str(step)),
    "step as a float": lambda good, raw, step: _with(good, step=step + 0.5),
    "size as a boolean": lambda good, raw, step: _with_file(good, size=True),
    "a path that is an object": lambda good, raw, step: _with_file(good, path={"a": 1}),
    "files as a number": lambda good, raw, step: _with(good, files=7),
    "a list, not an object": lambda good, raw, step: b"[1, 2, 3]",
    "not UTF-8": lambda good, raw, step: b"\xff\xfe\x00" + raw[3:],
    "no files, a huge step": lambda good, raw, step: _with(good, files=[]),
    "a negative step": lambda good, raw, step: _with(good, step=-5),
    "a step beyond train_steps": lambda good, raw, step: _with(good),
    "a path leaving the job dir": lambda good, raw, step: _with_file(good, path="../../escaped.txt"),
    "a good manifest under a newer name": lambda good, raw, step: raw,
    # files no directory can hold together: refused when read, never a failed restore
    "a file inside a file": lambda good, raw, step: _with(
        good, files=[good["files"][0], {**good["files"][0], "path": good["files"][0]["path"] + "/x"}]
    ),
    "one path twice": lambda good, raw, step: _with(
        good, files=[good["files"][0], {**good["files"][0], "path": "./" + good["files"][0]["path"]}]
    ),
}


def _placeholder(step: int) -> dict:
    """A manifest body for a job with no commit yet (its one chunk does not exist)."""
    return {
        "format": 2,
        "step": step,
        "attempt": 1,
        "seq": 1,
        "created": "",
        "writer": "chaos",
        "files": [
            {
                "path": "dummy-checkpoint-1.json",
                "size": 1,
                "crc32c": "AAAAAA==",
                "chunks": [
                    {"offset": 0, "size": 1, "crc32c": "AAAAAA==", "object": "survivor/blobs/chunks/" + "0" * 64}
                ],
            }
        ],
    }


def damaged_manifest(
    kind: str, good_raw: bytes | None, good_step: int, rng: random.Random, train_steps: int = TRAIN_STEPS
) -> tuple[str, bytes]:
    """Pure: (object name, body) of a damaged manifest of `kind` that sorts newer than the good one
    at `good_step` (stored as `good_raw`; None when nothing is committed yet)."""
    from survivor.jobdir.store import manifest_name

    step = {
        "no files, a huge step": rng.choice([train_steps, 999_999_999]),
        "a step beyond train_steps": train_steps + 1,
    }.get(kind, good_step + rng.randint(1, 50))
    good = json.loads(good_raw) if good_raw else _placeholder(good_step)
    raw = good_raw or json.dumps(good).encode()
    if kind != "a good manifest under a newer name":
        # its own name, so that only the damage (not a name that disagrees) can refuse it
        good = {**good, "step": step, "attempt": 999_999, "seq": 1}
        raw = json.dumps(good, indent=1).encode()
    return manifest_name(step, 999_999, 1), DAMAGES[kind](good, raw, step)


def judge_restore(
    damaged: str, good_step: int | None, restored_from: str | None, restored_step: int | None, trained: bool
) -> str | None:
    """Pure: what the agent's restore past a `damaged` manifest was -- "corrupt" (it followed it:
    restored that name, or a step below 0 or above the newest good commit at `good_step`, which only
    the damaged one claims), "lost" (it trained from something older) or None."""
    if restored_from == damaged or (
        restored_step is not None and (restored_step < 0 or good_step is None or restored_step > good_step)
    ):
        return "corrupt"
    if trained and good_step is not None and (restored_step is None or restored_step < good_step):
        return "lost"
    return None


def agent_traceback(log_text: str) -> bool:
    """Pure: whether an agent's log holds a traceback of its own. A trainer's, forwarded with
    source=trainer, is the trainer's business (the dummy trainer dies on a full boot disk, and the
    agent must carry on); a line that is not JSON is the interpreter's own, before logging was up."""
    for line in log_text.splitlines():
        if "Traceback" not in line:
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            return True
        if not isinstance(entry, dict) or entry.get("source") != "trainer":
            return True
    return False


# -- the rounds -----------------------------------------------------------------------------------


def _spec(job_dir: str, python: str, **fields) -> str:
    # Killing the trainer is a failed attempt; chaos tests storage integrity, not the crash-loop
    # guard, so that guard is set out of reach.
    spec = {
        "job_dir": job_dir,
        "train_steps": TRAIN_STEPS,
        "checkpoint_steps": 3,
        "keep": 2,
        "sync_seconds": 0.2,
        "lease_seconds": 5,
        "on_finish": "keep-alive",
        "max_failed_attempts": 1_000_000,
        "trainer": {
            "argv": [
                python,
                "-m",
                "survivor.trainers.dummy",
                "--on-sigterm",
                "save",
                "--step-seconds",
                "0.01",
                "--checkpoint-bytes",
                "200000",
            ]
        },
    }
    spec.update(fields)
    return yaml.safe_dump(spec)


class _Rounds:
    """The state the rounds share: the VM, the job dir as the harness sees it, the tallies."""

    def __init__(
        self,
        vm: LocalInstance,
        job_dir: str,
        rng: random.Random,
        seed: int,
        result: ChaosResult,
        root: str,
        proxy: FaultProxy | None,
    ):
        from survivor.jobdir.storage import open_storage
        from survivor.jobdir.store import CheckpointStore

        self.vm, self.job_dir, self.rng, self.seed, self.result = vm, job_dir, rng, seed, result
        self.storage = open_storage(job_dir)
        # bounded like the agent's own store: a manifest beyond train_steps is never a commit
        self.store = CheckpointStore(self.storage, max_step=TRAIN_STEPS)
        self.check = os.path.join(root, "check")
        self.proxy = proxy
        self.round = 0
        self.damages: list[str] = []
        self.root = root

    # -- what every round shares --

    def read(self, name: str) -> bytes:
        """An object's bytes, as the harness sees the job dir; an error when it is gone."""
        blob = self.storage.read(name)
        if blob is None:
            raise FileNotFoundError(f"{self.job_dir}: no {name}")
        return blob.data

    def boot(self, wipe: bool | None = None) -> float:
        self.round += 1
        booted = time.time()
        self.vm.boot(wipe=self.rng.random() < 0.5 if wipe is None else wipe)
        return booted

    def trainer_pid(self, booted: float) -> int | None:
        """This boot's trainer (None before it starts: no pid file, or a previous boot's)."""
        path = os.path.join(self.vm.workdir, "trainer.pid")
        try:
            if os.path.getmtime(path) >= booted:
                return int(open(path).read())
        except (OSError, ValueError):
            pass
        return None

    def await_training(self, tally: Tally, booted: float, deadline: float = BOOT_DEADLINE) -> str:
        """'training' once this boot's trainer runs, 'ended' if the agent exits first, else 'hung'."""
        started = time.monotonic()
        state = "hung"
        while time.monotonic() < started + deadline:
            if self.trainer_pid(booted) is not None:
                state = "training"
                break
            if not self.vm.running():
                state = "ended"
                break
            time.sleep(0.05)
        tally.slowest_seconds = max(tally.slowest_seconds, time.monotonic() - started)
        return state

    def kill_vm(self) -> None:
        """SIGKILLs the VM's processes, then lets the requests they had sent land: Cloud Storage may
        apply a request whose sender never saw the answer (`FaultProxy.settle`; here the proxy's
        stall holds one), so a commit may appear after the kill, and the checks read the job dir
        after it."""
        self.vm.kill()
        if self.proxy is not None and not self.proxy.settle():
            raise RuntimeError("the fault proxy still forwards a request 10 s after the kill")

    def boot_to_training(self, tally: Tally, what: str) -> float | None:
        """Boots; returns the boot's time once its trainer runs, else None: a boot that neither
        trained nor ended counts as a hang, `what` is said, and the VM is killed."""
        booted = self.boot()
        if self.await_training(tally, booted) == "training":
            return booted
        tally.hangs += self.vm.running()
        self.problem(tally, what)
        self.kill_vm()
        return None

    def problem(self, tally: Tally, what: str) -> None:
        tally.problems.append(
            f"round {self.round} (seed {self.seed}, boot {self.vm.boots}, log {self.vm.log_path()}): {what}"
        )

    def read_log(self) -> str:
        try:
            with open(self.vm.log_path(), encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def count_tracebacks(self, tally: Tally) -> None:
        if agent_traceback(self.read_log()):
            tally.tracebacks += 1
            self.problem(tally, "a traceback in the agent's log")

    def restored_by_agent(self) -> tuple[str | None, int | None]:
        """What this boot's agent restored: its newest attempt record's restored_from and step."""
        from survivor.jobdir.journal import ATTEMPTS, Attempt

        names = sorted(o.name for o in self.storage.list(ATTEMPTS) if o.name.endswith(".json"))
        blob = self.storage.read(names[-1]) if names else None
        if blob is None:
            return None, None
        try:
            attempt = Attempt.from_json(blob.data)
        except ValueError:
            return None, None
        return attempt.restored_from, attempt.restored_step

    def check_restore(self, tally: Tally, before, what: str) -> None:
        """The harness restores the job dir: at least as new as `before`, every file there."""
        checked = time.monotonic()
        restored = self.store.restore(self.check)
        for _ in range(2):  # a read the loaded machine let time out is no loss: a lost commit stays lost
            if before is None or (restored is not None and restored.step >= before.step):
                break
            time.sleep(1.0)
            restored = self.store.restore(self.check)
        if before is not None and (restored is None or restored.step < before.step):
            tally.lost_commits += 1
            self.problem(
                tally,
                f"{what}: restored {restored and restored.name}, older than {before.name}; {self.why_not_restored()}",
            )
        if restored is not None:
            missing = sum(not os.path.exists(os.path.join(self.check, f.path)) for f in restored.files)
            if missing:
                tally.corrupt_restores += missing
                self.problem(tally, f"{what}: {missing} files of {restored.name} missing after restore")
            tally.worst_lost_steps = max(tally.worst_lost_steps, (self.vm.progress() or 0) - restored.step)
        self.result.check_seconds += time.monotonic() - checked

    def why_not_restored(self) -> str:
        """What a restore that judged a loss saw: the manifests listed, the store's warning for each one
        it passed over (with the reason) and what a second restore returned, so that a lost commit
        seen once can be told from a bad read."""
        said: list[str] = []

        class Said(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                fields = getattr(record, "fields", {})
                said.append(f"{fields.get('manifest', '?')}: {record.getMessage()} ({fields.get('reason', '')})")

        catch, logger = Said(level=logging.WARNING), logging.getLogger("survivor.store")
        logger.addHandler(catch)
        try:
            names = self.store.manifest_names()
            restored = self.store.restore(self.check + ".why")
        except Exception as exc:  # what failed is the finding
            return f"the store said {said or 'nothing'}, then {type(exc).__name__}: {exc}"
        finally:
            logger.removeHandler(catch)
        return f"listed {names}; the store said {said or 'nothing'}; restored again: {restored and restored.name}"

    def storage_faults(self, tally: Tally, since: Counter) -> None:
        if self.proxy is not None:
            for kind, n in (self.proxy.count - since).items():
                tally.faults[f"storage {kind}"] += n

    def kill(self, tally: Tally, booted: float) -> None:
        """SIGKILL of the agent, the trainer or both: no notice, the worst case."""
        victim = self.rng.choice(["agent", "trainer", "both"])
        pid = self.trainer_pid(booted)
        if pid is None:
            victim = "agent" if victim == "agent" else "both"
        if victim != "agent" and pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        if victim == "trainer":
            started = time.monotonic()
            if self.vm.wait(HARD_OFF) is None:
                tally.hangs += 1
                self.problem(tally, f"the agent still ran {HARD_OFF:g} s after its trainer was killed")
            tally.slowest_seconds = max(tally.slowest_seconds, time.monotonic() - started)
        self.kill_vm()
        tally.faults[f"SIGKILL {victim}"] += 1

    # -- the classes --

    def kill_round(self) -> None:
        tally = self.result.tallies["kill"]
        since = Counter(self.proxy.count) if self.proxy else Counter()
        booted = self.boot()
        if self.rng.random() < 0.2:
            mode = self.rng.choice(["503", "garbage"])
            count = self.rng.randint(1, 4)
            self.vm.metadata.fault(mode, count=count)
            tally.faults[f"metadata {mode}"] += count
        # Half the kills land in the boot (spec, lease, restore), half once the trainer runs (saves,
        # uploads, commits): a boot takes 1-3 s here, so one window alone would favour one side.
        if self.rng.random() < 0.5:
            time.sleep(self.rng.uniform(0.3, 2.5))
        elif self.await_training(tally, booted) == "training":
            time.sleep(self.rng.uniform(0.0, 1.5))
        before = self.store.latest()
        self.kill(tally, booted)
        self.vm.metadata.fault("ok", count=0)
        tally.inputs += 1
        self.check_restore(tally, before, "after a SIGKILL")
        self.count_tracebacks(tally)
        self.storage_faults(tally, since)

    def manifest_round(self) -> None:
        tally = self.result.tallies["damaged manifest"]
        since = Counter(self.proxy.count) if self.proxy else Counter()
        if not self.damages:  # every kind once, in a random order, before any kind again
            self.damages = self.rng.sample(sorted(DAMAGES), len(DAMAGES))
        kind = self.damages.pop()
        good = self.store.latest()
        good_raw = self.read(good.name) if good else None
        name, body = damaged_manifest(kind, good_raw, good.step if good else 0, self.rng)
        self.storage.write(name, body)
        tally.inputs += 1
        tally.faults[kind] += 1
        try:
            booted = self.boot()
            state = self.await_training(tally, booted)
            if state == "hung":
                tally.hangs += 1
                self.problem(tally, f"{kind} ({name}): no training and no exit {BOOT_DEADLINE:g} s after the boot")
            restored_from, restored_step = self.restored_by_agent()
            verdict = judge_restore(
                name, good.step if good else None, restored_from, restored_step, trained=state == "training"
            )
            if verdict == "corrupt":
                tally.corrupt_restores += 1
                self.problem(tally, f"the agent restored the damaged manifest {name} ({kind})")
            elif verdict == "lost" and good is not None:  # "lost" needs a good step
                tally.lost_commits += 1
                self.problem(tally, f"{kind}: the agent restored {restored_from}, not {good.name}")
            if state == "training" and name not in self.read_log():
                self.problem(tally, f"{kind} ({name}) was skipped without a warning naming it")
            time.sleep(self.rng.uniform(0.2, 1.5))
            before = self.store.latest()
            self.kill(tally, booted)
        finally:
            self.storage.delete([name])
        self.check_restore(tally, before, f"after the {kind} round")
        self.count_tracebacks(tally)
        self.storage_faults(tally, since)

    def chunk_round(self) -> None:
        """A stored chunk of the newest snapshot damaged while the agent trains (flipped, truncated,
        emptied or another chunk's bytes): the agent's next commits must store it again, never reuse
        it, so the newest commit after the damage restores."""
        tally = self.result.tallies["damaged chunk"]
        since = Counter(self.proxy.count) if self.proxy else Counter()
        booted = self.boot_to_training(tally, "the boot of the damaged-chunk round did not train")
        if booted is None:
            return
        time.sleep(self.rng.uniform(0.5, 1.5))
        waited = time.monotonic() + CHUNK_ROUND_COMMIT_WAIT
        while True:  # the round's first boot of a fresh job may not have committed yet: wait for one
            target = self.store.latest()
            chunks = [c.object for f in (target.files if target else ()) for c in f.chunks]
            if target is not None and len(chunks) >= 2:
                break
            if time.monotonic() > waited:
                self.problem(tally, f"no commit of two chunks to damage {CHUNK_ROUND_COMMIT_WAIT:g} s into training")
                self.kill(tally, booted)
                return
            time.sleep(0.1)
        victim, other = self.rng.sample(chunks, 2)
        how = self.rng.choice(["flipped", "truncated", "emptied", "another chunk's bytes"])
        data: bytes | None = None
        with contextlib.suppress(Exception):
            data = self.read(victim)
            self.storage.write(
                victim,
                {
                    "flipped": bytes([data[0] ^ 1]) + data[1:],
                    "truncated": data[: len(data) // 2],
                    "emptied": b"",
                    "another chunk's bytes": self.read(other),
                }[how],
            )
        tally.inputs += 1
        tally.faults[f"chunk {how}"] += 1
        # Read after the damage: the commit it names, and one under way now (its chunks verified before
        # the damage), may rightly hold the damaged chunk; a commit begun after that one cannot.
        floor = self.store.latest() or target
        waited = time.monotonic() + 20
        while time.monotonic() < waited and self.commits_after(floor.name) < 2:
            time.sleep(0.1)
        time.sleep(self.rng.uniform(0.0, 1.0))
        before = self.store.latest()
        after_damage = self.commits_after(floor.name)
        self.kill(tally, booted)
        if before is not None and after_damage >= 2:  # the newest commit began after the damage: it must restore
            tally.faults["judged on a commit begun after the damage"] += 1
            self.check_restore(tally, before, f"after a {how} chunk")
        elif data is not None:
            # No commit began after the damage (a loaded machine): the newest snapshot may hold the
            # damaged chunk, and every later round would take it for the newest good commit and judge
            # its rightful refusal a lost commit (two clean-clone runs of 2026-11-27 did). Undone.
            self.storage.write(victim, data)
        self.count_tracebacks(tally)
        self.storage_faults(tally, since)

    def commits_after(self, name: str) -> int:
        """How many manifests are newer than the one named `name` (all of them once it is gone)."""
        names = self.store.manifest_names()  # newest first
        return names.index(name) if name in names else len(names)

    def pid_namespace_round(self) -> None:
        """A second agent of this VM's name, zone and boot in another pid namespace than the holder's."""
        from survivor.jobdir.lease import LEASE, parse_lease

        tally = self.result.tallies["pid namespace"]
        since = Counter(self.proxy.count) if self.proxy else Counter()
        holder_inside = self.rng.random() < 0.5
        self.vm.wrapper = UNSHARE_PID if holder_inside else ()
        try:
            booted = self.boot()
            state = self.await_training(tally, booted)
            lease = self.storage.read(LEASE)
            held = parse_lease(lease.data) if lease is not None else None
            if state != "training" or held is None:
                tally.hangs += state == "hung"
                self.problem(tally, f"the holder's boot did not train ({state})")
                self.kill_vm()
                return
            other = LocalInstance(
                self.vm.metadata.get("instance/attributes"),
                os.path.join(self.root, f"vm-ns-{self.round}"),
                name=self.vm.name,
                python=self.vm.python,
                env=self.vm.env,
                agent_args=self.vm.agent_args,
                wrapper=() if holder_inside else UNSHARE_PID,
            )
            tally.inputs += 1
            tally.faults[
                "the holder in a pid namespace" if holder_inside else "the second agent in a pid namespace"
            ] += 1
            started = time.monotonic()
            try:
                other.boot()
                code, stolen = None, False
                while time.monotonic() < started + BOOT_DEADLINE and code is None and not stolen:
                    code = other.wait(0.2)
                    now = self.storage.read(LEASE)
                    holder_now = parse_lease(now.data) if now is not None else None
                    stolen = holder_now is None or holder_now.get("agent") != held.get("agent")
                tally.slowest_seconds = max(tally.slowest_seconds, time.monotonic() - started)
                if stolen or code == 0 or not self.vm.running():
                    tally.stolen_leases += 1
                    self.problem(
                        tally,
                        f"the second agent (exit {code}) took the lease of a live holder: "
                        f"{held.get('agent')} in {held.get('pidns') or '?'}; see {other.log_path()}",
                    )
                elif code is None:
                    tally.hangs += 1
                    self.problem(tally, f"the second agent still ran {BOOT_DEADLINE:g} s after its boot")
                if agent_traceback(open(other.log_path(), encoding="utf-8", errors="replace").read()):
                    tally.tracebacks += 1
                    self.problem(tally, f"a traceback in the second agent's log {other.log_path()}")
            finally:
                other.close()
            time.sleep(self.rng.uniform(0.0, 1.0))
            before = self.store.latest()
            self.kill_vm()  # the pid file of an agent in a namespace names a pid of that namespace
            tally.faults["SIGKILL both"] += 1
        finally:
            self.vm.wrapper = ()
        self.check_restore(tally, before, "after a second agent in another pid namespace")
        self.count_tracebacks(tally)
        self.storage_faults(tally, since)

    def slow_metadata_round(self) -> None:
        tally = self.result.tallies["slow metadata"]
        since = Counter(self.proxy.count) if self.proxy else Counter()
        drips = self.rng.randint(1, 3)
        self.vm.metadata.fault("drip", count=drips, interval=2.0)
        tally.inputs += 1
        booted = self.boot()
        if self.rng.random() < 0.5:  # a soft off while the boot waits on the metadata server
            # Once the agent has asked for its first dripped answer (a start-up under load can take longer
            # than any fixed sleep), and at a random moment of the drips or just after them.
            deadline = time.monotonic() + BOOT_DEADLINE
            while (
                self.vm.metadata.faults_left() == drips and time.monotonic() < deadline and self.vm.wait(0.05) is None
            ):
                pass
            time.sleep(self.rng.uniform(0.0, drips * 2.0 + 1.0))
            before = self.store.latest()
            self.vm.set_preempted()
            self.vm.soft_off()
            tally.faults["SIGTERM during a slow boot"] += 1
            started = time.monotonic()
            if self.vm.wait(HARD_OFF) is None:
                tally.hangs += 1
                self.problem(tally, f"the agent still ran {HARD_OFF:g} s after its SIGTERM ({drips} dripped answers)")
                self.kill_vm()
            elif time.monotonic() - started > 25.0:  # the default grace budget
                self.problem(tally, f"the agent took {time.monotonic() - started:.1f} s to exit after its SIGTERM")
            tally.slowest_seconds = max(tally.slowest_seconds, time.monotonic() - started)
        else:
            state = self.await_training(tally, booted)
            if state == "hung":
                tally.hangs += 1
                self.problem(
                    tally,
                    f"no training and no exit {BOOT_DEADLINE:g} s after a boot with {drips} dripped metadata answers",
                )
            time.sleep(self.rng.uniform(0.2, 1.5))
            before = self.store.latest()
            self.kill(tally, booted)
        # What the emulator did not get to drip (it counts answers down) was not injected.
        tally.faults["dripped metadata answers"] += drips - self.vm.metadata.faults_left()
        self.vm.metadata.fault("ok", count=0)
        self.check_restore(tally, before, "after a slow-metadata boot")
        self.count_tracebacks(tally)
        self.storage_faults(tally, since)


@contextlib.contextmanager
def _quiet(name: str):
    """The harness reads the damaged manifests it wrote: their warnings are the agent's to give."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _skipped_snapshots(vm: LocalInstance) -> int:
    """How often the agents of `vm` skipped a snapshot whose files did not verify."""
    count = 0
    for boot in range(1, vm.boots + 1):
        with open(vm.log_path(boot), encoding="utf-8", errors="replace") as f:
            count += f.read().count("skipping a snapshot that does not verify")
    return count


def _can_unshare_pid() -> bool:
    """Whether this host lets the harness start a process in a new pid namespace."""
    try:
        return subprocess.run([*UNSHARE_PID, "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


# -- full disks ------------------------------------------------------------------------------------


@contextlib.contextmanager
def _tmpfs(path: str, size: str):
    """A tmpfs of `size` at `path` (root only); yields False where it cannot be mounted."""
    os.makedirs(path, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], capture_output=True)
    try:
        yield mounted.returncode == 0
    finally:
        if mounted.returncode == 0:
            subprocess.run(["umount", "-l", path], check=False, capture_output=True)


def _fill(fs: str, leave: int) -> str:
    """Fills the file system at `fs` up to `leave` free bytes; returns the filler's path."""
    filler = os.path.join(fs, f".chaos-filler-{os.getpid()}")
    free = os.statvfs(fs)
    with open(filler, "wb") as f:
        try:
            f.write(b"\0" * max(0, free.f_bavail * free.f_frsize - leave))
        except OSError as e:
            # another writer on the file system (a round's agent flushing its last lines) took some of
            # the room between statvfs and the write: the file system is full, as the round wants
            if e.errno != errno.ENOSPC:
                raise
    return filler


def _full_disk_rounds(rounds: int, rng: random.Random, seed: int, root: str, python: str, result: ChaosResult) -> None:
    """A job on a local job dir; each round fills it, the boot disk or both, then preempts."""
    from survivor.jobdir.journal import ATTEMPTS, Attempt

    tally = result.tallies["full disk"]
    jobfs, vm_root = os.path.join(root, "jobfs"), os.path.join(root, "vm-full")
    with _tmpfs(jobfs, "16m") as job_ok, _tmpfs(os.path.join(vm_root, "disk"), "16m") as disk_ok:
        if not (job_ok and disk_ok):
            tally.skipped = "not run: mounting a tmpfs needs root"
            return
        job_dir = os.path.join(jobfs, "job")
        vm = LocalInstance(
            {"survivor-job": _spec(job_dir, python, grace_seconds=10)}, vm_root, python=python, name="survivor-full-1"
        )
        run = _Rounds(vm, job_dir, rng, seed, result, root, proxy=None)
        expected = None  # the commit the next boot must restore
        seen_leaks: set[str] = set()
        try:
            for i in range(rounds + 1):
                booted = run.boot()
                if run.await_training(tally, booted) != "training":
                    tally.hangs += run.vm.running()
                    run.problem(tally, "the boot after a full disk did not train")
                    run.vm.kill()
                    run.count_tracebacks(tally)
                    continue
                restored_from, restored_step = run.restored_by_agent()
                if expected is not None and (restored_step is None or restored_step < expected.step):
                    tally.lost_commits += 1
                    run.problem(tally, f"the boot after a full disk restored {restored_from}, not {expected.name}")
                if i == rounds:  # the last boot only checks the restore
                    run.vm.kill()
                    run.count_tracebacks(tally)
                    break
                first = run.store.latest()
                ends = time.monotonic() + 30
                while time.monotonic() < ends:  # until this boot commits
                    latest = run.store.latest()
                    if latest is not None and (first is None or latest.step > first.step):
                        break
                    time.sleep(0.1)
                where = rng.choice(["job dir", "boot disk", "both"])
                fillers = [
                    _fill(fs, rng.randint(0, 300_000))
                    for fs, name in ((jobfs, "job dir"), (os.path.join(vm_root, "disk"), "boot disk"))
                    if where in (name, "both")
                ]
                tally.inputs += 1
                tally.faults[f"full {where}"] += 1
                expected = run.store.latest()
                started = time.monotonic()
                code = vm.preempt(hard_off_after=HARD_OFF)
                tally.slowest_seconds = max(tally.slowest_seconds, time.monotonic() - started)
                if code == -signal.SIGKILL:
                    tally.hangs += 1
                    run.problem(tally, f"full {where}: the agent still ran {HARD_OFF:g} s after its SIGTERM")
                elif code != 0:
                    run.problem(tally, f"full {where}: the agent exited {code} after the notice")
                leaked = [
                    path
                    for path in (
                        os.path.join(d, f) for d, _, files in os.walk(job_dir) for f in files if f.startswith(".tmp-")
                    )
                    if path not in seen_leaks
                ]
                seen_leaks.update(leaked)  # a leftover of an earlier round is not counted again
                if leaked:
                    tally.leaked_temp_files += len(leaked)
                    run.problem(tally, f"full {where}: {len(leaked)} temporary uploads left, e.g. {leaked[0]}")
                names = sorted(o.name for o in run.storage.list(ATTEMPTS))
                with contextlib.suppress(Exception):
                    attempt = Attempt.from_json(run.read(names[-1]))
                    if attempt.steps_lost is not None:
                        tally.worst_lost_steps = max(tally.worst_lost_steps, attempt.steps_lost)
                run.count_tracebacks(tally)
                for filler in fillers:
                    os.remove(filler)
                run.check_restore(tally, expected, f"after a full {where}")
        finally:
            vm.close()
        result.skipped_snapshots += _skipped_snapshots(vm)


#: The overlapped-upload rounds' state: 12 chunks of 1 MiB, written in a second.
OVERLAP_STATE_BYTES = 12 << 20


def _overlap_rounds(rounds: int, rng: random.Random, seed: int, root: str, python: str, result: ChaosResult) -> None:
    """A job whose notice save is large and slow enough for the agent to upload it while it is written;
    each round SIGKILLs the agent (or the agent and its trainer) somewhere in that save and commit."""
    tally = result.tallies["overlapped upload"]
    with StorageEmulator(log_dir=root) as gcs:
        gcs.create_bucket("overlap")
        job_dir = "gs://overlap/job"
        trainer = {
            "argv": [
                python,
                "-m",
                "survivor.trainers.dummy",
                "--on-sigterm",
                "save",
                "--step-seconds",
                "0.01",
                "--checkpoint-bytes",
                str(OVERLAP_STATE_BYTES),
                "--save-mib-per-second",
                "12",
            ]
        }
        vm = LocalInstance(
            {"survivor-job": _spec(job_dir, python, checkpoint_steps=1_000_000, trainer=trainer)},
            os.path.join(root, "vm-overlap"),
            python=python,
            name="survivor-overlap-1",
            env={"STORAGE_EMULATOR_HOST": gcs.url, "SURVIVOR_CHUNK_MIB": "1"},
        )
        run = _Rounds(vm, job_dir, rng, seed, result, root, proxy=None)
        try:
            for _ in range(rounds):
                booted = run.boot_to_training(tally, "the boot did not train")
                if booted is None:
                    continue
                time.sleep(rng.uniform(0.3, 1.0))
                run.vm.set_preempted()
                run.vm.soft_off()
                time.sleep(rng.uniform(0.0, 1.8))  # the save takes ~1 s; its commit follows the rename
                before = run.store.latest()
                tally.inputs += 1
                run.kill(tally, booted)
                run.check_restore(tally, before, "after a SIGKILL during an overlapped upload")
                run.count_tracebacks(tally)
        finally:
            vm.close()
        result.skipped_snapshots += _skipped_snapshots(vm)


def _contract_breaker_rounds(
    rounds: int, rng: random.Random, seed: int, root: str, python: str, result: ChaosResult
) -> None:
    """A trainer that breaks the write-then-rename contract (dummy --truncate-after-rename: each save
    renamed into place, then cut short 0.2 s later): SIGKILLed at random, every boot must train, every
    restore must verify, and no step is ever committed twice. Whether the first
    commit of a step holds the whole file or the truncated one depends on when the mirror read it:
    the agent cannot tell (docs/trainer-contract.md)."""
    tally = result.tallies["contract breaker"]
    with StorageEmulator(log_dir=root) as gcs:
        gcs.create_bucket("breaker")
        job_dir = "gs://breaker/job"
        trainer = {
            "argv": [
                python,
                "-m",
                "survivor.trainers.dummy",
                "--on-sigterm",
                "save",
                "--step-seconds",
                "0.01",
                "--truncate-after-rename",
            ]
        }
        vm = LocalInstance(
            {"survivor-job": _spec(job_dir, python, trainer=trainer)},
            os.path.join(root, "vm-breaker"),
            python=python,
            name="survivor-breaker-1",
            env={"STORAGE_EMULATOR_HOST": gcs.url},
        )
        run = _Rounds(vm, job_dir, rng, seed, result, root, proxy=None)
        try:
            for _ in range(rounds):
                booted = run.boot_to_training(tally, "the boot did not train (did the trainer fail on its restore?)")
                if booted is None:
                    continue
                time.sleep(rng.uniform(0.5, 2.0))
                before = run.store.latest()
                tally.inputs += 1
                run.kill(tally, booted)
                run.check_restore(tally, before, "after a SIGKILL of a contract breaker")
                # What the agent can promise such a trainer (docs/trainer-contract.md): the first commit of a
                # step stands. Which version that is depends on whether a scan came before the truncation.
                manifests = [run.store.load(n) for n in run.store.manifest_names()]
                steps = [m.step for m in manifests if m is not None]  # None: one that fails verification
                if len(steps) != len(set(steps)):
                    tally.corrupt_restores += 1
                    run.problem(tally, f"a step was committed twice: {steps}")
                run.count_tracebacks(tally)
        finally:
            vm.close()
        result.skipped_snapshots += _skipped_snapshots(vm)


def _state_disk_rounds(rounds: int, rng: random.Random, seed: int, root: str, python: str, result: ChaosResult) -> None:
    """A job with a state disk whose notice commits all go to the disk (an upload rate of 1 B/s);
    between boots its copy is made hostile: a FIFO for one of its files, a link at the disk's
    `snapshots` to a directory that must survive, or a link for one of its files.
    The next boot must train within its deadline, leave the link's target alone, and
    restore no older than the newest commit in the job dir."""
    tally = result.tallies["hostile state disk"]
    from survivor.jobdir.disk_tier import RATE_ENV

    with StorageEmulator(log_dir=root) as gcs:
        gcs.create_bucket("disk")
        job_dir = "gs://disk/job"
        vm = LocalInstance(
            {"survivor-job": _spec(job_dir, python, state_disk_gb=10)},
            os.path.join(root, "vm-disk"),
            python=python,
            name="survivor-disk-1",
            state_disk=True,
            env={"STORAGE_EMULATOR_HOST": gcs.url, RATE_ENV: "1"},
        )
        run = _Rounds(vm, job_dir, rng, seed, result, root, proxy=None)
        sentinel = os.path.join(root, "disk-sentinel")
        try:
            for _ in range(rounds):
                booted = run.boot_to_training(tally, "the boot after a hostile state disk did not train")
                if booted is None:
                    continue
                time.sleep(rng.uniform(0.5, 1.5))
                run.vm.set_preempted()
                run.vm.soft_off()
                if vm.wait(HARD_OFF) is None:
                    tally.hangs += 1
                    run.problem(tally, "the agent did not exit after its notice")
                    vm.kill()
                before = run.store.latest()
                how = rng.choice(["fifo", "link at snapshots", "link for a file", "nothing"])
                tally.inputs += 1
                tally.faults[how] += 1
                assert vm.state_disk is not None  # made with state_disk=True
                snapshots = os.path.join(vm.state_disk, "snapshots")
                copies = (
                    [os.path.join(d, f) for d, _, files in os.walk(snapshots) for f in files]
                    if os.path.isdir(snapshots) and not os.path.islink(snapshots)
                    else []
                )
                if how == "fifo" and copies:
                    victim = rng.choice(copies)
                    os.remove(victim)
                    os.mkfifo(victim)
                elif how == "link for a file" and copies:
                    victim = rng.choice(copies)
                    os.remove(victim)
                    os.symlink("/etc/hostname", victim)
                elif how == "link at snapshots":
                    os.makedirs(os.path.join(sentinel, "7-1"), exist_ok=True)
                    with open(os.path.join(sentinel, "keep"), "w") as f:
                        f.write("keep")
                    if os.path.lexists(snapshots):
                        if os.path.islink(snapshots):
                            os.remove(snapshots)
                        else:
                            shutil.rmtree(snapshots)
                    os.symlink(sentinel, snapshots)
                booted = run.boot()
                state = run.await_training(tally, booted)
                if state != "training":
                    tally.hangs += state == "hung"
                    run.problem(tally, f"{how}: the next boot {state} instead of training")
                if os.path.isdir(sentinel) and not (
                    os.path.isfile(os.path.join(sentinel, "keep")) and os.path.isdir(os.path.join(sentinel, "7-1"))
                ):
                    tally.corrupt_restores += 1
                    run.problem(tally, f"{how}: the state disk's link target lost its files")
                run.vm.kill()
                run.check_restore(tally, before, f"after a hostile state disk ({how})")
                run.count_tracebacks(tally)
                if os.path.islink(snapshots):  # the next round starts with a usable disk
                    os.remove(snapshots)
        finally:
            vm.close()
        result.skipped_snapshots += _skipped_snapshots(vm)


#: A trainer survivor did not write, saving TensorFlow's layout in an order of its own.
FOREIGN_TRAINER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "foreign_trainer.py")


def _save_order_rounds(rounds: int, rng: random.Random, seed: int, root: str, python: str, result: ChaosResult) -> None:
    """Jobs of a trainer that saves its state file before its shards or after them, half of them
    writing an export after their final save (`foreign_trainer.py`), each hurt once while it trains
    (a SIGTERM that it saves on, or a SIGKILL of the agent, the trainer or both) and then booted to
    its end. The boot after the fault must restore the newest whole commit seen before it (never a
    partial one: its trainer would exit 3), the job must end DONE at its last step, and the final
    commit must hold the export. An agent that exits 1 is started again, up
    to three times, as systemd's Restart=on-failure does: a job whose first save was cut before any
    checkpoint was whole restores that part, its trainer fails on it, and the next start passes it
    over for a start from scratch (`CheckpointStore.restore`)."""
    from survivor.jobdir.journal import Journal

    tally = result.tallies["save orders"]
    with StorageEmulator(log_dir=root) as gcs:
        gcs.create_bucket("orders")
        for index in range(rounds):
            job_dir = f"gs://orders/job-{index}"
            order, export = rng.choice(["state-first", "shards-first", "no-state"]), rng.random() < 0.5
            shards = rng.choice([1, 1, 3])
            train_steps = rng.randint(150, 250)
            argv = [
                python,
                FOREIGN_TRAINER,
                "--order",
                order,
                "--shards",
                str(shards),
                "--pause",
                str(rng.choice([0.0, 0.05, 0.2])),
                "--step-seconds",
                "0.01",
                "--step-log",
                os.path.join(root, f"orders-{index}.log"),
            ]
            trainer = {"argv": argv + (["--export"] if export else [])}
            vm = LocalInstance(
                {"survivor-job": _spec(job_dir, python, train_steps=train_steps, checkpoint_steps=20, trainer=trainer)},
                os.path.join(root, f"vm-orders-{index}"),
                python=python,
                name=f"survivor-orders-{index}",
                env={"STORAGE_EMULATOR_HOST": gcs.url},
            )
            run = _Rounds(vm, job_dir, rng, seed, result, root, proxy=None)
            run.store.max_step = train_steps
            try:
                tally.inputs += 1
                tally.faults[f"{order}{f' x{shards}' if shards > 1 else ''}{' + export' if export else ''}"] += 1
                booted = run.boot_to_training(tally, f"{order}: the first boot did not train")
                if booted is None:
                    continue
                time.sleep(rng.uniform(0.3, 1.5))
                if rng.random() < 0.5:
                    tally.faults["SIGTERM"] += 1
                    vm.set_preempted()
                    vm.soft_off()
                    if vm.wait(HARD_OFF) is None:
                        tally.hangs += 1
                        run.problem(tally, f"{order}: the agent still ran {HARD_OFF:g} s after its SIGTERM")
                        vm.kill()
                else:
                    run.kill(tally, booted)
                whole = [m for m in run.store.committed() if m.resumable]
                before = whole[0] if whole else None
                run.boot()
                for _ in range(3):  # systemd's Restart=on-failure: an agent that exits 1 starts again
                    code = vm.wait(120)
                    if code is None:
                        tally.hangs += 1
                        run.problem(tally, f"{order}: the boot after the fault did not finish in 120 s")
                        vm.kill()
                        break
                    if code != 1:
                        break
                    tally.faults["agent restarts"] += 1
                    run.boot(wipe=False)
                state = Journal(run.storage).state()
                attempt = state.attempts[-1] if state.attempts else None
                if before is not None and (attempt is None or (attempt.restored_step or 0) < before.step):
                    tally.lost_commits += 1
                    run.problem(
                        tally,
                        f"{order}: restored {attempt and attempt.restored_step}, older than the "
                        f"whole commit {before.name}",
                    )
                if state.done is None or state.done.get("step") != train_steps:
                    tally.corrupt_restores += 1
                    run.problem(
                        tally,
                        f"{order}: not DONE at step {train_steps} ({state.done}; last attempt "
                        f"{attempt and (attempt.outcome, attempt.reason)})",
                    )
                run.check_restore(tally, before, f"{order}: after the fault and the job's end")
                final = run.store.latest()
                paths = {f.path for f in final.files} if final is not None else set()
                if final is None or not final.resumable or (export and "export/saved_model.pb" not in paths):
                    tally.corrupt_restores += 1
                    run.problem(
                        tally,
                        f"{order}: the final commit is not whole{' or lacks the export' if export else ''}:"
                        f" {sorted(paths)}",
                    )
                run.count_tracebacks(tally)
            finally:
                vm.close()


def _cut_rounds(rounds: int, rng: random.Random, seed: int, root: str, result: ChaosResult) -> None:
    """A `survivor watch` SIGKILLed (`harness.cuts.KilledAt`: no handler of survivor runs) before a
    random Compute Engine call of a move (a stocked-out job that may move to another region) or of a
    switch (a job behind its deadline going on-demand); then capacity comes back and the next looks
    run, half the time two at once. Each job must end with one group, running one VM, where its
    records say."""
    import threading

    from harness import cuts
    from survivor.cloud.compute import Compute
    from survivor.jobdir.moves import current_place, moves
    from survivor.jobdir.storage import open_storage
    from survivor.jobdir.switches import switches
    from survivor.operator.watch import watch_once

    tally = result.tallies["cut moves and switches"]
    points = {
        "move": cuts.move_cut_points(os.path.join(root, "cut-probe-move")),
        "switch": cuts.switch_cut_points(os.path.join(root, "cut-probe-switch")),
    }
    previous = os.environ.get("SURVIVOR_COMPUTE_ENDPOINT")
    for index in range(rounds):
        action = rng.choice(["move", "switch"])
        at = rng.randint(*points[action])
        tally.inputs += 1
        tally.faults[f"{action} cut"] += 1
        server = cuts.ComputeServer().start()
        os.environ["SURVIVOR_COMPUTE_ENDPOINT"] = server.endpoint
        try:
            job = os.path.join(root, f"cut-{index}")
            spec = (cuts.stocked_out_job if action == "move" else cuts.deadline_job)(server, job)
            killed = cuts.KilledAt(cuts.PROJECT, endpoint=server.endpoint, at=at)
            try:
                watch_once(killed, cuts.FIRST, job_dir=spec.job_dir)
            except cuts.Killed:
                pass
            where = f"{action} killed before call {at} ({killed.names[-1] if killed.names else '-'})"
            if action == "move":
                server.clear_instance_creation_failures()  # capacity comes back to the first zone
                cuts.groups_of(server)  # its MIG tries again, and gets its VM
            errors: list[BaseException] = []

            def look(
                endpoint: str = server.endpoint, job_dir: str = spec.job_dir, failed: list[BaseException] = errors
            ) -> None:
                try:
                    watch_once(cuts.Compute(cuts.PROJECT, endpoint=endpoint), cuts.FIRST, job_dir=job_dir)
                except BaseException as exc:  # noqa: BLE001 - counted below
                    failed.append(exc)

            twice = rng.random() < 0.5
            looks = [threading.Thread(target=look) for _ in range(2 if twice else 1)]
            for thread in looks:
                thread.start()
            for thread in looks:
                thread.join(120)
            if twice:
                tally.faults["two looks at once"] += 1
            if any(thread.is_alive() for thread in looks):
                tally.hangs += 1
                tally.problems.append(f"round {index} (seed {seed}): {where}: a look still ran after 120 s")
                continue
            look()  # and one more alone: nothing changes once it is right
            found = cuts.groups_of(server)
            storage = open_storage(spec.job_dir)
            members = [m for ms in found.values() for m in ms]
            if action == "move":
                place = current_place(moves(storage), f"zones/{cuts.ZONE}")
                right = list(found) == [place] and [s for _, s in members] == ["RUNNING"]
            else:
                group = Compute(cuts.PROJECT, endpoint=server.endpoint).get_group(cuts.FIRST) or {}
                recorded = switches(storage)
                right = (
                    len(found) == 1
                    and [s for _, s in members] == ["RUNNING"]
                    and len(recorded) == 1
                    and str(group.get("instanceTemplate", "")).endswith("/" + recorded[-1].template)
                )
            if errors or not right:
                tally.wrong_groups += 1
                tally.problems.append(f"round {index} (seed {seed}): {where}: groups {found}, errors {errors}")
        finally:
            server.stop()
    if previous is None:
        os.environ.pop("SURVIVOR_COMPUTE_ENDPOINT", None)
    else:
        os.environ["SURVIVOR_COMPUTE_ENDPOINT"] = previous


# -- the run ---------------------------------------------------------------------------------------


def run_chaos(
    kills: int,
    fault_rate: float,
    seed: int,
    root: str,
    python: str = sys.executable,
    *,
    manifests: int = 0,
    full_disks: int = 0,
    slow_metadata: int = 0,
    overlapped: int = 0,
    damaged_chunks: int = 0,
    contract_breakers: int = 0,
    state_disks: int = 0,
    pid_namespaces: int = 0,
    save_orders: int = 0,
    cuts: int = 0,
) -> ChaosResult:
    """Runs the rounds, in a random order, against a fresh storage emulator under `root`."""
    from survivor.jobdir.journal import Journal
    from survivor.jobdir.storage import open_storage

    rng = random.Random(seed)
    result = ChaosResult()
    started = time.monotonic()
    os.makedirs(root, exist_ok=True)
    with _quiet("survivor.jobdir.store"), StorageEmulator(log_dir=root) as gcs:
        gcs.create_bucket("chaos")
        proxy = FaultProxy(gcs.url, FaultPlan(rate=fault_rate, seed=seed, stall_seconds=0.3)).start()
        job_dir = "gs://chaos/job"
        # 64 KiB chunks: the dummy's state file repeats its bytes after the step, so commits share chunks
        vm = LocalInstance(
            {"survivor-job": _spec(job_dir, python)},
            os.path.join(root, "vm"),
            python=python,
            env={"STORAGE_EMULATOR_HOST": proxy.url, "SURVIVOR_CHUNK_MIB": "0.0625"},
        )
        run = _Rounds(vm, job_dir, rng, seed, result, root, proxy)
        if pid_namespaces and not _can_unshare_pid():
            result.tallies["pid namespace"].skipped = "not run: a new pid namespace needs root and unshare(1)"
            pid_namespaces = 0
        schedule = (
            ["kill"] * kills
            + ["damaged manifest"] * manifests
            + ["slow metadata"] * slow_metadata
            + ["damaged chunk"] * damaged_chunks
            + ["pid namespace"] * pid_namespaces
        )
        rng.shuffle(schedule)
        rounds = {
            "kill": run.kill_round,
            "damaged manifest": run.manifest_round,
            "slow metadata": run.slow_metadata_round,
            "damaged chunk": run.chunk_round,
            "pid namespace": run.pid_namespace_round,
        }
        try:
            for kind in schedule:
                rounds[kind]()
        finally:
            vm.close()
            proxy.stop()
        result.skipped_snapshots = _skipped_snapshots(vm)
        result.failed_marker = Journal(open_storage(job_dir)).failed() is not None
        result.faults = proxy.count
    if full_disks:
        _full_disk_rounds(full_disks, rng, seed, root, python, result)
    if overlapped:
        _overlap_rounds(overlapped, rng, seed, root, python, result)
    if contract_breakers:
        _contract_breaker_rounds(contract_breakers, rng, seed, root, python, result)
    if state_disks:
        _state_disk_rounds(state_disks, rng, seed, root, python, result)
    if save_orders:
        _save_order_rounds(save_orders, rng, seed, root, python, result)
    if cuts:
        _cut_rounds(cuts, rng, seed, root, result)
    result.seconds = time.monotonic() - started
    return result


def table(result: ChaosResult) -> tuple[list[str], list[list]]:
    """The figures per class, as a header and rows (benchmarks/chaos.py prints them)."""
    header = [
        "fault class",
        "inputs tried",
        "faults injected",
        "corrupt restores",
        "lost commits",
        "hangs",
        "tracebacks",
        "temp files left",
        "leases stolen",
        "jobs not one running group",
        "worst lost steps",
        "slowest exit or boot (s)",
    ]
    rows: list[list] = []
    for name, t in result.tallies.items():
        if t.skipped:
            rows.append([name, t.skipped, "", "", "", "", "", "", "", "", "", ""])
            continue
        faults = ", ".join(f"{k} {v}" for k, v in sorted(t.faults.items()))
        rows.append(
            [
                name,
                t.inputs,
                f"{sum(t.faults.values())} ({faults})" if faults else 0,
                t.corrupt_restores,
                t.lost_commits,
                t.hangs,
                t.tracebacks,
                t.leaked_temp_files,
                t.stolen_leases,
                t.wrong_groups,
                t.worst_lost_steps,
                round(t.slowest_seconds, 1),
            ]
        )
    return header, rows
