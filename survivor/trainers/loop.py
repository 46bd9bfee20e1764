"""A resumable TensorFlow 2 training loop on MirroredStrategy that survives preemption bit for bit.

    >>> runtime = Runtime.from_args(args)                 # devices, determinism, strategy, SIGTERM
    >>> with runtime.strategy.scope():
    ...     model, optimizer = build_model(), keras.optimizers.SGD(0.1, momentum=0.9)
    >>> return runtime.train(model, optimizer, dataset_of_global_batches, TrainHooks(...))

What it keeps in its `tf.train.Checkpoint`, so that a resumed run reproduces the uninterrupted one
exactly (with op determinism and fixed seeds): every model and optimizer variable (slots, iterations,
batch-norm statistics, the Keras RNG state `seed_generator_state` that `model.weights` leaves out),
keyed by Keras path; the step; the input iterator (a plain iterator over global batches, split per
replica at each step: a distributed iterator cannot be checkpointed). A trainer whose input order is a
pure function of the step passes `dataset` as a function of the step to start at instead (the CIFAR-10
trainer does): nothing of the input is saved, and a save copies only variables.

Periodic saves are off the step path: TensorFlow's async checkpoint copies the state to host memory
(variables and the iterator's position, at that step) and writes it from a background thread; the
`checkpoint` state file names it only once it is complete, which is when the agent mirrors it. A
notice's save and the last one wait for the write. `--sync-checkpoints` writes on the step path.

Started by the agent at its start gate (`SURVIVOR_START_GATE=stdin`, before the agent has restored
the job dir): everything that reads nothing of the job dir is done first (the import, the devices,
the model, the step traced and run once on zeros with its state put back), then `go` is awaited.

SIGTERM or SIGINT: the step in flight finishes, a checkpoint is saved, the process exits 0. SIGUSR1
(the agent's request on a host-maintenance notice): a checkpoint is saved after the step in flight
and training goes on (on one machine; across machines a save is a collective every worker must
join, so there the notice goes through the handler below instead). Resuming
with hyperparameters other than the checkpoint's is refused, naming each difference, unless
`--allow-hparam-change`. On a machine without GPUs, `--num-gpus N` splits the CPU into N logical
devices, which is how multi-GPU training is tested here.

Across machines (`TF_CONFIG` or Vertex AI's `CLUSTER_SPEC` naming more than one worker, see
`survivor.trainers.cluster`): `MultiWorkerMirroredStrategy`, every worker stepping through the same
global batches. The chief writes checkpoints, summaries and the export into `--job-dir`; the other
workers take part in every save (a save reads synchronised variables, a collective) into a scratch
directory they delete; every worker restores from the chief's. Notices go through TensorFlow's
`PreemptionCheckpointHandler` with survivor's `NoticePoll` (SIGTERM, `instance/preempted`, a
terminating maintenance event): whichever worker hears first, all agree on the next step, all save
there, and all exit `RESTART_EXIT_CODE` so the cluster restarts the job.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from survivor.trainers.cluster import Cluster, cluster_from_env
from survivor.trainers.contract import (
    START_GATE_ENV,
    SaveRequest,
    StopRequest,
    report_progress,
    report_saved,
    wait_at_start_gate,
)

HPARAMS_FILE = "hparams.json"
#: What a multi-worker trainer exits with after its notice checkpoint: TensorFlow's restartable code on
#: Google Cloud. The single-machine trainer exits 0 instead (the agent knows why it stopped).
RESTART_EXIT_CODE = 143


def add_contract_flags(parser: argparse.ArgumentParser, *, checkpoint_steps: int = 1000) -> None:
    """The flags every survivor trainer takes (the trainer contract)."""
    parser.add_argument("--job-dir", required=True, help="local directory for checkpoints (the agent mirrors it)")
    parser.add_argument("--data-dir", default=None, help="where the input data is")
    parser.add_argument("--train-steps", type=int, required=True, help="total training steps")
    parser.add_argument(
        "--num-gpus",
        type=int,
        default=None,
        help="replicas: GPUs to use (default all); on a CPU-only machine, logical CPU devices",
    )
    parser.add_argument("--checkpoint-steps", type=int, default=checkpoint_steps, help="save every N steps")
    parser.add_argument("--keep-checkpoints", type=int, default=3, help="local checkpoints kept")
    parser.add_argument("--seed", type=int, default=0, help="seed for weights, data order and dropout")
    parser.add_argument("--log-steps", type=int, default=10, help="log and summarise every N steps")
    parser.add_argument(
        "--allow-hparam-change", action="store_true", help="resume even if hyperparameters differ from the checkpoint's"
    )
    parser.add_argument(
        "--no-determinism",
        action="store_true",
        help="skip op determinism (faster on GPUs; resume is then not bitwise exact)",
    )
    parser.add_argument(
        "--sync-checkpoints",
        action="store_true",
        help="write periodic checkpoints on the step path (default: copy the state to host memory "
        "and write it from a background thread)",
    )


class HparamMismatch(Exception):
    """Resuming with other hyperparameters than the checkpoint was made with."""


def hparam_differences(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Pure decision: one line per hyperparameter that differs between a checkpoint and this run."""
    lines = []
    for key in sorted(set(saved) | set(current)):
        if saved.get(key) != current.get(key):
            lines.append(f"{key}: checkpoint has {saved.get(key)!r}, this run has {current.get(key)!r}")
    return lines


