"""`inspect --verify` decodes JPEGs at 1/8 scale: TensorFlow's verdict is the full-size decode's.

libjpeg's DCT scaling (`tf.io.decode_jpeg(..., ratio=8)`) still entropy-decodes every coefficient
of every block, so damage anywhere in the scan (the last MCU rows too) fails the same way; the
shape is the header's (`tf.image.extract_jpeg_shape`, what the full decode allocates). These tests
hold the verify decoder's answer against TensorFlow's full-size `tf.io.decode_image` image by image.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image, UnidentifiedImageError

import conformance_cases as cases
from img2tfrecord.cli.inspect import inspect_command
from img2tfrecord.format.images import MAX_PIXELS, jpeg_frame_size, tf_error_message
from img2tfrecord.inspection import scan as inspector
from img2tfrecord.inspection.decode import Decoded, Decoder
from img2tfrecord.tf_import import tensorflow
from inspect_helpers import Item, encode, record_offsets, write_dataset


def full_size(data: bytes) -> Decoded:
    """TensorFlow's full-size decode: the shape, or its message."""
    tf = tensorflow()
    try:
        return tuple(int(d) for d in tf.shape(tf.io.decode_image(data, channels=0, expand_animations=False)))
    except (tf.errors.OpError, ValueError) as e:
        return tf_error_message(e)


def decoded_by_verify(images: list[bytes], workers: int) -> list[Decoded]:
    decoder = Decoder(workers)
    try:
        slots = [decoder.submit(image) for image in images]
        decoder.flush()
        return [slot.result() for slot in slots]
    finally:
        decoder.close()


