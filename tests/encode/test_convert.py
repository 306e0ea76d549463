"""`img2tfrecord convert` end to end: real images in, real TFRecords out, read back with TensorFlow."""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import xxhash
from PIL import Image

from helpers import (
    decode,
    make_dataset,
    natural_image,
    pillow_pixels,
    read_records,
    run_without_tensorflow,
    save,
    tree_with_broken,
)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def xxh3(path: Path) -> str:
    return xxhash.xxh3_128_hexdigest(path.read_bytes())


def shard_files(out: Path) -> list[Path]:
    return sorted(p for p in out.iterdir() if "-of-" in p.name and not p.name.endswith(".idx"))


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> tuple[Path, dict[str, list[Path]]]:
    root = tmp_path_factory.mktemp("data")
    files = make_dataset(root, {"cat": 9, "dog": 12, "fox": 6})
    (root / "notes.txt").write_text("not an image")
    (root / "dog" / ".DS_Store").write_bytes(b"\0\0")
    (root / "dog" / "._img_000.jpg").write_bytes(b"\0\x05\x16\x07")
    return root, files


def test_keep_mode_round_trip(cli, tree, tmp_path):
    root, files = tree
    out = tmp_path / "out"
    res = cli("convert", root, out, "--shards", "3")
    assert res.exit_code == 0, res.output
    recs = read_records(out)
    assert len(recs) == 27
    assert (out / "labels.txt").read_text() == "cat\ndog\nfox\n"
    by_name = {r["filename"].decode(): r for r in recs}
    for label, cls in enumerate(["cat", "dog", "fox"]):
        for path in files[cls]:
            r = by_name[f"{cls}/{path.name}"]
            assert r["label"] == label and r["text"] == cls.encode()
            assert r["encoded"] == path.read_bytes()  # keep mode: bytes untouched
            assert r["format"] == (b"PNG" if path.suffix == ".png" else b"JPEG")
            assert (
                decode(r).shape
                == (r["height"], r["width"], r["channels"])
                == (Image.open(path).height, Image.open(path).width, 3)
            )
            assert r["colorspace"] == b"RGB"
    manifest = json.loads((out / "dataset.json").read_text())
    assert manifest["ignored_files"] == 1  # notes.txt; hidden and AppleDouble files are not even counted
    assert manifest["splits"]["train"]["class_counts"] == {"cat": 9, "dog": 12, "fox": 6}
    for sh in manifest["splits"]["train"]["shards"]:
        assert xxh3(out / sh["file"]) == sh["xxh3_128"] and (out / sh["file"]).stat().st_size == sh["bytes"]
    assert not any(p.name.startswith(".") for p in out.iterdir())  # staging folder gone


def test_shards_are_balanced_and_mix_classes(cli, tree, tmp_path):
    root, _ = tree
    out = tmp_path / "out"
    assert cli("convert", root, out, "--shards", "4").exit_code == 0
    recs = read_records(out)
    counts = {}
    for r in recs:
        counts.setdefault(r["shard"], set()).add(r["label"])
    sizes = [sum(r["shard"] == s for r in recs) for s in sorted(counts)]
    assert [p.name for p in shard_files(out)] == [f"train-0000{i}-of-00004" for i in range(4)]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 27
    assert all(len(labels) >= 2 for labels in counts.values())
    # shuffled: not in folder order
    assert [r["label"] for r in recs] != sorted(r["label"] for r in recs)


def test_same_bytes_for_any_worker_count_and_run(cli, tree, tmp_path):
    root, _ = tree
    shas = []
    for i, workers in enumerate(["1", "2", "2"]):
        out = tmp_path / f"out{i}"
        assert (
            cli(
                "convert", root, out, "--shards", "2", "--workers", workers, "--encoding", "jpeg", "--resize", "20"
            ).exit_code
            == 0
        )
        shas.append([sha(p) for p in shard_files(out)] + [sha(out / "dataset.json")])
    assert shas[0] == shas[1] == shas[2]
    out = tmp_path / "seeded"
    assert cli("convert", root, out, "--shards", "2", "--seed", "5").exit_code == 0
    assert [sha(p) for p in shard_files(out)] != shas[0][:2]


