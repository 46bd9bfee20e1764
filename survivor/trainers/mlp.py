"""A small TensorFlow trainer on synthetic data: the demo's and the fast tests' real TF workload.

    $ python -m survivor.trainers.mlp --job-dir /tmp/job --train-steps 200 --num-gpus 2

A two-layer perceptron with batch normalisation and dropout on a deterministic synthetic
classification set (made in memory from the seed: nothing to download). It runs the same resumable
MirroredStrategy loop as the CIFAR-10 ResNet trainer, so everything the demo shows holds for it.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main(argv: list[str] | None = None) -> int:
    """Trains (or resumes) the small MLP with `argv`; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    from survivor.trainers.loop import Runtime, TrainHooks, add_contract_flags

    add_contract_flags(parser, checkpoint_steps=50)
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--hidden-units", type=int, default=64)
    parser.add_argument("--dropout", type=float, default=0.2)
    parser.add_argument("--train-batch-size", type=int, default=32)
    parser.add_argument("--examples", type=int, default=4096)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument(
        "--step-seconds",
        type=float,
        default=0.0,
        help="sleep this long per step, to stand in for a bigger model in demos",
    )
    args = parser.parse_args(argv)

    hparams = {
        k: getattr(args, k)
        for k in (
            "learning_rate",
            "momentum",
            "hidden_units",
            "dropout",
            "train_batch_size",
            "examples",
            "features",
            "seed",
        )
    }
    runtime = Runtime.from_args(args, hparams)

    import keras
    import tensorflow as tf

    global_batch = args.train_batch_size - args.train_batch_size % runtime.replicas
    x = tf.random.stateless_normal([args.examples, args.features], seed=[args.seed, 1])
    w = tf.random.stateless_normal([args.features, 4], seed=[args.seed, 2])
    y = tf.argmax(tf.matmul(x, w) + 0.3 * tf.random.stateless_normal([args.examples, 4], seed=[args.seed, 3]), -1)
    dataset = (
        tf.data.Dataset.from_tensor_slices((x, y))
        .shuffle(args.examples, seed=args.seed, reshuffle_each_iteration=True)
        .repeat()
        .batch(global_batch, drop_remainder=True)
    )
    with runtime.strategy.scope():
        model = keras.Sequential(
            [
                keras.Input((args.features,)),
                keras.layers.Dense(args.hidden_units),
                keras.layers.BatchNormalization(),
                keras.layers.ReLU(),
                keras.layers.Dropout(args.dropout, seed=args.seed),
                keras.layers.Dense(4),
            ],
            name="mlp",
        )
        optimizer = keras.optimizers.SGD(args.learning_rate, momentum=args.momentum)

    def loss(labels, logits):
        return keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)

    import time

    hooks = TrainHooks(
        loss=loss,
        learning_rate=lambda step: args.learning_rate,
        examples_per_batch=global_batch,
        after_step=(lambda: time.sleep(args.step_seconds)) if args.step_seconds else None,
    )
    return runtime.train(model, optimizer, dataset, hooks)


if __name__ == "__main__":
    raise SystemExit(main())
