"""Issue 15, the contract end to end: convert's output passes its own verify, no hangs, every
error one clean line, messages that say what happened. Real images (Pillow), the real CLI."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from helpers import build_dir, journal_file, make_dataset, natural_image, read_records, save


def verify(cli, out: Path) -> None:
    res = cli("inspect", out, "--verify")
    assert res.exit_code == 0, res.output
    assert "no problems" in res.stdout


# ---- 1. one definition of image/filename, for convert and inspect --verify ----


def test_odd_file_names_pass_their_own_verify(cli, tmp_path):
    src = tmp_path / "in"
    save(natural_image(20, 16, 1), src / "k" / "we\\ird.jpg")
    save(natural_image(20, 16, 2), src / "k" / "plain.png")
    bad = os.path.join(os.fsencode(src / "k"), b"caf\xe9.jpg")  # Latin-1 bytes: not UTF-8
    with open(bad, "wb") as f:
        f.write((src / "k" / "we\\ird.jpg").read_bytes())
    out = tmp_path / "out"
    res = cli("convert", src, out)
    assert res.exit_code == 0, res.output
    assert "1 name is not valid UTF-8 (e.g. 'k/caf\\xe9.jpg')" in res.stderr
    assert sorted(r["filename"].decode() for r in read_records(out)) == [
        "k/caf\\xe9.jpg",
        "k/plain.png",
        "k/we\\ird.jpg",
    ]
    verify(cli, out)


def test_file_list_rows_outside_input_pass_verify(cli, tmp_path):
    src, elsewhere = tmp_path / "in", tmp_path / "elsewhere"
    save(natural_image(20, 16, 1), src / "cat" / "a.jpg")
    save(natural_image(20, 16, 2), elsewhere / "b.png")
    save(natural_image(20, 16, 3), elsewhere / "c.jpg")
    listing = tmp_path / "files.csv"
    listing.write_text(f"path,label\ncat/a.jpg,cat\n{elsewhere / 'b.png'},dog\n./../elsewhere/c.jpg,dog\n")
    out = tmp_path / "out"
    res = cli("convert", src, out, "--file-list", listing)
    assert res.exit_code == 0, res.output
    names = sorted(r["filename"].decode() for r in read_records(out))
    assert names == sorted(["cat/a.jpg", str(elsewhere / "b.png"), "../elsewhere/c.jpg"])  # as written (normalized)
    verify(cli, out)


def test_remote_rows_outside_input_are_valid_names():
    from img2tfrecord.conversion.plan.filelist import _resolve_listed
    from img2tfrecord.format.schema import filename_problem

    for given, name in [
        ("gs://other-bucket/extra/img_001.jpg", "gs://other-bucket/extra/img_001.jpg"),
        ("gs://my-bucket/data/cat/a.jpg", "cat/a.jpg"),
        ("gs://my-bucket/data/cat//a.jpg", "gs://my-bucket/data/cat//a.jpg"),  # not a name a walk gives: as written
        ("gs://my-bucket/data/../x.jpg", "gs://my-bucket/data/../x.jpg"),
    ]:
        assert _resolve_listed("gs://my-bucket/data", given)[1] == name
        assert filename_problem(name) is None
    assert filename_problem("cat/./a.jpg") and filename_problem("") and filename_problem("a/../b.jpg")


# ---- 4. load(shuffle_files=True, seed=...) repeats its order ----


def test_seeded_shuffle_files_gives_the_same_order_on_every_call(cli, tmp_path):
    import img2tfrecord

    make_dataset(tmp_path / "in", {"a": 30, "b": 30}, size=(12, 10))
    out = tmp_path / "out"
    assert cli("convert", tmp_path / "in", out, "--shards", "12").exit_code == 0

    def order(**kw):
        ds = img2tfrecord.load(out, shuffle_files=True, as_dict=True, **kw)
        return [[ex["image/filename"].numpy() for ex in ds] for _epoch in range(2)]

    first = order(seed=1)
    assert all(order(seed=1) == first for _ in range(3))  # every call: the same epochs, record for record
    assert first[0] != first[1]  # still a new file order each epoch
    assert sorted(first[0]) == sorted(r["filename"] for r in read_records(out))


# ---- 3, 7, 8. resuming: what is reused, what is redone and why, what differs ----


@pytest.fixture(scope="module")
def eight_shards(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("resume")
    make_dataset(root, {"a": 20, "b": 20}, size=(24, 18))
    return root


def interrupted_run(src: Path, out: Path, **options) -> list[str]:
    """Convert in this process until half the images are done, then Ctrl-C: finished shards stay
    in the staging folder for --resume. Returns their names (from the journal)."""
    import img2tfrecord
    from img2tfrecord.errors import Interrupted

    def stop(images: int, nbytes: int, total: int) -> None:
        if images >= total // 2:
            raise KeyboardInterrupt

    with pytest.raises(Interrupted):
        img2tfrecord.convert(str(src), str(out), workers=1, shards=8, progress=stop, **options)
    lines = journal_file(out).read_text().splitlines()
    finished = [json.loads(line)["info"]["file"] for line in lines[1:]]
    assert finished, "no shard finished before the interrupt"
    return finished


def published(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if not p.name.startswith(".")}


@pytest.mark.parametrize("checksum, why", [("none", "data CRC mismatch"), ("xxh3_128", "its xxh3_128 differs")])
def test_resume_redoes_a_damaged_staged_shard_and_says_so(cli, eight_shards, tmp_path, checksum, why):
    reference = tmp_path / "reference"
    assert cli("convert", eight_shards, reference, "--shards", "8", "--checksum", checksum).exit_code == 0
    out = tmp_path / "out"
    finished = interrupted_run(eight_shards, out, checksum=checksum)
    damaged = build_dir(out) / finished[0]
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit inside an image, same size
    damaged.write_bytes(bytes(data))
    res = cli("convert", eight_shards, out, "--shards", "8", "--checksum", checksum, "--resume")
    assert res.exit_code == 0, res.output
    assert f"resuming: {finished[0]} is converted again: " in res.stderr and why in res.stderr
    assert f"resuming: {len(finished) - 1} of 8 shards" in res.stderr
    assert published(out) == published(reference)


def test_resume_rebuilds_a_shard_whose_source_was_edited_in_place(cli, eight_shards, tmp_path):
    """Same name, same size, other bytes (an in-place edit): the shard that holds it is converted
    again, so the result equals a fresh conversion of today's files."""
    import shutil

    from img2tfrecord.conversion.plan.job import plan_job

    src = tmp_path / "in"
    shutil.copytree(eight_shards, src)
    out = tmp_path / "out"
    finished = interrupted_run(src, out)
    shard = next(s for s in plan_job(str(src), str(out), shards=8).shards if s.name == finished[0])
    victim = Path(shard.tasks[0].path)
    before = victim.stat()
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    os.utime(victim, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))  # as an editor would, a later time
    assert victim.stat().st_size == before.st_size
    res = cli("convert", src, out, "--shards", "8", "--resume")
    assert res.exit_code == 0, res.output
    assert f"resuming: {finished[0]} is converted again: its source images were modified" in res.stderr
    fresh = tmp_path / "fresh"
    assert cli("convert", src, fresh, "--shards", "8").exit_code == 0
    assert published(out) == published(fresh)


