"""The columnar plan (conversion.plan.table) is the plan a list of Tasks gave, and it stays small.

A reference below rebuilds the plan the way the tool did before the table existed: an object per
image, a string sort of image/filename per split, then the stable hash split and order written out
plainly (u = XXH3-64(rel, seed) / 2^64 against the cumulative fractions; sort by the hash). On trees with
names that sort differently as bytes and as text, nested folders, undecodable names, split folders
and --labels, both must give the same Tasks in the same shards. Then: planning 50,000 files holds
a bounded number of bytes per image, a shard sent to a worker carries its own Tasks only, and a
dry run of a real tree runs without TensorFlow.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pickle
import random
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
import xxhash

from img2tfrecord.conversion.plan.job import plan_job, shard_bounds
from img2tfrecord.conversion.plan.table import Task, TaskView
from img2tfrecord.conversion.write.resume import header

EXTS = {".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp", ".tif", ".tiff"}
SPLITS = {"train": "train", "validation": "validation", "val": "validation", "test": "test"}


def _key(task: Task, seed: int) -> int:
    """The stable split rule written out: XXH3-64 of the path's bytes, seeded."""
    return xxhash.xxh3_64_intdigest(task.rel.encode("utf-8", "surrogateescape"), seed % 2**64)


def _split_by_hash(files: list, fractions: dict[str, float], seed: int) -> dict[str, list]:
    out: dict[str, list] = {s: [] for s in fractions}
    for t in files:
        u, acc = _key(t, seed) / 2**64, 0.0
        for name, frac in fractions.items():
            acc += frac
            if u < acc or name == list(fractions)[-1]:
                out[name].append(t)
                break
    return out


def _split_exact(files: list, fractions: dict[str, float], seed: int) -> dict[str, list]:
    """One class's images, in hash order (ties: image/filename order), the first floor-or-ceil(f*n)
    to the first split, ... (largest remainders, ties to the earlier split)."""
    ordered = sorted(files, key=lambda t: _key(t, seed))
    n = len(ordered)
    counts = [math.floor(f * n + 1e-9) for f in fractions.values()]
    by_remainder = sorted(range(len(counts)), key=lambda j: (-(list(fractions.values())[j] * n - counts[j]), j))
    for j in by_remainder[: n - sum(counts)]:
        counts[j] += 1
    out, start = {}, 0
    for name, k in zip(fractions, counts):
        out[name] = ordered[start : start + k]
        start += k
    return out


def reference_plan(
    src: Path, counts: dict[str, int], *, split=None, seed=0, labels=None, offset=0, rule: str = "exact"
):
    """[(shard name, [Task, ...])] as the list-of-Tasks planner made it (no symlinks in these trees)."""
    root = str(src)
    top = sorted(n for n in os.listdir(root) if not n.startswith("."))
    top_dirs = [n for n in top if os.path.isdir(os.path.join(root, n))]
    presplit = bool(top_dirs) and all(n.lower() in SPLITS for n in top_dirs)
    roots = {SPLITS[n.lower()]: n for n in top_dirs} if presplit else {"": ""}
    per_class: dict[str, dict[str, list[tuple[str, str, str, int]]]] = {}
    for skey, sdir in roots.items():
        base = os.path.join(root, sdir) if sdir else root
        for c in sorted(os.listdir(base)):
            if c.startswith(".") or not os.path.isdir(os.path.join(base, c)):
                continue
            found = []
            for dirpath, dirs, files in os.walk(os.path.join(base, c)):
                dirs[:] = [d for d in dirs if not d.startswith(".")]
                for f in files:
                    if not f.startswith(".") and os.path.splitext(f)[1].lower() in EXTS:
                        path = os.path.join(dirpath, f)
                        r = os.path.relpath(path, os.path.join(base, c)).replace(os.sep, "/")
                        st = os.stat(path)
                        found.append((path, r, st.st_size, st.st_mtime_ns))
            found.sort(key=lambda t: t[1])
            prefix = sdir + "/" if skey else ""
            per_class.setdefault(c, {})[skey] = [
                (p, prefix + c + "/" + r, c + "/" + r, sz, mt) for p, r, sz, mt in found
            ]
    classes = list(labels) if labels is not None else sorted(per_class)
    label_of = {c: i + offset for i, c in enumerate(classes)}
    keys = list(roots) if presplit else (list(split) if split else ["train"])
    splits: dict[str, list[Task]] = {s: [] for s in keys}
    for c in classes:
        for skey, found in per_class.get(c, {}).items():
            items = [
                Task(path=p, rel=r, filename=f, label=label_of[c], text=c, size=sz, mtime_ns=mt)
                for p, r, f, sz, mt in found
            ]
            if presplit:
                splits[skey].extend(items)
            elif split:
                by = _split_by_hash if rule == "hash" else _split_exact
                for s, part in by(items, split, seed).items():
                    splits[s].extend(part)
            else:
                splits["train"].extend(items)
    out = []
    for s, items in splits.items():
        items.sort(key=lambda t: t.filename)
        items.sort(key=lambda t: _key(t, seed))  # stable: equal hashes keep image/filename order
        for i, (a, b) in enumerate(shard_bounds(len(items), counts[s]) if items else []):
            out.append((f"{s}-{i:05d}-of-{counts[s]:05d}", items[a:b]))
    return out


