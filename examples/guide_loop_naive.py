"""TensorFlow's checkpoint guide's loop (https://www.tensorflow.org/guide/checkpoint) as people
first adapt it: the guide's `CheckpointManager.save()` (numbered by save count), its restore before
the optimizer is built, a save on SIGTERM and each step reported. With `--tf-ckpts` it keeps the
guide's `./tf_ckpts` and ignores `--job-dir`. What `survivor check-trainer` says of each is in
docs/trainer-contract.md.

    $ survivor check-trainer --steps 60 -- python examples/guide_loop_naive.py
"""

import argparse

from survivor.trainers.contract import StopRequest, report_progress, report_saved

stop = StopRequest.install()

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--job-dir", required=True)
parser.add_argument("--train-steps", type=int, default=60)
parser.add_argument("--checkpoint-steps", type=int, default=10)
parser.add_argument("--tf-ckpts", action="store_true", help="save in ./tf_ckpts, as the guide does")
args, _ = parser.parse_known_args()
tf.config.experimental.enable_op_determinism()
keras.utils.set_random_seed(0)

inputs = tf.range(10.0)[:, None]
labels = inputs * 5.0 + tf.range(5.0)[None, :]
iterator = iter(tf.data.Dataset.from_tensor_slices(dict(x=inputs, y=labels)).repeat().batch(2))
net = keras.Sequential([keras.Input((1,)), keras.layers.Dense(5)])
opt = keras.optimizers.Adam(0.1)
ckpt = tf.train.Checkpoint(step=tf.Variable(0), optimizer=opt, net=net, iterator=iterator)
manager = tf.train.CheckpointManager(ckpt, "./tf_ckpts" if args.tf_ckpts else args.job_dir, max_to_keep=3)
ckpt.restore(manager.latest_checkpoint)
print(f"Restored from {manager.latest_checkpoint}" if manager.latest_checkpoint else "Initializing from scratch.")

while int(ckpt.step) < args.train_steps:
    example = next(iterator)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.abs(net(example["x"]) - example["y"]))
    opt.apply_gradients(zip(tape.gradient(loss, net.trainable_variables), net.trainable_variables))
    ckpt.step.assign_add(1)
    report_progress(int(ckpt.step))
    if stop.requested or int(ckpt.step) % args.checkpoint_steps == 0 or int(ckpt.step) == args.train_steps:
        print(f"Saved checkpoint for step {int(ckpt.step)}: {manager.save()}; loss {float(loss):.2f}", flush=True)
    if stop.requested:
        report_saved(int(ckpt.step))
        break
