"""TensorFlow's record writer loaded alone (tf_import.record_io): TensorFlow's bytes, its errors
as exceptions, all of TensorFlow still importable afterwards, and a conversion that never imports
the rest of TensorFlow. Each case runs in a fresh process: what matters is the order of loading."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from helpers import read_records, tree_with_broken

ENV = os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3"}

LIGHT_THEN_FULL = r"""
import json, os, random, sys
from img2tfrecord import tf_import
out = sys.argv[1]
rio = tf_import.record_io()
result = {"light": tf_import.light()}
rnd = random.Random(7)
records = [b"", b"x"] + [rnd.randbytes(rnd.choice([1, 100, 5000, 70000])) for _ in range(40)]
for comp in ("", "GZIP", "ZLIB"):
    w = rio.RecordWriter(os.path.join(out, "light" + comp).encode(), rio.RecordWriterOptions(comp.encode()))
    for r in records:
        w.write(r)
    w.close()
try:
    rio.RecordWriter(b"/nonexistent-dir/x", rio.RecordWriterOptions(b""))
except tf_import.RecordIOError as e:
    result["light_error"] = str(e)
result["tensorflow_before"] = "tensorflow" in sys.modules
tf = tf_import.tensorflow()
for comp in ("", "GZIP", "ZLIB"):
    with tf.io.TFRecordWriter(os.path.join(out, "full" + comp), tf.io.TFRecordOptions(compression_type=comp)) as w:
        for r in records:
            w.write(r)
    light = list(tf.data.TFRecordDataset(os.path.join(out, "light" + comp), compression_type=comp).as_numpy_iterator())
    result["read_back_" + comp] = light == records
try:
    tf.io.TFRecordWriter("/nonexistent-dir/x")
except tf.errors.NotFoundError as e:
    result["full_error"] = type(e).__mro__[1].__name__
try:
    tf.io.decode_image(b"not an image")
except tf.errors.InvalidArgumentError:
    result["decode_error"] = True
result["pixels"] = int(tf.reduce_sum(tf.io.decode_png(tf.io.encode_png(tf.ones([2, 3, 3], tf.uint8)))).numpy())
print(json.dumps(result))
"""


def test_light_writer_writes_tensorflows_bytes_and_tensorflow_imports_after_it(tmp_path):
    res = subprocess.run(
        [sys.executable, "-c", LIGHT_THEN_FULL, str(tmp_path)], capture_output=True, text=True, env=ENV, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""  # TensorFlow's start-up lines stay off the terminal in both loads
    got = json.loads(res.stdout)
    assert got["light"] and not got["tensorflow_before"]
    assert "No such file or directory" in got["light_error"]
    for comp in ("", "GZIP", "ZLIB"):
        assert (tmp_path / ("light" + comp)).read_bytes() == (tmp_path / ("full" + comp)).read_bytes(), comp
        assert got["read_back_" + comp], comp
    # after the full import, errors raised through the registry are TensorFlow's own classes
    assert got["full_error"] == "NotFoundError" and got["decode_error"] and got["pixels"] == 18


CONVERT = r"""
import sys
if sys.argv[3] == "full":
    import tensorflow  # loaded first: the writer is then TensorFlow's own module
from img2tfrecord.cli import main
try:
    main(["convert", sys.argv[1], sys.argv[2], "--quiet", *sys.argv[4:]])
except SystemExit as e:
    assert not e.code, e.code
print("tensorflow" in sys.modules)
"""


def test_conversion_never_imports_tensorflow_and_makes_the_same_bytes(tmp_path):
    """Three broken files land in one shard, so every variant re-cuts its split (compressed
    shards through the record iterator alone)."""
    tree_with_broken(tmp_path / "in")
    outputs = {}
    for mode in ("light", "full"):
        for extra in ([], ["--compression", "gzip"], ["--index", "--encoding", "png"]):
            out = tmp_path / f"{mode}{len(extra)}"
            workers = "1" if mode == "full" else "2"  # full: every shard by TensorFlow's own writer class
            args = [str(tmp_path / "in"), str(out), mode, "--split", "train=0.75,validation=0.25"]
            args += ["--shards", "train=3,validation=1", "--workers", workers, *extra]
            res = subprocess.run(
                [sys.executable, "-c", CONVERT, *args], capture_output=True, text=True, env=ENV, timeout=180
            )
            assert res.returncode == 0, res.stderr
            assert res.stdout.strip() == ("True" if mode == "full" else "False")
            outputs[mode, len(extra)] = {p.name: p.read_bytes() for p in sorted(out.iterdir()) if "-of-" in p.name}
    for n in (0, 2, 3):
        assert outputs["light", n] == outputs["full", n]
        assert len(outputs["light", n]) == (8 if n == 3 else 4)  # with --index, the .idx files too
    for n in (0, 2):
        manifest = json.loads((tmp_path / f"light{n}" / "dataset.json").read_text())
        counts = [sh["records"] for sh in manifest["splits"]["train"]["shards"]]
        assert max(counts) - min(counts) <= 1 and len(manifest["skipped"]) == 3  # re-cut after the skips
        assert len(read_records(tmp_path / f"light{n}")) == 24
