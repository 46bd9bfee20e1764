"""TensorFlow's checkpoint guide's manual loop (https://www.tensorflow.org/guide/checkpoint: Adam,
a Dense(5) net, the toy dataset and its iterator), made survivor's with `ResumableCheckpoint`.

    $ survivor check-trainer --steps 60 -- python examples/guide_loop.py

Line by line against the guide: `ResumableCheckpoint` replaces its `tf.train.Checkpoint` +
`CheckpointManager('./tf_ckpts')` + `ckpt.restore(manager.latest_checkpoint)` (in `--job-dir`, the
optimizer built before the restore, every object checked); the loop runs from the restored step to
`--train-steps` instead of 50 more; it saves as `ckpt-<step>` every `--checkpoint-steps` and when
the SIGTERM of a preemption asks (`StopRequest`), and reports each step to the agent.
"""

import argparse

from survivor.trainers.contract import StopRequest, report_progress, report_saved

stop = StopRequest.install()  # before TensorFlow's import: a SIGTERM then is saved too

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from survivor.trainers.resume import ResumableCheckpoint  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--job-dir", required=True)
parser.add_argument("--train-steps", type=int, default=60)
parser.add_argument("--checkpoint-steps", type=int, default=10)
args, _ = parser.parse_known_args()
tf.config.experimental.enable_op_determinism()
keras.utils.set_random_seed(0)


def toy_dataset():
    inputs = tf.range(10.0)[:, None]
    labels = inputs * 5.0 + tf.range(5.0)[None, :]
    return tf.data.Dataset.from_tensor_slices(dict(x=inputs, y=labels)).repeat().batch(2)


def train_step(net, example, optimizer):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.abs(net(example["x"]) - example["y"]))
    optimizer.apply_gradients(zip(tape.gradient(loss, net.trainable_variables), net.trainable_variables))
    return loss


net = keras.Sequential([keras.Input((1,)), keras.layers.Dense(5)])
opt = keras.optimizers.Adam(0.1)
iterator = iter(toy_dataset())
ckpt = ResumableCheckpoint(args.job_dir, model=net, optimizer=opt, iterator=iterator)
loss = None  # a run resumed at train_steps trains no step
for step in range(ckpt.step, args.train_steps):
    loss = train_step(net, next(iterator), opt)
    report_progress(step + 1)
    if stop.requested or (step + 1) % args.checkpoint_steps == 0 or step + 1 == args.train_steps:
        ckpt.save(step + 1)
    if stop.requested:
        report_saved(step + 1)  # the agent commits it and lets the VM go without waiting for the exit
        break
print(f"step {ckpt.step}: loss {float(loss):.4f}" if loss is not None else "nothing to train", flush=True)
