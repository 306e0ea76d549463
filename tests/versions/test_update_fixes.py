"""`update`/`compact` review fixes: paths from Python, honest interrupts, a catalog checked before it is trusted."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers import make_dataset, natural_image, save
from img2tfrecord.conversion.convert import convert
from img2tfrecord.conversion.versions.compact import compact
from img2tfrecord.conversion.versions.update import update
from img2tfrecord.errors import DataError, UsageError
from img2tfrecord.format import catalog


def test_update_and_compact_take_paths(tmp_path: Path) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    make_dataset(src, {"a": 3, "b": 2}, size=(16, 12))
    convert(src, out)
    save(natural_image(18, 14, 7), src / "a" / "added.jpg", quality=90)
    assert update(src, out)["version"] == 2
    assert compact(out)["version"] == 3


def test_an_interrupt_after_compact_switched_says_it_was_compacted(tmp_path: Path, cli, monkeypatch) -> None:
    from img2tfrecord.conversion.write import publish, workspace

    src, out = tmp_path / "in", tmp_path / "out"
    make_dataset(src, {"a": 3, "b": 2}, size=(16, 12))
    convert(src, out)
    save(natural_image(18, 14, 7), src / "a" / "added.jpg", quality=90)
    update(src, out)

    def interrupted(ws: workspace.Workspace) -> None:  # Ctrl-C while the old version is being removed
        raise KeyboardInterrupt

    monkeypatch.setattr(publish, "_remove_workspace", interrupted)
    r = cli("compact", out)
    assert r.exit_code == 130
    assert "was compacted: it is complete" in r.output and "unchanged" not in r.output
    assert json.loads((out / "dataset.json").read_text())["version"] == 3


def _tampered(out: Path, change) -> None:
    path = out / catalog.CATALOG_NAME
    cat = catalog.decode(path.read_bytes())
    change(cat)
    path.write_bytes(catalog.encode(cat))


def _first_converted(cat: catalog.Catalog) -> int:
    return next(r for r in range(len(cat)) if cat.states[r] == catalog.CONVERTED and cat.records[r] == 0)


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_compact_refuses_a_catalog_whose_lengths_do_not_match_the_shards(tmp_path: Path, compression) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    make_dataset(src, {"a": 4, "b": 3}, size=(16, 12))
    convert(src, out, shards=2, **({"compression": compression} if compression else {}))
    make_dataset(src, {"c": 3}, size=(16, 12), seed=4)
    update(src, out)  # a shard appended: compact has records to copy (a compact dataset has none)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def shifted(cat: catalog.Catalog) -> None:  # the shard's length is the same: only the framing tells
        r0 = _first_converted(cat)
        r1 = next(r for r in range(len(cat)) if cat.shards[r] == cat.shards[r0] and cat.records[r] == 1)
        cat.lengths[r0] -= 4
        cat.lengths[r1] += 4

    _tampered(out, shifted)
    before[catalog.CATALOG_NAME] = (out / catalog.CATALOG_NAME).read_bytes()
    with pytest.raises(DataError, match="the catalog does not match the shards"):
        compact(out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing written


def test_update_refuses_a_catalog_whose_record_counts_differ_from_dataset_json(tmp_path: Path) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    make_dataset(src, {"a": 4, "b": 3}, size=(16, 12))
    convert(src, out, shards=2)

    def one_less(cat: catalog.Catalog) -> None:
        cat.states[_first_converted(cat)] = catalog.SKIPPED

    _tampered(out, one_less)
    save(natural_image(18, 14, 7), src / "a" / "added.jpg", quality=90)
    with pytest.raises(DataError, match=r"records in train-0000\d-of-00002; dataset.json says .*does not match"):
        update(src, out)
    with pytest.raises(DataError, match="the catalog does not match the shards"):
        compact(out)


def test_update_counts_the_images_it_skipped_now_apart_from_those_still_skipped(tmp_path: Path, cli) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    make_dataset(src, {"a": 3, "b": 2}, size=(16, 12))
    (src / "a" / "broken.jpg").write_bytes(b"\xff\xd8\xff broken")
    convert(src, out)
    save(natural_image(18, 14, 7), src / "a" / "added.jpg", quality=90)
    s = update(src, out)
    assert (s["skipped"], s["still_skipped"]) == ([], 1)
    (src / "b" / "new_broken.png").write_bytes(b"\x89PNG\r\n\x1a\n broken")
    r = cli("update", src, out)
    assert r.exit_code == 0
    assert "1 unusable image skipped" in r.output and "1 image skipped before and unchanged" in r.output
    assert len(json.loads((out / "dataset.json").read_text())["skipped"]) == 2


def test_the_dry_run_estimate_is_what_is_written_without_the_space_margin(tmp_path: Path) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    files = make_dataset(src, {"a": 3, "b": 3}, size=(16, 12))
    convert(src, out, shards=2)
    files["a"][1].unlink()  # one shard rewritten, nothing new: at most its old size
    s = update(src, out, dry_run=True)
    cat = catalog.decode((out / catalog.CATALOG_NAME).read_bytes())
    shard = cat.shards[list(cat.rels).index(b"a/" + files["a"][1].name.encode())]
    man = json.loads((out / "dataset.json").read_text())
    (entry,) = [e for e in man["splits"]["train"]["shards"] if e["file"] == shard]
    assert s["shards_to_rewrite"] == 1 and s["shards_to_write"] == 0
    assert s["bytes_needed"] == entry["bytes"]


def test_update_names_parameters_to_python_callers_and_options_to_the_cli(tmp_path: Path, cli) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    make_dataset(src, {"a": 2, "b": 2}, size=(16, 12))
    convert(src, out, dedupe="off")
    with pytest.raises(UsageError) as e:
        update(src, out, workers=0)
    assert "workers=0" in str(e.value) and "--" not in str(e.value)
    with pytest.raises(UsageError) as e:
        update(src, out, check_content=True)
    assert "check_content=True" in str(e.value) and "dedupe='off'" in str(e.value) and "--" not in str(e.value)
    r = cli("update", src, out, "--check-content")
    assert r.exit_code == 2 and "--check-content compares" in r.output and "--dedupe off" in r.output


def test_update_and_compact_show_names_escaped(tmp_path: Path, cli) -> None:
    src, out = tmp_path / "in", tmp_path / "o\x1b[31mut"
    make_dataset(src, {"a": 2, "b": 2}, size=(16, 12))
    r = cli("update", src, out)  # no dataset there yet: an error line naming it
    assert r.exit_code == 2 and "\x1b" not in r.output and "o\\x1b[31mut" in r.output
    convert(src, out)
    save(natural_image(18, 14, 7), src / "a" / "added.jpg", quality=90)
    for args in (
        ("update", src, out, "--dry-run"),
        ("update", src, out),
        ("compact", out, "--dry-run"),
        ("compact", out),
    ):
        r = cli(*args)
        assert r.exit_code == 0 and "\x1b" not in r.output and "o\\x1b[31mut" in r.output, args


@pytest.mark.parametrize("broken", [b"\\xff.png", b"\xff.png"])
def test_the_catalog_tells_an_undecodable_name_from_its_escaped_spelling(tmp_path: Path, broken: bytes) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    make_dataset(src, {"a": 2, "b": 2}, size=(16, 12))
    good = b"\xff.png" if broken == b"\\xff.png" else b"\\xff.png"
    folder = os.fsencode(src / "a")
    save(natural_image(18, 14, 7), Path(os.fsdecode(folder + b"/" + good)))
    with open(folder + b"/" + broken, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n broken")
    convert(src, out)
    cat = catalog.decode((out / catalog.CATALOG_NAME).read_bytes())
    state = {cat.rels[r]: cat.states[r] for r in range(len(cat))}
    assert state[b"a/" + broken] == catalog.SKIPPED and state[b"a/" + good] == catalog.CONVERTED
    assert update(src, out)["up_to_date"]
