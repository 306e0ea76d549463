"""`inspect` is bounded by design (issue 20 item 5b): what it parses, keeps and prints per record
and per file is capped, and it says so; `--verify` still checks every record.

Memory is measured in a child process (its peak resident size), against the
same child on a tiny file; never time. The record walker that makes this possible
(`inspection.wire`) must agree with protobuf's own parser, which the property test checks.
"""

from __future__ import annotations

import gzip
import json
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import google_crc32c
import pytest

if not Path("/proc/self/status").is_file():  # pragma: no cover
    pytest.skip("peak memory is read from /proc (Linux)", allow_module_level=True)
from click.testing import CliRunner
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import examples
from img2tfrecord.cli.inspect import inspect_command
from img2tfrecord.format.framing import mask_crc
from img2tfrecord.format.schema import Example
from img2tfrecord.inspection import scan as inspector
from img2tfrecord.inspection.records import MAX_RECORD_KEYS
from img2tfrecord.inspection.stats import MAX_FEATURE_KEYS
from img2tfrecord.inspection.wire import WireError, parse_example
from inspect_helpers import encode, example, frame, picture, write_frames

MB = 1 << 20

# The child: inspect PATH... with the CLI, report on stdout, then its peak resident size on stderr.
# The peak is the memory map's high-water mark (VmHWM), not getrusage's ru_maxrss: Linux carries
# ru_maxrss across exec, so a child of a big test process would report the parent's size.
CHILD = """
import re, sys
from img2tfrecord.cli import main
code = 0
try:
    main(['inspect', *sys.argv[1:]], prog_name='img2tfrecord')
except SystemExit as e:
    code = e.code
sys.stdout.flush()
with open('/proc/self/status') as f:
    peak = int(re.search(r'VmHWM:\\s+(\\d+) kB', f.read())[1]) * 1024
print('MAXRSS', peak, 'EXIT', code, file=sys.stderr)
"""


def inspect_child(*args: Any) -> tuple[int, str, int]:
    """(exit code, stdout, peak resident bytes) of `img2tfrecord inspect ARGS` in its own process."""
    p = subprocess.run([sys.executable, "-c", CHILD, *map(str, args)], capture_output=True, text=True, timeout=300)
    last = p.stderr.strip().splitlines()[-1].split()
    assert last[0] == "MAXRSS", p.stderr
    return int(last[3]), p.stdout, int(last[1])


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> int:
    """The child's peak on a one-record file: the interpreter, our modules, protobuf, Pillow."""
    path = tmp_path_factory.mktemp("tiny") / "tiny.tfrecord"
    write_frames(path, [example({"image/encoded": ("bytes", [encode(picture(8, 8, (1, 2, 3)), "PNG")])})])
    code, _, peak = inspect_child(path)
    assert code == 0
    return peak


def _wide_records(path: Path, records: int, keys: int, bad_at: int) -> None:
    """Records that each invent `keys` keys nobody else uses, around a tiny PNG; record `bad_at`
    declares a height its PNG does not have (a problem only --verify finds)."""
    png = encode(picture(6, 4, (200, 10, 10)), "PNG")
    with open(path, "wb") as f:
        for r in range(records):
            ex = Example()
            for k in range(keys):
                ex.features.feature[f"junk/{r}/{k:04d}"].int64_list.value.append(k)
            feats = ex.features.feature
            feats["image/encoded"].bytes_list.value.append(png)
            feats["image/format"].bytes_list.value.append(b"PNG")
            feats["image/height"].int64_list.value.append(5 if r == bad_at else 4)
            feats["image/width"].int64_list.value.append(6)
            feats["image/channels"].int64_list.value.append(3)
            feats["image/class/label"].int64_list.value.append(r % 3)
            f.write(frame(ex.SerializeToString()))


def test_many_distinct_keys_are_capped_in_memory_and_in_print(tmp_path: Path, baseline: int) -> None:
    path = tmp_path / "wide.tfrecord"
    records, keys = 300, 1000  # 300,000 distinct keys: ~550 MB and 300,000 report lines before the caps
    _wide_records(path, records, keys, bad_at=250)
    code, out, peak = inspect_child(path)
    assert code == 0, out
    assert len(out.splitlines()) < 120, out[:2000]
    kept = records * MAX_RECORD_KEYS - MAX_FEATURE_KEYS  # each record keeps MAX_RECORD_KEYS of its own keys
    assert f"... and {kept:,} more keys, not described" in out
    assert f"... and {records * (keys - MAX_RECORD_KEYS):,} keys in records holding more than" in out
    assert "image/encoded" in out  # our keys are always described, wherever they sit in a record
    assert peak - baseline < 60 * MB, f"peak grew by {(peak - baseline) / MB:.0f} MiB"
    code, out, peak = inspect_child(path, "--json")
    data = json.loads(out)
    assert len(data["total"]["features"]) <= MAX_FEATURE_KEYS + 9
    assert data["total"]["more_keys"] == kept and not data["total"]["more_keys_capped"]
    assert peak - baseline < 60 * MB
    # the caps leave no record unchecked: --verify still finds the bad height in record 250
    code, data = _json(path, "--verify")
    assert code == 1 and data["total"]["records"] == records
    assert [(p["record"], p["message"][:22]) for p in data["problems"]] == [(250, "stored shape 5x6x3 but")]