def test_hash_split_is_disjoint_and_deterministic(cli, tree, tmp_path):
    root, _ = tree
    out = tmp_path / "out"
    split = ("--split", "train=0.5,validation=0.25,test=0.25", "--split-rule", "hash")
    res = cli("convert", root, out, *split, "--json")
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    manifest = json.loads((out / "dataset.json").read_text())
    names = {
        s: {r["filename"] for r in read_records(out) if r["shard"].startswith(s + "-")} for s in manifest["splits"]
    }
    assert set(names) == {"train", "validation", "test"}
    assert (
        not (names["train"] & names["validation"])
        and not (names["train"] & names["test"])
        and not (names["validation"] & names["test"])
    )
    assert sum(len(v) for v in names.values()) == 27
    # each image's split is its seeded path hash against the cumulative fractions (stable splits)
    bounds = {"train": 0.5, "validation": 0.75, "test": 1.0}
    for s, files in names.items():
        for f in files:
            u = xxhash.xxh3_64_intdigest(f, 0) / 2**64
            assert s == next(k for k, b in bounds.items() if u < b), f
    cc = {s: manifest["splits"][s]["class_counts"] for s in names}
    for s in names:
        assert sum(cc[s].values()) == len(names[s]) == summary["splits"][s]["records"]
    # same seed -> same split
    out2 = tmp_path / "out2"
    cli("convert", root, out2, *split)
    assert (out / "dataset.json").read_text() == (out2 / "dataset.json").read_text()


def test_presplit_folders_share_one_class_list(cli, tmp_path):
    make_dataset(tmp_path / "in" / "train", {"a": 4, "b": 4})
    make_dataset(tmp_path / "in" / "val", {"b": 2, "c": 2}, seed=1)
    out = tmp_path / "out"
    res = cli("convert", tmp_path / "in", out)
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "dataset.json").read_text())
    assert manifest["classes"] == ["a", "b", "c"]
    assert set(manifest["splits"]) == {"train", "validation"}
    recs = read_records(out)
    val = [r for r in recs if r["shard"].startswith("validation")]
    assert sorted((r["text"], r["label"]) for r in val) == [(b"b", 1)] * 2 + [(b"c", 2)] * 2
    assert val[0]["filename"].startswith((b"b/", b"c/"))


def test_labels_file_offset_and_empty_class(cli, tree, tmp_path):
    root, _ = tree
    (tmp_path / "labels.txt").write_text("fox\ncat\nwolf\n")
    out = tmp_path / "out"
    res = cli("convert", root, out, "--labels", tmp_path / "labels.txt", "--label-offset", "1")
    assert res.exit_code == 0
    assert "wolf" in res.stderr and "dog" in res.stderr  # empty class warned, unlisted class warned
    recs = read_records(out)
    assert {(r["text"], r["label"]) for r in recs} == {(b"fox", 1), (b"cat", 2)}
    assert len(recs) == 15
    assert (out / "labels.txt").read_text() == "fox\ncat\nwolf\n"
    assert json.loads((out / "dataset.json").read_text())["label_offset"] == 1


@pytest.mark.parametrize("encoding", ["png", "raw"])
def test_lossless_encodings_keep_pixels(cli, tmp_path, encoding):
    src = {
        "rgb": save(natural_image(33, 21, 1), tmp_path / "in" / "rgb" / "a.jpg", quality=85),
        "gray": save(natural_image(17, 29, 2, "L"), tmp_path / "in" / "gray" / "b.png"),
        "rgba": save(natural_image(20, 20, 3, "RGBA"), tmp_path / "in" / "rgba" / "c.png"),
    }
    out = tmp_path / "out"
    assert cli("convert", tmp_path / "in", out, "--encoding", encoding).exit_code == 0
    recs = {r["text"].decode(): r for r in read_records(out)}
    for cls, path in src.items():
        r = recs[cls]
        assert r["format"] == encoding.upper().encode()
        pixels = decode(r)
        assert pixels.shape == (r["height"], r["width"], r["channels"])
        np.testing.assert_array_equal(pixels, pillow_pixels(path))
    assert recs["gray"]["colorspace"] == b"GRAYSCALE" and recs["rgba"]["colorspace"] == b"RGBA"


