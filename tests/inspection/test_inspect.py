"""`img2tfrecord inspect`: report, --json, --verify, --extract, --contact-sheet, foreign and damaged files."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tracemalloc
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image, ImageOps

from helpers import examples
from img2tfrecord.cli.inspect import inspect_command
from img2tfrecord.format.framing import TFRecordFile, masked_crc
from img2tfrecord.format.schema import FEATURE_TYPES
from img2tfrecord.inspection import scan as inspector
from img2tfrecord.inspection.sheet import GAP, THUMB, contact_sheet_size
from img2tfrecord.tf_import import tensorflow
from inspect_helpers import (
    CLASS_COLORS,
    encode,
    example,
    frame,
    make_items,
    picture,
    pixels,
    record_offsets,
    write_dataset,
    write_frames,
)

CLASSES = ["cat", "dog", "fox", "owl"]  # owl has no images: an empty class keeps its label


def run(*args: Any) -> Any:
    """The inspect command in-process; a leaked exception fails the test with its traceback."""
    return CliRunner().invoke(inspect_command, [str(a) for a in args], catch_exceptions=False)


def run_json(*args: Any) -> tuple[int, dict[str, Any]]:
    r = run(*args, "--json")
    return r.exit_code, json.loads(r.stdout)


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """Our layout: train in 2 shards, validation in 1, DALI indexes, every format and channel count."""
    out = tmp_path_factory.mktemp("ours") / "out"
    train = make_items(CLASSES, {"cat": 5, "dog": 4, "fox": 3}, split="train")
    val = make_items(CLASSES, {"cat": 1, "dog": 1, "fox": 1}, split="validation", seed=3)
    manifest = write_dataset(out, train + val, CLASSES, {"train": 2, "validation": 1}, index=True)
    shard_items = {
        "train-00000-of-00002": train[:6],
        "train-00001-of-00002": train[6:],
        "validation-00000-of-00001": val,
    }
    return SimpleNamespace(out=out, items=train + val, manifest=manifest, shard_items=shard_items)


def copy_of(ours: SimpleNamespace, tmp_path: Path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(ours.out, dst)
    return dst


# --------------------------------------------------------------------------- the report


def test_default_report_shows_files_schema_labels_sizes_and_first_records(ours: SimpleNamespace) -> None:
    r = run(ours.out)
    assert r.exit_code == 0, r.output
    out = r.stdout
    for name, items in ours.shard_items.items():
        assert re.search(rf"{name}\s+{len(items)} records", out)
    assert f"total: {len(ours.items)} records" in out
    for key, kind in FEATURE_TYPES.items():
        assert re.search(rf"{re.escape(key)}\s+{kind}\s+1\b", out)
    counts = Counter(it.cls for it in ours.items)
    for label, cls in enumerate(CLASSES[:3]):
        assert re.search(rf"\n\s+{label}\s+{cls}\s+\u2588+\s+{counts[cls]}\n", out), out
    hs = sorted(it.h for it in ours.items)
    assert f"height:   min {hs[0]}, median {hs[(len(hs) - 1) // 2]}, max {hs[-1]}" in out
    assert f"first 5 records of {ours.out / 'train-00000-of-00002'}:" in out
    for it in ours.shard_items["train-00000-of-00002"][:5]:
        assert re.search(
            rf"{re.escape(it.filename)}\s+{it.label}\s+{it.cls}\s+{it.h}x{it.w}x{it.channels}\s+{it.fmt}\s+{len(it.encoded):,}",
            out,
        )
    per_file = run(ours.out, "--per-file").stdout
    for name, items in ours.shard_items.items():
        assert f"\n{ours.out / name}: {len(items)} records, " in per_file


def test_json_is_the_truth(ours: SimpleNamespace) -> None:
    code, data = run_json(ours.out, "-n", "3")
    assert code == 0
    assert set(data) == {
        "format_version",
        "paths",
        "verified",
        "ok",
        "exit_code",  # --json's answer on every exit: ok and exit_code first
        "files",
        "total",
        "problems",
        "problems_omitted",
        "extracted",
        "contact_sheet",
        "lineage",
    }
    assert data["ok"] is True and data["problems"] == [] and data["verified"] is False
    assert [Path(f["path"]).name for f in data["files"]] == list(ours.shard_items)
    for f, (name, items) in zip(data["files"], ours.shard_items.items()):
        assert f["records"] == f["examples"] == len(items)
        assert f["bytes"] == (ours.out / name).stat().st_size
        assert f["compression"] == "none" and f["split"] == name.split("-")[0] and f["exists"] is True
        assert f["first_records"] == [
            {
                "index": i,
                "offset": off,
                "filename": it.filename,
                "label": it.label,
                "text": it.cls,
                "height": it.h,
                "width": it.w,
                "channels": it.channels,
                "format": it.fmt,
                "encoded_bytes": len(it.encoded),
            }
            for i, (it, off) in enumerate(zip(items[:3], record_offsets(ours.out / name)))
        ]
    t = data["total"]
    n = len(ours.items)
    assert t["files"] == 3 and t["records"] == n and t["non_examples"] == 0 and t["compression"] == "none"
    assert t["bytes"] == sum((ours.out / name).stat().st_size for name in ours.shard_items)
    assert t["features"] == {
        k: {"types": [kind], "min_values": 1, "max_values": 1, "records": n}
        for k, kind in sorted(FEATURE_TYPES.items())
    }
    counts = Counter(it.cls for it in ours.items)
    assert t["labels"] == [{"label": i, "name": c, "count": counts[c]} for i, c in enumerate(CLASSES) if counts[c]]
    assert t["formats"] == dict(Counter(it.fmt for it in ours.items))
    assert t["channels"] == {str(c): k for c, k in sorted(Counter(it.channels for it in ours.items).items())}
    for dim in ("height", "width"):
        vals = sorted(getattr(it, dim[0]) for it in ours.items)
        assert t[dim] == {"min": vals[0], "median": vals[(len(vals) - 1) // 2], "max": vals[-1]}
    assert [r["filename"] for r in t["first_records"]] == [
        it.filename for it in ours.shard_items["train-00000-of-00002"][:3]
    ]
    assert data["extracted"] is None and data["contact_sheet"] is None


def test_paths_prefix_glob_split_and_usage_errors(ours: SimpleNamespace) -> None:
    code, data = run_json(ours.out / "train-00001")
    assert code == 0
    assert [Path(f["path"]).name for f in data["files"]] == ["train-00001-of-00002"]
    assert {x["name"] for x in data["total"]["labels"]} <= set(CLASSES)  # names from the directory's dataset.json
    # the .idx beside the shard is never a candidate, so this prefix is unique
    assert [Path(f["path"]).name for f in run_json(ours.out / "valid")[1]["files"]] == ["validation-00000-of-00001"]
    assert len(run_json(ours.out / "train-*")[1]["files"]) == 2
    assert len(run_json(ours.out, "--split", "validation")[1]["files"]) == 1
    assert len(run_json(ours.out / "dataset.json")[1]["files"]) == 3

    r = run(ours.out / "train-0000")
    assert r.exit_code == 2 and r.stdout == ""
    assert "ambiguous" in r.stderr and "train-00000-of-00002" in r.stderr and "train-00001-of-00002" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = run(ours.out / "test-0")
    assert r.exit_code == 2 and "no such file" in r.stderr and "validation-00000-of-00001" in r.stderr
    r = run(ours.out / "nothing-*")
    assert r.exit_code == 2 and "matches no shard" in r.stderr
    r = run(ours.out, "--split", "test")
    assert r.exit_code == 2 and "train, validation" in r.stderr
    r = run(ours.out, "--all")
    assert r.exit_code == 2 and "--extract" in r.stderr
    assert "Traceback" not in r.output


# --------------------------------------------------------------------------- foreign files


def test_foreign_examples_unknown_missing_and_float_keys(tmp_path: Path) -> None:
    png = encode(picture(30, 20, (0, 0, 255)), "PNG")
    jpeg = encode(picture(16, 12, (255, 0, 0)), "JPEG")
    recs = [
        # Inception-style: our keys plus boxes and a synset
        example(
            {
                "image/encoded": ("bytes", [jpeg]),
                "image/format": ("bytes", [b"JPEG"]),
                "image/height": ("int64", [12]),
                "image/width": ("int64", [16]),
                "image/channels": ("int64", [3]),
                "image/class/label": ("int64", [7]),
                "image/class/text": ("bytes", [b"tench"]),
                "image/class/synset": ("bytes", [b"n01440764"]),
                "image/object/bbox/xmin": ("float", [0.1, 0.5]),
                "image/filename": ("bytes", [b"n01440764_1.JPEG"]),
            }
        ),
        # the same without filename/text and with no boxes
        example(
            {
                "image/encoded": ("bytes", [jpeg]),
                "image/format": ("bytes", [b"JPEG"]),
                "image/height": ("int64", [12]),
                "image/width": ("int64", [16]),
                "image/channels": ("int64", [3]),
                "image/class/label": ("int64", [7]),
                "image/object/bbox/xmin": ("float", []),
            }
        ),
        # TFDS-style: just "image" and "label"; size comes from the PNG header
        example({"image": ("bytes", [png]), "label": ("int64", [2]), "score": ("float", [0.25])}),
    ]
    path = tmp_path / "foreign.tfrecord"
    offsets = write_frames(path, recs)
    code, data = run_json(path, "--verify")
    assert code == 0, data["problems"]
    t = data["total"]
    assert t["records"] == t["examples"] == 3
    f = t["features"]
    assert f["image/object/bbox/xmin"] == {"types": ["float"], "min_values": 0, "max_values": 2, "records": 2}
    assert f["image/class/synset"]["records"] == 1 and f["image/filename"]["records"] == 1
    assert f["score"]["types"] == ["float"] and f["image"]["types"] == ["bytes"] and f["label"]["types"] == ["int64"]
    assert t["labels"] == [{"label": 2, "name": None, "count": 1}, {"label": 7, "name": "tench", "count": 2}]
    assert t["formats"] == {"JPEG": 2, "PNG": 1}
    assert t["first_records"][2] == {
        "index": 2,
        "offset": offsets[2],
        "filename": None,
        "label": 2,
        "text": None,
        "height": 20,
        "width": 30,
        "channels": 3,
        "format": "PNG",
        "encoded_bytes": len(png),
        "file": str(path),
    }
    r = run(path)
    assert r.exit_code == 0
    assert re.search(r"image/object/bbox/xmin\s+float\s+0\.\.2\s+in 2 of 3 records", r.stdout)


def test_verify_leaves_payloads_that_are_not_images_alone(tmp_path: Path) -> None:
    path = tmp_path / "tensors.tfrecord"  # the tutorial pattern: tf.io.serialize_tensor bytes under image_raw
    write_frames(
        path, [example({"image_raw": ("bytes", [bytes(range(48))]), "label": ("int64", [i])}) for i in range(2)]
    )
    code, data = run_json(path, "--verify")
    assert code == 0 and data["total"]["formats"] == {"unknown": 2}
    assert [x["label"] for x in data["total"]["labels"]] == [0, 1]


def test_records_that_are_not_examples(tmp_path: Path) -> None:
    path = tmp_path / "strings.tfrecord"
    write_frames(path, [f"not an example {i}".encode() for i in range(3)])
    code, data = run_json(path)
    assert code == 1 and not data["ok"]
    assert data["total"]["records"] == 3 and data["total"]["non_examples"] == 3
    [p] = data["problems"]
    assert p["record"] == 0 and p["offset"] == 0 and "3 of 3 records are not tf.train.Example" in p["message"]


@pytest.mark.parametrize(
    ("content", "what"),
    [
        (encode(picture(8, 8, (1, 2, 3)), "JPEG"), "JPEG image"),
        (b"hello world, I am text\n" * 4, "text"),
        (b"\x00" * 5, "shorter than one record header"),
    ],
)
def test_a_file_that_is_not_tfrecord(tmp_path: Path, content: bytes, what: str) -> None:
    path = tmp_path / "photo.jpg"
    path.write_bytes(content)
    r = run(path)
    assert r.exit_code == 1
    assert "not a TFRecord file" in r.stdout and what in r.stdout
    assert "Traceback" not in r.output


def test_empty_file_is_an_empty_tfrecord(tmp_path: Path) -> None:
    (tmp_path / "empty").write_bytes(b"")
    code, data = run_json(tmp_path / "empty")
    assert code == 0 and data["total"]["records"] == 0


# --------------------------------------------------------------------------- damage


def _flip(path: Path, pos: int) -> None:
    data = bytearray(path.read_bytes())
    data[pos] ^= 0x40
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["truncated", "data byte", "length crc", "length byte", "huge length"])
def test_damaged_shard_names_record_and_offset(ours: SimpleNamespace, tmp_path: Path, damage: str) -> None:
    path = tmp_path / "train-00000-of-00002"
    shutil.copy(ours.out / path.name, path)
    offs = record_offsets(path)
    n = len(offs)
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[: offs[3] + 20])
        want = (3, offs[3], "truncated record", 3)
    elif damage == "data byte":
        _flip(path, offs[2] + 12 + 30)
        want = (2, offs[2], "data CRC mismatch", n)  # framing intact: the later records are still read
    elif damage == "length crc":
        _flip(path, offs[1] + 9)
        want = (1, offs[1], "corrupt record header", 1)
    elif damage == "length byte":
        _flip(path, offs[4] + 1)
        want = (4, offs[4], "corrupt record header", 4)
    else:  # a length that passes its CRC but claims 2**60 bytes: checked, never allocated
        data = bytearray(path.read_bytes())
        length = struct.pack("<Q", 1 << 60)
        data[offs[4] : offs[4] + 12] = length + struct.pack("<I", masked_crc(length))
        path.write_bytes(bytes(data))
        want = (4, offs[4], "claims 1,152,921,504,606,846,976 data bytes", 4)
    for extra in ([], ["--verify"]):
        code, data = run_json(path, *extra)
        assert code == 1
        assert data["total"]["records"] == want[3]
        assert [(p["record"], p["offset"]) for p in data["problems"]] == [want[:2]]
        assert want[2] in data["problems"][0]["message"]
    r = run(path)
    assert f"{path}: record {want[0]} at byte {want[1]:,}: " in r.stdout


def test_gzip_zlib_and_damaged_gzip(tmp_path: Path) -> None:
    tf = tensorflow()
    items = make_items(CLASSES, {"cat": 2, "dog": 2})
    out = tmp_path / "gz"
    write_dataset(out, items, CLASSES, {"train": 1}, compression="gzip")
    code, data = run_json(out, "--verify")
    assert code == 0, data["problems"]
    assert data["total"]["compression"] == "gzip" and data["total"]["records"] == 4

    z = tmp_path / "foreign.zlib"
    with tf.io.TFRecordWriter(str(z), tf.io.TFRecordOptions(compression_type="ZLIB")) as w:
        for it in items:
            w.write(it.serialize())
    code, data = run_json(z)
    assert code == 0 and data["total"]["compression"] == "zlib" and data["total"]["records"] == 4
    zcut = tmp_path / "cut.zlib"
    zcut.write_bytes(z.read_bytes()[:-20])
    code, data = run_json(zcut)
    assert code == 1 and "zlib stream is damaged: it ends early" in data["problems"][0]["message"]

    shard = out / "train-00000-of-00001"
    cut = tmp_path / "cut.gz"
    cut.write_bytes(shard.read_bytes()[: shard.stat().st_size * 2 // 3])
    code, data = run_json(cut)
    assert code == 1 and "gzip stream is damaged" in data["problems"][0]["message"]
    assert data["total"]["records"] < 4
    assert re.search(rf"{cut}: record \d+ at byte [\d,]+ \(decompressed\): gzip stream is damaged", run(cut).stdout)

    plain = tmp_path / "plain"
    plain.write_bytes(gzip.decompress(shard.read_bytes()))
    assert run_json(plain)[1]["total"]["compression"] == "none"


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payloads=st.lists(st.binary(max_size=300), max_size=6), comp=st.sampled_from(["", "GZIP", "ZLIB"]))
def test_reader_agrees_with_tensorflow(tmp_path: Path, payloads: list[bytes], comp: str) -> None:
    tf = tensorflow()
    path = tmp_path / f"h{comp}.tfrecord"
    with tf.io.TFRecordWriter(str(path), tf.io.TFRecordOptions(compression_type=comp)) as w:
        for p in payloads:
            w.write(p)
    f = TFRecordFile(path)
    assert [r.data for r in f] == payloads
    assert f.compression == ({"": "none"}.get(comp) or comp.lower())


# --------------------------------------------------------------------------- verify


def test_verify_good_dataset(ours: SimpleNamespace) -> None:
    r = run(ours.out, "--verify")
    assert r.exit_code == 0, r.stdout
    assert f"verified 3 files, {len(ours.items):,} records: no problems" in r.stdout


def test_verify_finds_every_kind_of_problem(ours: SimpleNamespace, tmp_path: Path) -> None:
    out = tmp_path / "bad"
    train = make_items(CLASSES, {"cat": 3, "dog": 3, "fox": 2}, split="train")
    val = make_items(CLASSES, {"cat": 1, "dog": 1}, split="validation", seed=5)
    # record-level faults in the validation shard: [wrong height, undecodable JPEG]; in train: short RAW, wrong text
    val[0].h += 1
    jpeg = next(it for it in train if it.fmt == "JPEG")
    jpeg.encoded = jpeg.encoded[:40]
    raw = next(it for it in train if it.fmt == "RAW")
    raw.encoded = raw.encoded[:-3]
    liar = next(it for it in train if it.cls == "dog" and it is not jpeg and it is not raw)
    liar.cls = "fox"  # image/class/text says fox, the label says dog
    write_dataset(out, train + val, CLASSES, {"train": 2, "validation": 1}, index=True)
    # manifest-level faults
    man = json.loads((out / "dataset.json").read_text())
    man["splits"]["train"]["shards"][0]["sha256"] = "0" * 64
    man["splits"]["validation"]["shards"][0]["records"] = 5
    (out / "dataset.json").write_text(json.dumps(man))
    shutil.copy(out / "train-00001-of-00002", out / "train-00002-of-00003")
    idx = out / "train-00001-of-00002.idx"
    idx.write_text("7 7\n" + "".join(idx.read_text().splitlines(keepends=True)[1:]))

    code, data = run_json(out, "--verify")
    assert code == 1
    got = {(Path(p["file"]).name, p["record"], p["offset"], p["message"]) for p in data["problems"]}

    def find(name: str, it: Any, text: str) -> None:
        items = [x for x in train + val if x.split == it.split]
        shard_items = (
            items[: len(items) // 2]
            if name == "train-00000-of-00002"
            else items[len(items) // 2 :]
            if name.startswith("train")
            else items
        )
        i = shard_items.index(it)
        off = record_offsets(out / name)[i]
        assert any(g[:3] == (name, i, off) and text in g[3] for g in got), (name, i, off, text, got)

    def where(it: Any) -> str:
        if it.split == "validation":
            return "validation-00000-of-00001"
        items = [x for x in train if x.split == "train"]
        return "train-00000-of-00002" if items.index(it) < len(items) // 2 else "train-00001-of-00002"

    find(
        where(val[0]),
        val[0],
        f"stored shape {val[0].h}x{val[0].w}x{val[0].channels} but the image decodes to {val[0].h - 1}x",
    )
    find(where(jpeg), jpeg, "image does not decode")
    find(where(raw), raw, f"RAW image holds {len(raw.encoded):,} bytes")
    find(where(liar), liar, "label 1 is 'dog' in dataset.json but image/class/text says 'fox'")
    messages = [g[3] for g in got]
    assert any("sha256" in m and "differs from dataset.json" in m for m in messages)
    assert any(m == "holds 2 records, dataset.json says 5" for m in messages)
    assert ("train-00002-of-00003", None, None, "a shard file that dataset.json does not list") in got
    assert any(
        g[0] == "train-00001-of-00002" and g[1] == 0 and "train-00001-of-00002.idx line 1 says '7 7'" in g[3]
        for g in got
    )
    assert any(m == "split validation: 2 records, but its shards list 5" for m in messages)
    assert any(
        m.startswith("split train: class counts differ from the records: dog: 3 (listed 2), fox: 2 (listed 3)")
        for m in messages
    )
    # the text report lists the same problems with file, record and byte offset
    r = run(out, "--verify")
    assert r.exit_code == 1 and f"problems ({len(data['problems'])}):" in r.stdout
    # and a missing listed shard is reported even without --verify
    (out / "validation-00000-of-00001").unlink()
    code, data = run_json(out)
    assert code == 1 and any(p["message"] == "listed in dataset.json but missing" for p in data["problems"])


def test_verify_report_is_the_same_for_any_number_of_workers(tmp_path: Path) -> None:
    """Images decode in batches on several threads: problems still come in record order, capped
    at the same place, named by shard, record and offset, whatever --workers says."""
    out = tmp_path / "bad"
    items = make_items(CLASSES, {"cat": 80, "dog": 80, "fox": 80}, split="train")
    decodable = [it for it in items if it.fmt != "RAW"]
    for n, it in enumerate(decodable):
        if n % 2 == 0:
            it.encoded = it.encoded[: len(it.encoded) // 2]  # does not decode: its batch is redone image by image
        elif n % 5 == 0:
            it.h += 1  # decodes, to another shape
        elif n % 7 == 0:
            it.fmt = "BMP" if it.fmt != "BMP" else "PNG"  # image/format against the bytes
    write_dataset(out, items, CLASSES, {"train": 2}, index=True)
    reports = {w: run(out, "--verify", "--workers", w) for w in (1, 2, 5)}
    jsons = {w: run(out, "--verify", "--json", "--workers", w) for w in (1, 3)}
    assert reports[1].exit_code == jsons[1].exit_code == 1
    assert reports[1].stdout == reports[2].stdout == reports[5].stdout
    assert jsons[1].stdout == jsons[3].stdout
    data = json.loads(jsons[1].stdout)
    assert data["problems_omitted"] > 0  # a shard with more than 50 problems: the cap cuts at the same record
    for name in {Path(p["file"]).name for p in data["problems"]}:
        mine = [p for p in data["problems"] if Path(p["file"]).name == name]
        assert [p["record"] for p in mine] == sorted(p["record"] for p in mine)
        offsets = record_offsets(out / name)
        assert all(p["offset"] == offsets[p["record"]] for p in mine)
    messages = [p["message"] for p in data["problems"]]
    assert any(m.startswith("image does not decode: ") for m in messages)
    assert any(m.startswith("stored shape ") for m in messages)
    assert any(" but the bytes are " in m for m in messages)
    # the message of an undecodable image is TensorFlow's own for that image alone
    tf = tensorflow()
    bad = next(it for it in decodable if it.fmt == "JPEG" and len(it.encoded) < len(encode(it.image, "JPEG")))
    with pytest.raises(tf.errors.OpError) as e:
        tf.io.decode_image(bad.encoded, channels=0, expand_animations=False)
    from img2tfrecord.format.images import tf_error_message

    assert f"image does not decode: {tf_error_message(e.value)}" in messages


def test_workers_must_be_positive(ours: SimpleNamespace) -> None:
    r = CliRunner().invoke(inspect_command, [str(ours.out), "--verify", "--workers", "0"])
    assert r.exit_code == 2 and "Traceback" not in r.output and "--workers" in r.output
    with pytest.raises(inspector.UsageError):
        inspector.inspect([ours.out], verify=True, workers=0)


def test_exit_code_and_fast_import_in_a_real_process(ours: SimpleNamespace, tmp_path: Path) -> None:
    bad = tmp_path / "train-00000-of-00002"
    bad.write_bytes((ours.out / bad.name).read_bytes()[:-5])
    code = (
        "import sys\n"
        "from img2tfrecord.cli import main\n"
        "try:\n"
        "    main([sys.argv[1]] + sys.argv[2:], prog_name='img2tfrecord')\n"
        "except SystemExit as e:\n"
        "    assert 'tensorflow' not in sys.modules, 'inspect without --verify imported TensorFlow'\n"
        "    raise\n"
    )
    p = subprocess.run([sys.executable, "-c", code, "inspect", str(bad)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1, p.stderr
    assert "truncated record" in p.stdout and "Traceback" not in p.stderr


# --------------------------------------------------------------------------- extract


@pytest.mark.parametrize("encoding", ["keep", "raw"])
def test_extract_round_trip_through_convert(tmp_path: Path, encoding: str) -> None:
    import img2tfrecord
    from img2tfrecord.format.framing import RawRecord, read_records
    from img2tfrecord.inspection.records import parse_record

    src = tmp_path / "src"
    for cls, color in [("cat", CLASS_COLORS["cat"]), ("dog", CLASS_COLORS["dog"])]:
        (src / cls / "sub").mkdir(parents=True)
        picture(24, 18, color).save(src / cls / "a.jpg", quality=90)
        picture(17, 25, color, "RGBA").save(src / cls / "b.png")
        picture(20, 20, color, "L").save(src / cls / "sub" / "c.png")
    (src / "empty").mkdir()
    a, b = tmp_path / "a", tmp_path / "b"
    img2tfrecord.convert(str(src), str(a), encoding=encoding, workers=1)
    r = run(a, "--extract", tmp_path / "x", "--all")
    assert r.exit_code == 0, r.output
    assert f"extracted 6 images to {tmp_path / 'x'}" in r.stdout
    assert (tmp_path / "x" / "empty").is_dir()  # every class folder, so labels come out the same
    img2tfrecord.convert(str(tmp_path / "x"), str(b), encoding=encoding, workers=1)

    def records(d: Path) -> list[tuple]:
        man = json.loads((d / "dataset.json").read_text())
        out = []
        for sh in man["splits"]["train"]["shards"]:
            for i, data in enumerate(read_records(d / sh["file"])):
                info = parse_record(RawRecord(i, 0, data, True))
                name = info.filename if encoding == "keep" else info.filename.removesuffix(".png")
                out.append(
                    (name, info.label, info.text, info.format, info.height, info.width, info.channels, info.image)
                )
        return sorted(out)

    assert (
        json.loads((a / "dataset.json").read_text())["classes"]
        == json.loads((b / "dataset.json").read_text())["classes"]
    )
    assert records(a) == records(b)


def test_extract_first_n_safe_names_and_refuses_nonempty_dir(tmp_path: Path) -> None:
    png = encode(picture(8, 8, (9, 9, 9)), "PNG")
    recs = [
        example(
            {
                "image/encoded": ("bytes", [png]),
                "image/class/label": ("int64", [1]),
                "image/class/text": ("bytes", [b"dog"]),
                "image/filename": ("bytes", [b"../../evil.png"]),
            }
        ),
        example(
            {
                "image/encoded": ("bytes", [png]),
                "image/class/label": ("int64", [1]),
                "image/class/text": ("bytes", [b"dog"]),
                "image/filename": ("bytes", [b"/etc/x.png"]),
            }
        ),
        example(
            {
                "image/encoded": ("bytes", [png]),
                "image/class/label": ("int64", [1]),
                "image/class/text": ("bytes", [b"dog"]),
                "image/filename": ("bytes", [b"dog/x.png"]),
            }
        ),
        example({"image/encoded": ("bytes", [png]), "image/class/label": ("int64", [0])}),
        example(
            {
                "image/encoded": ("bytes", [png]),
                "image/class/label": ("int64", [0]),
                "image/filename": ("bytes", [b"pic.jpg"]),
            }
        ),
    ]
    path = tmp_path / "f.tfrecord"
    write_frames(path, recs)
    x = tmp_path / "x"
    assert run(path, "--extract", x, "--all").exit_code == 0
    files = sorted(p.relative_to(x).as_posix() for p in x.rglob("*") if p.is_file())
    assert files == ["dog/etc/x.png", "dog/evil.png", "dog/x.png", "label_0/pic.jpg.png", "label_0/record-00000003.png"]
    assert not (tmp_path / "evil.png").exists()
    assert all((x / f).read_bytes() == png for f in files)

    r = run(path, "--extract", x)
    assert r.exit_code == 2 and "not an empty directory" in r.stderr
    assert run(path, "--extract", tmp_path / "y", "-n", "2").exit_code == 0
    assert len([p for p in (tmp_path / "y").rglob("*") if p.is_file()]) == 2


# --------------------------------------------------------------------------- contact sheet


def test_contact_sheet_rows_per_class_with_labels_and_orientation(ours: SimpleNamespace, tmp_path: Path) -> None:
    sheet = tmp_path / "sheet.png"
    r = run(ours.out, "--contact-sheet", sheet, "-n", "3")
    assert r.exit_code == 0, r.output
    im = Image.open(sheet)
    assert im.format == "PNG"
    width = json.loads(run(ours.out, "--contact-sheet", sheet, "-n", "3", "--json").stdout)["contact_sheet"][
        "label_width"
    ]
    assert im.size == contact_sheet_size(4, 3, width)  # 4 classes (owl too, empty), 3 per row
    assert f"contact sheet: {sheet} ({im.width}x{im.height}, 4 rows)" in r.stdout
    arr = np.asarray(im.convert("RGB")).astype(int)
    T, G, L = THUMB, GAP, width
    order = [it for items in ours.shard_items.values() for it in items]
    for row, cls in enumerate(CLASSES):
        y0 = G + row * (T + G)
        firsts = [it for it in order if it.cls == cls][:3]
        for col, it in enumerate(firsts):
            tw, th = ImageOps.contain(Image.new("RGB", (it.w, it.h)), (T, T)).size
            x = L + col * (T + G) + (T - tw) // 2
            y = y0 + (T - th) // 2
            dark = arr[y + th // 5, x + tw // 5]
            bright = arr[y + th * 4 // 5, x + tw * 4 // 5]
            assert dark.max() < 60, (cls, col, dark)  # the black quadrant is top-left: not rotated or flipped
            expect = np.asarray(pixels(it.image.convert("RGB"))[it.h - 1, it.w - 1], int) if it.mode != "RGBA" else None
            if expect is not None:
                assert np.abs(bright - expect).max() < 40, (cls, col, bright, expect)
        if not firsts:  # owl: a labelled row with no thumbnails
            assert arr[y0 : y0 + T, L:].min() > 100
        label_area = arr[y0 : y0 + T, G : L - G]
        assert (label_area < 128).any()  # the row's "label  name" text is drawn
    assert run(ours.out, "--contact-sheet", sheet, "-n", "0").exit_code == 2


# --------------------------------------------------------------------------- memory


def test_memory_stays_flat_on_a_large_shard(tmp_path: Path) -> None:
    from img2tfrecord.format.schema import serialize_example

    path = tmp_path / "big.tfrecord"
    h, w, c = 512, 512, 4  # 1 MiB of pixels per record, 48 MiB in all
    with open(path, "wb") as f:
        for i in range(48):
            rec = serialize_example(
                encoded=os.urandom(h * w * c),
                image_format="RAW",
                height=h,
                width=w,
                channels=c,
                label=i % 3,
                text=b"c",
                filename=f"c/{i}.png".encode(),
            )
            f.write(frame(rec))
    tracemalloc.start()
    try:
        report = inspector.inspect([path], verify=True, records=3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.ok and report.total.records == 48
    assert peak < 8 * 2**20, f"peak {peak / 2**20:.1f} MiB while reading a 48 MiB shard"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_verify_shows_a_progress_bar_on_a_terminal(ours: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    monkeypatch.setenv("COLUMNS", "100")
    assert inspector.inspect([ours.out], verify=True, progress=True).ok
    total = sum((ours.out / n).stat().st_size for n in ours.shard_items)
    assert re.search(rf"verify:\s+0%.*/{total / 1000:.1f}k \[", term.getvalue()), (
        term.getvalue()
    )  # sized in on-disk bytes
    quiet = _Terminal()
    monkeypatch.setattr(sys, "stderr", quiet)
    inspector.inspect([ours.out], progress=True)  # no bar without --verify
    assert quiet.getvalue() == ""


def test_a_path_that_exists_but_is_no_file_says_what_it_is(tmp_path: Path) -> None:
    import img2tfrecord
    from img2tfrecord.errors import UsageError

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for path, kind in (("/dev/null", "a character device"), (str(fifo), "a named pipe")):
        r = run(path)
        assert (
            r.exit_code == 2 and r.stderr == f"error: {path}: is {kind}, not a TFRecord file or a dataset directory\n"
        )
        with pytest.raises(UsageError, match=f"is {kind}"):
            img2tfrecord.load(path)
