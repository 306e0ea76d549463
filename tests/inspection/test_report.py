"""`img2tfrecord report`: one HTML page from dataset.json, the catalog and the sampled records only;
its numbers are those of `inspect --json` and dataset.json; the catalog carries each record's shape."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import struct
from html import unescape
from pathlib import Path

import pytest
from PIL import Image

from helpers import make_dataset, save
from img2tfrecord.format import catalog as catalog_format
from img2tfrecord.format.catalog import MAGIC


def _convert(cli, src: Path, out: Path, *args: str) -> None:
    result = cli("convert", src, out, *args)
    assert result.exit_code == 0, result.output


def _page(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _values(html: str, attr: str) -> dict[str, int]:
    """data-ATTR="key" ... data-value="N" pairs of the page (keys unescaped)."""
    out = {}
    for m in re.finditer(rf'data-{attr}="([^"]*)" data-value="(\d+)"', html):
        out[unescape(m.group(1))] = int(m.group(2))
    return out


def _cells(html: str) -> dict[tuple[str, str], int]:
    return {
        (unescape(s), unescape(c)): int(v)
        for s, c, v in re.findall(r'data-split="([^"]*)" data-class="([^"]*)" data-value="(\d+)"', html)
    }


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """Two splits, an odd class name, a broken file, a duplicate across classes; converted."""
    root = tmp_path_factory.mktemp("report")
    src = root / "in"
    make_dataset(src, {"cat": 12, "dog": 9, "<b>x</b> & 'y'": 5})
    (src / "dog" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    shutil.copy(src / "cat" / "img_001.jpg", src / "dog" / "same_as_cat.jpg")
    save(Image.new("RGB", (64, 20), (10, 200, 30)), src / "cat" / "wide.png")
    out = root / "out"
    from img2tfrecord.conversion.convert import convert

    convert(str(src), str(out), split={"train": 0.7, "validation": 0.3}, shards={"train": 2, "validation": 1})
    return out


def test_numbers_equal_inspect_json_and_dataset_json(dataset: Path, cli, tmp_path: Path) -> None:
    html_path = tmp_path / "r.html"
    result = cli("report", dataset, "-o", html_path)
    assert result.exit_code == 0, result.output
    html = _page(html_path)
    man = json.loads((dataset / "dataset.json").read_text())
    inspected = json.loads(cli("inspect", dataset, "--json").output)["total"]
    records = sum(sp["records"] for sp in man["splits"].values())
    assert records == inspected["records"]
    assert re.search(rf'id="records" data-value="{records}"', html)
    assert _values(html, "split") == {s: sp["records"] for s, sp in man["splits"].items()}
    assert _cells(html) == {(s, c): n for s, sp in man["splits"].items() for c, n in sp["class_counts"].items()}
    for dim in ("height", "width"):
        shown = {stat: int(v) for stat, v in re.findall(rf'data-dim="{dim}" data-stat="(\w+)">(\d+)<', html)}
        assert shown == inspected[dim], dim
    channels = {k: int(v.replace(",", "")) for k, v in re.findall(r'data-channels="(\d+)">([\d,]+)<', html)}
    assert channels == {k: v for k, v in inspected["channels"].items()}
    formats = {unescape(k): int(v.replace(",", "")) for k, v in re.findall(r'data-format="([^"]+)">([\d,]+)<', html)}
    assert formats == inspected["formats"]
    assert re.search(rf'id="skipped-count" data-value="{len(man["skipped"])}"', html) and man["skipped"]
    assert man["duplicates"]["group_count"] == 1 and "across labels: cat, dog" in html


def test_names_are_escaped_and_every_class_is_named(dataset: Path, cli, tmp_path: Path) -> None:
    html_path = tmp_path / "r.html"
    assert cli("report", dataset, "-o", html_path).exit_code == 0
    html = _page(html_path)
    assert "<b>x</b>" not in html
    assert "&lt;b&gt;x&lt;/b&gt; &amp; &#39;y&#39;" in html
    for name in json.loads((dataset / "dataset.json").read_text())["classes"]:
        assert f'data-class="{_escaped(name)}"' in html


def _escaped(name: str) -> str:
    from markupsafe import escape

    return str(escape(name))


def test_self_contained_and_seeded(dataset: Path, cli, tmp_path: Path) -> None:
    a, b, c = tmp_path / "a.html", tmp_path / "b.html", tmp_path / "c.html"
    for path, seed in ((a, "0"), (b, "0"), (c, "1")):
        assert cli("report", dataset, "-o", path, "-n", "3", "--seed", seed).exit_code == 0
    html = _page(a)
    assert html == _page(b)  # the same dataset and seed give the same page
    assert html != _page(c)
    # nothing the browser would fetch: every src/href is a data: URI or a #fragment, no script
    refs = re.findall(r'(?:src|href)="([^"]*)"', html)
    assert refs and all(r.startswith(("data:", "#")) for r in refs)
    assert "<script" not in html and "@import" not in html
    assert "http:" not in html and "https:" not in html  # no address at all, not even an XML namespace
    assert all(u.startswith("#") for u in re.findall(r"url\(([^)]*)\)", html))  # the SVGs' own clip paths
    assert html.count('<img src="data:image/jpeg;base64,') >= 3 * 3  # 3 classes, 3 each
    assert len(html.encode()) < 10 << 20


def test_reads_only_the_sampled_records(dataset: Path, cli, tmp_path: Path) -> None:
    """Every byte of every shard but the sampled records' is zeroed: the page is the same."""
    from img2tfrecord.inspection.report.sample import pick

    copy = tmp_path / "copy"
    shutil.copytree(dataset, copy)
    before = tmp_path / "before.html"
    assert cli("report", copy, "-o", before, "-n", "2").exit_code == 0
    man = json.loads((copy / "dataset.json").read_text())
    cat = catalog_format.decode((copy / catalog_format.CATALOG_NAME).read_bytes())
    offsets = cat.offsets()
    keep: dict[str, list[tuple[int, int]]] = {}
    rows = [r for rs in pick(cat, man["classes"], 2, 0).values() for r in rs]
    dup_rows = [
        r for r in range(len(cat)) if cat.states[r] == 0 and cat.rels[r].startswith((b"cat/img_001", b"dog/same"))
    ]
    for r in rows + dup_rows:
        keep.setdefault(cat.shards[r], []).append((offsets[r], cat.lengths[r]))
    for sp in man["splits"].values():
        for sh in sp["shards"]:
            path = copy / sh["file"]
            data = path.read_bytes()
            blank = bytearray(len(data))
            for off, n in keep.get(sh["file"], []):
                blank[off : off + n] = data[off : off + n]
            path.write_bytes(bytes(blank))
    after = tmp_path / "after.html"
    assert cli("report", copy, "-o", after, "-n", "2").exit_code == 0
    assert _page(after) == _page(before)