def test_jpeg_resize_channels_and_exif_orientation(cli, tmp_path):
    im = natural_image(80, 40, 4)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise on display
    save(im, tmp_path / "in" / "a" / "rotated.jpg", exif=exif.tobytes(), quality=95)
    save(natural_image(50, 100, 5), tmp_path / "in" / "a" / "tall.png")
    out = tmp_path / "out"
    res = cli(
        "convert", tmp_path / "in", out, "--encoding", "jpeg", "--resize", "20", "--channels", "1", "--quality", "90"
    )
    assert res.exit_code == 0, res.output
    recs = {r["filename"]: r for r in read_records(out)}
    rot, tall = recs[b"a/rotated.jpg"], recs[b"a/tall.png"]
    assert (rot["height"], rot["width"], rot["channels"]) == (40, 20, 1)  # rotated: 40x80 -> short side 20
    assert (tall["height"], tall["width"]) == (40, 20)
    assert rot["format"] == b"JPEG" and decode(rot).shape == (40, 20, 1)
    keep = cli("convert", tmp_path / "in", tmp_path / "keep")  # keeps the bytes: the rotation is the reader's job
    assert keep.exit_code == 0 and "1 image carries an EXIF rotation" in keep.output
    kept = {r["filename"]: r for r in read_records(tmp_path / "keep")}[b"a/rotated.jpg"]
    assert (kept["height"], kept["width"]) == (40, 80)  # the stored pixels, as tf.io.decode_jpeg gives them
    assert "EXIF" not in cli("convert", tmp_path / "in", tmp_path / "k2", "--encoding", "jpeg").output
    out2 = tmp_path / "out2"
    assert cli("convert", tmp_path / "in", out2, "--resize", "16x12", "--encoding", "raw").exit_code == 0
    for r in read_records(out2):
        assert (r["height"], r["width"], r["channels"]) == (12, 16, 3) and len(r["encoded"]) == 12 * 16 * 3


def _png_with_size(w: int, h: int) -> bytes:
    """A tiny PNG whose header claims w x h (a decompression bomb's shape)."""
    data = bytearray(Image.new("L", (1, 1)).tobytes())
    raw = bytearray()
    from helpers import png_bytes

    png = bytearray(png_bytes(Image.new("L", (1, 1))))
    ihdr = png.index(b"IHDR")
    png[ihdr + 4 : ihdr + 12] = struct.pack(">II", w, h)
    png[ihdr + 17 : ihdr + 21] = struct.pack(">I", zlib.crc32(bytes(png[ihdr : ihdr + 17])))
    del data, raw
    return bytes(png)


def test_bad_files_are_skipped_with_reasons(cli, tmp_path):
    make_dataset(tmp_path / "in", {"ok": 4})
    bad = tmp_path / "in" / "bad"
    bad.mkdir()
    good = save(natural_image(64, 48, 9), tmp_path / "x.jpg", quality=90).read_bytes()
    (bad / "truncated.jpg").write_bytes(good[: len(good) // 2])
    (bad / "empty.png").write_bytes(b"")
    (bad / "page.jpg").write_text("<html><body>404</body></html>")
    (bad / "bomb.png").write_bytes(_png_with_size(20000, 20000))
    save(natural_image(30, 20, 10), bad / "really_png.jpg", "PNG")  # misnamed but fine: included as PNG
    save(natural_image(30, 20, 11), bad / "really_webp.jpg", "WEBP", lossless=True)  # included, as PNG
    out = tmp_path / "out"
    res = cli("convert", tmp_path / "in", out)
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "dataset.json").read_text())
    reasons = {s["path"]: s["reason"] for s in manifest["skipped"]}
    assert set(reasons) == {"bad/truncated.jpg", "bad/empty.png", "bad/page.jpg", "bad/bomb.png"}
    assert "truncated" in reasons["bad/truncated.jpg"]
    assert "empty" in reasons["bad/empty.png"]
    assert "not an image" in reasons["bad/page.jpg"]
    assert "max-pixels" in reasons["bad/bomb.png"]
    for path in reasons:
        assert path in res.stderr
    recs = read_records(out)
    assert len(recs) == 6
    for name in (b"bad/really_png.jpg", b"bad/really_webp.jpg"):
        misnamed = next(r for r in recs if r["filename"] == name)
        assert misnamed["format"] == b"PNG" and decode(misnamed).shape == (20, 30, 3)
    # --strict: exit 1, nothing published
    out2 = tmp_path / "strict"
    res = cli("convert", tmp_path / "in", out2, "--strict")
    assert res.exit_code == 1 and "--strict" in res.stderr
    assert not out2.exists() or not list(out2.iterdir())