def test_a_record_with_more_keys_than_kept_is_counted(tmp_path: Path) -> None:
    path = tmp_path / "one.tfrecord"
    n = MAX_RECORD_KEYS + 500
    _wide_records(path, 1, n, bad_at=-1)
    code, data = _json(path)
    t = data["total"]
    assert code == 0 and t["more_key_entries"] == 500
    assert t["more_keys"] == MAX_RECORD_KEYS - MAX_FEATURE_KEYS
    assert t["features"]["image/height"]["records"] == 1 and t["height"]["min"] == 4
    out = CliRunner().invoke(inspect_command, [str(path)], catch_exceptions=False).stdout
    assert f"... and 500 keys in records holding more than {MAX_RECORD_KEYS}" in out


def _json(*args: Any) -> tuple[int, dict[str, Any]]:
    r = CliRunner().invoke(inspect_command, [*map(str, args), "--json"], catch_exceptions=False)
    return r.exit_code, json.loads(r.stdout)


def test_twenty_million_packed_int64s_cost_their_bytes_not_eight_times_them(tmp_path: Path, baseline: int) -> None:
    n = 20_000_000  # 20 MB on the wire; protobuf's parse made 160 MB of values (464 MB peak)
    lst = b"\x0a" + _varint(n) + b"\x01" * n  # Int64List.value, packed
    feat = b"\x1a" + _varint(len(lst)) + lst  # Feature.int64_list
    key = b"\x0a\x05ticks"
    entry = key + b"\x12" + _varint(len(feat)) + feat
    features = b"\x0a" + _varint(len(entry)) + entry
    data = b"\x0a" + _varint(len(features)) + features
    assert parse_example(data).features["ticks"].count == n
    path = tmp_path / "ticks.tfrecord"
    path.write_bytes(frame(data))
    del data, lst, feat, entry, features
    code, out, peak = inspect_child(path, "--json")
    assert code == 0
    assert json.loads(out)["total"]["features"]["ticks"] == {
        "types": ["int64"],
        "min_values": n,
        "max_values": n,
        "records": 1,
    }
    assert peak - baseline < 50 * MB, f"peak grew by {(peak - baseline) / MB:.0f} MiB for a 20 MB record"


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def test_a_small_gzip_holding_a_huge_record_is_streamed_past(tmp_path: Path, baseline: int) -> None:
    size = 100 * MB  # over the 64 MiB a report reads whole; compresses to ~100 KB
    head = b"\x0a\x04blob"
    # Example{features{feature{"blob": bytes_list{value: <zeros>}}}}, written without holding it
    lst_len = 1 + len(_varint(size)) + size
    feat_len = 1 + len(_varint(lst_len)) + lst_len
    entry_len = len(head) + 1 + len(_varint(feat_len)) + feat_len
    feats_len = 1 + len(_varint(entry_len)) + entry_len
    prefix = (
        b"\x0a"
        + _varint(feats_len)
        + b"\x0a"
        + _varint(entry_len)
        + head
        + b"\x12"
        + _varint(feat_len)
        + b"\x0a"
        + _varint(lst_len)
        + b"\x0a"
        + _varint(size)
    )
    total = len(prefix) + size
    length = struct.pack("<Q", total)
    path = tmp_path / "bomb.gz"
    crc = google_crc32c.value(prefix)
    zeros = bytes(MB)
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(length + struct.pack("<I", mask_crc(google_crc32c.value(length))) + prefix)
        for _ in range(size // MB):
            f.write(zeros)
            crc = google_crc32c.extend(crc, zeros)
        f.write(struct.pack("<I", mask_crc(crc)))
    assert path.stat().st_size < 1 * MB
    code, out, peak = inspect_child(path)
    assert code == 0, out
    assert "1 record over 64.0 MB: CRC checked, content not read (--verify reads it)" in out
    assert peak - baseline < 40 * MB, f"peak grew by {(peak - baseline) / MB:.0f} MiB"
    # --verify reads it (CRC and all): the report counts it as read
    report = inspector.inspect([path], verify=True)
    assert report.ok and report.total.unread == 0 and report.total.features["blob"].max_values == 1


# --------------------------------------------------------------------------- the walker against protobuf


def _protobuf(data: bytes) -> tuple[dict[str, tuple], bool]:
    ex = Example()
    ex.ParseFromString(data)
    out = {}
    for key, feat in ex.features.feature.items():
        kind = feat.WhichOneof("kind")
        values = list(getattr(feat, kind).value) if kind else []
        out[key] = (kind[:-5] if kind else None, len(values), values[0] if values else None)
    return out, ex.HasField("features")


def _walker(data: bytes) -> tuple[dict[str, tuple], bool]:
    w = parse_example(data)
    first = lambda v: bytes(v) if isinstance(v, memoryview) else v  # noqa: E731
    return {k: (f.kind, f.count, first(f.first)) for k, f in w.features.items()}, w.has_features


_values = {
    "bytes": st.lists(st.binary(max_size=6), max_size=3),
    "float": st.lists(st.floats(width=32, allow_nan=False), max_size=3),
    "int64": st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3),
}
_feature = st.sampled_from(["bytes", "float", "int64", None]).flatmap(
    lambda k: st.tuples(st.just(k), _values[k] if k else st.just([]))
)
_examples = st.dictionaries(st.sampled_from(["a", "b", "image/encoded", "ü", ""]), _feature, max_size=4)