def _without_shapes(path: Path) -> None:
    """Rewrite a catalog file as a version that recorded no shapes wrote it (no shape columns)."""
    from img2tfrecord.format.catalog import SHAPE_COLUMNS

    data = path.read_bytes()
    (hlen,) = struct.unpack_from("<I", data, len(MAGIC))
    pos = len(MAGIC) + 4
    header = json.loads(data[pos : pos + hlen])
    pos += hlen
    blobs, kept = [], []
    for name, codec, size in header["columns"]:
        if name not in SHAPE_COLUMNS:
            kept.append([name, codec, size])
            blobs.append(data[pos : pos + size])
        pos += size
    header["columns"] = kept
    head = json.dumps(header, separators=(",", ":")).encode()
    path.write_bytes(MAGIC + struct.pack("<I", len(head)) + head + b"".join(blobs))


def test_catalog_without_shapes_says_so(dataset: Path, cli, tmp_path: Path) -> None:
    copy = tmp_path / "old"
    shutil.copytree(dataset, copy)
    _without_shapes(copy / catalog_format.CATALOG_NAME)
    cat = catalog_format.decode((copy / catalog_format.CATALOG_NAME).read_bytes())
    assert cat.shapes_known() == 0
    html_path = tmp_path / "r.html"
    result = cli("report", copy, "-o", html_path)
    assert result.exit_code == 0, result.output
    html = _page(html_path)
    records = sum(sp["records"] for sp in json.loads((copy / "dataset.json").read_text())["splits"].values())
    assert f"Sizes are recorded in the catalog for 0 of {records} records" in html
    assert 'data-dim="height"' not in html


def test_update_and_compact_carry_the_shapes(tmp_path: Path, cli) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    make_dataset(src, {"a": 4, "b": 3})
    _convert(cli, src, out, "--quiet")
    make_dataset(src, {"c": 3}, seed=5)
    result = cli("update", src, out)
    assert result.exit_code == 0, result.output
    assert result.output.count("See it in a browser: img2tfrecord report") == 1
    history = json.loads((out / "dataset.json").read_text())["history"]
    assert [(h["version"], h["classes"]) for h in history] == [(2, {"c": {"added": 3, "removed": 0, "changed": 0}})]
    for step in ("update", "compact"):
        if step == "compact":
            assert cli("compact", out).exit_code == 0
            assert json.loads((out / "dataset.json").read_text())["history"] == history  # compact changes no image
        cat = catalog_format.decode((out / catalog_format.CATALOG_NAME).read_bytes())
        conv = [r for r in range(len(cat)) if cat.states[r] == 0]
        assert cat.shapes_known() == len(conv) == 10
        inspected = json.loads(cli("inspect", out, "--json").output)["total"]
        heights = sorted(cat.heights[r] for r in conv)
        assert (heights[0], heights[-1]) == (inspected["height"]["min"], inspected["height"]["max"])


