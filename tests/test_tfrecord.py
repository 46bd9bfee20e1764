"""survivor's TFRecord writer (no TensorFlow needed) read back by TensorFlow's own parser, and
framed byte for byte as TensorFlow's writer frames the same record."""

import numpy as np
import pytest

from survivor.trainers import cifar10_data, tfrecord


@pytest.fixture(scope="module")
def tf():
    """TensorFlow, imported when a test of this file runs: at module level every test process imported
    it while collecting the suite (seconds of CPU each, most of them never running these tests)."""
    return pytest.importorskip("tensorflow")


def test_records_are_framed_as_tensorflows_writer_frames_them(tf, tmp_path):
    payloads = [b"", b"x", bytes(range(256)) * 40]
    ours, theirs = tmp_path / "ours.tfrecords", tmp_path / "theirs.tfrecords"
    with open(ours, "wb") as stream:
        for data in payloads:
            tfrecord.write_record(stream, data)
    with tf.io.TFRecordWriter(str(theirs)) as writer:
        for data in payloads:
            writer.write(data)
    assert ours.read_bytes() == theirs.read_bytes()


@pytest.mark.parametrize("label", [0, 9, 2**40, -3])
def test_an_example_parses_with_tensorflow_to_what_was_written(tf, label):
    image = np.arange(3072, dtype=np.uint8).tobytes()
    parsed = tf.io.parse_single_example(
        tfrecord.example({"image": image, "label": label}),
        {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)},
    )
    assert parsed["image"].numpy() == image and int(parsed["label"]) == label
    # and TensorFlow's own proto reads it the same
    proto = tf.train.Example.FromString(tfrecord.example({"image": image, "label": label}))
    assert proto.features.feature["label"].int64_list.value == [label]


def test_cifar10_files_load_with_the_trainers_reader(tf, tmp_path):
    counts = cifar10_data.synthetic(40, str(tmp_path))
    images, labels = cifar10_data.load_split(str(tmp_path), "train")
    assert counts["train"] == 40 and tuple(images.shape) == (40, 32, 32, 3) and labels.dtype == tf.int64
    assert not list(tmp_path.glob("*.partial"))
