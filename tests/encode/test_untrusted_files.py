"""Files that are not what their names say, and decoders that talk: each file's skip reason is
about that file alone, names what it is without quoting it, and reading it costs what sniffing
it costs (real subprocess runs where a real fd 2 or a process's peak memory is what is checked)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from conformance_cases import bad_samples_per_pixel_tiff, upright_rgb

SECRET = "root:*:20228:0:99999:7:::\nAKIA-not-a-real-key-9f8e7d\n"


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_a_decoder_log_record_belongs_to_the_file_that_made_it(tmp_path, workers):
    """Pillow logs `More samples per pixel than can be decoded` (logger.error) while it reads a
    TIFF with a bad SamplesPerPixel. That record must be part of *that* file's reason, never of
    the next image a worker reads, and never reach the terminal, with any worker count."""
    src = tmp_path / "in" / "a"
    src.mkdir(parents=True)
    for i in range(6):  # bad then good, over and over: each worker reads good images right after bad ones
        (src / f"{i}a_bad.tif").write_bytes(bad_samples_per_pixel_tiff())
        Image.fromarray(upright_rgb()[:, ::-1] if i % 2 else upright_rgb()).rotate(90 * i).save(src / f"{i}b_good.png")
    out = tmp_path / "out"
    script = (
        "import logging, sys, img2tfrecord\n"
        "img2tfrecord.convert(sys.argv[1], sys.argv[2], workers=int(sys.argv[3]), dedupe='off', shards=2)\n"
    )
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    res = subprocess.run(
        [sys.executable, "-c", script, str(src.parent), str(out), str(workers)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    skipped = {s["path"]: s["reason"] for s in json.loads((out / "dataset.json").read_text())["skipped"]}
    assert sorted(skipped) == [f"a/{i}a_bad.tif" for i in range(6)], skipped
    for reason in skipped.values():
        assert "samples per pixel" in reason
    assert "More samples per pixel" not in res.stderr, res.stderr  # said about a file, so in its reason only


def test_a_huge_sparse_jpg_is_sniffed_not_read(tmp_path):
    """A 2 GB sparse `.jpg` (0 bytes on disk) of zeros: skipped as unknown data after its first
    bytes; the converting process's peak memory stays far below the file's size."""
    src = tmp_path / "in" / "a"
    src.mkdir(parents=True)
    big = src / "huge.jpg"
    subprocess.run(["truncate", "-s", "2G", str(big)], check=True)
    Image.fromarray(upright_rgb()).save(src / "ok.png")
    out = tmp_path / "out"
    code = (
        "import resource\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)\n"  # Linux: kilobytes
    )
    script = f"import sys, img2tfrecord\nimg2tfrecord.convert(sys.argv[1], sys.argv[2], workers=1)\n{code}"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    res = subprocess.run(
        [sys.executable, "-c", script, str(src.parent), str(out)], capture_output=True, text=True, env=env, timeout=300
    )
    assert res.returncode == 0, res.stderr
    peak = int(res.stdout.split()[-1])
    assert peak < 1 << 30, f"peak RSS {peak / 2**20:.0f} MB for a 2 GB file that is not an image"
    skipped = json.loads((out / "dataset.json").read_text())["skipped"]
    assert skipped == [{"path": "a/huge.jpg", "split": "train", "reason": "not an image: unknown binary data"}]


def test_a_file_around_the_sniffed_head_is_read_whole_and_once(tmp_path):
    """Files just below, at and above the 64 KiB read before sniffing come back byte for byte
    (the head is re-read in place, not joined to the rest), and a JPEG of any size keeps its bytes."""
    import io

    import numpy as np

    from img2tfrecord.conversion.encode.source import HEAD_BYTES, read_source

    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(3).integers(0, 255, (400, 400, 3), dtype=np.uint8)).save(
        buf, "JPEG", quality=95
    )
    jpeg = buf.getvalue()
    assert len(jpeg) > 2 * HEAD_BYTES
    for n in (100, HEAD_BYTES - 1, HEAD_BYTES, HEAD_BYTES + 1, 2 * HEAD_BYTES + 7, len(jpeg)):
        data = jpeg[:3] + bytes(range(256)) * (n // 256 + 1) if n < len(jpeg) else jpeg
        path = tmp_path / f"f{n}.jpg"
        path.write_bytes(data[:n])
        assert read_source(str(path)) == data[:n]


def test_skip_reasons_never_copy_a_non_image_file(tmp_path):
    """A `--file-list` row pointing at a secret-looking text file, a symlink `notes.jpg` to it, and
    other non-images: stderr and dataset.json say what each is, and not one byte of it."""
    from click.testing import CliRunner

    from img2tfrecord.cli import main

    secret = tmp_path / "shadow"
    secret.write_text(SECRET)
    src = tmp_path / "in" / "a"
    src.mkdir(parents=True)
    Image.fromarray(upright_rgb()).save(src / "ok.png")
    (src / "notes.jpg").symlink_to(secret)
    (src / "page.jpg").write_text("<!DOCTYPE html><html><body>token=s3cr3t-html</body></html>")
    (src / "data.jpg").write_bytes(b"PK\x03\x04" + b"s3cr3t-zip" * 10)
    (src / "key.jpg").write_bytes(bytes(range(256)) * 4)  # binary, no known magic
    listing = tmp_path / "list.csv"
    listing.write_text(f"{src / 'ok.png'},a\n{secret},b\n")
    runner = CliRunner()
    walked = runner.invoke(main, ["convert", str(tmp_path / "in"), str(tmp_path / "out1")], catch_exceptions=False)
    listed = runner.invoke(
        main,
        ["convert", "--file-list", str(listing), str(tmp_path / "in"), str(tmp_path / "out2")],
        catch_exceptions=False,
    )
    reasons = {}
    for res, out in ((walked, "out1"), (listed, "out2")):
        assert res.exit_code == 0, res.output
        manifest = (tmp_path / out / "dataset.json").read_text()
        for leak in ("root:", "AKIA", "s3cr3t", "20228", "00 01 02"):
            assert leak not in res.output and leak not in manifest, (leak, res.output)
        reasons.update({Path(s["path"]).name: s["reason"] for s in json.loads(manifest)["skipped"]})
    assert reasons == {
        "notes.jpg": "not an image: content is text",
        "shadow": "not an image: content is text",
        "page.jpg": "not an image: content is HTML",
        "data.jpg": "not an image: content is a ZIP archive",
        "key.jpg": "not an image: unknown binary data",
    }


def png_bomb(width: int, height: int) -> bytes:
    """A real PNG of one colour (1-bit black), written row block by row block: 30,000 x 30,000
    is ~480 KB on disk and 900 M pixels (Pillow would need 900 MB to decode it)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    z = zlib.compressobj(1)
    rows = (b"\x00" + bytes((width + 7) // 8)) * 500  # filter byte + packed bits, 500 rows at a time
    idat = b"".join(z.compress(rows) for _ in range(height // 500)) + z.flush()
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)  # bit depth 1, grey
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def jpeg_claiming(width: int, height: int) -> bytes:
    """A real ~490 KB JPEG whose frame header (SOF0) is rewritten to claim width x height."""
    import io

    import numpy as np

    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(5).integers(0, 255, (640, 640, 3), dtype=np.uint8)).save(
        buf, "JPEG", quality=95
    )
    data = bytearray(buf.getvalue())
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
    return bytes(data)


def webp_claiming(width: int, height: int) -> bytes:
    """A real ~600 KB lossless WebP whose VP8L header is rewritten to claim width x height (<= 16384)."""
    import io

    import numpy as np

    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(6).integers(0, 255, (400, 500, 3), dtype=np.uint8)).save(
        buf, "WEBP", lossless=True, method=0
    )
    data = bytearray(buf.getvalue())
    assert data[12:16] == b"VP8L"
    bits = int.from_bytes(data[21:25], "little") & ~((1 << 28) - 1) | (width - 1) | (height - 1) << 14
    data[21:25] = bits.to_bytes(4, "little")
    return bytes(data)


def test_an_image_over_max_pixels_is_skipped_by_its_header_before_it_is_read(tmp_path):
    """A decompression bomb (a real 30,000 x 30,000 PNG), a JPEG and a WebP whose headers claim
    more than --max-pixels: skipped with the size and the option from the first 64 KiB alone, so reading one costs
    the sniff, not the file (the file used to be read whole first, and only then judged)."""
    import tracemalloc

    from click.testing import CliRunner

    from img2tfrecord.cli import main
    from img2tfrecord.conversion.encode.example import SkipImage, encode_image
    from img2tfrecord.conversion.encode.source import HEAD_BYTES
    from img2tfrecord.conversion.plan.options import EncodeOptions

    src = tmp_path / "in" / "a"
    src.mkdir(parents=True)
    Image.fromarray(upright_rgb()).save(src / "ok.png")
    (src / "bomb.png").write_bytes(png_bomb(30_000, 30_000))
    (src / "claims.jpg").write_bytes(jpeg_claiming(30_000, 30_000))
    (src / "claims.webp").write_bytes(webp_claiming(16_384, 16_384))
    with Image.open(src / "bomb.png") as im:  # what it is, by Pillow's reading
        assert im.size == (30_000, 30_000) and im.format == "PNG"
    reasons = {
        f"a/{name}": f"{size} pixels exceeds --max-pixels 100,000,000 (possible decompression bomb); "
        "raise --max-pixels to include it"
        for name, size in (
            ("bomb.png", "30000x30000 = 900,000,000"),
            ("claims.jpg", "30000x30000 = 900,000,000"),
            ("claims.webp", "16384x16384 = 268,435,456"),
        )
    }
    Image.init()  # all of Pillow's readers imported now, not counted below
    for rel, reason in reasons.items():
        name = rel.removeprefix("a/")
        path = src / name
        assert path.stat().st_size > 6 * HEAD_BYTES
        tracemalloc.start()
        try:
            with pytest.raises(SkipImage) as e:
                encode_image(str(path), EncodeOptions())
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert str(e.value) == reason
        assert peak < 3 * HEAD_BYTES, f"{name}: {peak:,} bytes allocated for a {path.stat().st_size:,}-byte file"

    res = CliRunner().invoke(main, ["convert", str(tmp_path / "in"), str(tmp_path / "out")], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    for rel, reason in reasons.items():
        assert f"skipped: {rel}: {reason}" in res.stderr
    skipped = json.loads((tmp_path / "out" / "dataset.json").read_text())["skipped"]
    assert {s["path"]: s["reason"] for s in skipped} == reasons


def test_a_remote_file_is_sniffed_before_it_is_read_whole(tmp_path):
    """gs:// inputs (TensorFlow's ram:// here) are judged by their first 64 KiB as local files are:
    4 MB of binary junk named .jpg and a PNG bomb cost that much, not the object; a real photo
    comes back byte for byte; `convert` from ram:// gives the local run's reasons."""
    import io
    import tracemalloc

    import numpy as np
    from click.testing import CliRunner

    from img2tfrecord.cli import main
    from img2tfrecord.conversion.encode.example import SkipImage
    from img2tfrecord.conversion.encode.source import HEAD_BYTES, read_source
    from img2tfrecord.tf_import import tensorflow

    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(7).integers(0, 255, (640, 640, 3), dtype=np.uint8)).save(buf, "JPEG")
    files = {
        "a/junk.jpg": bytes(range(256)) * (16 << 10),  # 4 MB, no known magic
        "a/bomb.png": png_bomb(30_000, 30_000),
        "a/photo.jpg": buf.getvalue(),
        "a/small.png": b"\x89PNG\r\n\x1a\n" + b"\x00" * 100,  # under 64 KiB: read whole, then judged
    }
    gfile = tensorflow().io.gfile
    gfile.makedirs("ram://sniff/in/a")
    for rel, data in files.items():
        with gfile.GFile(f"ram://sniff/in/{rel}", "wb") as f:
            f.write(data)
    assert len(files["a/photo.jpg"]) > 2 * HEAD_BYTES
    assert read_source("ram://sniff/in/a/photo.jpg") == files["a/photo.jpg"]
    Image.init()  # all of Pillow's readers imported now, not counted in the sniff below
    for rel in ("a/junk.jpg", "a/bomb.png"):
        tracemalloc.start()
        try:
            with pytest.raises(SkipImage):
                read_source(f"ram://sniff/in/{rel}", 100_000_000)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 3 * HEAD_BYTES, f"{rel}: {peak:,} bytes allocated for a {len(files[rel]):,}-byte object"

    local = tmp_path / "in"
    for rel, data in files.items():
        (local / rel).parent.mkdir(parents=True, exist_ok=True)
        (local / rel).write_bytes(data)
    runner = CliRunner()
    reasons = []
    for source, out in (("ram://sniff/in", tmp_path / "remote"), (str(local), tmp_path / "local")):
        res = runner.invoke(main, ["convert", source, str(out), "--workers", "1"], catch_exceptions=False)
        assert res.exit_code == 0, res.output
        reasons.append({s["path"]: s["reason"] for s in json.loads((out / "dataset.json").read_text())["skipped"]})
    assert reasons[0] == reasons[1]
    assert sorted(reasons[0]) == ["a/bomb.png", "a/junk.jpg", "a/small.png"]
    assert reasons[0]["a/junk.jpg"] == "not an image: unknown binary data"
    assert "exceeds --max-pixels 100,000,000" in reasons[0]["a/bomb.png"]


def test_inspect_names_a_non_tfrecord_file_without_quoting_it(tmp_path):
    """`inspect` on files that are no TFRecord: the message names what each looks like (the same
    words as a skip reason), never its first bytes (in hex or otherwise)."""
    import io

    from click.testing import CliRunner

    from img2tfrecord.cli import main

    def saved(fmt: str) -> bytes:
        buf = io.BytesIO()
        Image.fromarray(upright_rgb()).save(buf, fmt)
        return buf.getvalue()

    files = {
        "key.bin": (bytes(range(256)) * 4, "unknown binary data"),
        "photo.tif": (saved("TIFF"), "a TIFF (II*) image"),
        "photo.webp": (saved("WEBP"), "a WebP image"),
        "shadow": (SECRET.encode(), "text"),
        "doc.pdf": (b"%PDF-1.7 s3cr3t" * 20, "a PDF document"),
    }
    runner = CliRunner()
    for name, (data, kind) in files.items():
        path = tmp_path / name
        path.write_bytes(data)
        res = runner.invoke(main, ["inspect", str(path)], catch_exceptions=False)
        assert res.exit_code == 1, res.output
        assert f"not a TFRecord file (no valid record header at byte 0; it looks like {kind})" in res.output
        for leak in (data[:8].hex(" "), data[:8].hex(), data[:4].hex(" "), "root:", "s3cr3t"):
            assert leak not in res.output, (name, leak, res.output)


CHILD_SCRIPT = """
import multiprocessing, sys
from img2tfrecord import cstderr

def child():
    cstderr.install()  # what a worker process does
    print("said by a worker process", file=sys.stderr)

if __name__ == "__main__":
    with cstderr.quiet():  # convert's: fd 2 is a capture file while workers are spawned
        cstderr.take()
        p = multiprocessing.get_context("spawn").Process(target=child)
        p.start()
        p.join()
        print("captured by the parent:", repr(cstderr.take()))
"""


def test_a_worker_process_does_not_write_into_its_parents_capture(tmp_path):
    """Workers are spawned while the parent's fd 2 is its capture file, and inherit it: what a
    worker wrote to its stderr became the skip reason of whatever image the parent read then."""
    script = tmp_path / "spawn_child.py"
    script.write_text(CHILD_SCRIPT)
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "captured by the parent: ''" in res.stdout, res.stdout
    assert "said by a worker process" in res.stderr  # the worker's own stderr is the real terminal
