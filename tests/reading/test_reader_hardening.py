"""Reader hardening (issue 6): `inspect` and `load()` on damaged and malicious shards.

Every file here is built byte by byte: `frame()` around chosen payloads, plus headers whose length
claims gigabytes under a *valid* CRC (the case a naive reader allocates for), random bytes,
truncations and bombs. Each must end in a one-line problem naming file, record and byte offset
(exit 1), or in exit 0 where the framing is sound and only the content is odd; never a traceback,
a hang or a memory blow-up. The property tests fuzz the pure-Python reader; that it agrees with
TensorFlow on valid shards is `test_inspect.py::test_reader_agrees_with_tensorflow`.
"""

from __future__ import annotations

import gzip
import io
import json
import random
import re
import signal
import struct
import tracemalloc
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

import img2tfrecord
from helpers import examples
from img2tfrecord.cli import main
from img2tfrecord.errors import DataError, UsageError
from img2tfrecord.format import framing
from img2tfrecord.format.framing import (
    MAX_RECORD_BYTES,
    FramingError,
    RawRecord,
    TFRecordFile,
    check_framing,
    masked_crc,
    read_records,
)
from img2tfrecord.inspection import scan as inspector
from img2tfrecord.inspection.sheet import MAX_SHEET_CELLS, contact_sheet_size
from img2tfrecord.tf_import import tensorflow
from inspect_helpers import encode, example, frame, make_items, picture, write_dataset

MB = 1 << 20
MEMORY_LIMIT = 100 * MB  # growth allowed while reading a file that claims gigabytes
GIB4 = 4 << 30

# --------------------------------------------------------------------------- building bad files


def header(length: int) -> bytes:
    """A record header whose length CRC is valid: a naive reader believes it."""
    raw = struct.pack("<Q", length)
    return raw + struct.pack("<I", masked_crc(raw))


