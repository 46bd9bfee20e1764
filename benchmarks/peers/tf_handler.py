"""TensorFlow's `PreemptionCheckpointHandler` in a custom loop, as its docstring shows, on the shared workload.

    python -m benchmarks.peers.tf_handler --checkpoint-dir DIR --train-steps N --checkpoint-steps C \
        [--watch gce|gce+preempted] [--platform gce-gpu|detected] [--step-seconds S]

The handler is TensorFlow's own, unchanged (tensorflow/python/distribute/failure_handling/): it
restores the newest checkpoint when it is made, and its termination watcher polls the metadata
server once a second through `failure_handling_util.request_compute_metadata`, whose host is
`$GCE_METADATA_IP` (the driver points it at the metadata emulator). A `tf.train.CheckpointManager`
passed to it also takes the loop's periodic backup saves, as its docstring suggests.

- `--watch gce`: no TerminationConfig, so on Compute Engine it fills in `GcpGpuTerminationConfig`:
  the watcher `termination_watcher_function_gce` (`instance/maintenance-event` ==
  `TERMINATE_ON_HOST_MAINTENANCE` only), exit code 143, a 3600 s grace period.
- `--watch gce+preempted`: a `TerminationConfig` whose watcher also reads `instance/preempted`.
- `--platform`: the handler picks its behaviour from `detect_platform()`. On a Compute Engine VM
  without a GPU (this machine, as the emulator makes it look) that is GCE_CPU, for which the handler
  does nothing at all: `run()` only calls the step, nothing is watched and nothing is restored.
  `gce-gpu` (the default) makes `detect_platform` answer GCE_GPU, the path a GPU VM takes; it is the
  only thing changed, because this machine has no GPU.

With a watcher configured the handler installs no SIGTERM handler, so SIGTERM ends the process.
"""

from __future__ import annotations

import argparse
import time

from benchmarks.peers import workload


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--train-steps", type=int, required=True)
    parser.add_argument("--checkpoint-steps", type=int, required=True)
    parser.add_argument("--watch", choices=("gce", "gce+preempted"), default="gce")
    parser.add_argument("--platform", choices=("gce-gpu", "detected"), default="gce-gpu")
    parser.add_argument("--step-seconds", type=float, default=0.0)
    args = parser.parse_args(argv)

    import tensorflow as tf
    from tensorflow.python.distribute.failure_handling import failure_handling_util as util

    from survivor.trainers.contract import report_progress

    if args.platform == "gce-gpu":
        util.detect_platform = lambda: util.PlatformDevice.GCE_GPU
    strategy = workload.strategy()
    with strategy.scope():
        model, optimizer = workload.model_and_optimizer()
        optimizer.build(model.trainable_variables)
        step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)
    manager = tf.train.CheckpointManager(checkpoint, args.checkpoint_dir, max_to_keep=3)
    config = None
    if args.watch == "gce+preempted":

        def watcher() -> bool:
            return (
                util.termination_watcher_function_gce() or util.request_compute_metadata("instance/preempted") == "TRUE"
            )

        config = tf.distribute.experimental.TerminationConfig(termination_watcher_fn=watcher)
    started = time.perf_counter()
    handler = tf.distribute.experimental.PreemptionCheckpointHandler(
        strategy.cluster_resolver, manager, termination_config=config
    )
    workload.note(
        restore=time.perf_counter() - started, initial_step=int(step.numpy()), platform=str(util.detect_platform())
    )
    train_step = workload.custom_step(strategy, model, optimizer)
    iterator = iter(strategy.experimental_distribute_dataset(workload.dataset()))
    current = int(step.numpy())
    while current < args.train_steps:
        handler.run(train_step, iterator)
        step.assign_add(1)
        current += 1
        workload.pause(args.step_seconds)
        report_progress(current)
        if current % args.checkpoint_steps == 0:
            manager.save(checkpoint_number=current)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
