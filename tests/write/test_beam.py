"""`--engine beam`: the DirectRunner (2 worker processes) writes the local engine's exact bytes.

One module-scoped fixture runs both engines once on a small dataset with corrupt files, a split
and --index (each Beam worker process imports TensorFlow: a pipeline run costs seconds). Remote
paths are tested without a network on TensorFlow's in-memory filesystem (ram://), in-process.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

import pytest

from helpers import make_dataset, read_records, tree_with_broken, upload

needs_beam = pytest.mark.skipif(
    importlib.util.find_spec("apache_beam") is None,
    reason="the beam extra is not installed here: `make test` runs these in .venv-beam (make test-beam)",
)

BEAM_OPTIONS = "--runner=DirectRunner --direct_num_workers=2 --direct_running_mode=multi_processing"
OPTIONS = ["--split", "train=0.75,validation=0.25", "--shards", "train=3,validation=1", "--index"]


def dataset_files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def same_dataset_bytes(remote: dict[str, bytes], local: dict[str, bytes], skip: tuple[str, ...] = ()) -> None:
    """Every file equal byte for byte, but the catalog's size and mtime columns: a remote walk stats
    each image (the sizes agree; ram:// keeps no mtime: 0), a --file-list records neither (0), a
    local walk the files' own; every other column agrees."""
    from img2tfrecord.format import catalog

    assert sorted(remote) == sorted(local)
    for name in local:
        if name == "dataset.json" and name not in skip:  # its catalog entry names that catalog's bytes
            got_m, want_m = json.loads(remote[name]), json.loads(local[name])
            assert catalog_entry_names(got_m, remote) and catalog_entry_names(want_m, local)
            got_m.pop("catalog"), want_m.pop("catalog")
            assert got_m == want_m
        elif name == "dataset.catalog":
            got, want = catalog.decode(remote[name]), catalog.decode(local[name])
            assert set(got.mtimes) <= {0} and 0 not in want.mtimes
            assert set(got.sizes) == {0} or got.sizes == want.sizes
            got.mtimes, got.sizes = want.mtimes, want.sizes
            assert got == want
        elif name not in skip:
            assert remote[name] == local[name], name


def catalog_entry_names(manifest: dict, files: dict[str, bytes]) -> bool:
    """dataset.json's catalog entry gives the size and XXH3-128 of the catalog beside it."""
    import xxhash

    entry, data = manifest["catalog"], files[manifest["catalog"]["file"]]
    return entry["bytes"] == len(data) and entry["xxh3_128"] == xxhash.xxh3_128_hexdigest(data)


def without_engine(manifest_bytes: bytes) -> dict:
    m = json.loads(manifest_bytes)
    m["tool"].pop("engine")
    return m


@pytest.fixture(scope="module")
def both_engines(tmp_path_factory):
    """Convert the same tree with the local engine and with Beam (DirectRunner, 2 processes)."""
    from click.testing import CliRunner

    from img2tfrecord.cli import main

    root = tree_with_broken(tmp_path_factory.mktemp("data"))
    base = tmp_path_factory.mktemp("out")
    runner = CliRunner()
    local = runner.invoke(main, ["convert", str(root), str(base / "local"), *OPTIONS], catch_exceptions=False)
    # what reaches the terminal outside Python's sys.stderr (worker processes write to fd 2)
    with tempfile.TemporaryFile() as sink:
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            beam = runner.invoke(
                main,
                [
                    "convert",
                    str(root),
                    str(base / "beam"),
                    *OPTIONS,
                    "--engine",
                    "beam",
                    "--beam-options",
                    BEAM_OPTIONS,
                ],
                catch_exceptions=False,
            )
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        sink.seek(0)
        fd2 = sink.read().decode("utf-8", "replace")
    return root, base / "local", base / "beam", local, beam, fd2


@needs_beam
def test_beam_writes_the_local_engines_bytes(both_engines):
    _, local_out, beam_out, local, beam, _ = both_engines
    assert local.exit_code == 0, local.output
    assert beam.exit_code == 0, beam.output
    a, b = dataset_files(local_out), dataset_files(beam_out)
    assert sorted(a) == sorted(b)
    assert [n for n in a if n.endswith(".idx")] == [f"train-0000{i}-of-00003.idx" for i in range(3)] + [
        "validation-00000-of-00001.idx"
    ]
    for name in a:
        if name != "dataset.json":
            assert a[name] == b[name], name  # shards, DALI indexes, labels.txt
    assert without_engine(a["dataset.json"]) == without_engine(b["dataset.json"])
    assert json.loads(b["dataset.json"])["tool"]["engine"] == "beam"


@needs_beam
def test_beam_reports_and_rebalances_skipped_files(both_engines):
    _, _, beam_out, _, beam, _ = both_engines
    manifest = json.loads((beam_out / "dataset.json").read_text())
    assert sorted(s["path"] for s in manifest["skipped"]) == [f"dog/broken_{i}.jpg" for i in range(3)]
    # the plan put 7, 6, 7 images in the train shards and two broken files in the last one: re-cut
    assert [sh["records"] for sh in manifest["splits"]["train"]["shards"]] == [6, 6, 6]
    assert len(read_records(beam_out)) == 24
    for i in range(3):
        assert f"skipped: dog/broken_{i}.jpg: " in beam.stderr
    assert not any(p.name.startswith(".") for p in beam_out.iterdir())  # staging, plan and outcomes gone


@needs_beam
def test_beam_keeps_the_terminal_quiet(both_engines):
    *_, beam, fd2 = both_engines
    ours = (
        "skipped: ",
        "warning: ",
        "Wrote ",
        "See it in a browser: ",
    )  # our lines (a split warning for this small tree is one)
    assert [ln for ln in beam.stderr.splitlines() if ln.strip() and not ln.startswith(ours)] == []
    assert fd2.strip() == "", fd2[:2000]  # no apitools warning, no worker INFO lines


# A fresh process: Beam is imported for the first time there (in-process, pytest's own log handlers
# and an earlier test's import hide what Beam logs at import and what its logging.basicConfig() does).
FRESH_PROCESS = """
import logging, sys
from img2tfrecord.cli import main
code = main.main(sys.argv[1:], standalone_mode=False)
logging.basicConfig(format="app: %(message)s")  # the embedding application's logging, after the run
logging.warning("its own line")
sys.exit(code)
"""


@needs_beam
def test_a_fresh_beam_run_leaves_only_our_lines_and_the_applications_logging(tmp_path):
    """Nothing of Beam's on stderr ("WARNING:root:apitools not found" at import), and the process's
    logging still its own after the run: Beam's basicConfig() calls used to leave a root handler on
    convert's temporary (then closed) stderr, so a later record was "--- Logging error ---"."""
    import subprocess

    make_dataset(tmp_path / "in", {"a": 2, "b": 2})
    (tmp_path / "in" / "a" / "broken.png").write_bytes(b"not a png")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_CPP")}  # the tool quietens TF itself
    args = ["convert", str(tmp_path / "in"), str(tmp_path / "out"), "--engine", "beam"]
    res = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, *args], capture_output=True, text=True, env=env, timeout=300
    )
    assert res.returncode == 0, res.stderr[-3000:]
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert "skipped: a/broken.png: not an image: content is text" in lines
    assert lines[-1] == "app: its own line", res.stderr[-3000:]
    ours = ("skipped: ", "warning: ", "Wrote ", "See it in a browser: ", "app: ")
    assert [ln for ln in lines if not ln.startswith(ours)] == []


