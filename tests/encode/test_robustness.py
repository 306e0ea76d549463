"""Hostile and unusual inputs, and a hostile environment: each gets a clear reason, nothing is lost."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from helpers import (
    decode,
    make_dataset,
    natural_image,
    pillow_pixels,
    read_records,
    save,
)

ROOT = Path(__file__).resolve().parents[2]


def skipped(out: Path) -> dict[str, str]:
    return {s["path"]: s["reason"] for s in json.loads((out / "dataset.json").read_text())["skipped"]}


def test_multi_frame_files_keep_their_first_frame(cli, tmp_path):
    frames = [natural_image(30, 20, i) for i in range(3)]
    d = tmp_path / "in" / "anim"
    d.mkdir(parents=True)
    frames[0].save(d / "a.gif", save_all=True, append_images=frames[1:], duration=50)
    frames[0].save(d / "b.tiff", save_all=True, append_images=frames[1:])
    frames[0].save(d / "c.webp", save_all=True, append_images=frames[1:], lossless=True)
    out = tmp_path / "out"
    assert cli("convert", tmp_path / "in", out).exit_code == 0
    recs = {r["filename"].decode(): r for r in read_records(out)}
    assert set(recs) == {"anim/a.gif", "anim/b.tiff", "anim/c.webp"}
    for name, r in recs.items():
        assert r["format"] == b"PNG" and decode(r).shape == (20, 30, r["channels"])
        first = Image.open(tmp_path / "in" / name)  # Pillow opens on frame 0
        np.testing.assert_array_equal(
            decode(r)[..., :3],
            pillow_pixels(tmp_path / "in" / name, "RGB") if first.mode == "P" else np.asarray(first.convert("RGB")),
        )


def test_vanished_files(cli, tmp_path):
    make_dataset(tmp_path / "in", {"a": 3})
    (tmp_path / "in" / "a" / "gone.jpg").symlink_to(tmp_path / "nowhere.jpg")
    out = tmp_path / "out"
    assert cli("convert", tmp_path / "in", out).exit_code == 0
    assert "vanished" in skipped(out)["a/gone.jpg"]


def test_names_that_are_not_utf8(cli, tmp_path):
    root = os.fsencode(tmp_path / "in")
    os.makedirs(root + b"/caf\xe9 bar")
    save(natural_image(16, 16, 3), Path(os.fsdecode(root + b"/caf\xe9 bar/x\xff.png")))
    out = tmp_path / "out"
    res = cli("convert", os.fsdecode(root), out)
    assert res.exit_code == 0, res.output
    rec = read_records(out)[0]
    assert rec["text"] == b"caf\\xe9 bar" and rec["filename"] == b"caf\\xe9 bar/x\\xff.png"
    rec["text"].decode("utf-8")  # valid UTF-8
    manifest = json.loads((out / "dataset.json").read_text(encoding="utf-8"))
    assert manifest["classes"] == ["caf\\xe9 bar"]
    assert (out / "labels.txt").read_text(encoding="utf-8") == "caf\\xe9 bar\n"


def test_hundred_thousand_files_in_one_folder(cli, tmp_path):
    d = tmp_path / "in" / "many"
    d.mkdir(parents=True)
    sources = [save(Image.new("L", (2, 2), v), tmp_path / f"tiny{v}.png") for v in range(2)]  # ext4: < 65,000 links
    for i in range(100_000):
        os.link(sources[i % 2], d / f"{i:06d}.png")
    res = cli("convert", tmp_path / "in", tmp_path / "out", "--dry-run", "--json", "--shards", "10")
    assert res.exit_code == 0
    plan = json.loads(res.stdout)
    assert plan["images"] == 100_000 and [s["images"] for s in plan["splits"]["train"]["shards"]] == [10_000] * 10


def test_decompression_bomb_is_refused_before_decoding(cli, tmp_path):
    from test_convert import _png_with_size

    d = tmp_path / "in" / "c"
    d.mkdir(parents=True)
    (d / "bomb.png").write_bytes(_png_with_size(30000, 30000))
    save(natural_image(20, 20, 1), d / "ok.png")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    res = cli("convert", tmp_path / "in", tmp_path / "out", "--workers", "1", "--encoding", "raw")
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert res.exit_code == 0 and "max-pixels" in skipped(tmp_path / "out")["c/bomb.png"]
    assert grown_mb < 500  # decoding it would need 2.7 GB (900 Mpx x 3 bytes)
    # raising the limit lets it through to the decoder, which then reports the lie about its size
    res = cli(
        "convert", tmp_path / "in", tmp_path / "out2", "--workers", "1", "--max-pixels", "1000000000", "--channels", "1"
    )
    assert res.exit_code == 0 and "c/bomb.png" in skipped(tmp_path / "out2")


# Root reads and writes everything: run the tool as root without the capabilities that bypass
# file permissions, so that 0o000 files and read-only folders act as they do for users.
NO_DAC = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_unreadable_files_and_unwritable_output():
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o777)
        base = Path(tmp)
        make_dataset(base / "in", {"a": 3})
        secret = save(natural_image(10, 10, 5), base / "in" / "a" / "secret.png")
        os.chmod(secret, 0o000)
        for p in [base / "in", base / "in" / "a", *(base / "in" / "a").iterdir()]:
            if p != secret:
                os.chmod(p, 0o755 if p.is_dir() else 0o644)
        locked = base / "locked"
        locked.mkdir(mode=0o755)
        os.chmod(locked, 0o555)
        cmd = [*NO_DAC, sys.executable, "-m", "img2tfrecord", "convert", str(base / "in")]
        res = subprocess.run([*cmd, str(locked / "out")], capture_output=True, text=True)
        assert res.returncode == 2 and "cannot create output" in res.stderr and "Traceback" not in res.stderr
        out = base / "out"
        res = subprocess.run([*cmd, str(out), "--workers", "1"], capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        assert "a/secret.png: permission denied" in res.stderr
        assert skipped(out) == {"a/secret.png": "permission denied"}


def _small_fsize() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG, as on a full disk, instead of being killed
    resource.setrlimit(resource.RLIMIT_FSIZE, (60_000, 60_000))


def test_disk_full_fails_cleanly(tmp_path):
    out = tmp_path / "out"
    res = subprocess.run(
        [sys.executable, "-m", "img2tfrecord", "convert", str(ROOT / "sample_data"), str(out), "--shards", "1"],
        capture_output=True,
        text=True,
        preexec_fn=_small_fsize,
    )
    assert res.returncode == 1, res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: writing the dataset in {out} failed") and "needs about" in last
    assert "Traceback" not in res.stderr and not out.exists()


def test_output_inside_or_equal_to_input_is_refused(cli, tmp_path):
    make_dataset(tmp_path / "in", {"a": 1})
    for target in (tmp_path / "in", tmp_path / "in" / "a" / "out"):
        res = cli("convert", tmp_path / "in", target)
        assert res.exit_code == 2 and "inside input" in res.stderr


def test_header_probe_agrees_with_pillow(tmp_path):
    """--no-validate reads JPEG headers itself; on every kind of JPEG it must find what Pillow finds."""
    from img2tfrecord.conversion.encode.example import encode_image, probe_jpeg
    from img2tfrecord.conversion.plan.options import EncodeOptions

    exif = Image.Exif()
    exif[0x0112] = 6
    base = natural_image(61, 47, 3)
    cases = {
        "rgb.jpg": dict(quality=90),
        "gray.jpg": dict(quality=80, mode="L"),
        "progressive.jpg": dict(progressive=True),
        "restart.jpg": dict(restart_marker_blocks=1),
        "exif_rotated.jpg": dict(exif=exif.tobytes()),
        "cmyk.jpg": dict(mode="CMYK"),
        "subsampled.jpg": dict(subsampling=2, quality=60),
        "icc.jpg": dict(icc_profile=b"\0" * 3000),
    }
    for name, kw in cases.items():
        im = base.convert(kw.pop("mode", "RGB"))
        path = tmp_path / name
        im.save(path, "JPEG", **kw)
        fast = encode_image(str(path), EncodeOptions(validate=False))
        full = encode_image(str(path), EncodeOptions(validate=True))
        assert fast == full, name
        assert (probe_jpeg(path.read_bytes()) is None) == (name == "cmyk.jpg"), name  # CMYK is Pillow's to transcode
        assert fast.orientation_ignored == (name == "exif_rotated.jpg")
    # a frame header that claims too many pixels is refused from the header alone, like Pillow's
    with pytest.raises(Exception, match="max-pixels"):
        encode_image(str(tmp_path / "rgb.jpg"), EncodeOptions(validate=False, max_pixels=100))


def test_a_skip_carries_its_reason_apart_from_the_format(tmp_path):
    """An encoder result names why an image was skipped in `reason`; `fmt` is only ever a stored format."""
    from img2tfrecord.conversion.encode.example import Result, encode_task
    from img2tfrecord.conversion.plan.job import Task
    from img2tfrecord.conversion.plan.options import EncodeOptions

    (tmp_path / "notes.jpg").write_text("not an image at all")
    natural_image(8, 6, 3).save(tmp_path / "ok.png")
    task = {"label": 0, "text": "a", "size": 19}
    bad = encode_task(
        Task(path=str(tmp_path / "notes.jpg"), rel="notes.jpg", filename="notes.jpg", **task), EncodeOptions()
    )
    assert (bad.kind, bad.payload, bad.fmt) == ("skip", None, "") and "text" in bad.reason
    ok = encode_task(Task(path=str(tmp_path / "ok.png"), rel="ok.png", filename="ok.png", **task), EncodeOptions())
    assert (ok.kind, ok.fmt, ok.reason, ok.height, ok.width) == ("keep", "PNG", "", 6, 8)
    with pytest.raises(TypeError):
        Result("skip", None, "a reason in the format's place")  # type: ignore[misc]


def test_one_run_at_a_time_per_output(cli, tmp_path):
    """A second run into an output another run is writing is refused before it touches anything."""
    import fcntl

    make_dataset(tmp_path / "in", {"a": 3, "b": 3})
    from img2tfrecord.conversion.write.workspace import workspace

    out = tmp_path / "out"
    ws = workspace(str(out))
    staging = Path(ws.build)
    staging.mkdir(parents=True)
    (staging / "train-00000-of-00002").write_bytes(b"the other run's shard")
    assert ws.lock_path is not None
    with open(ws.lock_path, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a run in progress holds it
        held.write("4242\n")
        held.flush()
        res = cli("convert", tmp_path / "in", out)
        assert res.exit_code == 2 and "another img2tfrecord run (pid 4242) is writing to" in res.stderr
        assert (staging / "train-00000-of-00002").read_bytes() == b"the other run's shard"
    res = cli("convert", tmp_path / "in", out)  # released (the other run ended or died)
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir()) == [
        "dataset.catalog",
        "dataset.json",
        "dataset_info.json",
        "features.json",
        "image.class.label.labels.txt",
        "labels.txt",
        "train-00000-of-00001",
    ]