def test_resume_refusal_says_what_differs(cli, eight_shards, tmp_path):
    src = tmp_path / "in"
    make_dataset(src, {"a": 20, "b": 20}, size=(24, 18))
    out = tmp_path / "out"
    interrupted_run(src, out)
    res = cli("convert", src, out, "--shards", "8", "--seed", "1", "--resume")
    assert res.exit_code == 2 and "--seed 0 then, 1 now" in res.stderr
    save(natural_image(20, 20, 99), src / "a" / "extra.jpg")
    res = cli("convert", src, out, "--shards", "8", "--resume")
    assert res.exit_code == 2 and "the input: 40 images then, 41 now" in res.stderr
    (src / "a" / "extra.jpg").unlink()
    victim = src / "b" / "img_001.jpg"
    save(natural_image(30, 30, 98), victim)  # same name, other content and size
    res = cli("convert", src, out, "--shards", "8", "--resume")
    assert res.exit_code == 2 and "the input: other files (or sizes) in 1 shard, e.g. train-" in res.stderr
    assert res.stderr.count("\n") == 1 and "run the command it was, or drop --resume and add --overwrite" in res.stderr


def test_finished_shards_are_not_thrown_away_unasked(cli, eight_shards, tmp_path):
    out = tmp_path / "out"
    finished = interrupted_run(eight_shards, out)
    staged = sorted(p.name for p in build_dir(out).iterdir())
    res = cli("convert", eight_shards, out, "--shards", "8")
    n = len(finished)
    assert res.exit_code == 2, res.output
    assert f"holds an unfinished run with {n} finished shard{'s' if n > 1 else ''}" in res.stderr
    assert "--resume" in res.stderr and "--overwrite" in res.stderr
    assert sorted(p.name for p in build_dir(out).iterdir()) == staged  # nothing lost
    res = cli("convert", eight_shards, out, "--shards", "8", "--overwrite")
    assert res.exit_code == 0 and f"discarding the unfinished run in {out} and its {n} finished shard" in res.stderr