def test_missing_beam_is_a_usage_error_with_the_install_command(cli, tmp_path, monkeypatch):
    make_dataset(tmp_path / "in", {"a": 2})
    monkeypatch.setitem(sys.modules, "apache_beam", None)  # what `import apache_beam` does when absent
    res = cli("convert", tmp_path / "in", tmp_path / "out", "--engine", "beam")
    assert res.exit_code == 2
    assert "pip install 'img2tfrecord[beam]'" in res.stderr and "Traceback" not in res.output
    assert not (tmp_path / "out").exists()
    # a fresh import of the engine module (no Beam at all) still gives the hint, not an ImportError
    monkeypatch.delitem(sys.modules, "img2tfrecord.conversion.write.engines.beam", raising=False)
    res = cli("convert", tmp_path / "in", tmp_path / "out", "--engine", "beam", "--dry-run")
    assert res.exit_code == 2 and "pip install 'img2tfrecord[beam]'" in res.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--beam-options", "--runner=DirectRunner"], "add --engine beam"),
        pytest.param(
            ["--engine", "beam", "--beam-options", "--runner='unclosed"], "No closing quotation", marks=needs_beam
        ),
        pytest.param(["--engine", "beam", "--beam-options", "--runner=NoSuchRunner"], "NoSuchRunner", marks=needs_beam),
        pytest.param(
            ["--engine", "beam", "--beam-options", "--runner=DataflowRunner --project=p"], "gs://", marks=needs_beam
        ),
    ],
)
def test_bad_beam_options_are_usage_errors(cli, tmp_path, args, message):
    make_dataset(tmp_path / "in", {"a": 2})
    res = cli("convert", tmp_path / "in", tmp_path / "out", *args)
    assert res.exit_code == 2, res.output
    assert message in res.stderr and "Traceback" not in res.output
    assert not (tmp_path / "out").exists()  # refused before anything was written