def _serialize(features: dict[str, tuple[str | None, list]]) -> bytes:
    ex = Example()
    for key, (kind, values) in features.items():
        f = ex.features.feature[key]
        if kind:
            lst = getattr(f, kind + "_list")
            lst.SetInParent()
            lst.value.extend(values)
    return ex.SerializeToString()


@settings(max_examples=examples(400), deadline=None)
@given(
    parts=st.lists(_examples, min_size=1, max_size=2),  # two serialized messages concatenated merge
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
    cut=st.one_of(st.none(), st.integers(0, 10_000)),
)
def test_walker_agrees_with_protobuf_on_random_and_damaged_examples(
    parts: list[dict[str, Any]], edits: list[tuple[int, int]], cut: int | None
) -> None:
    data = bytearray(b"".join(_serialize(p) for p in parts))
    for at, value in edits:
        if data:
            data[at % len(data)] = value
    if cut is not None and data:
        del data[cut % len(data) :]
    try:
        want: Any = _protobuf(bytes(data))
    except DecodeError:
        want = "error"
    try:
        got: Any = _walker(bytes(data))
    except WireError:
        got = "error"
    if want != "error" and got != "error":
        want, got = (sorted(want[0].items()), want[1]), (sorted(got[0].items()), got[1])
    assert repr(got) == repr(want)  # repr: a NaN float equals itself


def _all_values(data: bytes, cap: int) -> dict[str, list]:
    ex = Example()
    ex.ParseFromString(data)
    out = {}
    for key, feat in ex.features.feature.items():
        kind = feat.WhichOneof("kind")
        out[key] = list(getattr(feat, kind).value)[:cap] if kind else []
    return out


@settings(max_examples=examples(300), deadline=None)
@given(
    parts=st.lists(_examples, min_size=1, max_size=3),
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=2),
    cap=st.integers(0, 4),
)
def test_walker_collects_the_values_protobuf_parses_up_to_its_cap(
    parts: list[dict[str, Any]], edits: list[tuple[int, int]], cap: int
) -> None:
    """`collect`: every value of the keys asked for (a detection record's boxes), the first `cap` of them;
    the other keys keep only their first value."""
    data = bytearray(b"".join(_serialize(p) for p in parts))
    for at, value in edits:
        if data:
            data[at % len(data)] = value
    try:
        want: Any = _all_values(bytes(data), cap)
    except DecodeError:
        want = "error"
    try:
        w = parse_example(bytes(data), collect={"a", "ü"}, cap=cap)
        got: Any = {
            k: [bytes(v) if isinstance(v, memoryview) else v for v in f.values or []] for k, f in w.features.items()
        }
        assert all((f.values is not None) == (k in ("a", "ü")) for k, f in w.features.items())
    except WireError:
        got = "error"
    if want != "error" and got != "error":
        want = sorted((k, v) for k, v in want.items() if k in ("a", "ü"))
        got = sorted((k, v) for k, v in got.items() if k in ("a", "ü"))
    assert repr(got) == repr(want)  # repr: a NaN float equals itself


