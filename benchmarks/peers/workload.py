"""The workload every row trains: survivor.trainers.mlp's model and data on 2 logical CPU devices.

The same layers, initialisation seed, synthetic data (made from the seed), optimizer, batch, op
determinism and step pause (`--step-seconds`, standing in for a bigger model's accelerator time)
as `python -m survivor.trainers.mlp --num-gpus 2 --step-seconds S`. What differs between rows is
only the code each alternative ships: how it loops, saves, restores and reacts to a preemption.

Each harness reports its step the way survivor's built-in trainer does (`report_progress`, one
pwrite per step to `$SURVIVOR_PROGRESS_FILE`), which is what the driver times every row by, and
writes how long its restore took to `$BENCH_NOTES` (one JSON line).
"""

from __future__ import annotations

import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

#: survivor.trainers.mlp's defaults (its argparse flags), which the survivor row runs with.
HPARAMS = {
    "learning_rate": 0.05,
    "momentum": 0.9,
    "hidden_units": 64,
    "dropout": 0.2,
    "train_batch_size": 32,
    "examples": 4096,
    "features": 32,
    "seed": 0,
}
REPLICAS = 2


def strategy():
    """MirroredStrategy over REPLICAS logical CPU devices, op determinism and the seed, as survivor's loop sets them."""
    import keras
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * REPLICAS)
    tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(HPARAMS["seed"])
    return tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(REPLICAS)])


def dataset():
    """survivor.trainers.mlp's synthetic set: endless shuffled global batches."""
    import tensorflow as tf

    h = HPARAMS
    seed, batch = h["seed"], h["train_batch_size"] - h["train_batch_size"] % REPLICAS
    x = tf.random.stateless_normal([h["examples"], h["features"]], seed=[seed, 1])
    w = tf.random.stateless_normal([h["features"], 4], seed=[seed, 2])
    y = tf.argmax(tf.matmul(x, w) + 0.3 * tf.random.stateless_normal([h["examples"], 4], seed=[seed, 3]), -1)
    return (
        tf.data.Dataset.from_tensor_slices((x, y))
        .shuffle(h["examples"], seed=seed, reshuffle_each_iteration=True)
        .repeat()
        .batch(batch, drop_remainder=True)
    )


def model_and_optimizer(hidden_units: int | None = None, learning_rate: float | None = None):
    """survivor.trainers.mlp's model and optimizer (call inside the strategy's scope)."""
    import keras

    h = HPARAMS
    model = keras.Sequential(
        [
            keras.Input((h["features"],)),
            keras.layers.Dense(hidden_units or h["hidden_units"]),
            keras.layers.BatchNormalization(),
            keras.layers.ReLU(),
            keras.layers.Dropout(h["dropout"], seed=h["seed"]),
            keras.layers.Dense(4),
        ],
        name="mlp",
    )
    return model, keras.optimizers.SGD(learning_rate or h["learning_rate"], momentum=h["momentum"])


def custom_step(strategy, model, optimizer):
    """A one-step distributed train function, as TensorFlow's custom-loop tutorials write it
    (and survivor's loop: per-example loss averaged over the global batch)."""
    import keras
    import tensorflow as tf

    global_batch = HPARAMS["train_batch_size"] - HPARAMS["train_batch_size"] % REPLICAS

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            per_example = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def train_step(iterator):
        loss = strategy.run(replica_step, args=next(iterator))
        return strategy.reduce("SUM", loss, axis=None)

    return train_step


def pause(seconds: float) -> None:
    """The step pause every row takes after each step (survivor.trainers.mlp's --step-seconds)."""
    if seconds:
        time.sleep(seconds)


def note(**values) -> None:
    """One JSON line to $BENCH_NOTES (restore seconds and the like), for the driver."""
    path = os.environ.get("BENCH_NOTES")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(values) + "\n")