@needs_beam
def test_default_flags_fill_only_what_the_user_did_not_say():
    from img2tfrecord.conversion.write.engines.beam import pipeline_flags, unknown_options

    assert pipeline_flags(None, workers=8, shards=3) == [
        "--runner=DirectRunner",
        "--direct_running_mode=multi_processing",
        "--direct_num_workers=3",
        "--default_sdk_harness_log_level=ERROR",
    ]
    flags = pipeline_flags("--direct_num_workers 5 --default_sdk_harness_log_level=INFO", workers=2, shards=9)
    assert flags == [
        "--runner=DirectRunner",
        "--direct_num_workers",
        "5",
        "--default_sdk_harness_log_level=INFO",
        "--direct_running_mode=multi_processing",
    ]
    flink = pipeline_flags("--runner=FlinkRunner --parallelism=4", workers=2, shards=9)
    assert not any(f.startswith("--direct") for f in flink)
    assert unknown_options(["--runner=DirectRunner", "--direct_num_worker=2"]) == [
        "--direct_num_worker=2 (did you mean --direct_num_workers?)"
    ]


@needs_beam
def test_plan_lines_round_trip_undecodable_names():
    from img2tfrecord.conversion.plan.job import PlannedShard, Task
    from img2tfrecord.conversion.write.engines.beam import shard_from_json, shard_to_json

    name = b"caf\xe9/\xff.jpg".decode("utf-8", "surrogateescape")
    shard = PlannedShard(
        split="train",
        index=1,
        count=4,
        tasks=(
            Task(
                path=f"/d/{name}",
                rel=name,
                filename=name,
                label=3,
                text="caf\udce9",
                size=123,
                mtime_ns=1_700_000_000_123_456_789,
            ),
        ),
    )
    assert shard_from_json(shard_to_json(shard)) == shard
    from img2tfrecord.format.schema import MetaValue

    meta = (
        MetaValue("image/class/label", "int64", (0, 3)),
        MetaValue("image/class/text", "bytes", ("caf\udce9", "dog")),
        MetaValue("image/score", "float", (0.1, 1e-300)),
    )
    labelled = PlannedShard(split="train", index=1, count=4, tasks=(dataclasses.replace(shard.tasks[0], meta=meta),))
    assert shard_from_json(shard_to_json(labelled)) == labelled  # metadata and multi-label survive Beam's plan file