def test_unusual_formats_match_tensorflow_shape(cli, tmp_path):
    d = tmp_path / "in" / "odd"
    base = natural_image(24, 18, 11)
    save(base.convert("CMYK"), d / "cmyk.jpg", quality=95)
    save(base.convert("P", palette=Image.Palette.ADAPTIVE), d / "anim.gif")
    pal = base.convert("P", palette=Image.Palette.ADAPTIVE)
    save(pal, d / "pal_trns.png", transparency=0)
    save(pal, d / "pal.png")
    save(base.convert("LA"), d / "la.png")
    save(base.convert("1"), d / "bits.png")
    save(Image.fromarray(np.arange(24 * 18, dtype=np.uint16).reshape(18, 24) * 100), d / "deep.png")
    save(base, d / "b.bmp")
    save(base, d / "w.webp", lossless=True)
    save(base, d / "t.tiff")
    out = tmp_path / "out"
    res = cli("convert", tmp_path / "in", out)
    assert res.exit_code == 0, res.output
    recs = {r["filename"].decode().split("/")[1]: r for r in read_records(out)}
    assert len(recs) == 10
    for name, r in recs.items():
        assert decode(r).shape == (r["height"], r["width"], r["channels"]), name
    assert recs["cmyk.jpg"]["format"] == b"JPEG" and recs["cmyk.jpg"]["channels"] == 3
    assert recs["anim.gif"]["format"] == b"PNG" and recs["t.tiff"]["format"] == b"PNG"
    assert recs["pal_trns.png"]["channels"] == 4 and recs["pal.png"]["channels"] == 3
    assert recs["la.png"]["colorspace"] == b"GRAYSCALE_ALPHA"
    assert recs["bits.png"]["channels"] == 1 and recs["deep.png"]["channels"] == 1
    assert recs["b.bmp"]["format"] == b"BMP"
    np.testing.assert_array_equal(decode(recs["w.webp"]), pillow_pixels(d / "w.webp"))
    transcoded = json.loads((out / "dataset.json").read_text())["transcoded"]
    assert transcoded == {"CMYK JPEG->JPEG": 1, "GIF->PNG": 1, "TIFF->PNG": 1, "WEBP->PNG": 1}


def test_unicode_names_symlink_loop_and_nested_folders(cli, tmp_path):
    d = tmp_path / "in" / "café ☕"
    save(natural_image(20, 20, 1), d / "nested" / "deeper" / "naïve 猫.png")
    (d / "nested" / "loop").symlink_to(d, target_is_directory=True)
    out = tmp_path / "out"
    res = cli("convert", tmp_path / "in", out)
    assert res.exit_code == 0, res.output
    recs = read_records(out)
    assert len(recs) == 1
    assert recs[0]["filename"].decode() == "café ☕/nested/deeper/naïve 猫.png"
    assert recs[0]["text"].decode() == "café ☕"