def write(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)


def awkward_tree(src: Path, *, undecodable: bool = True) -> Path:
    """Class names that sort differently by folder name and by 'class/...' ("a" < "a b" but
    "a b/x" < "a/x"), nested folders that interleave with files, non-ASCII and undecodable names."""
    n = 0
    for cls in ("a", "a b", "a-b", "a.b", "B", "é", "z"):
        for name in ("x.jpg", "y.PNG", "deep/x.jpg", "deep/more/1.gif", "x.jpg.d/2.bmp", "Ä.webp", "ß/é.tif", "~.jpeg"):
            write(src / cls / name, 100 + 7 * n)
            n += 1
        (src / cls / "notes.txt").write_text("not an image")
        (src / cls / ".hidden.jpg").write_bytes(b"x")
    for name in ("x.jpg", "Ä.webp", "y.jpg"):  # a flat class folder: sorted as one folder
        write(src / "k" / name, 10 + len(name))
    if undecodable:  # a raw byte 0xa9 sorts before 'Ä' (0xc3 0x84) as bytes, after it as text
        for i, raw in enumerate((b"caf\xe9.jpg", b"\xff\xfe.png", b"ok\xc3.jpg", b"\xa9z.jpg")):
            for cls in ("a", "k"):
                with open(os.path.join(os.fsencode(src / cls), raw), "wb") as f:
                    f.write(b"y" * (50 + i))
    return src


def plan_list(plan) -> list[tuple[str, list[Task]]]:
    return [(s.name, list(s.tasks)) for s in plan.shards]


@pytest.mark.parametrize(
    "options",
    [
        {"shards": 3},
        {"shards": "train=3,validation=2", "split": "train=0.7,validation=0.3", "seed": 5},
        {"shards": "train=3,validation=2", "split": "train=0.7,validation=0.3", "seed": 5, "split_rule": "hash"},
        {"shards": 4, "labels": ["z", "a b", "a", "missing", "é"], "label_offset": 10, "seed": 2},
    ],
    ids=["one split", "stratified", "hash rule", "labels"],
)
def test_the_columnar_plan_is_the_list_of_tasks_plan(tmp_path, options):
    src = awkward_tree(tmp_path / "in")
    plan = plan_job(str(src), str(tmp_path / "out"), **options)
    split = (
        {k: float(v) for k, v in (p.split("=") for p in options["split"].split(","))} if "split" in options else None
    )
    want = reference_plan(
        src,
        plan.options["shards"],
        split=split,
        seed=options.get("seed", 0),
        labels=options.get("labels"),
        offset=options.get("label_offset", 0),
        rule=options.get("split_rule", "exact"),
    )
    assert plan_list(plan) == want
    assert plan.images == sum(len(t) for _, t in want)