def test_plan_file_entries_name_every_field_of_a_task():
    """Beam's plan file holds each Task by field name, its boxes, masks and metadata too: an entry
    read back in any key order is the same Task, and a Task field the file does not carry fails
    here (the sample must set every field, so a new one cannot be left at its default unseen)."""
    from img2tfrecord.conversion.plan.job import PlannedShard, Task
    from img2tfrecord.conversion.plan.raw_boxes import Segment
    from img2tfrecord.conversion.plan.table import Objects
    from img2tfrecord.conversion.write.engines.beam import shard_from_json, shard_to_json
    from img2tfrecord.format.schema import MetaValue

    masks = (Segment(polygons=((1.5, 2.0, 3.1, 4.0, 0.7, 3.3),)), Segment(counts=(3, 4, 5), height=3, width=4))
    boxes = Objects(
        width=4,
        height=3,
        source_id="7",
        xmin=(0.0, 0.5),
        ymin=(0.1, 0.2),
        xmax=(0.3, 1.0),
        ymax=(0.4, 0.9),
        label=(1, 2),
        text=("a", "b"),
        is_crowd=(0, 1),
        area=(2.0, 3.5),
        difficult=(1, 0),
        truncated=(0, 1),
        masks=masks,
    )
    task = Task(  # every field distinct from the others and from its default: a swap cannot go unseen
        path="/d/train/a/x.jpg",
        rel="train/a/x.jpg",
        filename="a/x.jpg",
        label=3,
        text="caf\udce9",
        size=123,
        mtime_ns=1_700_000_000_123_456_789,
        meta=(MetaValue(key="image/score", kind="float", values=(0.1, 1e-300)),),
        objects=boxes,
        mask="/m/train/a/x.png",
    )
    unset = [f.name for f in dataclasses.fields(Task) if getattr(task, f.name) == f.default]
    assert not unset, f"the sample Task leaves {unset} at the default: give them a value"
    line = shard_to_json(PlannedShard(split="train", index=1, count=4, tasks=(task,)))
    entry = json.loads(line)["tasks"][0]
    assert list(entry) == [f.name for f in dataclasses.fields(Task)]
    assert list(entry["objects"]) == [f.name for f in dataclasses.fields(Objects)]
    assert [list(m) for m in entry["objects"]["masks"]] == [list(Segment._fields)] * 2
    assert list(entry["meta"][0]) == list(MetaValue._fields)
    assert entry["label"] == 3 and entry["size"] == 123 and entry["objects"]["height"] == 3

    def reversed_keys(v):
        if isinstance(v, dict):
            return {k: reversed_keys(v[k]) for k in reversed(list(v))}
        return [reversed_keys(x) for x in v] if isinstance(v, list) else v

    plain = dataclasses.replace(task, mtime_ns=0, meta=(), objects=None, mask=None)  # defaults left out, and given back
    plain_line = shard_to_json(PlannedShard(split="train", index=1, count=4, tasks=(plain,)))
    assert list(json.loads(plain_line)["tasks"][0]) == ["path", "rel", "filename", "label", "text", "size"]
    assert shard_from_json(plain_line).tasks == (plain,)
    again = json.dumps({**json.loads(line), "tasks": [reversed_keys(entry)]}).encode("ascii")
    assert shard_from_json(again).tasks == (task,) == shard_from_json(line).tasks
    with pytest.raises(TypeError):  # a field this Task does not have is refused, not dropped
        shard_from_json(json.dumps({**json.loads(line), "tasks": [{**entry, "colour": "red"}]}).encode("ascii"))


