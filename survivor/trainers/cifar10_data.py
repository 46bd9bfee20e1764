"""CIFAR-10 as TFRecords in the layout of the tensorflow/models CIFAR-10 estimator example.

    $ survivor data cifar10 --from cifar-10-python.tar.gz --out /tmp/cifar-10-data
    $ survivor data cifar10 --synthetic 512 --out /tmp/cifar-10-data      # tests and the demo

Files: `train.tfrecords` (data_batch_1..4), `validation.tfrecords` (data_batch_5), `eval.tfrecords`
(test_batch); each example has `image` (the 3072 raw bytes, 32x32x3 HWC uint8) and `label` (int64),
as the estimator example's `generate_cifar10_tfrecords.py` writes them. Nothing is downloaded.
"""

from __future__ import annotations

import os
import pickle
import tarfile

import numpy as np

from survivor.trainers import tfrecord

SPLITS = {
    "train": ["data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4"],
    "validation": ["data_batch_5"],
    "eval": ["test_batch"],
}
HEIGHT = WIDTH = 32
DEPTH = 3


def _example(image: np.ndarray, label: int) -> bytes:
    return tfrecord.example({"image": image.astype(np.uint8).tobytes(), "label": int(label)})


def write_split(path: str, images: np.ndarray, labels: np.ndarray) -> int:
    """Writes images (N, 32, 32, 3) uint8 and labels to one TFRecord file; returns N. Without
    TensorFlow (`survivor.trainers.tfrecord`): the operator's install writes the data."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path + ".partial", "wb") as stream:
        for image, label in zip(images, labels):
            tfrecord.write_record(stream, _example(image, label))
    os.replace(path + ".partial", path)
    return len(images)


def from_python_archive(archive: str, out: str) -> dict[str, int]:
    """Converts the official `cifar-10-python.tar.gz` into the three TFRecord files."""
    counts = {}
    with tarfile.open(archive, "r:gz") as tar:
        members = {os.path.basename(m.name): m for m in tar.getmembers() if m.isfile()}
        for split, batches in SPLITS.items():
            images, labels = [], []
            for batch in batches:
                if batch not in members:
                    raise ValueError(f"{archive}: no {batch} inside; is this cifar-10-python.tar.gz?")
                batch_file = tar.extractfile(members[batch])
                assert batch_file is not None  # members holds regular files only
                data = pickle.load(batch_file, encoding="bytes")
                # stored as (N, 3072) in CHW order; the estimator example writes HWC
                images.append(data[b"data"].reshape(-1, DEPTH, HEIGHT, WIDTH).transpose(0, 2, 3, 1))
                labels.append(np.asarray(data[b"labels"], dtype=np.int64))
            counts[split] = write_split(
                os.path.join(out, f"{split}.tfrecords"), np.concatenate(images), np.concatenate(labels)
            )
    return counts


def synthetic(count: int, out: str, seed: int = 0) -> dict[str, int]:
    """Writes `count` deterministic fake training images (and smaller validation/eval sets) whose
    class is learnable from a colour cue, so a short run shows the loss falling."""
    rng = np.random.default_rng(seed)
    counts = {}
    for split, n in (("train", count), ("validation", max(count // 8, 16)), ("eval", max(count // 4, 32))):
        labels = rng.integers(0, 10, size=n).astype(np.int64)
        noise = rng.integers(0, 160, size=(n, HEIGHT, WIDTH, DEPTH))
        cue = (labels[:, None, None, None] * 9) % 96
        images = np.clip(noise + cue * np.array([1, 0.5, 0.25]), 0, 255).astype(np.uint8)
        counts[split] = write_split(os.path.join(out, f"{split}.tfrecords"), images, labels)
    return counts


def load_split(data_dir: str, split: str):
    """Reads one split into memory: (images uint8 [N, 32, 32, 3], labels int64 [N]) as tensors."""
    import tensorflow as tf

    features = {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}

    def parse(record):
        parsed = tf.io.parse_single_example(record, features)
        return tf.reshape(tf.io.decode_raw(parsed["image"], tf.uint8), [HEIGHT, WIDTH, DEPTH]), parsed["label"]

    ds = tf.data.TFRecordDataset(os.path.join(data_dir, f"{split}.tfrecords")).map(parse).batch(10_000)
    images, labels = zip(*list(ds))
    return tf.concat(images, 0), tf.concat(labels, 0)


def _augment(image, key):
    import tensorflow as tf

    image = tf.image.resize_with_crop_or_pad(image, HEIGHT + 8, WIDTH + 8)
    image = tf.image.stateless_random_crop(image, [HEIGHT, WIDTH, DEPTH], seed=key)
    return tf.image.stateless_random_flip_left_right(image, seed=key + 1)


def train_dataset(data_dir: str, *, batch_size: int, seed: int, start_step: int = 0, split=None):
    """Endless training batches whose order is a pure function of the step, from `start_step` on;
    `split`: the train split as `load_split` returned it, when it is in memory already.

    Example k of the stream is image `index_shuffle(k mod N, seed=(seed, epoch))` of the split held
    in memory, augmented with stateless ops keyed by k. Resuming at step s is starting the stream at
    example s x batch: nothing of the input needs checkpointing (not even a prefetch buffer).
    """
    import tensorflow as tf

    images, labels = split if split is not None else load_split(data_dir, "train")
    count = int(labels.shape[0])

    def example(k):
        epoch, position = k // count, k % count
        index = tf.random.experimental.index_shuffle(
            position, seed=tf.stack([tf.cast(seed, tf.int64), epoch]), max_index=count - 1
        )
        image = _augment(tf.cast(tf.gather(images, index), tf.float32), tf.stack([tf.cast(seed, tf.int64), k]))
        return tf.image.per_image_standardization(image), tf.gather(labels, index)

    return (
        tf.data.Dataset.range(start_step * batch_size, 2**62)
        .map(example, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .batch(batch_size, drop_remainder=True)
        .prefetch(2)
    )


def eval_dataset(data_dir: str, split: str = "eval", *, batch_size: int):
    """The evaluation split in file order, standardised, not augmented."""
    import tensorflow as tf

    images, labels = load_split(data_dir, split)
    ds = tf.data.Dataset.from_tensor_slices((images, labels))
    ds = ds.map(lambda image, label: (tf.image.per_image_standardization(tf.cast(image, tf.float32)), label))
    return ds.batch(batch_size)