def test_a_locked_output_is_refused_before_any_other_message(cli, eight_shards, tmp_path):
    from img2tfrecord.conversion.write.publish import OutputLock
    from img2tfrecord.conversion.write.workspace import workspace

    out = tmp_path / "out"
    interrupted_run(eight_shards, out)
    staged = sorted(p.name for p in build_dir(out).iterdir())
    lock = OutputLock(workspace(str(out)))
    lock.acquire()  # another run is writing here
    try:
        res = cli("convert", eight_shards, out, "--shards", "8", "--overwrite")
    finally:
        lock.release()
    assert res.exit_code == 2 and "another img2tfrecord run" in res.stderr
    assert "discarding" not in res.stderr and res.stderr.count("\n") == 1
    assert sorted(p.name for p in build_dir(out).iterdir()) == staged


# ---- 5. a FIFO named like an image ----


def test_a_fifo_named_like_an_image_is_skipped_never_waited_for(cli, tmp_path):
    import threading
    import time

    src = tmp_path / "in"
    make_dataset(src, {"a": 3, "b": 3})
    fifo = src / "a" / "pipe.jpg"
    os.mkfifo(fifo)
    import socket

    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(src / "b" / "sock.png"))
    reader_waited, done = threading.Event(), threading.Event()

    def release_readers() -> None:  # a reader stuck on the FIFO is let go (EOF) and remembered
        while not done.is_set():
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO while nobody reads
            except OSError:
                time.sleep(0.01)
                continue
            reader_waited.set()
            os.close(fd)

    helper = threading.Thread(target=release_readers, daemon=True)
    helper.start()
    try:
        out = tmp_path / "out"
        res = cli("convert", src, out)
    finally:
        done.set()
        helper.join()
        sock.close()
    assert res.exit_code == 0, res.output
    assert not reader_waited.is_set(), "the run opened the FIFO and waited on it"
    skipped = {s["path"]: s["reason"] for s in json.loads((out / "dataset.json").read_text())["skipped"]}
    assert skipped == {
        "a/pipe.jpg": "not a regular file (a FIFO): not read",
        "b/sock.png": "not a regular file (a socket): not read",
    }
    assert "a/pipe.jpg: not a regular file (a FIFO)" in res.stderr


# ---- 6. file systems TensorFlow lacks (s3://: tests/remote/), storage it cannot reach ----