def test_the_str_walk_of_other_platforms_plans_the_same(tmp_path, monkeypatch):
    """Where names are not bytes that decode as UTF-8 (Windows), the walk lists str names: same
    plan, symlinks included (followed, each folder walked once)."""
    from img2tfrecord.conversion.plan import walk

    src = awkward_tree(tmp_path / "in")
    os.symlink(src / "a", src / "z" / "loop")  # a class folder reached again: walked as its own class only
    os.symlink(src / "a" / "deep", src / "z" / "deep2")  # a folder reached twice: walked once, by the first class
    os.symlink(src / "z", src / "z" / "deep" / "up")  # a loop
    os.symlink(src / "k" / "x.jpg", src / "k" / "link.jpg")
    os.symlink(src / "k" / "gone.jpg", src / "k" / "broken.jpg")  # size 0: reported as skipped later
    fast = plan_list(plan_job(str(src), str(tmp_path / "o1"), shards=3, split="train=0.5,validation=0.5"))
    rels = {t.rel for _, tasks in fast for t in tasks}
    assert "a/x.jpg" in rels and "a/deep/x.jpg" in rels and "k/link.jpg" in rels and "k/broken.jpg" in rels
    assert not any(r.startswith(("z/deep/up/", "z/loop/", "z/deep2/")) for r in rels)  # issue 38, item 6
    monkeypatch.setattr(walk, "_BYTES_WALK", False)
    assert plan_list(plan_job(str(src), str(tmp_path / "o2"), shards=3, split="train=0.5,validation=0.5")) == fast


def test_split_folders_plan_as_before(tmp_path):
    for split, n in (("train", 0), ("val", 1)):
        for cls in ("cat", "cat-2", "dog"):
            for k in range(5 + n):
                write(tmp_path / "in" / split / cls / ("sub/" if k == 2 else "") / f"{cls}{k}.jpg", 300 + k)
    plan = plan_job(str(tmp_path / "in"), str(tmp_path / "out"), shards=4, seed=1)
    assert plan_list(plan) == reference_plan(tmp_path / "in", plan.options["shards"], seed=1)
    assert {t.filename.split("/")[0] for s in plan.shards for t in s.tasks} == {"cat", "cat-2", "dog"}


def test_a_file_list_of_the_tree_plans_as_its_walk(tmp_path):
    """Rows in any order, relative and absolute: the same Tasks as the walk (the paths as written)."""
    src = awkward_tree(tmp_path / "in", undecodable=False)  # a CSV file is UTF-8 text
    rels = sorted(str(p.relative_to(src)).replace(os.sep, "/") for p in src.rglob("*") if p.is_file())
    rels = [r for r in rels if not r.endswith(".txt") and "/." not in r]
    random.Random(0).shuffle(rels)
    rows = [f"{src / r if i % 3 == 0 else r},{r.split('/')[0]}" for i, r in enumerate(rels)]
    (tmp_path / "list.csv").write_text("\n".join(rows) + "\n")
    options = {"shards": 3, "split": "train=0.5,validation=0.5", "seed": 4}
    walked = plan_job(str(src), str(tmp_path / "o1"), **options)
    listed = plan_job(str(src), str(tmp_path / "o2"), file_list=str(tmp_path / "list.csv"), **options)
    strip = [(name, [dataclasses.replace(t, path="") for t in tasks]) for name, tasks in plan_list(walked)]
    assert [(name, [dataclasses.replace(t, path="") for t in tasks]) for name, tasks in plan_list(listed)] == strip
    absolute = {str(src / r) for r in rels[::3]}
    for _, tasks in plan_list(listed):
        for t in tasks:
            assert t.path == (t.path if t.path in absolute else os.path.join(str(src), t.rel))
    assert header(listed)["fingerprint"] == header(walked)["fingerprint"]