def test_index_compression_and_dry_run(cli, tree, tmp_path):
    root, _ = tree
    out = tmp_path / "out"
    assert cli("convert", root, out, "--shards", "2", "--index").exit_code == 0
    for shard in shard_files(out):
        data = shard.read_bytes()
        lines = (out / (shard.name + ".idx")).read_text().splitlines()
        pos = 0
        for line in lines:
            off, size = map(int, line.split())
            assert off == pos and struct.unpack("<Q", data[off : off + 8])[0] == size - 16
            pos += size
        assert pos == len(data)
    gz = tmp_path / "gz"
    assert cli("convert", root, gz, "--compression", "gzip").exit_code == 0
    assert shard_files(gz)[0].read_bytes()[:2] == b"\x1f\x8b"
    assert len(read_records(gz)) == 27
    dry = tmp_path / "dry"
    res = cli("convert", root, dry, "--dry-run", "--split", "train=0.8,validation=0.2")
    assert res.exit_code == 0 and "train" in res.stdout and "validation" in res.stdout  # the plan is the output
    assert not dry.exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["{missing}", "{out}"], "does not exist"),
        (["{empty}", "{out}"], "no class folders"),
        (["{noimg}", "{out}"], "no images found"),
        (["{data}", "{full}"], "--overwrite"),
        (["{data}", "{out}", "--split", "train=0.7,validation=0.2"], "add up to"),
        (["{data}", "{out}", "--shards", "train=0"], "--shards"),
        (["{data}", "{out}", "--shards", "bogus=3"], "bogus"),
        (["{data}", "{out}", "--resize", "12y"], "--resize"),
        (["{data}", "{out}", "--index", "--compression", "gzip"], "--index"),
        (["{data}", "{data}/sub"], "inside input"),
    ],
)
def test_usage_errors_exit_2_with_a_message(cli, tmp_path, args, message):
    make_dataset(tmp_path / "data", {"a": 2})
    (tmp_path / "empty").mkdir()
    (tmp_path / "noimg" / "a").mkdir(parents=True)
    (tmp_path / "noimg" / "a" / "x.txt").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "something").write_text("x")
    paths = {k: tmp_path / k for k in ("missing", "empty", "noimg", "data", "full", "out")}
    res = cli("convert", *[a.format(**paths) for a in args])
    assert res.exit_code == 2, res.output
    assert message in res.stderr and "Traceback" not in res.output
    assert not (tmp_path / "out").exists()


def test_overwrite_replaces_stale_shards(cli, tree, tmp_path):
    root, _ = tree
    out = tmp_path / "out"
    assert cli("convert", root, out, "--shards", "3").exit_code == 0
    (out / "README.keep").write_text("user file")
    assert cli("convert", root, out, "--shards", "2", "--overwrite").exit_code == 0
    assert [p.name for p in shard_files(out)] == ["train-00000-of-00002", "train-00001-of-00002"]
    assert (out / "README.keep").exists() and len(read_records(out)) == 27


def test_library_api_returns_summary(tree, tmp_path):
    import img2tfrecord

    root, _ = tree
    events = []
    summary = img2tfrecord.convert(str(root), str(tmp_path / "o"), shards=2, on_event=lambda k, m: events.append(k))
    assert summary["records"] == 27 and summary["splits"]["train"]["shards"] == 2
    assert summary["ignored_files"] == 1 and summary["skipped"] == [] and summary["skipped_count"] == 0


def test_skipped_images_do_not_unbalance_shards(cli, tmp_path):
    make_dataset(tmp_path / "in", {"a": 10, "b": 10})
    good = (tmp_path / "in" / "a" / "img_001.jpg").read_bytes()
    for i in range(6):  # six truncated files: some shards lose more records than others
        (tmp_path / "in" / "b" / f"broken_{i}.jpg").write_bytes(good[: len(good) // 3])
    out = tmp_path / "out"
    res = cli("convert", tmp_path / "in", out, "--shards", "5", "--index", "--json", "--checksum", "sha256")
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "dataset.json").read_text())
    shards = manifest["splits"]["train"]["shards"]
    sizes = [sh["records"] for sh in shards]
    assert sum(sizes) == 20 and max(sizes) - min(sizes) <= 1 and len(manifest["skipped"]) == 6
    for sh in shards:
        data = (out / sh["file"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == sh["sha256"] and len(data) == sh["bytes"]
        idx = (out / sh["index"]).read_text().splitlines()
        assert len(idx) == sh["records"] and sum(int(line.split()[1]) for line in idx) == len(data)
    assert sorted(r["filename"] for r in read_records(out)) == sorted(
        f"{c}/{p.name}".encode()
        for c in "ab"
        for p in (tmp_path / "in" / c).iterdir()
        if not p.name.startswith("broken")
    )
    assert not list(out.glob("*.rebalanced*"))


def test_duplicates_are_reported_or_dropped(cli, tmp_path):
    files = make_dataset(tmp_path / "in", {"cat": 6, "dog": 6})
    (tmp_path / "in" / "cat" / "copy_of_cat0.png").write_bytes(files["cat"][0].read_bytes())  # same class
    (tmp_path / "in" / "dog" / "really_a_cat.jpg").write_bytes(files["cat"][1].read_bytes())  # conflicting label
    out = tmp_path / "report"
    res = cli("convert", tmp_path / "in", out)
    assert (
        res.exit_code == 0
        and "2 duplicate images in 2 groups" in res.stderr
        and "1 with conflicting labels" in res.stderr
    )
    dup = json.loads((out / "dataset.json").read_text())["duplicates"]
    assert sorted(sorted(g["files"]) for g in dup["groups"]) == [
        ["cat/copy_of_cat0.png", "cat/img_000.png"],
        ["cat/img_001.jpg", "dog/really_a_cat.jpg"],
    ]
    assert [g["conflicting_labels"] for g in sorted(dup["groups"], key=lambda g: g["files"][0])] in (
        [False, True],
        [True, False],
    )
    assert len(read_records(out)) == 14  # report mode writes everything
    out = tmp_path / "drop"
    res = cli("convert", tmp_path / "in", out, "--dedupe", "drop", "--split", "train=0.5,validation=0.5")
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "dataset.json").read_text())
    dropped = manifest["duplicates"]["dropped"]
    assert len(dropped) == 2 and len(read_records(out)) == 12
    kept = {r["filename"].decode() for r in read_records(out)}
    for d in dropped:
        assert d["path"] not in kept and d["duplicate_of"] in kept
    assert manifest["skipped"] == []