def test_collected_values_are_capped_on_a_packed_list_of_a_million() -> None:
    ex = Example()
    ex.features.feature["image/object/bbox/xmin"].float_list.value.extend([0.25] * 1_000_000)
    ex.features.feature["image/object/class/label"].int64_list.value.extend(range(1_000_000))
    w = parse_example(ex.SerializeToString(), collect={"image/object/bbox/xmin", "image/object/class/label"})
    xmin, label = w.features["image/object/bbox/xmin"], w.features["image/object/class/label"]
    assert (xmin.count, len(xmin.values or []), label.count, len(label.values or [])) == (10**6, 1000, 10**6, 1000)
    assert label.values == list(range(1000)) and set(xmin.values or []) == {0.25}


def _ld(field: int, payload: bytes) -> bytes:
    """A length-delimited field (its length in one byte: these messages are small)."""
    assert len(payload) < 128
    return bytes([field << 3 | 2, len(payload)]) + payload


@pytest.mark.parametrize(
    "entry_fields",
    [
        [("value", b"")],  # no key: the key ""
        [("value", b""), ("key", b"a")],  # the value before its key
        [("key", b"b"), ("value", b""), ("key", b"a")],  # a second key after the value: the last counts
        [("key", b"a"), ("value", b""), ("key", b"b")],
        [("key", b"a"), ("value", b""), ("value", b"more")],  # a repeated value merges
    ],
)
def test_collected_values_follow_the_entry_key_protobuf_takes_in_any_field_order(entry_fields: list) -> None:
    floats = struct.pack("<3f", 0.5, 1.5, 2.5)
    fields = []
    for what, text in entry_fields:
        if what == "key":
            fields.append(_ld(1, text))
        else:
            extra = struct.pack("<f", 9.0) if text else b""
            fields.append(_ld(2, _ld(2, _ld(1, floats + extra))))
    data = _ld(1, _ld(1, b"".join(fields)))
    want = _all_values(data, 10)
    w = parse_example(data, collect={"a"}, cap=10)
    assert set(w.features) == set(want)
    for key, f in w.features.items():
        assert f.values == (want[key] if key == "a" else None), key


def _walked(data: bytes, collect: frozenset[str], cap: int) -> Any:
    """Everything parse_example says of `data` (its error message included), bytes as bytes."""
    b = lambda v: bytes(v) if isinstance(v, memoryview) else v  # noqa: E731
    try:
        w = parse_example(data, collect=collect, cap=cap)
    except WireError as e:
        return f"error: {e}"
    rows = {
        k: (f.kind, f.count, b(f.first), None if f.values is None else [b(v) for v in f.values])
        for k, f in w.features.items()
    }
    return repr((sorted(rows.items()), w.more_keys, w.has_features))


@settings(max_examples=examples(300), deadline=None)
@given(
    parts=st.lists(_examples, min_size=1, max_size=2),
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=2),
    caps=st.lists(st.integers(0, 4), min_size=2, max_size=3),
)
def test_small_entries_from_the_cache_are_what_a_fresh_walk_gives(
    parts: list[dict[str, Any]], edits: list[tuple[int, int]], caps: list[int]
) -> None:
    """Small map entries are taken from a cache by their bytes (verify's reading thread, issue 41): the
    same record walked again, with other keys collected or another cap, and a damaged one's error
    message, position included, are what a walk without the cache gives."""
    from img2tfrecord.inspection import wire

    data = bytearray(b"".join(_serialize(p) for p in parts))
    for at, value in edits:
        if data:
            data[at % len(data)] = value
    runs = [(frozenset(c), cap) for cap in caps for c in ({"a"}, {"a", "ü"}, set())]
    cached = [_walked(bytes(data), c, cap) for c, cap in runs + runs]  # the second time from the cache
    size, wire._CACHED_ENTRY_BYTES = wire._CACHED_ENTRY_BYTES, -1  # (hypothesis: no monkeypatch fixture)
    try:
        fresh = [_walked(bytes(data), c, cap) for c, cap in runs + runs]
    finally:
        wire._CACHED_ENTRY_BYTES = size
    assert cached == fresh


def test_a_cached_entry_holds_its_own_bytes_not_the_record() -> None:
    """What the cache keeps (a bytes value's memoryview) must not keep a whole record, image and all, alive."""
    ex = Example()
    ex.features.feature["image/format"].bytes_list.value.append(b"JPEG")
    ex.features.feature["image/encoded"].bytes_list.value.append(b"\xff\xd8\xff" + bytes(100_000))
    data = ex.SerializeToString()
    for _ in range(2):
        w = parse_example(data)
        fmt, image = w.features["image/format"].first, w.features["image/encoded"].first
        assert isinstance(fmt, memoryview) and isinstance(image, memoryview)
        assert bytes(fmt) == b"JPEG" and fmt.obj is not data and len(fmt.obj) < 64
        assert image.obj is data  # a large entry is walked in place, never copied
