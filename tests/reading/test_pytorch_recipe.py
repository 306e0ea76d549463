"""The PyTorch recipe of docs/reading.md, run with the `tfrecord` package's own reader (no torch needed).

`MultiTFRecordDataset.__iter__` in a DataLoader worker calls
`tfrecord.reader.multi_tfrecord_loader(..., shard=(worker id, workers))`; the test makes those
calls, one per worker, with the recipe's own shards, description and `to_sample`, in a process
without TensorFlow (the package and TensorFlow register the same protobuf names).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers import make_dataset, read_records, run_without_tensorflow

READING = Path(__file__).resolve().parents[2] / "docs" / "reading.md"

WORKERS = """
import json, sys
out, workers = sys.argv[1], int(sys.argv[2])
exec(sys.argv[3])  # the docs' recipe up to `import torch`: shards, description, to_sample
from tfrecord.reader import multi_tfrecord_loader

seen = []
for w in range(workers):  # what each DataLoader worker's iterator reads
    shard = (w, workers) if workers > 1 else None
    for ex in multi_tfrecord_loader(f"{out}/{{}}", f"{out}/{{}}.idx", shards, {**description, "image/filename": "byte"},
                                    shard=shard, infinite=False):
        image, label = to_sample(ex)
        seen.append([bytes(ex["image/filename"]).decode(), label, list(image.shape), str(image.dtype), float(image.max())])
print(json.dumps(seen))
"""


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    from click.testing import CliRunner

    from img2tfrecord.cli import main

    root = tmp_path_factory.mktemp("in")
    make_dataset(root, {"a": 5, "b": 4, "c": 4})
    out = tmp_path_factory.mktemp("out") / "out"
    res = CliRunner().invoke(
        main, ["convert", str(root), str(out), "--shards", "3", "--index", "--quiet"], catch_exceptions=False
    )
    assert res.exit_code == 0, res.output
    return out


def recipe() -> str:
    section = READING.read_text(encoding="utf-8").split("## PyTorch", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    return block.split("\nimport torch\n", 1)[0].replace('out = "out"\n', "")


@pytest.mark.parametrize("workers", [1, 3])
def test_docs_pytorch_recipe_reads_every_record_once(converted: Path, workers: int) -> None:
    seen = run_without_tensorflow(WORKERS, converted, workers, recipe())
    want = {r["filename"].decode(): int(r["label"]) for r in read_records(converted)}
    assert sorted(f for f, *_ in seen) == sorted(want)  # every record, each once
    for name, label, shape, dtype, top in seen:
        assert label == want[name] and shape == [3, 224, 224] and dtype == "float32" and 0 < top <= 1
