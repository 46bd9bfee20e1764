"""CIFAR-10 ResNet on every GPU, resumed bit for bit: the recipe's trainer, written for TF 2.

    $ python -m survivor.trainers.cifar10 --data-dir gs://my-project-cifar-10-data \\
          --job-dir /var/lib/survivor/job --num-gpus 4 --train-steps 80000 \\
          --momentum 0.9 --weight-decay 0.0002 --learning-rate 0.1 \\
          --batch-norm-decay 0.997 --batch-norm-epsilon 0.00001

The same command line and defaults as the tensorflow/models CIFAR-10 estimator example the recipe
trains (`tf.estimator` is gone from TF 2.16 on): a pre-activation-free ResNet of depth 6n+2 (44 by
default) in Keras 3 on `tf.distribute.MirroredStrategy`, the estimator's piecewise learning-rate
schedule, L2 weight decay, pad-crop + flip augmentation and per-image standardisation, evaluation
at the end and a SavedModel under `--job-dir/export`. Checkpointing, SIGTERM handling, the
hyperparameter guard and TensorBoard summaries come from `survivor.trainers.loop`.
"""

from __future__ import annotations

import argparse
import functools
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

TRAIN_EXAMPLES = 45000  # data_batch_1..4, as the estimator example counts an epoch


def build_resnet(
    depth: int,
    *,
    batch_norm_decay: float,
    batch_norm_epsilon: float,
    dropout: float,
    seed: int,
    dtype_policy: str | None = None,
):
    """ResNet for 32x32 images (He et al. 2016, section 4.2): 3 stages of n basic blocks, 16/32/64 filters."""
    import keras

    if (depth - 2) % 6 != 0:
        raise ValueError(f"--resnet-depth {depth}: expected 6n+2 (20, 32, 44, 56, 110, ...)")
    blocks = (depth - 2) // 6
    bn = dict(momentum=batch_norm_decay, epsilon=batch_norm_epsilon)
    init = keras.initializers.HeNormal(seed=seed)

    def conv(filters, stride=1, name=None):
        return keras.layers.Conv2D(
            filters, 3, strides=stride, padding="same", use_bias=False, kernel_initializer=init, name=name
        )

    inputs = keras.Input((32, 32, 3), name="image")
    x = conv(16, name="stem")(inputs)
    x = keras.layers.BatchNormalization(**bn)(x)
    x = keras.layers.ReLU()(x)
    for stage, filters in enumerate((16, 32, 64)):
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            shortcut = x
            y = conv(filters, stride)(x)
            y = keras.layers.BatchNormalization(**bn)(y)
            y = keras.layers.ReLU()(y)
            y = conv(filters)(y)
            y = keras.layers.BatchNormalization(**bn)(y)
            if stride != 1 or shortcut.shape[-1] != filters:
                shortcut = keras.layers.Conv2D(filters, 1, strides=stride, use_bias=False, kernel_initializer=init)(
                    shortcut
                )
                shortcut = keras.layers.BatchNormalization(**bn)(shortcut)
            x = keras.layers.ReLU()(keras.layers.Add()([y, shortcut]))
    x = keras.layers.GlobalAveragePooling2D()(x)
    if dropout:
        x = keras.layers.Dropout(dropout, seed=seed)(x)
    outputs = keras.layers.Dense(
        10, kernel_initializer=keras.initializers.GlorotUniform(seed=seed), dtype="float32", name="logits"
    )(x)
    return keras.Model(inputs, outputs, name=f"resnet{depth}")


def learning_rate_schedule(base: float, global_batch: int):
    """The estimator example's schedule: base * batch/128, divided by 10 at epochs 82, 123 and 164
    (in steps of this batch size over 45000 training images)."""
    import keras

    steps_per_epoch = TRAIN_EXAMPLES / global_batch
    boundaries = [int(steps_per_epoch * epoch) for epoch in (82, 123, 164)]
    scaled = base * global_batch / 128
    return keras.optimizers.schedules.PiecewiseConstantDecay(
        boundaries, [scaled, scaled / 10, scaled / 100, scaled / 1000]
    )


