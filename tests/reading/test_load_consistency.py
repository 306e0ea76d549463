"""load() on a dataset.json that disagrees with its shards answers in one line of its own, naming the
file: never TensorFlow's traceback (`FailedPreconditionError: Input dataset was expected to contain
14 elements but contained only 11`, from the cardinality it was told). The first case is the example
the property test in test_manifest_validation.py found with a random seed, pinned here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import img2tfrecord
from helpers import make_dataset
from img2tfrecord.errors import DataError


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("counts")
    make_dataset(root / "in", {"a": 4, "b": 4}, size=(16, 12))
    out = root / "out"
    img2tfrecord.convert(str(root / "in"), str(out), split={"train": 0.5, "validation": 0.5}, index=True, workers=1)
    return out


def _edited(dataset: Path, tmp: Path, edit: Any) -> Path:
    out = tmp / "edited"
    shutil.copytree(dataset, out)
    data = json.loads((dataset / "dataset.json").read_text())
    edit(data)
    (out / "dataset.json").write_text(json.dumps(data))
    return out


def _more(field: str, n: int) -> Any:
    def edit(d: Any) -> None:
        d["splits"]["validation"][field] += n

    return edit


@pytest.mark.parametrize("n", [3, -1])
def test_split_records_that_disagree_with_its_shards_is_one_line_naming_dataset_json(
    dataset: Path, tmp_path: Path, n: int
) -> None:
    out = _edited(dataset, tmp_path, _more("records", n))
    for verify in ("framing", "full", "none"):
        with pytest.raises(DataError) as e:
            for _ in img2tfrecord.load(out, split="validation", verify=verify):
                pass
        text = str(e.value)
        assert str(out / "dataset.json") in text and "\n" not in text, text
        assert "splits.validation.records" in text, text


def test_load_of_the_untouched_dataset_reads_every_record(dataset: Path) -> None:
    want = json.loads((dataset / "dataset.json").read_text())["splits"]["validation"]["records"]
    assert sum(1 for _ in img2tfrecord.load(dataset, split="validation")) == want
