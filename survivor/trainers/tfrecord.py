"""TFRecord files of `tf.train.Example`s, written without TensorFlow, so `survivor data` runs in the
operator's install (which has no TensorFlow).

The record framing is TensorFlow's (`tensorflow/core/lib/io/record_writer.cc`, documented in
https://www.tensorflow.org/tutorials/load_data/tfrecord#tfrecords_format_details): for each record,
its length as a little-endian uint64, the masked CRC32C of those 8 bytes, the data, and the masked
CRC32C of the data; a mask is `((crc >> 15) | (crc << 17)) + 0xa282ead8` (mod 2**32). The data is an
`Example` protocol buffer (`tensorflow/core/example/example.proto`, `feature.proto`):
`Example{features=1: Features{feature=1: map<string, Feature>}}`, with
`Feature{bytes_list=1: BytesList{value=1: repeated bytes}, int64_list=3: Int64List{value=1: packed int64}}`
in the protocol buffer wire format (https://protobuf.dev/programming-guides/encoding/).
tests/test_tfrecord.py reads these files back with TensorFlow's own parser.
"""

from __future__ import annotations

import struct
from typing import BinaryIO, Mapping, Sequence

import google_crc32c

_MASK_DELTA = 0xA282EAD8


def masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC32C of `data`."""
    crc = google_crc32c.value(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def _varint(value: int) -> bytes:
    value &= 0xFFFFFFFFFFFFFFFF  # a negative int64 is its two's complement, ten bytes
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _feature(value: bytes | Sequence[int] | int) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        return _field(1, _field(1, bytes(value)))  # bytes_list
    values = [value] if isinstance(value, int) else list(value)
    return _field(3, _field(1, b"".join(_varint(int(v)) for v in values)))  # int64_list, packed


def example(features: Mapping[str, bytes | Sequence[int] | int]) -> bytes:
    """A serialized `tf.train.Example` with a bytes or int64 feature per key."""
    entries = b"".join(
        _field(1, _field(1, key.encode()) + _field(2, _feature(value))) for key, value in features.items()
    )
    return _field(1, entries)


def write_record(stream: BinaryIO, data: bytes) -> None:
    """Appends one record to an open TFRecord file."""
    length = struct.pack("<Q", len(data))
    stream.write(length + struct.pack("<I", masked_crc(length)) + data + struct.pack("<I", masked_crc(data)))
