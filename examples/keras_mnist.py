"""keras-io's examples/vision/mnist_convnet.py, made survivor's with `fit_resumable` (+8 lines).

    $ survivor check-trainer --steps 33 -- python examples/keras_mnist.py

The model, the compile and the batch size are keras-io's; the data are synthetic MNIST-shaped
arrays so that it runs offline (put `keras.datasets.mnist.load_data()` back for the real ones).
`fit_resumable` stops exactly at `--train-steps` (33 is off the 5-batch epoch), keys its seeded
shuffle by the epoch so a resumed run sees the batches an uninterrupted one does, checkpoints every
`--checkpoint-steps` as `ckpt-<step>` in `--job-dir`, and saves on the SIGTERM a preemption brings.
"""

import argparse

from survivor.trainers.contract import StopRequest

stop = StopRequest.install()  # before TensorFlow's import, which takes seconds: a SIGTERM then is saved too

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from keras import layers  # noqa: E402

from survivor.trainers.keras_fit import fit_resumable  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--job-dir", required=True)
parser.add_argument("--train-steps", type=int, default=33)
args, _ = parser.parse_known_args()  # survivor may pass --checkpoint-steps: fit_resumable reads it

tf.config.experimental.enable_op_determinism()
keras.utils.set_random_seed(1)
num_classes, input_shape = 10, (28, 28, 1)
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
fit_resumable(
    model,
    (x_train, y_train),
    job_dir=args.job_dir,
    train_steps=args.train_steps,
    batch_size=128,
    validation_split=0.1,
    stop=stop,
)