@pytest.mark.parametrize(
    ("rows", "error"),
    [
        (
            ["a/1.jpg", "a/2.jpg", "./a/1.jpg", "a/3.jpg", "a/1.jpg,a,x"],
            "line 3: ./a/1.jpg is listed twice (first on line 1)",
        ),
        (["a/1.jpg", "a/1.jpg,a,x", "a/2.jpg", "a/1.jpg"], "line 2: expected path, got 3 column(s)"),
        (["a/2.jpg", "a/nope.jpg", "a/1.jpg", "a/2.jpg"], "line 4: a/2.jpg is listed twice (first on line 1)"),
        (
            ["a/1.jpg", "a/nope.jpg", "b/9.jpg"],
            "line 2: {src}/a/nope.jpg does not exist (1 more listed file(s)",
        ),
        (["a/2.jpg", "a/1.jpg", "a/2.jpg", "a/1.jpg"], "line 3: a/2.jpg is listed twice (first on line 1)"),
    ],
    ids=["twice before a bad row", "bad row before twice", "twice and missing", "missing", "first of two"],
)
def test_a_file_list_names_its_first_wrong_line(tmp_path, rows, error):
    """Names listed twice are found by sorting, after the rows are read: the error is still the
    one on the first wrong line, as a reading that stopped there would give."""
    from img2tfrecord.errors import UsageError

    src = tmp_path / "in"
    for name in ("a/1.jpg", "a/2.jpg", "a/3.jpg"):
        write(src / name, 10)
    (tmp_path / "list.csv").write_text("\n".join(rows) + "\n")
    with pytest.raises(UsageError) as e:
        plan_job(str(src), str(tmp_path / "out"), file_list=str(tmp_path / "list.csv"))
    assert error.format(src=src) in str(e.value)