def test_a_new_task_field_crosses_the_plan_file_with_no_edit_there(monkeypatch):
    """A per-image field added to Task (here a tuple: JSON gives a list back) reaches Beam's workers
    with no change to the plan file's code: entries are written and read by field name."""
    from img2tfrecord.conversion.plan.job import PlannedShard, Task
    from img2tfrecord.conversion.write.engines import beam

    @dataclasses.dataclass(slots=True, kw_only=True)
    class Cropped(Task):
        crop: tuple[int, ...] = ()

    monkeypatch.setattr(beam, "Task", Cropped)
    task = Cropped(path="/d/x.jpg", rel="x.jpg", filename="x.jpg", label=1, text="a", size=9, crop=(1, 2, 30, 40))
    line = beam.shard_to_json(PlannedShard(split="train", index=0, count=1, tasks=(task,)))
    assert json.loads(line)["tasks"][0]["crop"] == [1, 2, 30, 40]
    assert beam.shard_from_json(line).tasks == (task,)


def ram_files(path: str) -> dict[str, bytes]:
    from img2tfrecord.tf_import import tensorflow

    gfile = tensorflow().io.gfile
    return {n: gfile.GFile(f"{path}/{n}", "rb").read() for n in sorted(gfile.listdir(path))}


@needs_beam
def test_remote_input_and_output_give_the_same_bytes(both_engines):
    """ram:// in, ram:// out (gfile listing in threads, staging, rename-publish): same dataset as on disk."""
    from img2tfrecord.conversion.convert import convert

    root, local_out, *_ = both_engines
    upload(root, "ram://t1/in")
    events: list[str] = []
    summary = convert(
        "ram://t1/in",
        "ram://t1/out",
        workers=1,
        split="train=0.75,validation=0.25",
        shards="train=3,validation=1",
        index=True,
        on_event=lambda kind, msg: events.append(msg),
    )
    assert summary["skipped_count"] == 3 and len([e for e in events if "broken_" in e]) == 3
    same_dataset_bytes(ram_files("ram://t1/out"), dataset_files(local_out))  # dataset.json included: engine local


@needs_beam
def test_beam_on_remote_paths_with_a_file_list(both_engines):
    """Beam (in-process runner, so ram:// is shared) + a remote --file-list: the folder walk's bytes again."""
    from img2tfrecord.conversion.convert import convert

    root, local_out, *_ = both_engines
    upload(root, "ram://t2/in")
    from img2tfrecord.tf_import import tensorflow

    rows = sorted(str(p.relative_to(root)) for p in root.rglob("*.*") if p.suffix in (".jpg", ".png"))
    with tensorflow().io.gfile.GFile("ram://t2/list.csv", "w") as f:
        f.write("path\n" + "\n".join(reversed(rows)) + "\n")
    convert(
        "ram://t2/in",
        "ram://t2/out",
        engine="beam",
        beam_options="--direct_running_mode=in_memory",
        file_list="ram://t2/list.csv",
        split="train=0.75,validation=0.25",
        shards="train=3,validation=1",
        index=True,
    )
    got, want = ram_files("ram://t2/out"), dataset_files(local_out)
    same_dataset_bytes(got, want, skip=("dataset.json",))
    m_got, m_want = without_engine(got["dataset.json"]), without_engine(want["dataset.json"])
    assert catalog_entry_names(m_got, got) and catalog_entry_names(m_want, want)
    m_got.pop("catalog"), m_want.pop("catalog")  # the catalogs differ in their size and mtime columns
    assert m_want.pop("ignored_files") == 1 and m_got.pop("ignored_files") == 0  # notes.txt is not listed
    assert m_got == m_want


@needs_beam
def test_dataflow_refuses_local_images(tmp_path, monkeypatch):
    """Remote workers cannot read this machine's disk: said before anything runs."""
    from img2tfrecord.conversion.plan.job import plan_job
    from img2tfrecord.conversion.write.engines import beam as beam_engine
    from img2tfrecord.errors import UsageError

    make_dataset(tmp_path / "in", {"a": 2})
    plan = plan_job(str(tmp_path / "in"), "ram://t3/out")
    with pytest.raises(UsageError, match="cannot read the local file"):
        beam_engine.run_beam(plan, "ram://t3/out/.staging", plan.settings, "--runner=DataflowRunner", lambda k, m: None)


