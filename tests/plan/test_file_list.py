"""`--file-list`: a CSV/TSV of images instead of a folder walk (local engine; Beam is in test_beam.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import make_dataset, read_records


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> tuple[Path, Path, list[str]]:
    """A folder tree, its folder-walk conversion (the reference) and its image paths relative to it."""
    from click.testing import CliRunner

    from img2tfrecord.cli import main

    root = tmp_path_factory.mktemp("data")
    make_dataset(root, {"cat": 5, "dog": 7, "fox": 4})
    (root / "dog" / "sub").mkdir()
    (root / "dog" / "img_001.jpg").rename(root / "dog" / "sub" / "nested.jpg")
    rows = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    ref = tmp_path_factory.mktemp("ref") / "out"
    res = CliRunner().invoke(
        main,
        ["convert", str(root), str(ref), "--split", "train=0.6,validation=0.4", "--shards", "3"],
        catch_exceptions=False,
    )
    assert res.exit_code == 0, res.output
    return root, ref, rows


def shards_and_labels(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.name != "dataset.json"}


def convert_list(cli, root: Path, out: Path, list_file: Path, *extra: str):
    return cli(
        "convert", root, out, "--file-list", list_file, "--split", "train=0.6,validation=0.4", "--shards", "3", *extra
    )


@pytest.mark.parametrize("style", ["csv-with-labels", "tsv-paths-with-header", "absolute-paths-shuffled"])
def test_listing_the_tree_gives_the_walks_bytes(cli, tree, tmp_path, style):
    root, ref, rows = tree
    if style == "csv-with-labels":
        text = "".join(f"{r},{r.split('/')[0]}\n" for r in rows)
        list_file = tmp_path / "list.csv"
    elif style == "tsv-paths-with-header":
        text = "path\n" + "".join(f"{r}\n" for r in rows)
        list_file = tmp_path / "list.tsv"
    else:  # absolute paths below INPUT, in reverse order, with blank lines: order does not matter
        text = "filename,label\n" + "\n".join(f"{root / r},{r.split('/')[0]}" for r in reversed(rows)) + "\n\n"
        list_file = tmp_path / "list.csv"
    list_file.write_text(text)
    out = tmp_path / "out"
    res = convert_list(cli, root, out, list_file)
    assert res.exit_code == 0, res.output
    assert shards_and_labels(out) == shards_and_labels(ref)
    want = json.loads((ref / "dataset.json").read_text())
    got = json.loads((out / "dataset.json").read_text())
    assert got == want  # no non-image file in the tree: even ignored_files agrees


def test_label_column_overrides_folders_and_outside_paths_keep_their_name(cli, tree, tmp_path):
    root, _, rows = tree
    elsewhere = tmp_path / "elsewhere.png"
    elsewhere.write_bytes((root / rows[0]).read_bytes())
    lines = [f"{r}\t{'pet' if r.startswith(('cat', 'dog')) else 'wild'}" for r in rows] + [f"{elsewhere}\twild"]
    (tmp_path / "list.txt").write_text("\n".join(lines) + "\n")  # a tab in the first line makes it a TSV
    out = tmp_path / "out"
    res = cli("convert", root, out, "--file-list", tmp_path / "list.txt", "--label-offset", "1")
    assert res.exit_code == 0, res.output
    recs = read_records(out)
    assert (out / "labels.txt").read_text() == "pet\nwild\n"
    by_name = {r["filename"].decode(): (r["text"], r["label"]) for r in recs}
    assert by_name["dog/sub/nested.jpg"] == (b"pet", 1) and by_name["fox/img_000.png"] == (b"wild", 2)
    assert by_name[str(elsewhere)] == (b"wild", 2)  # not below INPUT: the path as given
    assert len(recs) == len(rows) + 1


def test_labels_file_selects_classes_from_a_list(cli, tree, tmp_path):
    root, _, rows = tree
    (tmp_path / "list.csv").write_text("".join(f"{r}\n" for r in rows))
    (tmp_path / "labels.txt").write_text("fox\ncat\nwolf\n")
    out = tmp_path / "out"
    res = cli("convert", root, out, "--file-list", tmp_path / "list.csv", "--labels", tmp_path / "labels.txt")
    assert res.exit_code == 0, res.output
    assert "wolf" in res.stderr and "dog" in res.stderr  # empty class, unlisted class
    assert {(r["text"], r["label"]) for r in read_records(out)} == {(b"fox", 0), (b"cat", 1)}
    assert json.loads((out / "dataset.json").read_text())["excluded_files"] == 7  # the dog rows


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("cat/img_000.png,cat\ncat/img_001.jpg,cat,extra\n", "line 2: expected path,label_name, got 3 column(s)"),
        ("path,label\ncat/img_000.png\n", "line 2: expected path,label_name, got 1 column(s)"),
        ("cat/img_000.png,cat\n\ncat/nope.jpg,cat\n", "line 3: {root}/cat/nope.jpg does not exist"),
        (
            "cat/img_000.png\ndog/img_000.png\n./cat/img_000.png\n",
            "line 3: ./cat/img_000.png is listed twice (first on line 1)",
        ),
        ("cat/img_000.png,cat\ncat/img_001.jpg,\n", "line 2: empty label for cat/img_001.jpg"),
        ("{outside}\n", "line 1: cannot tell the class of {outside}"),
        ("cat\n", "line 1: cannot tell the class of cat"),
        ("path\n", "lists no images"),
        ('"cat/img_000.png,cat\n', "line 1: unexpected end of data"),  # an unclosed quote
        (  # issue 38, item 19: refused up front, not when its shard is written
            "cat/img_000.png,cat,train\ncat/img_001.jpg,cat,{long}\n",
            "line 2: bad split for cat/img_001.jpg: the split name xxxxxxxxxxxxxxxxxxxx... is 301 bytes; at most 200",
        ),
    ],
)
def test_bad_lists_are_usage_errors_naming_the_line(cli, tree, tmp_path, content, message):
    root, _, _ = tree
    outside = tmp_path / "x.png"
    fmt = {"root": root, "outside": outside, "long": "x" * 301}
    (tmp_path / "list.csv").write_text(content.format(**fmt))
    res = cli("convert", root, tmp_path / "out", "--file-list", tmp_path / "list.csv")
    assert res.exit_code == 2, res.output
    assert message.format(**fmt) in res.stderr, res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.output
    assert not (tmp_path / "out").exists()


def test_missing_list_and_many_missing_files(cli, tree, tmp_path):
    root, _, _ = tree
    res = cli("convert", root, tmp_path / "out", "--file-list", tmp_path / "nope.csv")
    assert res.exit_code == 2 and "does not exist" in res.stderr
    (tmp_path / "list.csv").write_text("cat/a.jpg,cat\ncat/b.jpg,cat\ncat/c.jpg,cat\n")
    res = cli("convert", root, tmp_path / "out", "--file-list", tmp_path / "list.csv")
    assert res.exit_code == 2 and "line 1:" in res.stderr and "(2 more listed file(s) are missing too)" in res.stderr


def test_dry_run_with_a_list(cli, tree, tmp_path):
    root, _, rows = tree
    (tmp_path / "list.csv").write_text("".join(f"{r}\n" for r in rows[:4]))
    res = cli("convert", root, tmp_path / "out", "--file-list", tmp_path / "list.csv", "--dry-run", "--json")
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    assert plan["images"] == 4 and plan["classes"] == sorted({r.split("/")[0] for r in rows[:4]})


def test_split_names_are_case_insensitive_as_split_folders_are(cli, tmp_path):
    """Split folders Train/, Val/, TEST/ and a list's split cells Train, Val, TEST, validation, VAL
    name the same three splits: `load(out, "validation")` reads the Val images of either."""
    from img2tfrecord import load

    root = tmp_path / "in"
    folders = {"Train": {"cat": 3, "dog": 2}, "Val": {"cat": 2, "dog": 1}, "TEST": {"cat": 1, "dog": 1}}
    want: dict[str, set[str]] = {}
    rows = []
    for i, (folder, classes) in enumerate(folders.items()):
        split = {"Train": "train", "Val": "validation", "TEST": "test"}[folder]
        files = make_dataset(root / folder, classes, seed=i)
        for cls, paths in files.items():
            for k, p in enumerate(paths):
                cell = {"Val": ["Val", "validation", "VAL"][k % 3]}.get(folder, folder)
                rows.append(f"{p.relative_to(root).as_posix()},{cls},{cell}\n")
                want.setdefault(split, set()).add(p.relative_to(root).as_posix())
    (tmp_path / "list.csv").write_text("".join(rows))
    listed, walked = tmp_path / "listed", tmp_path / "walked"
    res = cli("convert", root, listed, "--file-list", tmp_path / "list.csv")
    assert res.exit_code == 0, res.output
    res = cli("convert", root, walked)
    assert res.exit_code == 0, res.output
    for out in (listed, walked):
        assert set(json.loads((out / "dataset.json").read_text())["splits"]) == set(want)
        for split, rels in want.items():
            got = {ex["image/filename"].numpy().decode() for ex in load(out, split, as_dict=True)}
            if out == walked:  # the walk names a record by its path below the split folder
                rels = {r.split("/", 1)[1] for r in rels}
            assert got == rels, (out.name, split)