@pytest.mark.parametrize(
    "args, what",
    [
        (["hdfs://namenode/images", "{out}"], "input hdfs://namenode/images"),
        (["{src}", "hdfs://namenode/out"], "output hdfs://namenode/out"),
        (["{src}", "{out}", "--file-list", "hdfs://namenode/files.csv"], "--file-list hdfs://namenode/files.csv"),
    ],
)
def test_hdfs_says_what_is_missing(cli, tmp_path, args, what):
    make_dataset(tmp_path / "src", {"a": 1})
    res = cli("convert", *[a.format(src=tmp_path / "src", out=tmp_path / "out") for a in args])
    assert res.exit_code == 2
    assert res.stderr.startswith(f"error: {what}: ") and "pip install tensorflow-io" in res.stderr
    assert res.stderr.count("\n") == 1 and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_an_unreachable_bucket_is_one_line_with_the_cause(tmp_path):
    import subprocess
    import sys

    env = os.environ | {
        "https_proxy": "http://127.0.0.1:9",
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "GCS_RETRY_CONFIG_MAX_RETRIES": "0",
        "GOOGLE_AUTH_TOKEN_FOR_TESTING": "none",
    }  # a network that refuses every connection, fast
    res = subprocess.run(
        [sys.executable, "-m", "img2tfrecord", "convert", "gs://img2tfrecord-no-bucket/in", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert res.returncode == 1, res.stderr
    assert (
        res.stderr.startswith("error: input gs://img2tfrecord-no-bucket/in cannot be reached: ")
        and "connect" in res.stderr
    )
    assert res.stderr.count("\n") == 1


# ---- 9. options and messages that say what happens ----


def test_split_help_is_what_a_split_tree_does(cli, tmp_path):
    help_text = " ".join(cli("convert", "--help").stdout.split())
    assert "Ignored if" not in help_text and "Not with an INPUT_DIR already split" in help_text
    make_dataset(tmp_path / "in" / "train", {"a": 2})
    res = cli("convert", tmp_path / "in", tmp_path / "out", "--split", "train=0.5,test=0.5")
    assert res.exit_code == 2 and "already split" in res.stderr


def test_a_split_named_twice_in_shards_is_refused(cli, tmp_path):
    make_dataset(tmp_path / "in", {"a": 4})
    res = cli("convert", tmp_path / "in", tmp_path / "out", "--shards", "train=2,train=3")
    assert res.exit_code == 2 and "train given twice" in res.stderr and res.stderr.count("\n") == 1


def test_inspect_split_keeps_or_refuses_files_and_globs(cli, tmp_path):
    make_dataset(tmp_path / "in", {"a": 6, "b": 6})
    out = tmp_path / "out"
    assert (
        cli(
            "convert", tmp_path / "in", out, "--split", "train=0.5,validation=0.5", "--shards", "train=2,validation=1"
        ).exit_code
        == 0
    )
    res = cli("inspect", out / "train-00000-of-00002", "--split", "validation")
    assert res.exit_code == 2 and "no shard of split 'validation' (split train)" in res.stderr
    res = cli("inspect", str(out / "*-of-*"), "--split", "validation", "--json")
    assert res.exit_code == 0 and [f["path"] for f in json.loads(res.stdout)["files"]] == [
        str(out / "validation-00000-of-00001")
    ]


def test_split_folders_next_to_class_folders_warn(cli, tmp_path):
    make_dataset(tmp_path / "in", {"train": 2, "dog": 2})
    res = cli("convert", tmp_path / "in", tmp_path / "out")
    assert res.exit_code == 0
    assert "holds a split folder (train) next to class folders (dog): it is taken as classes" in res.stderr


def test_keep_with_resize_honours_quality(cli, tmp_path):
    src = tmp_path / "in"
    for i in range(3):
        save(natural_image(64, 48, i), src / "a" / f"{i}.jpg", quality=95)
    sizes = {}
    for q in ("30", "95"):
        out = tmp_path / f"keep{q}"
        assert cli("convert", src, out, "--resize", "24", "--quality", q).exit_code == 0
        jpeg = tmp_path / f"jpeg{q}"
        assert cli("convert", src, jpeg, "--encoding", "jpeg", "--resize", "24", "--quality", q).exit_code == 0
        assert (
            published(out)["train-00000-of-00001"] == published(jpeg)["train-00000-of-00001"]
        )  # a JPEG is re-encoded alike
        sizes[q] = sum(len(r["encoded"]) for r in read_records(out))
    assert sizes["30"] < sizes["95"]


def test_dry_run_plans_on_stdout_and_says_the_output_is_not_empty(cli, tmp_path):
    make_dataset(tmp_path / "in", {"a": 3})
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("x")
    res = cli("convert", tmp_path / "in", out, "--dry-run")
    assert res.exit_code == 0
    assert (
        res.stdout.startswith("Plan for ")
        and "1 class: a" in res.stdout
        and "train: 3 images in 1 shard of 3 images" in res.stdout
    )
    assert f"the real run would stop here (exit 2): output {out} is not empty (1 entry)" in res.stdout
    assert "Plan for" not in res.stderr
    assert cli("convert", tmp_path / "in", out).exit_code == 2  # as the plan said
    res = cli("convert", tmp_path / "in", out, "--dry-run", "--json")
    assert json.loads(res.stdout)["refused"].startswith(f"output {out} is not empty")


def test_images_left_out_by_labels_are_counted_apart_from_non_images(cli, tmp_path):
    src = tmp_path / "in"
    make_dataset(src, {"a": 2, "b": 3})
    (src / "a" / "notes.txt").write_text("not an image")
    (tmp_path / "labels.txt").write_text("a\n")
    out = tmp_path / "out"
    res = cli("convert", src, out, "--labels", tmp_path / "labels.txt")
    assert res.exit_code == 0
    assert "Ignored 1 non-image file. Left out 3 images of classes not in --labels." in res.stderr
    assert "1 class folder not in --labels is left out (3 images): b" in res.stderr
    assert "Wrote 2 images (train: 2 in 1 shard) of 1 class to" in res.stderr
    manifest = json.loads((out / "dataset.json").read_text())
    assert (manifest["ignored_files"], manifest["excluded_files"]) == (1, 3)


def test_inspect_messages_say_one_record_and_no_internal_names(cli, tmp_path):
    import tensorflow as tf

    from img2tfrecord.conversion.plan.options import TF_COMPRESSION  # noqa: F401 - TensorFlow's writer below

    path = tmp_path / "odd.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as w:
        w.write(b"\x07not an example")
    res = cli("inspect", path)
    assert res.exit_code == 1
    assert "1 record is not tf.train.Example" in res.stdout and "1 problem" in res.stdout
    assert "img2tfrecord_pb" not in res.output and "records are" not in res.stdout


# ---- 10. the summary's rates say what they measure ----


def test_summary_rates_are_labelled(cli, tmp_path):
    make_dataset(tmp_path / "in", {"a": 30, "b": 30}, size=(16, 12))
    out = tmp_path / "out"
    res = cli("convert", tmp_path / "in", out, "--shards", "6", "--workers", "1", "--json")
    s = json.loads(res.stdout)
    assert s["steady_seconds"] < s["elapsed_seconds"]
    res = cli("convert", tmp_path / "in", tmp_path / "out2", "--shards", "6", "--workers", "1")
    assert res.exit_code == 0
    assert " images/s including start-up, " in res.stderr and " images/s after it; " in res.stderr


def test_rates_count_the_converted_images_and_say_which_bytes(cli, tmp_path):
    """Skipped images are not in the rates; each byte count says whose bytes it counts, in a unit
    that shows a number (a tiny run is not "0.0 MB/s")."""
    files = make_dataset(tmp_path / "in", {"a": 3, "b": 3}, size=(16, 12))
    for i in range(30):
        (tmp_path / "in" / "a" / f"broken_{i}.jpg").write_bytes(b"\xff\xd8\xff\xe0 truncated" + bytes(i))
    res = cli("convert", tmp_path / "in", tmp_path / "out", "--json")
    s = json.loads(res.stdout)
    assert (s["records"], s["skipped_count"], s["images"]) == (6, 30, 36)
    assert s["converted_images"] == 6 and s["converted_bytes"] == sum(
        p.stat().st_size for ps in files.values() for p in ps
    )
    rel = 0.01 + 0.001 / s["elapsed_seconds"]  # elapsed_seconds is rounded to the millisecond
    assert s["images_per_second"] == pytest.approx(6 / s["elapsed_seconds"], rel=rel, abs=0.2)
    assert s["mb_per_second"] == pytest.approx(s["converted_bytes"] / 1e6 / s["elapsed_seconds"], rel=rel, abs=0.01)
    res = cli("convert", tmp_path / "in", tmp_path / "out2")
    wrote = res.stderr.splitlines()[-2]  # the last line: the report command
    shards = sum(p.stat().st_size for p in (tmp_path / "out2").glob("train-*"))
    assert f": {shards / 1e3:.1f} KB of shards from " in wrote and " of source images, in " in wrote, wrote
    assert re.search(r"; [1-9][\d,.]* (bytes|KB|MB)/s of source images\)", wrote), wrote
    assert " 0.0 " not in wrote and "Skipped 30 unusable images" in wrote


def test_resumed_run_reports_what_it_converted_apart_from_what_it_reused(cli, eight_shards, tmp_path):
    """After --resume the rates are this run's: converted = the images outside the finished shards."""
    out = tmp_path / "out"
    finished = interrupted_run(eight_shards, out)
    journal = journal_file(out).read_text().splitlines()[1:]
    in_finished = sum(json.loads(line)["info"]["records"] for line in journal)
    res = cli("convert", eight_shards, out, "--shards", "8", "--resume", "--json")
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    assert s["reused_shards"] == len(finished) and s["reused_images"] == in_finished
    assert s["converted_images"] == 40 - in_finished > 0
    assert s["reused_images"] + s["converted_images"] == s["images"] == s["records"] == 40
    published_bytes = sum(
        sh["bytes"] for sh in json.loads((out / "dataset.json").read_text())["splits"]["train"]["shards"]
    )
    assert 0 < s["converted_bytes"] < s["input_bytes"] and s["bytes"] == published_bytes
    rel = 0.01 + 0.001 / s["elapsed_seconds"]  # elapsed_seconds is rounded to the millisecond
    assert s["images_per_second"] == pytest.approx(s["converted_images"] / s["elapsed_seconds"], rel=rel, abs=0.2)
    assert s["mb_per_second"] == pytest.approx(s["converted_bytes"] / 1e6 / s["elapsed_seconds"], rel=rel, abs=0.02)

    out2 = tmp_path / "out2"
    finished = interrupted_run(eight_shards, out2)
    res = cli("convert", eight_shards, out2, "--shards", "8", "--resume")
    assert res.exit_code == 0, res.output
    n = len(finished)
    assert "Wrote 40 images (train: 40 in 8 shards)" in res.stderr
    assert f"This run converted {40 - in_finished} images (" in res.stderr
    assert (
        f"; {in_finished} came from the {n} finished shard{'s' if n > 1 else ''} of the interrupted run." in res.stderr
    )

    s = json.loads(cli("convert", eight_shards, tmp_path / "fresh", "--shards", "8", "--json").stdout)
    assert (s["converted_images"], s["reused_images"], s["reused_shards"]) == (40, 0, 0)
    assert s["converted_bytes"] == s["input_bytes"]


def test_progress_bar_shows_mb_per_second_on_every_update(capsys):
    from img2tfrecord.cli.convert import _Progress

    bar = _Progress(enabled=True)
    bar.start(1000)
    for images in (37, 81, 130):  # workers report in steps of any size, never a multiple of 64 here
        bar.update(images, images * 100_000)
        assert "B/s read" in str(bar.bar), str(bar.bar)  # its unit as size_text chooses it
    bar.close()


# ---- 11. what the docs promise ----


def test_the_package_exports_the_readers_the_docs_show(cli, tmp_path):
    import img2tfrecord

    make_dataset(tmp_path / "in", {"a": 2})
    out = tmp_path / "out"
    assert cli("convert", tmp_path / "in", out).exit_code == 0
    examples = [img2tfrecord.parse_example(r) for r in img2tfrecord.read_records(out / "train-00000-of-00001")]
    assert sorted(e["image/filename"][0] for e in examples) == [b"a/img_000.png", b"a/img_001.jpg"]
    assert {"read_records", "parse_example"} <= set(img2tfrecord.__all__)


def test_summary_and_manifest_keys_mean_one_thing(cli, tmp_path):
    src = tmp_path / "in"
    make_dataset(src, {"a": 3, "b": 2})
    (src / "a" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 truncated")
    (src / "b" / "copy.png").write_bytes((src / "a" / "img_000.png").read_bytes())
    out = tmp_path / "out"
    res = cli("convert", src, out, "--json")
    summary, manifest = json.loads(res.stdout), json.loads((out / "dataset.json").read_text())
    assert summary["skipped"] == manifest["skipped"] and summary["skipped_count"] == 1
    assert "groups" not in summary["duplicates"]
    assert (
        summary["duplicates"]["group_count"]
        == manifest["duplicates"]["group_count"]
        == len(manifest["duplicates"]["groups"])
        == 1
    )
    for key in set(summary) & set(manifest):
        assert type(summary[key]) is type(manifest[key]), key
    for key in set(summary["duplicates"]) & set(manifest["duplicates"]):
        assert summary["duplicates"][key] == manifest["duplicates"][key], key


def test_pillow_lower_bound_excludes_known_decoder_cves():
    import re

    import tomllib

    deps = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]["dependencies"]
    bound = next(re.fullmatch(r"pillow>=([\d.]+)", d.lower())[1] for d in deps if d.lower().startswith("pillow"))
    assert tuple(map(int, bound.split("."))) >= (10, 3, 0)  # CVE-2023-4863 (10.0.1), CVE-2024-28219 (10.3.0)