@needs_beam
def test_a_beam_dataset_is_updated_by_the_local_engine(both_engines, tmp_path):
    """update reads the catalog Beam's run wrote and gives the bytes of the same update of the local engine's output."""
    import shutil

    from helpers import natural_image, save
    from img2tfrecord.conversion.versions.update import update

    root, local_out, beam_out, _, _, _ = both_engines
    src = tmp_path / "in"
    shutil.copytree(root, src)
    save(natural_image(40, 30, 4242), src / "cat" / "zz_added.jpg", quality=90)
    next(p for p in sorted((src / "dog").iterdir()) if not p.name.startswith("broken")).unlink()
    outs = {}
    for name, made in (("local", local_out), ("beam", beam_out)):
        outs[name] = tmp_path / name
        shutil.copytree(made, outs[name])
        update(str(src), str(outs[name]))
    local_files, beam_files = dataset_files(outs["local"]), dataset_files(outs["beam"])
    assert sorted(local_files) == sorted(beam_files)
    for n in local_files:
        if n != "dataset.json":
            assert local_files[n] == beam_files[n], n
    lm, bm = json.loads(local_files["dataset.json"]), json.loads(beam_files["dataset.json"])
    assert lm.pop("parent") != bm.pop("parent")  # their parents differ in tool.engine
    assert lm == bm and bm["tool"]["engine"] == "local"


@needs_beam
def test_metadata_and_multi_label_give_the_local_engines_bytes(tmp_path):
    """Metadata columns and multi-label records cross Beam's plan file (JSON) and come out the same."""
    from img2tfrecord.cli import main
    from test_metadata import _jsonl, _multi_label_tree

    src = tmp_path / "in"
    rows = [r | {"caption": f"picture {i}", "score": i / 3} for i, r in enumerate(_multi_label_tree(src))]
    _jsonl(src / "metadata.jsonl", rows)
    from click.testing import CliRunner

    runner = CliRunner()
    args = ["convert", str(src), "--split", "train=0.5,test=0.5"]
    local = runner.invoke(main, [*args[:2], str(tmp_path / "local"), *args[2:]], catch_exceptions=False)
    beam = runner.invoke(
        main,
        [*args[:2], str(tmp_path / "beam"), *args[2:], "--engine", "beam", "--beam-options", BEAM_OPTIONS],
        catch_exceptions=False,
    )
    assert local.exit_code == 0 and beam.exit_code == 0, (local.output, beam.output)
    a, b = dataset_files(tmp_path / "local"), dataset_files(tmp_path / "beam")
    assert json.loads(a["dataset.json"])["metadata"]["multi_label"] is True
    assert sorted(a) == sorted(b)
    for name in a:
        if name != "dataset.json":
            assert a[name] == b[name], name
    assert without_engine(a["dataset.json"]) == without_engine(b["dataset.json"])