def links(root: Path, n: int, classes: int = 10) -> Path:
    """n hard links to a few small files, in `classes` class folders."""
    src = root / "in"
    sources = []
    for k in range(-(-n // 20_000)):
        p = root / f"source{k}.jpg"
        p.write_bytes(b"\xff\xd8" + b"x" * 1000)
        sources.append(p)
    for c in range(classes):
        (src / f"class_{c:02d}").mkdir(parents=True)
    for i in range(n):
        os.link(sources[i // 20_000], src / f"class_{i % classes:02d}" / f"img_{i:08d}.jpg")
    return src


def test_planning_holds_few_bytes_per_image(tmp_path):
    """50,000 files: the plan's peak and what it keeps, per image, traced by tracemalloc (an object
    per image cost ~700 bytes; the table ~45, its transient sorting and shuffling a few dozen more)."""
    n = 50_000
    src = links(tmp_path, n)
    tracemalloc.start()
    try:
        plan = plan_job(str(src), str(tmp_path / "out"), split="train=0.9,validation=0.1", shards=20)
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert plan.images == n and len(plan.shards) == 20
    assert peak / n < 150, f"{peak / n:.0f} bytes per image at the peak"
    assert kept / n < 80, f"{kept / n:.0f} bytes per image kept"


def test_a_shard_sent_to_a_worker_carries_its_tasks_not_the_plan(tmp_path):
    src = links(tmp_path, 2000)
    plan = plan_job(str(src), str(tmp_path / "out"), shards=10)
    shard = plan.shards[3]
    assert isinstance(shard.tasks, TaskView)
    sent = pickle.loads(pickle.dumps(shard))
    assert type(sent.tasks) is tuple and sent.tasks == tuple(shard.tasks) and sent.name == shard.name
    assert all(isinstance(t, Task) and os.path.exists(t.path) for t in sent.tasks)
    assert len(pickle.dumps(shard)) < len(pickle.dumps(plan.shards[0])) * 1.5  # one shard's worth, not ten


def test_a_dry_run_of_a_big_tree_imports_no_tensorflow(tmp_path):
    src = links(tmp_path, 20_000)
    code = (
        "import sys\nfrom img2tfrecord.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "print('tensorflow' in sys.modules, file=sys.stderr)"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, "convert", str(src), str(tmp_path / "out"), "--dry-run", "--json"],
        capture_output=True,
        text=True,
    )
    assert res.stderr.strip().splitlines()[-1] == "False", res.stderr
    summary = json.loads(res.stdout)
    assert summary["images"] == 20_000 and summary["splits"]["train"]["class_counts"]["class_03"] == 2000
    assert not (tmp_path / "out").exists()


def test_remote_runners_are_told_of_a_local_file_without_making_every_task():
    """Dataflow's workers cannot read local files; a plan of a bucket answers that at once."""
    from array import array

    from img2tfrecord.conversion.plan.table import ImageTable, first_local_path

    bucket = ImageTable("gs://b/in", True, ["cat"], [0])
    bucket.extend(bucket.new_group("cat/", 0), [b"1.jpg", b"2.jpg"], [0, 0])
    view = TaskView(bucket, array("q", [1, 0]))
    assert first_local_path(view) is None and [t.path for t in view] == ["gs://b/in/cat/2.jpg", "gs://b/in/cat/1.jpg"]
    bucket.paths[0] = "/home/me/1.jpg"  # a --file-list row naming a local file
    assert first_local_path(view) == "/home/me/1.jpg"


def test_the_duplicate_report_groups_as_a_list_per_digest_did():
    """dedupe.report keeps a tuple for a digest seen once (nearly all of them): same report."""
    from img2tfrecord.conversion.write import dedupe

    rnd = random.Random(1)
    written = [
        (f"d{rnd.randrange(40)}", f"c{i % 3}/{i}.jpg", rnd.choice(["train", "validation"]), f"c{i % 3}")
        for i in range(200)
    ]
    dropped = [{"digest": "d7", "path": "c1/x.jpg", "split": "train", "class": "c1", "duplicate_of": "c0/0.jpg"}]
    groups: dict[str, list] = {}
    for digest, rel, split, text in written:
        groups.setdefault(digest, []).append((rel, split, text))
    for d in dropped:
        groups.setdefault(d["digest"], []).append((d["path"], d["split"], d["class"]))
    want = [[m[0] for m in members] for members in groups.values() if len(members) > 1]
    got = dedupe.report("drop", iter(written), dropped)
    assert [g["files"] for g in got["groups"]] == want and got["duplicate_files"] == sum(len(w) - 1 for w in want)
    # finalize passes only the records whose digest is duplicated, found from 16-byte keys: same report
    hexed = [(f"{int(d[1:]):032x}", *rest) for d, *rest in written]
    twice = dedupe.duplicated(["".join(h[0] for h in hexed[:120]), "".join(h[0] for h in hexed[120:])], [f"{7:032x}"])
    assert twice == {h[0] for h in hexed if sum(g[0] == h[0] for g in hexed) > 1} | {f"{7:032x}"}
    dedupe.NUMPY_FROM, small = 0, dedupe.NUMPY_FROM  # the numpy path finds the same digests
    try:
        assert dedupe.duplicated(["".join(h[0] for h in hexed)], [f"{7:032x}"]) == twice
    finally:
        dedupe.NUMPY_FROM = small
    hex_dropped = [d | {"digest": f"{7:032x}"} for d in dropped]
    only = dedupe.report("drop", (h for h in hexed if h[0] in twice), hex_dropped)
    assert [g["files"] for g in only["groups"]] == want and only["duplicate_files"] == got["duplicate_files"]
    assert got["dropped"] == [{"path": "c1/x.jpg", "split": "train", "duplicate_of": "c0/0.jpg"}]


def test_every_walk_records_each_images_mtime_from_its_stat(tmp_path, monkeypatch):
    """The bytes walk, the str walk and a --file-list give each Task the st_mtime_ns of its file
    (what update and resume compare), held as a column of the table."""
    from img2tfrecord.conversion.plan import walk
    from img2tfrecord.conversion.plan.table import mtimes_of

    src = tmp_path / "in"
    for i, name in enumerate(("a/1.jpg", "a/deep/2.png", "b/3.jpg")):
        write(src / name, 10 + i)
        os.utime(src / name, ns=(1_000_000_007 * (i + 1), 1_700_000_000_123_456_789 + i))
    want = {r: os.stat(src / r).st_mtime_ns for r in ("a/1.jpg", "a/deep/2.png", "b/3.jpg")}
    (tmp_path / "list.csv").write_text("\n".join(want) + "\n")

    def mtimes(plan) -> dict[str, int]:
        got = {t.rel: t.mtime_ns for s in plan.shards for t in s.tasks}
        assert [t.mtime_ns for s in plan.shards for t in s.tasks] == [
            m for s in plan.shards for m in mtimes_of(s.tasks)
        ]
        return got

    assert mtimes(plan_job(str(src), str(tmp_path / "o1"))) == want
    assert mtimes(plan_job(str(src), str(tmp_path / "o2"), file_list=str(tmp_path / "list.csv"))) == want
    monkeypatch.setattr(walk, "_BYTES_WALK", False)
    assert mtimes(plan_job(str(src), str(tmp_path / "o3"))) == want
