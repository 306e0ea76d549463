"""Nothing reaches a terminal's stderr that is not ours, even from C libraries, and what they say
about a file goes into its skip reason. Real processes: only a real fd 2 shows C-level writes."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys

import numpy as np
from PIL import Image

from conformance_cases import damaged, upright_rgb
from test_cli_process import NOISE, run

OURS = re.compile(
    r"^(skipped|warning|note): |^Wrote \d+ image|^Inspected|^See it in a browser: img2tfrecord report |^\s*$"
)


def _chatty_tiffs() -> dict[str, bytes]:
    """TIFFs whose decoding makes libtiff print to fd 2 (errors Pillow does not always raise)."""
    rng = np.random.default_rng(0)
    im = Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8))
    out = {}
    for comp in ("tiff_lzw", "tiff_adobe_deflate", "group4"):
        buf = io.BytesIO()
        (im.convert("1") if comp == "group4" else im).save(buf, "TIFF", compression=comp)
        data = bytearray(buf.getvalue())
        for i in range(40, 200):
            data[i] ^= 0x5A
        out[f"bad_{comp}.tif"] = bytes(data)
    return out


def test_c_library_chatter_becomes_skip_reasons_not_terminal_noise(tmp_path):
    src = tmp_path / "in"
    for cls in ("a", "b"):
        (src / cls).mkdir(parents=True)
        for i in range(4):
            Image.fromarray(np.roll(upright_rgb(), i, 1)).save(src / cls / f"ok{i}.png")
            Image.fromarray(np.roll(upright_rgb(), i, 0)).save(src / cls / f"ok{i}.tif", compression="tiff_lzw")
    for name, data in _chatty_tiffs().items():
        (src / "a" / name).write_bytes(data)
    for case in damaged():
        (src / "b" / case.name).write_bytes(case.data)

    out = tmp_path / "out"
    res = run("convert", src, out, "--shards", "2", "--workers", "2")  # the calling process and a worker decode
    assert res.returncode == 0, res.stderr
    strangers = [line for line in res.stderr.splitlines() if not OURS.match(line)]
    assert not strangers, strangers
    assert not any(n in res.stderr for n in NOISE)
    reasons = {s["path"]: s["reason"] for s in json.loads((out / "dataset.json").read_text())["skipped"]}
    assert "Fax4Decode" in reasons["a/bad_group4.tif"]  # Pillow decoded it "fine": libtiff said otherwise
    assert "ZIPDecode" in reasons["a/bad_tiff_adobe_deflate.tif"]
    assert reasons["a/bad_tiff_lzw.tif"].startswith("TIFF (II*): ")
    for case in damaged():
        assert re.search(case.skip, reasons[f"b/{case.name}"]), reasons[f"b/{case.name}"]
    assert len(reasons) == 3 + len(damaged())

    res = run("inspect", out, "--verify")
    assert res.returncode == 0, res.stdout + res.stderr
    assert not [line for line in res.stderr.splitlines() if not OURS.match(line)]


def test_load_keeps_libjpeg_warnings_off_stderr(tmp_path):
    """A dataset written with --no-validate may hold a damaged JPEG: TensorFlow's libjpeg warns on
    fd 2 while load() decodes it. Those lines are not shown."""
    src = tmp_path / "in" / "a"
    src.mkdir(parents=True)
    bad = next(c for c in damaged() if c.name == "jpeg_rst_in_scan.jpg")
    (src / "bad.jpg").write_bytes(bad.data)
    Image.fromarray(upright_rgb()).save(src / "ok.jpg")
    out = tmp_path / "out"
    assert run("convert", tmp_path / "in", out, "--no-validate").returncode == 0
    code = f"import img2tfrecord; print(sum(1 for _ in img2tfrecord.load({str(out)!r})))"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and res.stdout.strip() == "2", res.stderr
    assert "Corrupt JPEG" not in res.stderr and not any(n in res.stderr for n in NOISE), res.stderr