@needs_beam
def test_annotations_give_the_local_engines_bytes(tmp_path):
    """Boxes cross Beam's plan file (JSON: lists where the encoder wants tuples) and come out the same."""
    from click.testing import CliRunner

    from img2tfrecord.cli import main
    from img2tfrecord.conversion.plan.job import PlannedShard, Task
    from img2tfrecord.conversion.plan.table import Objects
    from img2tfrecord.conversion.write.engines.beam import shard_from_json, shard_to_json
    from test_detection import coco_corpus, od_records

    boxes = Objects(
        width=4,
        height=3,
        source_id="7",
        xmin=(0.0, 0.5),
        ymin=(0.1, 0.2),
        xmax=(0.3, 1.0),
        ymax=(0.4, 0.9),
        label=(1, 2),
        text=("a", "b"),
        is_crowd=(0, 1),
        area=(2.0, 3.5),
        difficult=(0, 0),
        truncated=(1, 0),
    )
    shard = PlannedShard(
        split="train",
        index=0,
        count=1,
        tasks=(
            Task(path="/d/x.jpg", rel="x.jpg", filename="x.jpg", label=0, text="a", size=9, mtime_ns=1, objects=boxes),
        ),
    )
    assert shard_from_json(shard_to_json(shard)) == shard
    ann = coco_corpus(tmp_path)
    runner = CliRunner()
    args = ["--annotations", str(ann), "--split", "train=0.5,test=0.5", "--encoding", "png"]
    local = runner.invoke(main, ["convert", str(tmp_path / "images"), str(tmp_path / "local"), *args, "--workers", "2"])
    beam = runner.invoke(
        main,
        [
            "convert",
            str(tmp_path / "images"),
            str(tmp_path / "beam"),
            *args,
            "--engine",
            "beam",
            "--beam-options",
            BEAM_OPTIONS,
        ],
        catch_exceptions=False,
    )
    assert local.exit_code == 0 and beam.exit_code == 0, (local.output, beam.output)
    a, b = dataset_files(tmp_path / "local"), dataset_files(tmp_path / "beam")
    assert json.loads(a["dataset.json"])["metadata"]["detection"]["clipped"] == 1
    assert "label_map.pbtxt" in a and sorted(a) == sorted(b)
    for name in a:
        if name != "dataset.json":
            assert a[name] == b[name], name
    assert without_engine(a["dataset.json"]) == without_engine(b["dataset.json"])
    assert len(od_records(tmp_path / "beam")["plain.jpg"]["image/object/bbox/xmin"]) == 2


@needs_beam
def test_masks_give_the_local_engines_bytes(tmp_path):
    """--masks: segmentations (polygons, RLE counts, compressed RLE) cross Beam's plan file (JSON:
    lists where the encoder wants tuples) and the masks come out the same bytes."""
    pytest.importorskip("pycocotools")
    from click.testing import CliRunner

    from img2tfrecord.cli import main
    from img2tfrecord.conversion.plan.job import PlannedShard, Task
    from img2tfrecord.conversion.plan.raw_boxes import Segment
    from img2tfrecord.conversion.plan.table import Objects
    from img2tfrecord.conversion.write.engines.beam import shard_from_json, shard_to_json
    from test_masks import mask_corpus, mask_records

    segments = (Segment(polygons=((1.5, 2.0, 3.1, 4.0, 0.7, 3.3),)), Segment(counts=(3, 4, 5), height=3, width=4))
    one = dict(xmin=(0.0, 0.5), ymin=(0.1, 0.2), xmax=(0.3, 1.0), ymax=(0.4, 0.9), label=(1, 2), text=("a", "b"))
    more = dict(is_crowd=(0, 1), area=(2.0, 3.5), difficult=(0, 0), truncated=(1, 0))
    boxes = Objects(width=4, height=3, source_id="7", **one, **more, masks=segments)
    shard = PlannedShard(
        split="train",
        index=0,
        count=1,
        tasks=(
            Task(path="/d/x.jpg", rel="x.jpg", filename="x.jpg", label=0, text="a", size=9, mtime_ns=1, objects=boxes),
        ),
    )
    assert shard_from_json(shard_to_json(shard)) == shard
    ann = mask_corpus(tmp_path)
    runner = CliRunner()
    args = ["--annotations", str(ann), "--masks", "--split", "train=0.5,test=0.5", "--encoding", "png"]
    images = str(tmp_path / "images")
    local = runner.invoke(main, ["convert", images, str(tmp_path / "local"), *args, "--workers", "2"])
    beam = runner.invoke(
        main,
        ["convert", images, str(tmp_path / "beam"), *args, "--engine", "beam", "--beam-options", BEAM_OPTIONS],
        catch_exceptions=False,
    )
    assert local.exit_code == 0 and beam.exit_code == 0, (local.output, beam.output)
    a, b = dataset_files(tmp_path / "local"), dataset_files(tmp_path / "beam")
    assert sorted(a) == sorted(b)
    for name in a:
        if name != "dataset.json":
            assert a[name] == b[name], name
    assert without_engine(a["dataset.json"]) == without_engine(b["dataset.json"])
    assert len(mask_records(tmp_path / "beam")["poly.png"]["masks"]) == 3
