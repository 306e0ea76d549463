"""The update benchmark (`bench/run.py --only update`): what keeping a dataset up to date costs.

Each round converts the 8,000-image set (the reference wall time), adds 80 new images (1%) and
times `update`; does the same +80 on the 16,000-image set; removes 10 images and checks that only
the shards that held them were rewritten (bytes written reported); and times `compact` of the
updated 8,000-image dataset. Every step is its own process (start-up included), as a user runs
it. Inputs are hard-link copies of the cached sets, so nothing in bench/.cache changes.

Targets (issue 22): update +1% <= 0.15x a fresh conversion; the +80 update on 16,000 <= 1.25x
on 8,000; compact <= 0.5x a fresh conversion.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import dataset

PY = sys.executable
BIN = os.path.join(os.path.dirname(PY), "img2tfrecord")
EXTRA = 80


def _extra_images() -> str:
    """bench/.cache/extra-80: 80 new photo-like images (seeds the sets do not use), made once."""
    root = os.path.join(dataset.CACHE, f"extra-{EXTRA}")
    if os.path.exists(os.path.join(root, ".complete")):
        return root
    os.makedirs(root, exist_ok=True)
    for i in range(EXTRA):
        im, quality, ext = dataset.photo_like(1_000_000 + i)
        buf = io.BytesIO()
        im.save(buf, "PNG" if ext == "png" else "JPEG", **({"quality": quality} if quality else {}))
        with open(os.path.join(root, f"new_{i:04d}.{ext}"), "wb") as f:
            f.write(buf.getvalue())
    open(os.path.join(root, ".complete"), "w").close()
    return root


def _linked_copy(src: str, dst: str) -> None:
    """`cp -al`: the same files under a folder the benchmark may change."""
    for dirpath, _dirs, files in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        os.makedirs(os.path.join(dst, rel), exist_ok=True)
        for f in files:
            if not f.startswith("."):
                os.link(os.path.join(dirpath, f), os.path.join(dst, rel, f))


def _timed(argv: list[str]) -> tuple[float, dict]:
    start = time.perf_counter()
    res = subprocess.run(argv, capture_output=True, text=True, env=os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3"})
    wall = time.perf_counter() - start
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({res.returncode}):\n{res.stderr[-2000:]}")
    return wall, json.loads(res.stdout.strip().splitlines()[-1]) if res.stdout.strip() else {}


def _add(src: str, extra: str) -> None:
    for i, name in enumerate(sorted(n for n in os.listdir(extra) if not n.startswith("."))):
        os.link(os.path.join(extra, name), os.path.join(src, dataset.CLASSES[i % len(dataset.CLASSES)], name))


def run(rounds: int = 3) -> dict:
    extra = _extra_images()
    sets = {n: dataset.make(n) for n in (8000, 16000)}
    work = tempfile.mkdtemp(prefix="img2tfrecord-bench-update-", dir=dataset.CACHE)
    runs: list[dict] = []
    try:
        for r in range(rounds):
            row: dict = {}
            for n, data in sets.items():
                src, out = os.path.join(work, f"in{n}"), os.path.join(work, f"out{n}")
                shutil.rmtree(src, ignore_errors=True)
                shutil.rmtree(out, ignore_errors=True)
                _linked_copy(data, src)
                row[f"convert_{n}"], _ = _timed([BIN, "convert", src, out, "--json", "--quiet"])
                _add(src, extra)
                row[f"update_{n}"], s = _timed([BIN, "update", src, out, "--json", "--quiet"])
                row[f"update_{n}_bytes_written"] = s["bytes_written"]
                if n == 8000:
                    gone = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(src) for f in fs)[::797][:10]
                    cat_before = {p: _shard_of(out, os.path.relpath(p, src)) for p in gone}
                    for p in gone:
                        os.remove(p)
                    row["remove_10"], s = _timed([BIN, "update", src, out, "--json", "--quiet"])
                    holders = set(cat_before.values())
                    row["remove_10_shards_held"] = len(holders)
                    row["remove_10_shards_rewritten"] = s["shards_rewritten"]
                    row["remove_10_bytes_written"] = s["bytes_written"]
                    row["remove_10_bytes_rewritten_shards"] = s["bytes_rewritten_shards"]
                    row["dataset_bytes"] = sum(
                        os.path.getsize(os.path.join(out, f)) for f in os.listdir(out) if "-of-" in f
                    )
                    row["compact_8000"], _ = _timed([BIN, "compact", out, "--json"])
                    cat = os.path.join(out, "dataset.catalog")
                    row["catalog_bytes_per_image"] = os.path.getsize(cat) / sum(1 for _ in _rows(out))
            runs.append(row)
            print(
                f"  update round {r + 1}/{rounds}: {json.dumps({k: round(v, 2) for k, v in row.items()})}",
                file=sys.stderr,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def med(key: str) -> float:
        return statistics.median(row[key] for row in runs)

    ratios = {
        "update +1% (80 images) / fresh conversion, 8,000 images": (med("update_8000") / med("convert_8000"), 0.15),
        "update +80 on 16,000 / on 8,000": (med("update_16000") / med("update_8000"), 1.25),
        "compact of the updated 8,000 / fresh conversion": (med("compact_8000") / med("convert_8000"), 0.5),
    }
    print(f"\nupdate bench: medians of {rounds} rounds (whole processes, start-up included)")
    for key in ("convert_8000", "update_8000", "convert_16000", "update_16000", "remove_10", "compact_8000"):
        print(f"  {key:44s} {med(key):7.2f} s")
    for name, (value, target) in ratios.items():
        print(f"  {name:58s} {value:5.3f}  {'ok' if value <= target else f'MISSED (target <= {target})'}")
    rewritten_ok = all(row["remove_10_shards_rewritten"] <= row["remove_10_shards_held"] for row in runs)
    print(
        f"  remove 10 images: {runs[-1]['remove_10_shards_rewritten']} shards rewritten of the "
        f"{runs[-1]['remove_10_shards_held']} that held them; {runs[-1]['remove_10_bytes_written'] / 1e6:.1f} MB "
        f"written of a {runs[-1]['dataset_bytes'] / 1e6:.0f} MB dataset  {'ok' if rewritten_ok else 'MISSED'}"
    )
    print(f"  catalog: {med('catalog_bytes_per_image'):.1f} bytes per image on disk (target <= 50)")
    return {"runs": runs, "ratios": {k: v for k, (v, _) in ratios.items()}}


def _rows(out: str) -> list[bytes]:
    from img2tfrecord.format import catalog

    with open(os.path.join(out, catalog.CATALOG_NAME), "rb") as f:
        return catalog.decode(f.read()).rels


def _shard_of(out: str, rel: str) -> str:
    from img2tfrecord.format import catalog

    with open(os.path.join(out, catalog.CATALOG_NAME), "rb") as f:
        cat = catalog.decode(f.read())
    return cat.shards[cat.rels.index(rel.encode())]


if __name__ == "__main__":
    run(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