def test_inspect_ends_with_the_report_command_and_it_runs_as_printed(tmp_path: Path, cli, monkeypatch) -> None:
    src, out = tmp_path / "in", tmp_path / "my data"
    make_dataset(src, {"a": 3, "b": 2})
    result = cli("convert", src, out)
    assert result.exit_code == 0
    assert result.output.count("See it in a browser: img2tfrecord report") == 1
    text = cli("inspect", out).output
    last = text.rstrip().splitlines()[-1]
    assert last == f"See it in a browser: img2tfrecord report {shlex.quote(str(out))}"
    argv = shlex.split(last.removeprefix("See it in a browser: "))
    monkeypatch.chdir(tmp_path)
    ran = cli(*argv[1:])
    assert ran.exit_code == 0, ran.output
    page = Path(str(out) + "-report.html")
    assert ran.output.startswith(f"wrote {page} (") and page.is_file()
    assert "--contact-sheet" in cli("inspect", "--help").output


def test_usage_errors_are_one_line(tmp_path: Path, cli) -> None:
    result = cli("report", tmp_path)
    assert result.exit_code == 2
    assert (
        result.output.strip()
        == f"error: {tmp_path}: no dataset.json here; give the output folder of img2tfrecord convert"
    )


def test_outcome_shapes_survive_the_journal_and_beams_outcome_files() -> None:
    """`ShardOutcome.to_dict`/`from_dict` (the journal, Beam's outcome files) carry the shapes."""
    from array import array

    from img2tfrecord.conversion.write.shards import ShardInfo, ShardOutcome

    o = ShardOutcome("train", ShardInfo("train-00000-of-00001"), shapes=array("I", [480, 640, 3, 32, 32, 1]))
    back = ShardOutcome.from_dict(json.loads(json.dumps(o.to_dict())))
    assert list(back.shapes) == [480, 640, 3, 32, 32, 1]
    old = {k: v for k, v in o.to_dict().items() if k != "shapes"}  # a journal written before shapes
    assert list(ShardOutcome.from_dict(old).shapes) == []


def test_past_the_byte_budget_classes_are_listed_without_pictures(
    dataset: Path, cli, tmp_path: Path, monkeypatch
) -> None:
    """The thumbnails' bytes are capped (so a page of any number of classes stays under 10 MB)."""
    from img2tfrecord.inspection.report import sample

    html_path = tmp_path / "r.html"
    full = cli("report", dataset, "-o", html_path)
    thumbs = _page(html_path).count('<img src="data:')
    monkeypatch.setattr(sample, "BUDGET", 1)  # not even one class's thumbnails fit
    assert cli("report", dataset, "-o", html_path).exit_code == 0
    html = _page(html_path)
    assert thumbs > 0 and full.exit_code == 0
    assert html.count('<img src="data:') < thumbs  # only the duplicate group's pictures are left
    assert "3 classes are left out to keep the page small." in html
    for name in json.loads((dataset / "dataset.json").read_text())["classes"]:
        assert f'data-class="{_escaped(name)}"' in html  # still counted in the table


def test_compressed_shards_are_read_up_to_the_last_sampled_record(tmp_path: Path, cli) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    make_dataset(src, {"a": 5, "b": 4})
    _convert(cli, src, out, "--compression", "gzip", "--shards", "2", "--quiet")
    html_path = tmp_path / "r.html"
    result = cli("report", out, "-o", html_path, "-n", "3")
    assert result.exit_code == 0 and ", 6 thumbnails" in result.output, result.output
    html = _page(html_path)
    assert html.count('<img src="data:image/jpeg;base64,') == 6 and "could not be shown" not in html


def test_an_output_in_a_missing_folder_is_a_usage_error(dataset: Path, cli, tmp_path: Path) -> None:
    result = cli("report", dataset, "-o", tmp_path / "nope" / "r.html")
    assert result.exit_code == 2
    assert result.output == f"error: {tmp_path / 'nope' / 'r.html'}: its directory does not exist\n"