def restart_jpeg() -> bytes:
    """A 4:2:0 JPEG of 8 MCU rows with a restart marker after each row: the last RST marks where
    the last MCU row's entropy data begins."""
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:120, 0:160]
    arr = np.stack([x, y, (x + y) % 256], -1).astype(np.uint8) + rng.integers(0, 40, (120, 160, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "JPEG", quality=90, restart_marker_rows=1)
    return buf.getvalue()


def last_row_damage() -> dict[str, bytes]:
    """The restart JPEG damaged inside its last MCU row, each way libjpeg meets it."""
    data = restart_jpeg()
    rsts = [i for i in range(len(data) - 1) if data[i] == 0xFF and 0xD0 <= data[i + 1] <= 0xD7]
    assert len(rsts) == 7 and data.endswith(b"\xff\xd9")
    eoi = len(data) - 2
    mid = (rsts[-1] + 2 + eoi) // 2  # halfway through the last row's entropy data
    frame = b"\xff\xc0\x00\x11\x08\x00\x10\x00\x10\x03\x01\x22\x00\x02\x11\x01\x03\x11\x01"
    noise = np.random.default_rng(1).integers(0, 255, eoi - mid, dtype=np.uint8).tobytes().replace(b"\xff", b"\x00")
    return {
        "cut in the last row": data[:mid],  # the data ends inside the last row: fatal
        "second frame header in the last row": data[:mid] + frame + data[mid:],  # fatal at the end of the scan
        "end of image in the last row": data[:mid] + b"\xff\xd9",  # libjpeg warns and fills: decodes
        "noise in the last row": data[:mid] + noise + data[eoi:],  # libjpeg warns: decodes
        "intact": data,
    }


def every_jpeg_case() -> dict[str, bytes]:
    """The conformance matrix's JPEGs, its damaged and real-world JPEGs, and the last-row damage."""
    found = {c.name: c.data for c in cases.matrix() + cases.damaged() + cases.release_cases()}
    found |= {"arithmetic.jpg": cases.ARITHMETIC_JPEG} | last_row_damage()
    return {name: data for name, data in found.items() if data.startswith(b"\xff\xd8\xff")}


@pytest.mark.parametrize("workers", [1, 2])
def test_verify_decoder_gives_the_full_size_decode_for_every_jpeg_case(workers: int) -> None:
    """Shape or TensorFlow's message, image by image: what `decode_image` at full size says.
    Batches with a failing image are redone image by image, so both paths are exercised."""
    jpegs = every_jpeg_case()
    assert len(jpegs) > 60
    truth = {name: full_size(data) for name, data in jpegs.items()}
    assert sum(isinstance(t, str) for t in truth.values()) >= 4  # the cases hold JPEGs TensorFlow refuses
    got = dict(zip(jpegs, decoded_by_verify(list(jpegs.values()), workers)))
    assert got == truth


def test_one_eighth_scale_fails_exactly_where_full_size_fails() -> None:
    """TensorFlow's own decoder at ratio 8, without verify's code: the same images fail, and its
    shape is the header's height and width scaled by libjpeg (ceil(side / 8)), channels unchanged."""
    tf = tensorflow()
    for name, data in every_jpeg_case().items():
        truth = full_size(data)
        try:
            small = tuple(int(d) for d in tf.shape(tf.io.decode_jpeg(data, channels=0, ratio=8)))
        except (tf.errors.OpError, ValueError):
            assert isinstance(truth, str), f"{name}: fails at 1/8 scale only"
            continue
        assert not isinstance(truth, str), f"{name}: decodes at 1/8 scale but not at full size: {truth}"
        header = tuple(int(d) for d in tf.image.extract_jpeg_shape(data))
        assert header[:2] == truth[:2], name
        assert small == (-(-truth[0] // 8), -(-truth[1] // 8), truth[2]), name


def test_damaged_entropy_data_in_the_last_mcu_rows_is_reported(tmp_path: Path) -> None:
    """Damage after the last restart marker: `inspect --verify` names the record, with
    TensorFlow's message, and the 1/8-scale decode alone already refuses it."""
    tf = tensorflow()
    damage = last_row_damage()
    items = []
    for i, name in enumerate(damage):
        it = Item("train", "cat", f"cat/{i}.jpg", "JPEG", "RGB", 160, 120)
        it.encoded = damage[name]
        items.append(it)
    write_dataset(tmp_path / "out", items, ["cat"], {"train": 1})
    r = CliRunner().invoke(inspect_command, [str(tmp_path / "out"), "--verify", "--json"], catch_exceptions=False)
    assert r.exit_code == 1
    problems = json.loads(r.stdout)["problems"]
    offsets = record_offsets(tmp_path / "out" / "train-00000-of-00001")
    fatal = ["cut in the last row", "second frame header in the last row"]
    for name in fatal:
        i = list(damage).index(name)
        with pytest.raises(tf.errors.OpError) as e:
            tf.io.decode_jpeg(damage[name], channels=0, ratio=8)
        message = f"image does not decode: {tf_error_message(e.value)}"
        assert {"file": str(tmp_path / "out" / "train-00000-of-00001"), "record": i, "offset": offsets[i]} | {
            "message": message
        } in problems, (name, problems)
    assert len(problems) == len(fatal)  # the rest decode in TensorFlow (libjpeg only warns), so verify passes them


def _resident_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field)) / 1024


def test_verify_does_not_decode_a_jpeg_at_full_size(tmp_path: Path) -> None:
    """A 6,000 x 6,000 JPEG is 108 MB of pixels at full size and 1.7 MB at 1/8 scale: the peak
    resident memory of verifying it (reset through /proc/self/clear_refs after a warm-up run)
    stays far below its full-size pixels."""
    big = Item("train", "cat", "cat/big.jpg", "JPEG", "RGB", 6000, 6000)
    big.encoded = encode(big.image, "JPEG")
    small = Item("train", "cat", "cat/small.jpg", "JPEG", "RGB", 64, 48)
    small.encoded = encode(small.image, "JPEG")
    write_dataset(tmp_path / "big", [big], ["cat"], {"train": 1})
    write_dataset(tmp_path / "small", [small], ["cat"], {"train": 1})
    assert inspector.inspect([tmp_path / "small"], verify=True, workers=2).ok  # TensorFlow imported, functions traced
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak resident set starts again from the current one
    before = _resident_mb("VmRSS:")
    report = inspector.inspect([tmp_path / "big"], verify=True, workers=2)
    assert report.ok, [str(p) for p in report.problems]
    grew = _resident_mb("VmHWM:") - before
    assert grew < 6000 * 6000 * 3 / 2**20 / 2, f"peak resident memory grew {grew:.0f} MB while verifying"


def test_jpeg_frame_size_is_the_size_pillow_reads() -> None:
    """The fast header read (verify's max-pixels check for JPEGs) answers only where it reads what
    Pillow reads (or, where Pillow reads no size and so reports nothing, a size within the limit:
    nothing reported either); elsewhere the check falls back to Pillow."""
    answered = 0
    for name, data in every_jpeg_case().items():
        size = jpeg_frame_size(data)
        if size is None:
            continue
        answered += 1
        try:
            with Image.open(io.BytesIO(data)) as im:
                assert size == (im.height, im.width), name
        except UnidentifiedImageError:
            assert size[0] * size[1] <= MAX_PIXELS, name
    assert answered > 60
    assert jpeg_frame_size(b"\xff\xd8\xff\xe0\x00\x10JFIF") is None  # cut before any frame header


def test_a_jpeg_header_claiming_too_many_pixels_is_not_decoded(tmp_path: Path) -> None:
    """A small JPEG whose frame header says 20,000 x 20,000: reported from the header, not decoded."""
    bomb = bytearray(restart_jpeg())
    sof = bomb.index(b"\xff\xc0")
    bomb[sof + 5 : sof + 9] = (20_000).to_bytes(2, "big") * 2
    it = Item("train", "cat", "cat/bomb.jpg", "JPEG", "RGB", 160, 120)
    it.encoded = bytes(bomb)
    write_dataset(tmp_path / "out", [it], ["cat"], {"train": 1})
    r = CliRunner().invoke(inspect_command, [str(tmp_path / "out"), "--verify", "--json"], catch_exceptions=False)
    messages = [p["message"] for p in json.loads(r.stdout)["problems"]]
    # Pillow's size, or (past its own bomb limit, which a conversion in this process may have lifted) its count
    assert r.exit_code == 1 and len(messages) == 1
    assert re.fullmatch(
        r"image header claims 400,000,000 pixels( \(20,000x20,000\))?, more than the 100,000,000 decoded;"
        r" not decoded \(decompression bomb\?\)",
        messages[0],
    ), messages
