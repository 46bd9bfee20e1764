"""`model.fit` that saves on SIGTERM and resumes mid-epoch, exactly: for users who keep their Keras code.

    >>> from survivor.trainers.keras_fit import fit_resumable
    >>> model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9), loss="sparse_categorical_crossentropy")
    >>> fit_resumable(model, (x_train, y_train), job_dir=args.job_dir, train_steps=args.train_steps,
    ...               batch_size=128, validation_split=0.1)          # keras-io's mnist_convnet, resumable
    >>> fit_resumable(model, batches_from, job_dir=args.job_dir, train_steps=args.train_steps, steps_per_epoch=500)

Keras 3's `BackupAndRestore` resumes only at epoch starts, saves nothing on a preemption notice, and
deletes its backup when `fit()` ends. `fit_resumable` instead:

- restores model, optimizer (its `iterations` is the global step) and the Keras RNG state variables
  from the newest `ckpt-N` in `job_dir` (TensorFlow's `CheckpointManager`, so stock TF reads it);
- feeds `fit` the batches from where the checkpoint stopped, from a stream keyed by the global step:
  - `(x, y)` arrays with `batch_size` (and `validation_split`, the arrays' last part, as Keras
    takes it): batch `k` of epoch `e` is the `k`-th slice of a permutation seeded by
    (`shuffle_seed`, `e`), so a resumed run sees exactly the batches an uninterrupted one does;
  - `batches_from(step)`, a function returning the batch stream from global batch `step` (cheap
    for a step-keyed pipeline; built anew for each `fit` call, so exact for any seeded pipeline);
  - a plain `tf.data.Dataset` of batches, as `dataset.repeat().skip(step)`: exact only for a
    pipeline without a reshuffling `.shuffle()` (each `fit` call iterates it again, and such a
    shuffle draws new seeds for every iteration); a mid-epoch resume of one says so once;
- finishes a partly done epoch with a short first `fit` call, runs the whole epochs, and a short
  last epoch, so training stops exactly at `train_steps` (or `epochs` x `steps_per_epoch`);
- saves every `checkpoint_steps`: by default the `--checkpoint-steps` survivor passes the trainer,
  else at every epoch's end, so a VM lost without a notice loses at most that; and on
  SIGTERM/SIGINT after the batch in flight, then stops `fit`.

Returns "finished" or "stopped" (then exit 0: the agent commits the checkpoint and the next boot
resumes). With `tf.config.experimental.enable_op_determinism()` and fixed seeds the resumed run
matches the uninterrupted one bit for bit.

Restore before the optimizer is built and Keras 3 drops its state silently (TensorFlow's
checkpoint guide does; the loss jumps after the resume): `fit_resumable` builds it first.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import warnings

from survivor.trainers.contract import StopRequest, report_progress, report_saved
from survivor.trainers.loop import latest_checkpoint


def _rng_variables(model) -> list:
    return [v for v in model.variables if "seed_generator_state" in getattr(v, "path", v.name)]


def checkpoint_steps_from_argv(argv: list[str] | None = None) -> int | None:
    """The `--checkpoint-steps` survivor passes the trainer (the spec's `checkpoint_steps`), if any."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--checkpoint-steps", type=int)
    known, _ = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    return known.checkpoint_steps if known.checkpoint_steps and known.checkpoint_steps > 0 else None


def epoch_plan(done: int, total: int, steps_per_epoch: int) -> list[tuple[int, int, int]]:
    """Pure: the `fit` calls that take a run from global step `done` to exactly `total`, as
    (initial_epoch, epochs, steps_per_epoch): the rest of a partly done epoch, the whole epochs, and
    a short last epoch.

    >>> epoch_plan(0, 60, 8)
    [(0, 7, 8), (7, 8, 4)]
    >>> epoch_plan(21, 60, 8)
    [(2, 3, 3), (3, 7, 8), (7, 8, 4)]
    >>> epoch_plan(58, 60, 8)
    [(7, 8, 2)]
    """
    plan = []
    epoch, into = divmod(done, steps_per_epoch)
    whole = total // steps_per_epoch
    if into and done < total:
        plan.append((epoch, epoch + 1, min(steps_per_epoch, total - epoch * steps_per_epoch) - into))
        epoch += 1
    if epoch < whole:
        plan.append((epoch, whole, steps_per_epoch))
        epoch = whole
    if epoch * steps_per_epoch < total:
        plan.append((epoch, epoch + 1, total - epoch * steps_per_epoch))
    return plan


def array_batches(x, y, batch_size: int, seed: int):
    """The step-keyed batch stream of `(x, y)` arrays: `stream(step)` is a `tf.data.Dataset` from
    global batch `step`; batch `k` of epoch `e` is the `k`-th `batch_size` slice (the last one
    shorter, as Keras's) of the permutation stateless-seeded by (`seed`, `e`). Returns
    (stream, steps_per_epoch)."""
    import tensorflow as tf

    n = len(x)
    if n == 0:
        raise ValueError("no training examples (after validation_split)")
    per_epoch = math.ceil(n / batch_size)
    xs, ys = tf.constant(x), tf.constant(y)

    def batch(k):
        epoch, index = k // per_epoch, k % per_epoch
        order = tf.random.experimental.stateless_shuffle(
            tf.range(n, dtype=tf.int64), seed=tf.stack([tf.constant(seed, tf.int64), epoch])
        )
        picked = order[index * batch_size : tf.minimum((index + 1) * batch_size, n)]
        return tf.gather(xs, picked), tf.gather(ys, picked)

    def stream(step: int):
        return tf.data.Dataset.range(step, 2**62).map(batch, num_parallel_calls=1).prefetch(2)

    return stream, per_epoch


def fit_resumable(
    model,
    data,
    *,
    job_dir: str,
    steps_per_epoch: int | None = None,
    epochs: int | None = None,
    train_steps: int | None = None,
    batch_size: int | None = None,
    validation_split: float = 0.0,
    shuffle_seed: int = 0,
    checkpoint_steps: int | None | str = "auto",
    keep: int = 3,
    callbacks=(),
    verbose: int = 2,
    stop: StopRequest | None = None,
    **fit_kwargs,
) -> str:
    """Runs (or resumes) `model.fit` to exactly `train_steps` global batches (or `epochs` x
    `steps_per_epoch`). `data`: `(x, y)` arrays (with `batch_size`), `batches_from(step)`, or a
    `tf.data.Dataset` of batches. See the module docstring."""
    import keras
    import tensorflow as tf

    request = stop or StopRequest.install()  # a new name: the callback below sees it narrowed
    if isinstance(data, tuple):
        x, y = data
        if not batch_size:
            raise ValueError("(x, y) arrays need batch_size")
        if validation_split:
            split = int(math.floor(len(x) * (1.0 - validation_split)))  # Keras's own split: the arrays' last part
            x, y, fit_kwargs["validation_data"] = x[:split], y[:split], (x[split:], y[split:])
        stream_from, per_epoch = array_batches(x, y, batch_size, shuffle_seed)
        steps_per_epoch = steps_per_epoch or per_epoch
    elif callable(data) and not isinstance(data, tf.data.Dataset):
        stream_from = data
    else:

        def stream_from(step: int):
            return data.repeat().skip(step)

    if not steps_per_epoch:
        raise ValueError("steps_per_epoch is needed unless the data are (x, y) arrays")
    total = train_steps if train_steps is not None else (epochs or 0) * steps_per_epoch
    if checkpoint_steps == "auto":
        checkpoint_steps = checkpoint_steps_from_argv() or steps_per_epoch
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
    if done >= total:
        return "finished"
    if isinstance(data, tf.data.Dataset) and done % steps_per_epoch:
        warnings.warn(
            "a plain tf.data.Dataset resumed mid-epoch is exact only without a reshuffling .shuffle(): "
            "pass batches_from(step), a function that builds the stream, or (x, y) arrays",
            stacklevel=2,
        )

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
            elif checkpoint_steps and step % int(checkpoint_steps) == 0:
                manager.save(checkpoint_number=step)

    saver = _SaveOnPreemption()
    for initial_epoch, until, steps in epoch_plan(done, total, steps_per_epoch):
        start = int(optimizer.iterations.numpy())
        model.fit(
            stream_from(start),
            initial_epoch=initial_epoch,
            epochs=until,
            steps_per_epoch=steps,
            callbacks=[saver, *callbacks],
            verbose=verbose,
            **fit_kwargs,
        )
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
    parser.add_argument(
        "--arrays",
        action="store_true",
        help="fit (x, y) arrays with batch_size and validation_split, as keras-io's examples do",
    )
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

    model = keras.Sequential(
        [
            keras.Input((16,)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.BatchNormalization(),
            keras.layers.Dropout(0.3, seed=1),
            keras.layers.Dense(2),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    if args.arrays:  # 512 examples, 10% for validation: 461 to train on, 29 batches of 16 an epoch
        outcome = fit_resumable(
            model,
            (x.numpy(), y.numpy()),
            job_dir=args.job_dir,
            train_steps=args.train_steps,
            batch_size=16,
            validation_split=0.1,
            shuffle_seed=3,
            stop=stop,
            verbose=0,
        )
    else:
        outcome = fit_resumable(
            model,
            batches_from,
            job_dir=args.job_dir,
            train_steps=args.train_steps,
            steps_per_epoch=args.steps_per_epoch,
            stop=stop,
            verbose=0,
        )
    print(f"fit {outcome} at step {int(model.optimizer.iterations.numpy())}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(_example())