def hparam_refusal(differences: list[str], allowed: bool) -> str | None:
    """Pure decision: the line refusing a resume with these `hparam_differences`, or None."""
    if not differences or allowed:
        return None
    return (
        "refusing to resume with other hyperparameters than the checkpoint's "
        "(pass --allow-hparam-change to override): " + "; ".join(differences)
    )


def _local_hparam_refusal(args: argparse.Namespace, hparams: dict[str, Any]) -> str | None:
    """The refusal for a local job dir (the agent's), read without TensorFlow; None for a remote one
    (gs://, Vertex AI's), which `Runtime.guard_hparams` reads through TensorFlow's gfile."""
    if "://" in args.job_dir:
        return None
    try:
        with open(os.path.join(args.job_dir, HPARAMS_FILE), encoding="utf-8") as f:
            saved = json.loads(f.read())
    except (OSError, ValueError):
        return None  # none yet, or unreadable: guard_hparams decides, as before
    if not isinstance(saved, dict):
        return None
    return hparam_refusal(hparam_differences(saved, hparams), args.allow_hparam_change)


#: Packages TensorFlow and Keras import at their own import whenever they are installed, for work no
#: built-in trainer does: Keras 3's `matplotlib.pyplot` (keras.src.visualization's image galleries),
#: 0.44 s of the 3.3 s import on this project's test machine, and TensorFlow's `googleapiclient.discovery`
#: (the GCE cluster resolver, for TPU pods), 0.2 s. Deep Learning VM images ship both.
NOT_FOR_TRAINING = ("matplotlib", "googleapiclient")


def import_tensorflow() -> None:
    """Imports TensorFlow and Keras without NOT_FOR_TRAINING: both fall back on the ImportError (no
    plots, no GCE resolver). The block is lifted once they are in, so a trainer that plots later
    imports matplotlib as usual."""
    if "keras" in sys.modules or "tensorflow" in sys.modules:
        return
    blocked = [name for name in NOT_FOR_TRAINING if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]  # `import name` raises ImportError
    try:
        import keras  # noqa: F401
        import tensorflow  # noqa: F401
    finally:
        for name in blocked:
            del sys.modules[name]


def select_devices(num_gpus: int | None, physical_gpus: int) -> tuple[str, int]:
    """Pure decision: ("gpu" | "cpu", replica count) for the requested count and what exists."""
    if physical_gpus:
        return "gpu", min(num_gpus or physical_gpus, physical_gpus) or physical_gpus
    return "cpu", max(1, num_gpus or 1)


@dataclass
class TrainHooks:
    """What a model module provides beyond the model: its loss and optional extras."""

    loss: Callable  # (labels, logits) -> per-example loss
    regularization: Callable[[], Any] | None = None  # () -> scalar, added once per replica (scaled)
    learning_rate: Callable[[Any], Any] | None = None  # step -> value (logged)
    evaluate: Callable[[], dict] | None = None  # after training: {"loss": ..., "accuracy": ...}
    export: Callable[[str], None] | None = None  # after training: write a SavedModel at the path
    examples_per_batch: int = 0
    after_step: Callable[[], None] | None = None  # e.g. a pause that stands in for a bigger model