def test_duplicate_groups_name_the_right_files_among_skips_and_shards(cli, tmp_path):
    """The report finds paths from the plan, past skipped files, in every shard: the groups are
    exactly the sets of byte-identical readable source files."""
    root = tree_with_broken(tmp_path / "in")  # 3 broken JPEGs in one train shard
    sources = sorted(p for p in root.rglob("*.*") if p.suffix in (".jpg", ".png") and "broken" not in p.name)
    for i, src in enumerate(sources[::5]):  # copies under other names and classes
        (root / ("cat", "dog", "fox")[i % 3] / f"zz_copy_{i}{src.suffix}").write_bytes(src.read_bytes())
    out = tmp_path / "out"
    res = cli("convert", root, out, "--split", "train=0.75,validation=0.25", "--shards", "train=3,validation=1")
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "dataset.json").read_text())
    assert len(manifest["skipped"]) == 3
    by_content: dict[bytes, set[str]] = {}
    skipped = {s["path"] for s in manifest["skipped"]}
    for p in root.rglob("*.*"):
        rel = p.relative_to(root).as_posix()
        if p.suffix in (".jpg", ".png") and rel not in skipped:
            by_content.setdefault(p.read_bytes(), set()).add(rel)
    want = sorted(sorted(g) for g in by_content.values() if len(g) > 1)
    assert sorted(sorted(g["files"]) for g in manifest["duplicates"]["groups"]) == want and len(want) >= 4


def test_default_shard_counts_aim_at_100_to_200_mb():
    from img2tfrecord.conversion.plan.job import auto_shard_counts

    mb = 1024 * 1024
    counts = auto_shard_counts(
        {"train": 450 * mb, "validation": 50 * mb}, {"train": 4500, "validation": 500}, None
    ).counts
    assert counts == {"train": 3, "validation": 1}  # 150 MB and 50 MB shards
    counts = auto_shard_counts(
        {"train": 800 * mb, "validation": 200 * mb}, {"train": 8000, "validation": 2000}, 10
    ).counts
    assert counts == {"train": 8, "validation": 2}  # N in total, in proportion
    counts = auto_shard_counts(
        {"train": 800 * mb, "validation": 200 * mb}, {"train": 8000, "validation": 2000}, {"train": 16}
    ).counts
    assert counts == {"train": 16, "validation": 4}  # unnamed splits: in proportion to the named ones
    cut = auto_shard_counts({"train": 1000}, {"train": 3}, 8)
    counts, warnings = cut.counts, cut.warnings
    assert counts == {"train": 3} and "using 3" in warnings[0]  # never more shards than images


