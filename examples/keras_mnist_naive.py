"""keras-io's mnist_convnet as people first adapt it: `model.fit` with a `ModelCheckpoint` in
`--job-dir`, epochs rounded up from `--train-steps`, a seeded shuffle, progress reported, and no
resume (or, with `--epoch-names`, Keras' `BackupAndRestore` and checkpoints named by epoch). What
`survivor check-trainer` says of it is in docs/trainer-contract.md.

    $ survivor check-trainer --steps 33 -- python examples/keras_mnist_naive.py
"""

import argparse
import math
import os

import keras
import numpy as np
import tensorflow as tf
from keras import layers

from survivor.trainers.contract import report_progress

parser = argparse.ArgumentParser()
parser.add_argument("--job-dir", required=True)
parser.add_argument("--train-steps", type=int, default=33)
parser.add_argument(
    "--epoch-names",
    action="store_true",
    help="ModelCheckpoint('ckpt-{epoch:02d}.weights.h5') with Keras' BackupAndRestore, which resumes "
    "at the last epoch's end",
)
args, _ = parser.parse_known_args()

tf.config.experimental.enable_op_determinism()
keras.utils.set_random_seed(1)
num_classes, input_shape, batch_size = 10, (28, 28, 1), 128
rng = np.random.default_rng(0)
x_train = rng.random((640, *input_shape), dtype=np.float32)
y_train = keras.utils.to_categorical(rng.integers(0, num_classes, 640), num_classes)

model = keras.Sequential(
    [
        keras.Input(shape=input_shape),
        layers.Conv2D(32, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Conv2D(64, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Flatten(),
        layers.Dropout(0.5),
        layers.Dense(num_classes, activation="softmax"),
    ]
)
model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])


class Progress(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        report_progress(int(self.model.optimizer.iterations.numpy()))


steps_per_epoch = math.ceil(len(x_train) * 0.9 / batch_size)
if args.epoch_names:
    callbacks = [
        keras.callbacks.BackupAndRestore(os.path.join(args.job_dir, "backup")),
        keras.callbacks.ModelCheckpoint(
            os.path.join(args.job_dir, "ckpt-{epoch:02d}.weights.h5"), save_weights_only=True
        ),
    ]
else:
    callbacks = [
        keras.callbacks.ModelCheckpoint(os.path.join(args.job_dir, "ckpt-{epoch:02d}-{val_accuracy:.4f}.keras"))
    ]
model.fit(
    x_train,
    y_train,
    batch_size=batch_size,
    epochs=math.ceil(args.train_steps / steps_per_epoch),
    validation_split=0.1,
    shuffle=True,
    callbacks=[*callbacks, Progress()],
    verbose=2,
)
