"""`model.fit` that saves on SIGTERM and resumes mid-epoch, exactly: for users who keep their Keras code.

    >>> from survivor.trainers.keras_fit import fit_resumable
    >>> model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9), loss="sparse_categorical_crossentropy")
    >>> fit_resumable(model, batches_from, job_dir=args.job_dir, epochs=10, steps_per_epoch=500)

Keras 3's `BackupAndRestore` resumes only at epoch starts, saves nothing on a preemption notice, and
deletes its backup when `fit()` ends. `fit_resumable` instead:

- restores model, optimizer (its `iterations` is the global step) and the Keras RNG state variables
  from the newest `ckpt-N` in `job_dir` (TensorFlow's `CheckpointManager`, so stock TF reads it);
- feeds `fit` the batches from where the checkpoint stopped: `batches_from(step)` returns the batch
  stream starting at global batch `step` (cheap for a step-keyed pipeline), or, given a plain
  `tf.data.Dataset` of batches, `dataset.repeat().skip(step)` (exact for a deterministic pipeline,
  but it replays the skipped batches through the input pipeline);
- finishes a partly done epoch with a short first `fit` call, then runs the remaining epochs;
- saves every `checkpoint_steps`, and on SIGTERM/SIGINT after the batch in flight, then stops `fit`.

Returns "finished" or "stopped" (then exit 0: the agent commits the checkpoint and the next boot
resumes). With `tf.config.experimental.enable_op_determinism()` and fixed seeds the resumed run
matches the uninterrupted one bit for bit.
"""

from __future__ import annotations

import os

from survivor.trainers.contract import StopRequest, report_progress, report_saved
from survivor.trainers.loop import latest_checkpoint


def _rng_variables(model) -> list:
    return [v for v in model.variables if "seed_generator_state" in getattr(v, "path", v.name)]


def fit_resumable(model, batches_from, *, job_dir: str, epochs: int, steps_per_epoch: int,
                  checkpoint_steps: int | None = None, keep: int = 3, callbacks=(), verbose: int = 2,
                  stop: StopRequest | None = None, **fit_kwargs) -> str:
    """Runs (or resumes) `model.fit` for `epochs` x `steps_per_epoch` batches. See the module docstring."""
    import keras
    import tensorflow as tf

    request = stop or StopRequest.install()  # a new name: the callback below sees it narrowed
    optimizer = model.optimizer
    optimizer.build(model.trainable_variables)
    rng = {f"rng_{i}": getattr(v, "value", v) for i, v in enumerate(_rng_variables(model))}
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, rng=rng)
    manager = tf.train.CheckpointManager(checkpoint, job_dir, max_to_keep=keep, checkpoint_name="ckpt")
    latest = latest_checkpoint(manager, job_dir)  # by name when no state file names one
    if latest:
        checkpoint.restore(latest).assert_existing_objects_matched()
    done = int(optimizer.iterations.numpy())
    if latest:  # the line the built-in loop prints too
        print(f"resumed from {os.path.basename(latest)} at step {done}", flush=True)
    total = epochs * steps_per_epoch
    if done >= total:
        return "finished"

    def stream(step: int):
        if callable(batches_from) and not isinstance(batches_from, tf.data.Dataset):
            return batches_from(step)
        return batches_from.repeat().skip(step)

    class _SaveOnPreemption(keras.callbacks.Callback):
        stopped = False

        def on_train_batch_end(self, batch, logs=None):
            step = int(optimizer.iterations.numpy())
            report_progress(step)
            if request.requested:
                manager.save(checkpoint_number=step)
                report_saved(step)  # the agent may end the process once this save is committed
                self.model.stop_training = True
                _SaveOnPreemption.stopped = True
            elif checkpoint_steps and step % checkpoint_steps == 0:
                manager.save(checkpoint_number=step)

    saver = _SaveOnPreemption()
    epoch, into = divmod(done, steps_per_epoch)
    if into:
        model.fit(stream(done), initial_epoch=epoch, epochs=epoch + 1, steps_per_epoch=steps_per_epoch - into,
                  callbacks=[saver, *callbacks], verbose=verbose, **fit_kwargs)
        if saver.stopped:
            return "stopped"
        epoch += 1
    if epoch < epochs:
        model.fit(stream(epoch * steps_per_epoch), initial_epoch=epoch, epochs=epochs,
                  steps_per_epoch=steps_per_epoch, callbacks=[saver, *callbacks], verbose=verbose, **fit_kwargs)
        if saver.stopped:
            return "stopped"
    final = int(optimizer.iterations.numpy())
    if not manager.latest_checkpoint or not manager.latest_checkpoint.endswith(f"ckpt-{final}"):
        manager.save(checkpoint_number=final)
    return "finished"


def _example(argv: list[str] | None = None) -> int:
    """The runnable example of docs/trainer-contract.md (a small classifier on synthetic data)."""
    import argparse

    parser = argparse.ArgumentParser(description="model.fit under survivor: saves on SIGTERM, resumes mid-epoch")
    parser.add_argument("--job-dir", required=True)
    parser.add_argument("--train-steps", type=int, default=60)
    parser.add_argument("--steps-per-epoch", type=int, default=8)
    parser.add_argument("--num-gpus", type=int, default=0)
    parser.add_argument("--data-dir")
    args, _ = parser.parse_known_args(argv)

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    stop = StopRequest.install()
    import keras
    import tensorflow as tf

    tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(0)
    x = tf.random.stateless_normal([512, 16], seed=[0, 1])
    y = tf.cast(tf.reduce_sum(x[:, :4], axis=1) > 0, tf.int64)

    def batches_from(step):  # the batch stream from global batch `step`, without replaying earlier ones
        order = tf.data.Dataset.range(step * 16, 2**62)
        return order.map(lambda k: (tf.gather(x, k % 512), tf.gather(y, k % 512))).batch(16)

    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"),
                              keras.layers.BatchNormalization(), keras.layers.Dropout(0.3, seed=1),
                              keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    epochs = -(-args.train_steps // args.steps_per_epoch)
    outcome = fit_resumable(model, batches_from, job_dir=args.job_dir, epochs=epochs,
                            steps_per_epoch=args.steps_per_epoch, stop=stop, verbose=0)
    print(f"fit {outcome} at step {int(model.optimizer.iterations.numpy())}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(_example())