def main(argv: list[str] | None = None) -> int:
    """Trains (or resumes) ResNet on CIFAR-10 with `argv`; returns the exit code."""
    from survivor.trainers.loop import Runtime, TrainHooks, add_contract_flags

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_contract_flags(parser, checkpoint_steps=1000)
    parser.add_argument("--train-batch-size", type=int, default=128, help="global batch, split over the replicas")
    parser.add_argument("--eval-batch-size", type=int, default=100)
    parser.add_argument("--eval-steps", type=int, default=None, help="eval batches at the end (default: the whole set)")
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--weight-decay", type=float, default=2e-4)
    parser.add_argument("--learning-rate", type=float, default=0.1)
    parser.add_argument("--batch-norm-decay", type=float, default=0.997)
    parser.add_argument("--batch-norm-epsilon", type=float, default=1e-5)
    parser.add_argument("--resnet-depth", type=int, default=44)
    parser.add_argument("--dropout", type=float, default=0.0, help="dropout before the classifier (0: none)")
    parser.add_argument("--mixed-precision", action="store_true", help="float16 compute on tensor-core GPUs")
    parser.add_argument("--no-export", action="store_true", help="skip the SavedModel export at the end")
    args = parser.parse_args(argv)
    if not args.data_dir:
        parser.error("--data-dir is required (write one with: survivor data cifar10 --synthetic 512 --out DIR)")
    train_file = os.path.join(args.data_dir, "train.tfrecords")

    hparams = {
        k: getattr(args, k)
        for k in (
            "train_batch_size",
            "momentum",
            "weight_decay",
            "learning_rate",
            "batch_norm_decay",
            "batch_norm_epsilon",
            "resnet_depth",
            "dropout",
            "mixed_precision",
            "seed",
        )
    }
    runtime = Runtime.from_args(args, hparams)

    import keras
    import tensorflow as tf

    from survivor.trainers import cifar10_data

    if not tf.io.gfile.exists(train_file):
        print(
            f"error: {train_file} does not exist (write it with: survivor data cifar10 --out {args.data_dir} ...)",
            flush=True,
        )
        return 2
    if args.mixed_precision:
        keras.mixed_precision.set_global_policy("mixed_float16")
    global_batch = args.train_batch_size - args.train_batch_size % runtime.replicas

    train_split = functools.cache(lambda: cifar10_data.load_split(args.data_dir, "train"))  # read once a process

    def train(start_step: int):
        return cifar10_data.train_dataset(
            args.data_dir, batch_size=global_batch, seed=args.seed, start_step=start_step, split=train_split()
        )

    with runtime.strategy.scope():
        model = build_resnet(
            args.resnet_depth,
            batch_norm_decay=args.batch_norm_decay,
            batch_norm_epsilon=args.batch_norm_epsilon,
            dropout=args.dropout,
            seed=args.seed,
        )
        schedule = learning_rate_schedule(args.learning_rate, global_batch)
        optimizer = keras.optimizers.SGD(schedule, momentum=args.momentum)
        if args.mixed_precision:
            optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)

    kernels = [w for w in model.trainable_weights if "kernel" in w.path]

    def loss(labels, logits):
        return keras.losses.sparse_categorical_crossentropy(labels, tf.cast(logits, tf.float32), from_logits=True)

    def regularization():
        return args.weight_decay * tf.add_n([tf.nn.l2_loss(tf.cast(k, tf.float32)) for k in kernels])

    def evaluate() -> dict:
        data = cifar10_data.eval_dataset(args.data_dir, batch_size=args.eval_batch_size)
        if args.eval_steps:
            data = data.take(args.eval_steps)
        total = correct = 0
        loss_sum = 0.0
        for images, labels in data:
            logits = model(images, training=False)
            loss_sum += float(tf.reduce_sum(loss(labels, logits)))
            correct += int(tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, -1), labels), tf.int32)))
            total += int(labels.shape[0])
        return {"loss": loss_sum / max(total, 1), "accuracy": correct / max(total, 1), "examples": float(total)}

    def export(path: str) -> None:
        model.export(path, verbose=False)

    hooks = TrainHooks(
        loss=loss,
        regularization=regularization,
        learning_rate=schedule,
        evaluate=evaluate,
        export=None if args.no_export else export,
        examples_per_batch=global_batch,
    )
    return runtime.train(model, optimizer, train, hooks)


if __name__ == "__main__":
    raise SystemExit(main())