def test_with_index_no_shard_holds_a_single_record():
    """A one-line .idx crashes the `tfrecord` package's reader (its issue #9): at least 2 records per shard."""
    from img2tfrecord.conversion.plan.job import auto_shard_counts, shard_bounds
    from img2tfrecord.errors import wording

    for n in range(2, 40):
        for k in range(1, n + 3):
            counts = auto_shard_counts({"train": n}, {"train": n}, k, min_records=2).counts
            assert min(b - a for a, b in shard_bounds(n, counts["train"])) >= 2, (n, k)
    cut = auto_shard_counts({"train": 1000}, {"train": 5}, 4, min_records=2)
    counts, warnings = cut.counts, cut.warnings
    assert counts == {"train": 2} and "using 2 (with --index" in wording(warnings[0], cli=True)
    assert "using 2 (with index=True" in wording(warnings[0])  # for Python callers
    cut = auto_shard_counts({"train": 10, "validation": 1}, {"train": 10, "validation": 1}, 4, min_records=2)
    counts, warnings = cut.counts, cut.warnings
    assert counts["validation"] == 1 and any(w.startswith("validation: one record in all") for w in warnings)


def test_skips_that_would_leave_one_record_shards_make_fewer_shards(cli, tmp_path):
    """6 images + 2 broken in 4 indexed shards: 6 records in 4 shards would hold one or two; 3 shards of 2."""
    make_dataset(tmp_path / "in", {"a": 3, "b": 3})
    good = (tmp_path / "in" / "a" / "img_001.jpg").read_bytes()
    for i in range(2):
        (tmp_path / "in" / "b" / f"broken_{i}.jpg").write_bytes(good[: len(good) // 3])
    out = tmp_path / "out"
    res = cli("convert", tmp_path / "in", out, "--shards", "4", "--index")
    assert res.exit_code == 0, res.output
    assert "train: 3 shards instead of 4" in res.stderr
    shards = json.loads((out / "dataset.json").read_text())["splits"]["train"]["shards"]
    assert [(sh["file"], sh["records"]) for sh in shards] == [(f"train-0000{i}-of-00003", 2) for i in range(3)]
    assert sorted(p.name for p in shard_files(out)) == [sh["file"] for sh in shards]  # the -of-00004 names are gone
    names = run_without_tensorflow(
        "import json, sys\nfrom tfrecord.reader import tfrecord_loader\n"
        "print(json.dumps([bytes(ex['image/filename']).decode() for i in range(1, len(sys.argv), 2)"
        " for ex in tfrecord_loader(sys.argv[i], sys.argv[i + 1], ['image/filename'])]))",
        *[str(out / sh[k]) for sh in shards for k in ("file", "index")],
    )  # each one-line index would crash it: IndexError: too many indices for array
    assert sorted(names) == sorted(f"{c}/img_00{i}.{'png' if i == 0 else 'jpg'}" for c in "ab" for i in range(3))
    assert cli("inspect", out, "--verify").exit_code == 0


def test_empty_class_folder_keeps_its_label(cli, tmp_path):
    make_dataset(tmp_path / "in", {"a": 2, "c": 2})
    (tmp_path / "in" / "b").mkdir()
    res = cli("convert", tmp_path / "in", tmp_path / "out")
    assert res.exit_code == 0 and "class 'b' has no images" in res.stderr
    assert {(r["text"], r["label"]) for r in read_records(tmp_path / "out")} == {(b"a", 0), (b"c", 2)}


def test_dedupe_off_reports_nothing(cli, tmp_path):
    files = make_dataset(tmp_path / "in", {"a": 2})
    (tmp_path / "in" / "a" / "copy.png").write_bytes(files["a"][0].read_bytes())
    res = cli("convert", tmp_path / "in", tmp_path / "out", "--dedupe", "off")
    assert res.exit_code == 0 and "duplicate" not in res.stderr
    assert json.loads((tmp_path / "out" / "dataset.json").read_text())["duplicates"] == {"mode": "off"}


def test_progress_bar_only_on_a_terminal(cli, tree, tmp_path, monkeypatch):
    import img2tfrecord.cli.convert as cc

    root, _ = tree
    res = cli("convert", root, tmp_path / "plain")
    assert "img/s" not in res.stderr  # not a terminal: no bar, just the summary
    monkeypatch.setattr(cc, "_stderr_is_terminal", lambda: True)
    res = cli("convert", root, tmp_path / "tty")
    bar = [part for part in res.stderr.replace("\r", "\n").splitlines() if "27/27" in part]
    assert res.exit_code == 0 and bar and "img/s" in bar[-1] and "B/s read" in bar[-1]  # in the unit size_text picks
    res = cli("convert", root, tmp_path / "quiet", "--quiet")
    assert res.stderr == ""


def test_shard_checksums_are_recorded_and_verified(cli, tmp_path):
    """xxh3_128 by default, sha256 or none on request; inspect --verify recomputes what was recorded."""
    make_dataset(tmp_path / "in", {"a": 3, "b": 3})
    for algorithm in ("xxh3_128", "sha256", "none"):
        out = tmp_path / algorithm
        assert cli("convert", tmp_path / "in", out, "--checksum", algorithm).exit_code == 0
        shard = json.loads((out / "dataset.json").read_text())["splits"]["train"]["shards"][0]
        digest = {"xxh3_128": xxh3, "sha256": sha}.get(algorithm)
        assert set(shard) - {"file", "records", "bytes", "version"} == ({algorithm} if digest else set())
        if digest:
            assert shard[algorithm] == digest(out / shard["file"])
        assert cli("inspect", out, "--verify").exit_code == 0
    manifest = json.loads((tmp_path / "xxh3_128" / "dataset.json").read_text())
    manifest["splits"]["train"]["shards"][0]["xxh3_128"] = "0" * 32  # a shard swapped for another one
    (tmp_path / "xxh3_128" / "dataset.json").write_text(json.dumps(manifest))
    res = cli("inspect", tmp_path / "xxh3_128", "--verify")
    assert res.exit_code == 1 and "xxh3_128" in res.output and "differs from dataset.json" in res.output
    assert cli("convert", tmp_path / "in", tmp_path / "bad", "--checksum", "md5").exit_code == 2


def test_worker_processes_write_exactly_what_one_process_writes(cli, tmp_path):
    """Workers each write whole shards: bad files, dropped duplicates, re-cut shards and indexes
    come out byte-identical to a one-process run, and workers' skip messages reach the user."""
    make_dataset(tmp_path / "in", {"a": 14, "b": 11})
    good = (tmp_path / "in" / "a" / "img_001.jpg").read_bytes()
    (tmp_path / "in" / "b" / "cut.jpg").write_bytes(good[: len(good) // 2])
    (tmp_path / "in" / "b" / "copy.jpg").write_bytes(good)  # a duplicate with a conflicting label
    (tmp_path / "in" / "b" / "page.jpg").write_text("<html>404</html>")
    runs = {}
    for workers in ("1", "2"):
        out = tmp_path / f"w{workers}"
        res = cli(
            "convert",
            tmp_path / "in",
            out,
            "--shards",
            "4",
            "--index",
            "--dedupe",
            "drop",
            "--workers",
            workers,
            "--json",
        )
        assert res.exit_code == 0, res.output
        assert json.loads(res.stdout)["workers"] == int(workers)
        assert "b/cut.jpg" in res.stderr and "b/page.jpg" in res.stderr  # reported as they happen
        runs[workers] = {p.name: p.read_bytes() for p in sorted(out.iterdir())}
    assert runs["1"] == runs["2"]
    manifest = json.loads(runs["2"]["dataset.json"])
    assert [d["path"] for d in manifest["duplicates"]["dropped"]] in (["b/copy.jpg"], ["a/img_001.jpg"])
    counts = [s["records"] for s in manifest["splits"]["train"]["shards"]]
    assert sum(counts) == 25 and max(counts) - min(counts) <= 1  # 28 files - 2 unusable - 1 duplicate
    assert cli("inspect", tmp_path / "w2", "--verify").exit_code == 0
    # --strict stops the workers: exit 1 and nothing published
    res = cli("convert", tmp_path / "in", tmp_path / "strict", "--shards", "4", "--workers", "2", "--strict")
    assert res.exit_code == 1 and "--strict" in res.stderr
    assert not (tmp_path / "strict").exists() or not list((tmp_path / "strict").iterdir())


def test_small_jobs_use_one_process_by_default(cli, tmp_path):
    """A worker costs a TensorFlow import (~2 s): 30 images are faster in one process."""
    make_dataset(tmp_path / "in", {"a": 15, "b": 15})
    res = cli("convert", tmp_path / "in", tmp_path / "out", "--shards", "3", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["workers"] == 1