@dataclass
class Runtime:
    """Devices, determinism, the strategy and the stop flag for one trainer process."""

    args: argparse.Namespace
    strategy: Any
    replicas: int
    stop: StopRequest
    hparams: dict[str, Any] = field(default_factory=dict)
    cluster: Cluster | None = None  # set when training across machines
    saved_step: int | None = None  # the newest checkpoint's step, the same on every worker
    save_now: SaveRequest = field(default_factory=SaveRequest)  # SIGUSR1: save, keep training

    @property
    def is_chief(self) -> bool:
        """True for the process that writes checkpoints: the only one, or the cluster's chief."""
        return self.cluster is None or self.cluster.is_chief

    @classmethod
    def from_args(cls, args: argparse.Namespace, hparams: dict[str, Any]) -> "Runtime":
        """Sets up this trainer process from its flags: stop and save signals, devices, determinism,
        seeds and the strategy (exits at once for a cluster task that does not train)."""
        stop = StopRequest.install()  # before the slow imports finish: a SIGTERM now still saves
        save_now = SaveRequest.install()  # and a SIGUSR1 then must not end the process
        cluster = cluster_from_env(os.environ)
        if cluster is not None and not cluster.trains:
            print(
                f"{cluster.source}: task {cluster.task_type}:{cluster.task_index} has nothing to do: the built-in "
                "trainers run MultiWorkerMirroredStrategy (chief and workers only); exiting",
                flush=True,
            )
            raise SystemExit(0)
        gated = os.environ.get(START_GATE_ENV) == "stdin"  # the agent restores the job dir meanwhile
        refusal = None if gated else _local_hparam_refusal(args, hparams)  # gated: `train` reads it at the gate
        if refusal is not None:  # before TensorFlow's import: the refusal is one line in a fraction of a second
            print(f"error: {refusal}", file=sys.stderr, flush=True)
            raise SystemExit(2)
        import_tensorflow()
        import tensorflow as tf
        import keras

        physical_gpus = tf.config.list_physical_devices("GPU")
        kind, replicas = select_devices(args.num_gpus, len(physical_gpus))
        if cluster is not None and cluster.multi_worker:
            os.environ["TF_CONFIG"] = json.dumps(cluster.tf_config)  # normalised: chief/worker only
            if kind == "gpu":
                tf.config.set_visible_devices(physical_gpus[:replicas], "GPU")
        elif kind == "cpu" and replicas > 1:
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
        if not args.no_determinism:
            tf.config.experimental.enable_op_determinism()
        keras.utils.set_random_seed(args.seed)
        if cluster is not None and cluster.multi_worker:
            strategy = tf.distribute.MultiWorkerMirroredStrategy()
            print(
                f"worker {cluster.worker_id} of {cluster.workers} ({cluster.task_type}:{cluster.task_index}, "
                f"{'chief' if cluster.is_chief else 'not chief'}), {strategy.num_replicas_in_sync} replica(s) "
                "in all",
                flush=True,
            )
            return cls(args, strategy, strategy.num_replicas_in_sync, stop, hparams, cluster, save_now=save_now)
        devices = [f"/{kind}:{i}" for i in range(replicas)]
        strategy = tf.distribute.MirroredStrategy(devices)
        return cls(args, strategy, replicas, stop, hparams, save_now=save_now)

    # -- hyperparameter guard ---------------------------------------------------------------------

    def guard_hparams(self) -> None:
        """Refuses to resume with different hyperparameters; the chief records them on a first start."""
        from tensorflow.io import gfile  # the job dir may be gs:// (Vertex AI)

        path = os.path.join(self.args.job_dir, HPARAMS_FILE)
        if gfile.exists(path):
            with gfile.GFile(path, "r") as f:
                saved = json.loads(f.read())
            differences = hparam_differences(saved, self.hparams)
            refusal = hparam_refusal(differences, self.args.allow_hparam_change)
            if refusal is not None:
                raise HparamMismatch(refusal)
            if not differences:
                return
        if not self.is_chief:
            return
        tmp = path + ".tmp"
        with gfile.GFile(tmp, "w") as f:
            f.write(json.dumps(self.hparams, indent=1, sort_keys=True))
        gfile.rename(tmp, path, overwrite=True)

    def scratch_dir(self, name: str) -> str:
        """Where a worker other than the chief writes what only the chief's copy of is kept."""
        assert self.cluster is not None
        parent = os.path.dirname(self.args.job_dir.rstrip("/"))
        return os.path.join(parent, f"workertemp_{self.cluster.worker_id}", name)

    def notice_handler(self, manager, save: Callable[[], None]):
        """TensorFlow's PreemptionCheckpointHandler, listening to survivor's NoticePoll."""
        import tensorflow as tf

        from survivor import retry
        from survivor.metadata import MetadataClient
        from survivor.trainers.preemption import NoticePoll

        poll = NoticePoll(self.stop, MetadataClient(timeout=retry.TRAINER_POLL.attempt_seconds, retrying=retry.once))

        def leave() -> None:
            print(
                f"notice ({poll.source or 'a peer'}): all workers saved at step {self.saved_step}; exiting "
                f"{RESTART_EXIT_CODE} for a restart",
                flush=True,
            )
            sys.exit(RESTART_EXIT_CODE)

        config = tf.distribute.experimental.TerminationConfig(
            termination_watcher_fn=poll, exit_fn=leave, grace_period=0, save_fn=save
        )
        return tf.distribute.experimental.PreemptionCheckpointHandler(
            self.strategy.cluster_resolver, manager, termination_config=config
        )

    # -- the loop ---------------------------------------------------------------------------------

    def train(self, model, optimizer, dataset, hooks: TrainHooks) -> int:
        """Runs (or resumes) training to `--train-steps`. Returns the process exit code.

        `dataset`: endless global batches, as a `tf.data.Dataset` (its iterator is checkpointed) or
        as a function of the step to start at that returns one (nothing of the input is saved)."""
        import tensorflow as tf

        args = self.args
        with self.strategy.scope():
            optimizer.build(model.trainable_variables)
            step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        iterator: Any = None
        next_step = self._step_function(model, optimizer, hooks, step, lambda: next(iterator))
        batches = (dataset(0) if callable(dataset) else dataset).element_spec
        # Everything up to the gate reads nothing of the job dir: an agent that started this trainer
        # before its restore lets it on from there (contract.wait_at_start_gate), and the import, the
        # model and the step's first trace and run overlap the agent's steps up to the end of the
        # restore. Not gated, the first step would instantiate the step anyway: it is only traced ahead.
        if os.environ.get(START_GATE_ENV) == "stdin":
            with _put_back(checkpoint_objects(model, optimizer, step)):
                ran = next_step.ahead(batches, run=True)
            print(
                f"ready at the start gate (model built, step {'traced and run once' if ran else 'not traced'}): "
                "waiting for the restore",
                flush=True,
            )
        else:
            next_step.ahead(batches, run=False)
        if not wait_at_start_gate():
            print("the boot ended before training; exiting", flush=True)
            return 0
        tf.io.gfile.makedirs(args.job_dir)
        try:
            self.guard_hparams()
        except HparamMismatch as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            return 2
        saves, iterator = self._resume(model, optimizer, step, dataset)
        handler = self.notice_handler(saves.manager, saves.save) if self.multi_worker else None
        progress = _StepLog(self, hooks)
        current = int(step.numpy())
        while current < args.train_steps:
            if handler is not None:  # checks for a notice (any worker's) before taking a batch; may save, exit
                loss, accuracy = handler.run(next_step)
            else:
                loss, accuracy = next_step()
            current += 1
            if hooks.after_step is not None:
                hooks.after_step()
            report_progress(current)
            progress.step_done(current, loss, accuracy)
            if self.stop.requested and handler is None:  # across workers the handler saves and exits
                saves.save()
                print(
                    f"{self.stop.signal_name or 'stop'} at step {current}: checkpoint saved in "
                    f"{saves.seconds[-1]:.3f} s, exiting",
                    flush=True,
                )
                progress.writer.flush()
                report_saved(current)  # last: the agent may end this process once the save is committed
                return 0
            if self.save_now.take() and handler is None:
                saves.save(blocking=False)
                print(f"asked to save at step {current}: checkpoint written in the background, training on", flush=True)
            elif current % args.checkpoint_steps == 0:
                saves.save(blocking=False)
        progress.timing(saves.seconds, next_step.traces())
        saves.finish(current)
        self._evaluate_and_export(hooks, progress.writer, current)
        print(f"training finished at step {current}", flush=True)
        return 0

    @property
    def multi_worker(self) -> bool:
        """True when this process is one of several workers (MultiWorkerMirroredStrategy)."""
        return self.cluster is not None and self.cluster.multi_worker

    def _resume(self, model, optimizer, step, dataset) -> tuple["_Saves", Any]:
        """Restores the newest checkpoint of the job dir, if any, and opens the input at its step."""
        import tensorflow as tf

        positional = callable(dataset)  # dataset(step) starts at that step: its position need not be saved
        iterator = None if positional else iter(dataset)
        checkpoint = tf.train.Checkpoint(**checkpoint_objects(model, optimizer, step, iterator))
        manager = tf.train.CheckpointManager(
            checkpoint, self.args.job_dir, max_to_keep=self.args.keep_checkpoints, checkpoint_name="ckpt"
        )
        latest = latest_checkpoint(manager, self.args.job_dir)
        if latest:
            checkpoint.restore(latest).assert_existing_objects_matched()
            self.saved_step = int(step.numpy())
            print(f"resumed from {os.path.basename(latest)} at step {self.saved_step}", flush=True)
        else:
            print(f"starting from scratch on {self.replicas} replica(s)", flush=True)
        if positional:
            iterator = iter(dataset(int(step.numpy())))
        return _Saves(self, checkpoint, manager, step), iterator

    def _step_function(self, model, optimizer, hooks: TrainHooks, step, next_batch: Callable[[], Any]):
        """One training step on every replica: the global batch split between them, gradients applied,
        the step counted; returns (loss, accuracy) of the global batch (`ahead`: before the first one)."""
        import tensorflow as tf

        strategy, replicas, global_batch = self.strategy, self.replicas, hooks.examples_per_batch

        def split(batch, ctx):
            index, count = ctx.replica_id_in_sync_group, ctx.num_replicas_in_sync
            per = global_batch // count
            return tuple(t[index * per : (index + 1) * per] for t in batch)

        @tf.function
        def train_step(features, labels):
            def replica_step(x, y):
                with tf.GradientTape() as tape:
                    logits = model(x, training=True)
                    per_example = hooks.loss(y, logits)
                    loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
                    if hooks.regularization is not None:
                        loss += hooks.regularization() / replicas
                grads = tape.gradient(loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
                correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, -1, output_type=y.dtype), y), tf.float32))
                return loss, correct

            loss, correct = strategy.run(replica_step, args=(features, labels))
            step.assign_add(1)
            return (strategy.reduce("SUM", loss, axis=None), strategy.reduce("SUM", correct, axis=None) / global_batch)

        def distribute(batch):
            return strategy.experimental_distribute_values_from_function(lambda ctx: split(batch, ctx))

        return _StepFunction(
            lambda: train_step(*distribute(next_batch())),
            lambda batch: train_step(*distribute(batch)),
            lambda batch: train_step.get_concrete_function(*distribute(batch)),
            train_step.experimental_get_tracing_count,
        )

    def _evaluate_and_export(self, hooks: TrainHooks, writer, current: int) -> None:
        """After the last step: the evaluation (chief only: replica 0 holds the model that is saved)
        and the SavedModel export the hooks ask for."""
        import tensorflow as tf

        if hooks.evaluate is not None and self.is_chief:
            metrics = hooks.evaluate()
            print("eval " + " ".join(f"{k} {v:.4f}" for k, v in metrics.items()), flush=True)
            with writer.as_default(step=current):
                for key, value in metrics.items():
                    tf.summary.scalar(f"eval_{key}", value)
            writer.flush()
        if hooks.export is not None:
            export_dir = os.path.join(self.args.job_dir, "export") if self.is_chief else self.scratch_dir("export")
            hooks.export(export_dir)
            if self.is_chief:
                print(f"exported a SavedModel to {export_dir}", flush=True)
            else:
                tf.io.gfile.rmtree(os.path.dirname(export_dir))