def record(
    enc: bytes | None = None,
    fmt: bytes = b"PNG",
    h: int = 8,
    w: int = 8,
    c: int = 3,
    label: int = 0,
    text: bytes = b"cat",
    filename: bytes = b"cat/a.png",
) -> bytes:
    """One Example of our schema; by default a valid 8x8 PNG."""
    enc = PNG if enc is None else enc
    return example(
        {
            "image/encoded": ("bytes", [enc]),
            "image/format": ("bytes", [fmt]),
            "image/height": ("int64", [h]),
            "image/width": ("int64", [w]),
            "image/channels": ("int64", [c]),
            "image/colorspace": ("bytes", [b"RGB"]),
            "image/class/label": ("int64", [label]),
            "image/class/text": ("bytes", [text]),
            "image/filename": ("bytes", [filename]),
        }
    )


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_bomb(w: int, h: int, *, real: bool) -> bytes:
    """A 1-bit greyscale PNG of w x h: `real` holds every (zero) row, ~1/1000 of the decoded size."""
    z = zlib.compressobj(9)
    if real:
        row = bytes(1 + (w + 7) // 8)  # filter byte + packed bits
        body = b"".join(z.compress(row * 100) for _ in range(h // 100)) + z.compress(row * (h % 100)) + z.flush()
    else:
        body = z.compress(bytes(100)) + z.flush()
    ihdr = struct.pack(">IIBBBBB", w, h, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", body) + _png_chunk(b"IEND", b"")


PNG = encode(picture(8, 8, (200, 30, 30)), "PNG")
GOOD = frame(record())
RNG = random.Random(6)
JUNK = bytes([0x5A]) + RNG.randbytes(4999)  # 0x5A: neither gzip's nor zlib's first byte


def _bad_data_crc(payload: bytes) -> bytes:
    f = bytearray(frame(payload))
    f[-1] ^= 0xFF
    return bytes(f)


def _zeros_gzip(prefix: bytes, n: int) -> bytes:
    """gzip of prefix + n zero bytes, built in pieces (150 MB of zeros make a 150 KB file)."""
    z = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    out = [z.compress(prefix)]
    chunk = bytes(MB)
    for _ in range(n // MB):
        out.append(z.compress(chunk))
    out.append(z.flush())
    return b"".join(out)


@dataclass
class Case:
    """A file, and what inspect must say about it.

    `problem` (record, offset, text) is reported by every mode; `verify` only by --verify, which
    decodes images (other modes exit 0: the framing is sound and they do not judge pixels);
    `undrawable`: the contact sheet crosses the image out instead of decoding it.
    """

    data: bytes
    problem: tuple[int | None, int | None, str] | None = None
    verify: tuple[int, int, str] | None = None
    undrawable: bool = False
    records: int | None = None


N = len(GOOD)
CASES: dict[str, Any] = {
    # framing: every mode reports it, exit 1
    "length 4 GiB": lambda: Case(
        GOOD + header(GIB4) + bytes(64),
        (1, N, "it claims 4,294,967,296 data bytes but the file holds 64 more"),
        records=1,
    ),
    "length 2**40": lambda: Case(
        GOOD + header(1 << 40) + bytes(64), (1, N, "it claims 1,099,511,627,776 data bytes"), records=1
    ),
    "length 2**63": lambda: Case(
        GOOD + header(1 << 63) + bytes(64), (1, N, "it claims 9,223,372,036,854,775,808 data bytes"), records=1
    ),
    "length 2**64-1": lambda: Case(
        GOOD + header(2**64 - 1), (1, N, "it claims 18,446,744,073,709,551,615 data bytes"), records=1
    ),
    "random bytes": lambda: Case(
        JUNK, (None, None, "not a TFRecord file (no valid record header at byte 0"), records=0
    ),
    "random bytes after a record": lambda: Case(GOOD + JUNK, (1, N, "corrupt record header"), records=1),
    "truncated header": lambda: Case(
        GOOD + header(10)[:7], (1, N, "truncated record header: 7 of 12 bytes"), records=1
    ),
    "truncated data": lambda: Case(
        GOOD + header(1000) + bytes(100), (1, N, "it claims 1,000 data bytes but the file holds 100 more"), records=1
    ),
    "missing data CRC": lambda: Case(
        GOOD + GOOD[:-4], (1, N, f"its {N - 16:,} data bytes are there but its data CRC is cut short"), records=1
    ),
    "wrong data CRC": lambda: Case(GOOD + _bad_data_crc(record()) + GOOD, (1, N, "data CRC mismatch"), records=3),
    "not an Example": lambda: Case(
        GOOD + frame(b"\xff" * 40), (1, N, "1 of 2 records is not tf.train.Example"), records=2
    ),
    "50,000 tiny non-Examples": lambda: Case(
        frame(b"\x07") * 50_000, (0, 0, "50000 of 50000 records are not tf.train.Example"), records=50_000
    ),
    "gzip: length 4 GiB": lambda: Case(
        gzip.compress(GOOD + header(GIB4) + bytes(100)),
        (1, N, "truncated record: 100 of 4,294,967,296 data bytes"),
        records=1,
    ),
    "zlib: length 4 GiB": lambda: Case(
        zlib.compress(GOOD + header(GIB4) + bytes(100)),
        (1, N, "truncated record: 100 of 4,294,967,296 data bytes"),
        records=1,
    ),
    "gzip bomb: length 4 GiB over 150 MB of zeros": lambda: Case(
        _zeros_gzip(GOOD + header(GIB4), 150 * MB),
        (1, N, f"truncated record: {150 * MB:,} of 4,294,967,296 data bytes"),
        records=1,
    ),
    "gzip: cut short": lambda: Case(
        gzip.compress(GOOD * 3)[:-10], (2, 2 * N, "gzip stream is damaged: Compressed file ended"), records=2
    ),
    # valid framing, odd content: exit 0, except --verify
    "zero-length record": lambda: Case(frame(b""), records=1),
    "50,000 zero-length records": lambda: Case(frame(b"") * 50_000, records=50_000),
    "garbage image bytes": lambda: Case(
        frame(record(JUNK[:500], b"JPEG")), verify=(0, 0, "image does not decode"), undrawable=True
    ),
    "claims 10**9 pixels": lambda: Case(
        frame(record(h=31_623, w=31_623)),
        verify=(0, 0, "image/height x image/width claim 31,623x31,623 = 1,000,014,129 pixels"),
        undrawable=True,
    ),
    "RAW claims 10**9 pixels": lambda: Case(
        frame(record(bytes(12), b"RAW", h=10**9, w=1, c=1)),
        verify=(0, 0, "RAW image holds 12 bytes, but 1000000000x1x1 needs 1,000,000,000"),
        undrawable=True,
    ),
    "channels 7": lambda: Case(frame(record(c=7)), verify=(0, 0, "stored shape 8x8x7 but the image decodes to 8x8x3")),
    "channels -1": lambda: Case(
        frame(record(c=-1)), verify=(0, 0, "stored shape 8x8x-1 but the image decodes to 8x8x3")
    ),
    "RAW channels 7": lambda: Case(
        frame(record(bytes(28), b"RAW", h=2, w=2, c=7)),
        verify=(0, 0, "RAW image with impossible shape 2x2x7"),
        undrawable=True,
    ),
    "RAW negative size": lambda: Case(
        frame(record(bytes(6), b"RAW", h=-2, w=-3, c=1)),
        verify=(0, 0, "RAW image with impossible shape -2x-3x1"),
        undrawable=True,
    ),
    "RAW wrong byte count": lambda: Case(
        frame(record(bytes(47), b"RAW", h=4, w=4, c=3)),
        verify=(0, 0, "RAW image holds 47 bytes, but 4x4x3 needs 48"),
        undrawable=True,
    ),
    "PNG header 50000x50000": lambda: Case(
        frame(record(png_bomb(50_000, 50_000, real=False))),
        verify=(0, 0, "image header claims 2,500,000,000 pixels"),
        undrawable=True,
    ),
    "PNG bomb 20000x20000": lambda: Case(
        frame(record(png_bomb(20_000, 20_000, real=True))),
        verify=(0, 0, "image header claims 400,000,000 pixels"),
        undrawable=True,
    ),
}


# --------------------------------------------------------------------------- guards


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Fail instead of hanging (SIGALRM: the main thread, between Python bytecodes)."""
    if not hasattr(signal, "setitimer"):  # Windows: no watchdog
        yield
        return

    def expired(signum: int, frame: Any) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _hwm() -> int | None:
    """Peak resident memory of this process (Linux), in bytes."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            return int(re.search(r"VmHWM:\s+(\d+) kB", f.read())[1]) * 1024  # type: ignore[index]
    except (OSError, TypeError):
        return None


@contextmanager
def bounded(limit: int = MEMORY_LIMIT, trace: bool = True) -> Iterator[None]:
    """Fail if the block's peak memory grows by `limit` or more.

    tracemalloc sees every Python allocation (bytes, lists) but slows Python down ~8x, so it is
    optional; the resident high-water mark, reset first through /proc/self/clear_refs, also sees
    C allocations (Pillow, TensorFlow, zlib).
    """
    if trace:
        tracemalloc.start()
    peak = 0
    hwm = None
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        hwm = _hwm()
    except OSError:
        pass
    try:
        yield
        if trace:
            _, peak = tracemalloc.get_traced_memory()
    finally:
        if trace:
            tracemalloc.stop()
    assert peak < limit, f"Python allocations peaked at {peak / MB:.0f} MiB"
    after = _hwm()
    if hwm is not None and after is not None:
        assert after - hwm < limit, f"resident memory grew by {(after - hwm) / MB:.0f} MiB"


@pytest.fixture(scope="module")
def tf() -> Any:
    return tensorflow()  # imported once, outside the memory measurements


# --------------------------------------------------------------------------- inspect, every mode


def _where(path: Path, problem: tuple[int | None, int | None, str], compressed: bool) -> str:
    """The start of a problem line: file, record, byte offset."""
    record, offset, _ = problem
    where = str(path)
    if record is not None:
        where += f": record {record}"
    if offset is not None:
        where += f" at byte {offset:,}" + (" (decompressed)" if compressed else "")
    return where


@pytest.mark.parametrize("name", list(CASES))
def test_inspect_every_mode_reports_malicious_files_in_one_line(name: str, tmp_path: Path, tf: Any) -> None:
    case: Case = CASES[name]()
    path = tmp_path / "shard"
    path.write_bytes(case.data)
    compressed = name.startswith(("gzip", "zlib"))
    modes = {
        "report": [],
        "--verify": ["--verify"],
        "--json": ["--json"],
        "--extract": ["--extract", tmp_path / "x", "--all"],
        "--contact-sheet": ["--contact-sheet", tmp_path / "sheet.png"],
    }
    for mode, extra in modes.items():
        problem = case.verify if mode == "--verify" and case.verify else case.problem
        with deadline(30), bounded(trace=(case.records or 0) < 1000):
            r = CliRunner().invoke(main, ["inspect", str(path), *map(str, extra)], catch_exceptions=False)
        what = f"{name} {mode}:\n{r.output}"
        assert r.exit_code == (1 if problem else 0), what
        assert "Traceback" not in r.output, what
        if mode == "--json":
            data = json.loads(r.stdout)
            probs = [(p["record"], p["offset"]) for p in data["problems"]]
            assert probs == ([problem[:2]] if problem else []), what
            if problem:
                assert problem[2] in data["problems"][0]["message"], what
            if case.records is not None:
                assert data["total"]["records"] == case.records, what
            continue
        if problem:
            assert r.stdout.count("\n  " + str(path)) == 1 and "problems (1):" in r.stdout, (
                what
            )  # exactly one problem line
            line = next(x for x in r.stdout.splitlines() if x.startswith("  " + str(path)))
            assert line.startswith("  " + _where(path, problem, compressed) + ": "), what
            assert problem[2] in line, what
        if mode == "--contact-sheet":
            assert Image.open(tmp_path / "sheet.png").format == "PNG"
            assert ("images not drawn" in r.stdout) == case.undrawable, what
        if mode == "--extract":
            assert "extracted" in r.stdout, what


# --------------------------------------------------------------------------- inspect, details


def test_a_record_too_big_to_hold_is_crc_checked_while_streaming_past_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = record(bytes(5000), b"RAW", h=50, w=100, c=1)
    broken = bytearray(frame(big))
    broken[100] ^= 1
    for comp, wrap in (("none", bytes), ("gzip", gzip.compress), ("zlib", zlib.compress)):
        path = tmp_path / f"big.{comp}"
        path.write_bytes(wrap(GOOD + frame(big) + bytes(broken) + GOOD))
        recs = list(TFRecordFile(path, max_record_bytes=1000))
        assert [(r.oversize, r.crc_ok, r.length) for r in recs] == [
            (False, True, N - 16),
            (True, True, len(big)),
            (True, False, len(big)),
            (False, True, N - 16),
        ]
        assert recs[1].data == b"" and recs[3].offset == N + 2 * len(frame(big))
        with pytest.raises(
            DataError, match=rf"record 1 at byte {N}: {len(big):,} data bytes, more than max_record_bytes=1,000"
        ):
            list(read_records(path, max_record_bytes=1000))
        monkeypatch.setattr(framing, "MAX_RECORD_BYTES", 1000)
        report = inspector.inspect([path])
        monkeypatch.undo()
        assert [(p.record, p.message.split(":")[0]) for p in report.problems] == [
            (1, f"{len(big):,} data bytes, more than the 1,000 inspect holds in memory"),
            (2, "data CRC mismatch"),
        ]
        assert report.total.records == 4 and report.total.examples == 2


def test_contact_sheet_rows_are_capped_whatever_labels_a_file_invents(tmp_path: Path) -> None:
    tiny = encode(picture(2, 2, (0, 90, 0)), "PNG")
    path = tmp_path / "labels"
    texts = [b"c" * 100_000 + b"\n"] + [b"c"] * 2999  # a long, multi-line label text once: drawn cut short
    path.write_bytes(b"".join(frame(record(tiny, h=2, w=2, label=i, text=t)) for i, t in enumerate(texts)))
    sheet = tmp_path / "sheet.png"
    with deadline(60), bounded():
        r = CliRunner().invoke(
            main, ["inspect", str(path), "--contact-sheet", str(sheet), "-n", "20", "--json"], catch_exceptions=False
        )
    assert r.exit_code == 0, r.output
    c = json.loads(r.stdout)["contact_sheet"]
    rows = MAX_SHEET_CELLS // 20
    assert c["rows"] == rows and c["omitted"] == 3000 - rows and c["unreadable"] == 0
    assert Image.open(sheet).size == contact_sheet_size(rows, 20, c["label_width"])


def test_extract_survives_names_the_file_system_refuses(tmp_path: Path) -> None:
    names = [
        b"cat/" + b"y" * 300 + b".png",
        b"cat/a",
        b"cat/a/b.png",
        b"cat/" + b"d/" * 3000 + b"deep.png",
        b"../../../../etc/passwd",
    ]
    path = tmp_path / "names"
    path.write_bytes(
        b"".join(frame(record(filename=n, text=t)) for n in names for t in (b"cat", b"\x1b]0;owned\x07" + b"z" * 400))
    )
    x = tmp_path / "x"
    r = CliRunner().invoke(main, ["inspect", str(path), "--extract", str(x), "--all"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert f"extracted {2 * len(names)} images" in r.stdout
    files = [p for p in x.rglob("*") if p.is_file()]
    assert len(files) == 2 * len(names) and all(p.read_bytes() == PNG for p in files)
    assert all(len(part.encode()) <= 255 for p in files for part in p.relative_to(x).parts)
    assert not (tmp_path / "etc").exists()


def test_text_report_shows_record_content_escaped_and_short(tmp_path: Path) -> None:
    path = tmp_path / "ctl"
    path.write_bytes(
        frame(
            record(filename=b"cat/\x1b[2J\x1b]0;owned\x07.png\nFAKE LINE", text=b"\xe2\x80\xaecat", fmt=b"P" * 10_000)
        )
    )
    r = CliRunner().invoke(main, ["inspect", str(path)], catch_exceptions=False)
    assert r.exit_code == 0
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout and "\u202e" not in r.stdout
    assert "\\x1b[2J" in r.stdout and "\\nFAKE LINE" in r.stdout and "\\u202ecat" in r.stdout
    assert max(len(line) for line in r.stdout.splitlines()) < 400


# --------------------------------------------------------------------------- load()


@pytest.mark.parametrize("length", [GIB4, 1 << 40, 1 << 62, 1 << 63, 2**64 - 1])
def test_load_refuses_a_lying_length_before_tensorflow_allocates_it(tmp_path: Path, tf: Any, length: int) -> None:
    """TensorFlow reserves a header's claimed length before reading: 2**40 under a valid CRC
    segfaults the process (TF 2.21). load() walks the headers first and names the record."""
    path = tmp_path / "train-00000-of-00001"
    path.write_bytes(GOOD + header(length) + bytes(64))
    with deadline(30), bounded():
        with pytest.raises(
            DataError,
            match=rf"^{re.escape(str(path))}: record 1 at byte {N}: truncated record: it claims {length:,} data bytes",
        ):
            img2tfrecord.load(path)
        with pytest.raises(DataError, match="record 1 at byte"):  # the same through a directory, without dataset.json
            img2tfrecord.load(tmp_path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (JUNK, "not a TFRecord file"),
        (GOOD + JUNK, f"record 1 at byte {N}: corrupt record header"),
        (GOOD + GOOD[:-4], f"record 1 at byte {N}: truncated record"),
        (GOOD + header(10)[:7], f"record 1 at byte {N}: truncated record header"),
    ],
)
def test_load_names_file_record_and_offset_of_broken_framing(
    tmp_path: Path, tf: Any, content: bytes, message: str
) -> None:
    path = tmp_path / "shard"
    path.write_bytes(content)
    with pytest.raises(DataError, match=re.escape(f"{path}: ") + ".*" + re.escape(message)):
        img2tfrecord.load(path)


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    write_dataset(out, make_items(["cat", "dog"], {"cat": 3, "dog": 3}), ["cat", "dog"], {"train": 2})
    return out


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_load_names_the_shard_and_record_tensorflow_cannot_read(
    tmp_path: Path, tf: Any, compression: str | None
) -> None:
    out = tmp_path / "out"
    write_dataset(
        out, make_items(["cat", "dog"], {"cat": 3, "dog": 3}), ["cat", "dog"], {"train": 2}, compression=compression
    )
    shard = out / "train-00001-of-00002"
    raw = gzip.decompress(shard.read_bytes()) if compression else shard.read_bytes()
    damaged = bytearray(raw)
    second = struct.unpack_from("<Q", raw)[0] + 16  # record 1's offset
    damaged[second + 40] ^= 0x10  # one of its data bytes
    shard.write_bytes(gzip.compress(bytes(damaged)) if compression else bytes(damaged))
    ds = img2tfrecord.load(out)  # framing is fine: this is only found while reading
    with (
        deadline(60),
        pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(f"{shard}: record 1 cannot be read")),
    ):
        for _ in ds:
            pass
    unzipped = " (decompressed)" if compression else ""
    with pytest.raises(
        DataError, match=re.escape(f"{shard}: record 1 at byte {second:,}{unzipped}: data CRC mismatch")
    ):
        img2tfrecord.load(out, verify="full")
    assert sum(1 for _ in img2tfrecord.load(out, split="train", verify="none").take(2)) == 2


def test_load_checks_record_counts_against_dataset_json(dataset: Path, tf: Any) -> None:
    man = json.loads((dataset / "dataset.json").read_text())
    man["splits"]["train"]["shards"][1]["records"] += 1
    (dataset / "dataset.json").write_text(json.dumps(man))
    with pytest.raises(
        DataError, match=re.escape(f"{dataset / 'train-00001-of-00002'}: holds 3 records, dataset.json says 4")
    ):
        img2tfrecord.load(dataset)
    (dataset / "train-00000-of-00002").unlink()
    with pytest.raises(DataError, match="train-00000-of-00002: cannot read: No such file"):
        img2tfrecord.load(dataset)
    with pytest.raises(UsageError, match="verify must be none, framing, full"):
        img2tfrecord.load(dataset, verify="yes")
    gz = dataset / "train-00001-of-00002"
    gz.write_bytes(gzip.compress(gz.read_bytes()))
    with pytest.raises(
        DataError, match=re.escape(f"{gz}: record 0 at byte 0: a gzip-compressed file, read as uncompressed")
    ):
        img2tfrecord.load(gz, compression="none")


NAMED = "is not a tf.train.Example with the img2tfrecord features"


@pytest.mark.parametrize(
    ("payload", "message", "while_iterating"),
    [
        (b"\xff" * 40, "not a tf.train.Example", NAMED),  # TensorFlow alone: a UnicodeDecodeError
        (b"", "feature image/encoded is not one bytes value", NAMED),
        (
            example({"image": ("bytes", [PNG]), "label": ("int64", [1])}),
            "feature image/encoded is not one bytes value",
            NAMED,
        ),
        (
            record(bytes(47), b"RAW", h=4, w=4, c=3),
            "RAW image holds 47 bytes, but 4x4x3 needs 48",
            "image/filename cat/a.png (RAW, 47 bytes) does not decode",
        ),
        (
            record(png_bomb(50_000, 50_000, real=False)),
            "image header claims 2,500,000,000 pixels",
            "image/filename cat/a.png (PNG, 69 bytes) does not decode",
        ),
        (
            record(h=31_623, w=31_623),
            "image/height x image/width claim 31,623x31,623",
            None,
        ),  # TensorFlow decodes the real 8x8
    ],
)
def test_load_on_records_that_are_no_image_examples(
    tmp_path: Path, tf: Any, payload: bytes, message: str, while_iterating: str | None
) -> None:
    """verify="full" names file, record and offset before TensorFlow starts; the default names
    file and record of what does not parse, and the image/filename of what does not decode
    (TensorFlow alone: `Input to reshape is a tensor with 47 values`, `PNG size too large`)."""
    path = tmp_path / "shard"
    path.write_bytes(GOOD + frame(payload))
    with pytest.raises(DataError, match=re.escape(f"{path}: record 1 at byte {N}: {message}")):
        img2tfrecord.load(path, verify="full")
    ds = img2tfrecord.load(path)
    with deadline(60), bounded():
        try:
            assert sum(1 for _ in ds) == 2 and while_iterating is None
        except tf.errors.InvalidArgumentError as e:
            assert while_iterating is not None and while_iterating in e.message, e.message
            if while_iterating == NAMED:
                assert f"{path}: record 1 {NAMED}" in e.message
            else:
                assert f"{path}: record 1: {while_iterating}" in e.message


def test_load_full_verify_streams_past_a_gzip_bomb(tmp_path: Path, tf: Any) -> None:
    path = tmp_path / "bomb.gz"
    path.write_bytes(_zeros_gzip(GOOD + header(GIB4), 150 * MB))
    with deadline(60), bounded():
        with pytest.raises(
            DataError,
            match=re.escape(
                f"{path}: record 1 at byte {N} (decompressed): truncated record: {150 * MB:,} of 4,294,967,296"
            ),
        ):
            img2tfrecord.load(path, verify="full")


# --------------------------------------------------------------------------- properties


def _read(
    path: Path, max_record: int | None = None
) -> tuple[str | None, list[RawRecord], FramingError | DataError | None]:
    """Everything the reader yields from a file, and how it stopped."""
    try:
        f = TFRecordFile(path, max_record_bytes=max_record)
    except DataError as e:  # not TFRecord at all: a file-level problem
        return None, [], e
    recs: list[RawRecord] = []
    try:
        for r in f:
            recs.append(r)
    except FramingError as e:
        return f.compression, recs, e
    return f.compression, recs, None


def _check_reader(path: Path, max_record: int | None = None) -> tuple[str | None, list[RawRecord], Any]:
    """The reader's invariants on any file: consecutive records, offsets inside the file, one clean stop."""
    with deadline(20):
        comp, recs, err = _read(path, max_record)
    size = path.stat().st_size
    pos = 0
    for i, r in enumerate(recs):
        assert (r.index, r.offset) == (i, pos)
        pos += 16 + r.length
        if r.oversize:
            assert r.data == b"" and r.length > (max_record or MAX_RECORD_BYTES)
    if comp == "none":
        assert pos <= size
    if isinstance(err, FramingError):
        assert (err.index, err.offset) == (len(recs), pos)
        assert comp != "none" or err.offset < size
        assert err.message and "\n" not in err.message
    if comp == "none":  # the header walk load() relies on sees exactly what the reader sees
        if isinstance(err, FramingError):
            with pytest.raises(DataError, match=rf"record {err.index} at byte {err.offset:,}: "):
                check_framing(path)
        else:
            assert check_framing(path) == len(recs)
    return comp, recs, err


_payloads = st.lists(st.binary(max_size=200), max_size=8)
# pieces of a hostile file: good frames, valid-CRC headers claiming anything, raw bytes
_segments = st.lists(
    st.one_of(
        st.binary(max_size=120).map(frame),
        st.tuples(st.integers(0, 2**64 - 1), st.binary(max_size=40)).map(lambda t: header(t[0]) + t[1]),
        st.binary(max_size=40),
    ),
    max_size=6,
)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@settings(max_examples=examples(500), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=_segments, wrap=st.sampled_from(["none", "gzip", "zlib"]), max_record=st.sampled_from([None, 16]))
def test_property_reader_on_hostile_bytes(
    scratch: Path, pieces: list[bytes], wrap: str, max_record: int | None
) -> None:
    data = b"".join(pieces)
    data = {"none": data, "gzip": gzip.compress(data) if data else data, "zlib": zlib.compress(data) if data else data}[
        wrap
    ]
    path = scratch / "hostile"
    path.write_bytes(data)
    _check_reader(path, max_record)
    with deadline(20):
        report = inspector.inspect([path])  # the whole command: never raises on content
    assert all("\n" not in p.message for p in report.problems)


@settings(max_examples=examples(500), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    payloads=_payloads,
    wrap=st.sampled_from(["none", "gzip", "zlib"]),
    damage=st.sampled_from(["none", "flip", "truncate", "length", "flip compressed", "truncate compressed"]),
    where=st.floats(0, 1, exclude_max=True),
    bits=st.integers(1, 255),
    new_length=st.one_of(st.integers(0, 400), st.integers(0, 2**64 - 1)),
    max_record=st.sampled_from([None, 64]),
)
def test_property_damaged_shard_yields_what_was_written_or_a_problem(
    scratch: Path,
    payloads: list[bytes],
    wrap: str,
    damage: str,
    where: float,
    bits: int,
    new_length: int,
    max_record: int | None,
) -> None:
    original = b"".join(frame(p) for p in payloads)
    raw = bytearray(original)
    written = {}  # offset -> (index, payload)
    pos = 0
    for i, p in enumerate(payloads):
        written[pos] = (i, p)
        pos += 16 + len(p)
    if raw and damage == "flip":
        raw[int(where * len(raw))] ^= bits
    elif raw and damage == "truncate":
        raw = raw[: int(where * len(raw))]
    elif payloads and damage == "length":  # rewrite a length field under a valid CRC
        at = sorted(written)[int(where * len(payloads))]
        raw[at : at + 12] = header(new_length)
    data = bytearray({"none": bytes, "gzip": gzip.compress, "zlib": zlib.compress}[wrap](bytes(raw)))
    intact = bytes(raw) == original and damage not in ("flip compressed", "truncate compressed")
    if data and damage == "flip compressed":
        data[int(where * len(data))] ^= bits
    elif data and damage == "truncate compressed":
        data = data[: int(where * len(data))]
    path = scratch / "damaged"
    path.write_bytes(bytes(data))
    comp, recs, err = _check_reader(path, max_record)
    for k, r in enumerate(recs):
        if r.crc_ok and not r.oversize:  # a record passing its CRC is exactly one that was written there
            index, payload = written[r.offset]
            assert r.data == payload
            if all(x.crc_ok for x in recs[:k]):  # (a rewritten length may have swallowed records before it)
                assert r.index == index
    if intact:
        assert err is None and [r.data if not r.oversize else None for r in recs] == [
            p if max_record is None or len(p) <= max_record else None for p in payloads
        ]
    with deadline(20):
        try:
            got = list(read_records(path))
        except DataError as e:
            assert str(e).startswith(f"{path}: ") and "\n" not in str(e)
        else:
            assert got == payloads[: len(got)]  # a clean read is a prefix (a cut between records is a valid file)


@settings(max_examples=examples(50), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    payloads=_payloads,
    damage=st.sampled_from(["flip", "truncate", "length"]),
    where=st.floats(0, 1, exclude_max=True),
    bits=st.integers(1, 255),
    new_length=st.integers(0, 1000),
)
def test_property_reader_and_tensorflow_agree_on_damaged_shards(
    scratch: Path, tf: Any, payloads: list[bytes], damage: str, where: float, bits: int, new_length: int
) -> None:
    """What TensorFlow reads before its first error is what our reader reads before its first problem.

    Lengths stay small here: a huge one under a valid CRC crashes TensorFlow (see the load tests).
    """
    raw = bytearray(b"".join(frame(p) for p in payloads))
    if raw and damage == "flip":
        raw[int(where * len(raw))] ^= bits
    elif damage == "truncate":
        raw = raw[: int(where * len(raw))]
    elif payloads:
        at = sum(16 + len(p) for p in payloads[: int(where * len(payloads))])
        raw[at : at + 12] = header(new_length)
    path = scratch / "agree"
    path.write_bytes(bytes(raw))
    _, recs, err = _read(path)
    ours = []
    for r in recs:
        if not r.crc_ok:
            break
        ours.append(r.data)
    problem = err is not None or len(ours) < len(recs)
    if (
        err is not None
        and len(ours) == len(recs)
        and re.search("truncated record header|shorter than one record header", str(err))
    ):
        problem = False  # TensorFlow takes a cut-off header at the very end for the end of the file
    theirs, failed = [], False
    try:
        for x in tf.data.TFRecordDataset(str(path)):
            theirs.append(x.numpy())
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError, tf.errors.OutOfRangeError):
        failed = True
    assert theirs == ours and failed == problem


def _images() -> list[bytes]:
    im = picture(6, 5, (10, 200, 90))
    gif = io.BytesIO()
    im.save(gif, "GIF")
    return [encode(im, "PNG"), encode(im, "JPEG"), encode(im, "BMP"), gif.getvalue(), encode(im.convert("RGBA"), "PNG")]


_int64 = st.one_of(st.integers(-3, 10), st.integers(-(2**63), 2**63 - 1))


@st.composite
def _image_bytes(draw: Any) -> bytes:
    kind = draw(st.sampled_from(["real", "damaged", "bomb", "junk"]))
    if kind == "junk":
        return draw(st.binary(max_size=120))
    if kind == "bomb":
        return png_bomb(draw(st.integers(1, 2**31 - 1)), draw(st.integers(1, 2**31 - 1)), real=False)
    data = bytearray(draw(st.sampled_from(_images())))
    if kind == "damaged":
        at = draw(st.integers(0, len(data) - 1))
        if draw(st.booleans()):
            data[at] ^= draw(st.integers(1, 255))
        else:
            del data[at:]
    return bytes(data)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    images=st.lists(
        st.tuples(
            _image_bytes(),
            st.sampled_from([b"PNG", b"JPEG", b"BMP", b"GIF", b"RAW", b"", b"\xff\n"]),
            _int64,
            _int64,
            _int64,
            _int64,
            st.binary(max_size=30),
            st.binary(max_size=30),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_property_any_example_content_is_reported_never_raised(scratch: Path, tf: Any, images: list[tuple]) -> None:
    """--verify, --extract and --contact-sheet on Examples with arbitrary images, shapes, labels and names."""
    path = scratch / "content"
    path.write_bytes(
        b"".join(frame(record(enc, fmt, h, w, c, label, text, name)) for enc, fmt, h, w, c, label, text, name in images)
    )
    out = scratch / "extract"
    if out.exists():
        import shutil

        shutil.rmtree(out)
    with deadline(30):
        report = inspector.inspect(
            [path], verify=True, extract_dir=out, extract_all=True, contact_sheet=scratch / "sheet.png"
        )
    assert report.total.records == report.total.examples == len(images)
    assert all("\n" not in p.message and len(p.message) < 400 for p in report.problems)
    assert report.extracted["images"] + report.extracted["skipped"] == len(images)