class _StepFunction:
    """One training step (call it), which can be traced and run before its first batch (`ahead`)."""

    def __init__(
        self,
        run: Callable[[], Any],
        run_batch: Callable[[Any], Any],
        trace_batch: Callable[[Any], Any],
        traces: Callable[[], int],
    ):
        self._run, self._run_batch, self._trace_batch, self.traces = run, run_batch, trace_batch, traces

    def __call__(self):
        return self._run()

    def ahead(self, element_spec, *, run: bool) -> bool:
        """Before the first batch: traces the step for batches of `element_spec` (a dataset's) on
        zeros of its shapes, and with `run` also runs it on them once (instantiating its graph, and on
        a GPU tuning its kernels), which moves the model's state: run it only inside `_put_back`. The
        first real step finds the trace (the same shapes, dtypes and placement make the same
        signature). False, doing nothing, when a shape is not fully known: the first step traces then."""
        import tensorflow as tf

        specs = tf.nest.flatten(element_spec)
        if not all(isinstance(s, tf.TensorSpec) and s.shape.is_fully_defined() for s in specs):
            return False
        zeros = tf.nest.pack_sequence_as(element_spec, [tf.zeros(s.shape, s.dtype) for s in specs])
        if run:
            self._run_batch(zeros)
        else:
            self._trace_batch(zeros)
        return True


def latest_checkpoint(manager, job_dir: str) -> str | None:
    """The checkpoint a resume restores: the one TensorFlow's `checkpoint` state file names
    (`manager.latest_checkpoint`), else the newest `ckpt-N` by name (`newest_by_name`), else None.
    The built-in loop and `keras_fit.fit_resumable` both resume through it."""
    import tensorflow as tf

    if manager.latest_checkpoint:
        return manager.latest_checkpoint
    named = newest_by_name([os.path.basename(p) for p in tf.io.gfile.glob(os.path.join(job_dir, "ckpt-*.index"))])
    return os.path.join(job_dir, named) if named else None


def newest_by_name(index_files: list[str]) -> str | None:
    """Pure decision: the newest checkpoint (`ckpt-N`) among its `ckpt-N.index` file names, or None.
    The resume's fallback when the job dir has no `checkpoint` state file naming one: TensorFlow
    writes that file after the checkpoint's own files, and a commit taken between the two restores
    the checkpoint without it, which `CheckpointManager.latest_checkpoint` reads as none at all. The
    agent commits the step again once the state file appears (`agent.mirror.same_step`), but a VM
    gone before that leaves only the first commit."""
    steps = [int(found.group(1)) for found in map(_INDEX_FILE.fullmatch, index_files) if found]
    return f"ckpt-{max(steps)}" if steps else None


_INDEX_FILE = re.compile(r"ckpt-(\d+)\.index")


@contextlib.contextmanager
def _put_back(objects: dict[str, Any]):
    """Whatever runs inside leaves the state of `objects` (`checkpoint_objects`) as it found it:
    written before to a scratch checkpoint outside the job dir, read back after, as a resume reads."""
    import tensorflow as tf

    checkpoint = tf.train.Checkpoint(**objects)
    with tempfile.TemporaryDirectory(prefix="survivor-put-back-") as scratch:
        path = checkpoint.write(os.path.join(scratch, "before"))
        yield
        checkpoint.read(path).assert_existing_objects_matched()


class _Saves:
    """The trainer's checkpoint saves: where they go (the chief's job dir; another worker's scratch
    dir, since every worker takes part in a save but only the chief's copy is kept) and how (off the
    step path with TensorFlow's async checkpoint, except across workers, where a save is a collective)."""

    def __init__(self, runtime: Runtime, checkpoint, manager, step):
        import tensorflow as tf

        self.runtime, self.checkpoint, self.manager, self.step = runtime, checkpoint, manager, step
        if runtime.is_chief:
            self.writer = manager
        else:
            self.writer = tf.train.CheckpointManager(
                checkpoint, runtime.scratch_dir("checkpoints"), max_to_keep=1, checkpoint_name="ckpt"
            )
        # Off the step path: the state is copied to host memory (variables, an iterator's position) and
        # written by TensorFlow's async checkpoint thread; `checkpoint` names it only once it is complete.
        self.background = not runtime.args.sync_checkpoints and not runtime.multi_worker
        self.options = (
            tf.train.CheckpointOptions(experimental_enable_async_checkpoint=True) if self.background else None
        )
        self.seconds: list[float] = []  # time on the step path per save

    def save(self, blocking: bool = True) -> None:
        """Saves the state at the current step; `blocking` waits until the files are complete.

        A blocking save (on a notice, at the end: the process's last) waits for any background save
        still in flight and then writes inline: TensorFlow's async path first traces its copy to host
        memory, which made a first save on a notice 0.17 s for the small MLP against 0.01 s inline.
        (Inline is never followed by a background save: TensorFlow refuses that order.)"""
        import tensorflow as tf

        started = time.perf_counter()
        number = int(self.step.numpy())
        if blocking and self.background:
            self.checkpoint.sync()
            self.writer.save(checkpoint_number=number)
        else:
            self.writer.save(checkpoint_number=number, options=self.options)
        if not self.runtime.is_chief:
            tf.io.gfile.rmtree(os.path.dirname(self.writer.directory))
        self.runtime.saved_step = number
        self.seconds.append(time.perf_counter() - started)

    def finish(self, current: int) -> None:
        """At the end of training: the last step saved, and every background save complete."""
        if self.runtime.saved_step != current:
            self.save()
        elif self.background:
            self.checkpoint.sync()


class _StepLog:
    """The trainer's progress as a reader sees it: a line and TensorBoard scalars every `--log-steps`
    (rates over the steps since the last line), and the timing line at the end (steps/s from the
    second step on, since the first traces the graph)."""

    def __init__(self, runtime: Runtime, hooks: TrainHooks):
        import tensorflow as tf

        self.args, self.hooks, self.global_batch = runtime.args, hooks, hooks.examples_per_batch
        if runtime.is_chief:
            self.writer = tf.summary.create_file_writer(os.path.join(runtime.args.job_dir, "train"))
        else:
            self.writer = tf.summary.create_noop_writer()
        self.first_step_done: float | None = None
        self.timed_steps = 0
        self.window_start, self.window_steps = time.monotonic(), 0

    def step_done(self, current: int, loss_t, acc_t) -> None:
        """Counts a step; at every `--log-steps` (and the last) prints and records the metrics."""
        import tensorflow as tf

        self.window_steps += 1
        if self.first_step_done is None:
            self.first_step_done = time.perf_counter()
        else:
            self.timed_steps += 1
        if current % self.args.log_steps and current != self.args.train_steps:
            return
        loss_value, accuracy = float(loss_t), float(acc_t)
        steps_per_s = self.window_steps / max(time.monotonic() - self.window_start, 1e-9)
        lr = float(self.hooks.learning_rate(current)) if self.hooks.learning_rate else float("nan")
        print(
            f"step {current}/{self.args.train_steps} loss {loss_value:.3f} acc {accuracy:.3f} "
            f"{steps_per_s * self.global_batch:.0f} ex/s",
            flush=True,
        )
        with self.writer.as_default(step=current):
            tf.summary.scalar("loss", loss_value)
            tf.summary.scalar("accuracy", accuracy)
            tf.summary.scalar("learning_rate", lr)
            tf.summary.scalar("steps_per_second", steps_per_s)
            tf.summary.scalar("examples_per_second", steps_per_s * self.global_batch)
        self.writer.flush()
        self.window_start, self.window_steps = time.monotonic(), 0

    def timing(self, save_seconds: list[float], traces: int) -> None:
        """The run's timing line: steps/s, the time saves took on the step path, and how often the step
        was traced (1: the trace before the first batch served every step)."""
        if self.first_step_done is None or not self.timed_steps:
            return
        elapsed = time.perf_counter() - self.first_step_done
        mean_save = sum(save_seconds) / len(save_seconds) if save_seconds else 0.0
        median_save = sorted(save_seconds)[len(save_seconds) // 2] if save_seconds else 0.0
        print(
            f"timing steps {self.timed_steps} seconds {elapsed:.3f} steps_per_second {self.timed_steps / elapsed:.3f} "
            f"saves {len(save_seconds)} mean_save_seconds {mean_save:.4f} median_save_seconds {median_save:.4f} "
            f"traces {traces}",
            flush=True,
        )


def checkpoint_objects(model, optimizer, step, iterator=None) -> dict[str, Any]:
    """What a checkpoint holds: every model and optimizer variable as the TensorFlow variable under
    the Keras one, keyed by its Keras path, plus the step and the input iterator (when it has state).

    `model.variables` includes the Keras 3 RNG state (`seed_generator_state` of Dropout and random
    augmentation layers), which `tf.train.Checkpoint(model=...)` leaves out. The TensorFlow variables
    themselves (not the Keras wrappers) are what TensorFlow's async checkpoint can copy to host memory.
    """
    objects: dict[str, Any] = {"step": step, **({"iterator": iterator} if iterator is not None else {})}
    for group, variables in (("model", model.variables), ("optimizer", optimizer.variables)):
        by_path: dict[str, Any] = {}
        for variable in variables:
            path = getattr(variable, "path", variable.name)
            if path in by_path:
                raise ValueError(
                    f"two {group} variables share the path {path!r}: a checkpoint could not tell them apart"
                )
            by_path[path] = getattr(variable, "value", variable)
        objects[group] = by_path
    return objects
