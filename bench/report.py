"""The report benchmark: `img2tfrecord report OUT` against `img2tfrecord inspect OUT` (no --verify), same dataset.

The dataset is the bench images (`--images`, default 100,000: the 4,000 generated ones hard-linked
25 times, so every image has 24 byte-identical copies: 4,000 duplicate groups), converted once
with a train/validation split into bench/.cache/report-N (kept). Each run is a fresh process,
timed whole (interpreter, imports), its peak RSS sampled every 0.1 s; contenders alternate over
the rounds and medians are reported. The report must finish in under 15 s and 400 MB; the ratio to
`inspect` (which reads every record) says what reading only the sampled records saves.

Usage: python bench/report.py [--images 100000] [--rounds 3]   (or python bench/run.py --only report)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dataset  # noqa: E402
from verify import run_once  # noqa: E402

PY = sys.executable
BIN = os.path.join(os.path.dirname(PY), "img2tfrecord")
LIMIT_SECONDS, LIMIT_MB = 15.0, 400.0


def converted(images: int) -> str:
    """bench/.cache/report-N: the bench images converted once, split 90/10."""
    out = os.path.join(dataset.CACHE, f"report-{images}")
    if not os.path.exists(os.path.join(out, "dataset.json")):
        src = dataset.make(images)
        print(f"  converting {images} bench images into {out} (once)", file=sys.stderr)
        subprocess.run(
            [BIN, "convert", src, out, "--split", "train=0.9,validation=0.1", "--quiet", "--overwrite"], check=True
        )
    return out


def run(rounds: int = 3, images: int = 100_000) -> dict:
    out = converted(images)
    manifest = json.load(open(os.path.join(out, "dataset.json")))
    records = sum(sp["records"] for sp in manifest["splits"].values())
    with tempfile.TemporaryDirectory() as tmp:
        page = os.path.join(tmp, "report.html")
        contenders = {"report": [BIN, "report", out, "-o", page], "inspect": [BIN, "inspect", out]}
        runs: dict[str, list[dict]] = {k: [] for k in contenders}
        keys = list(contenders)
        for r in range(rounds):
            for k in keys[r % 2 :] + keys[: r % 2]:
                x = run_once(contenders[k])
                x.pop("stdout")
                runs[k].append(x)
                print(f"  round {r + 1} {k}: {x['wall_seconds']:.2f} s, {x['peak_rss_mb']:.0f} MB", file=sys.stderr)
        size = os.path.getsize(page)
    med = {k: {m: statistics.median(x[m] for x in v) for m in ("wall_seconds", "peak_rss_mb")} for k, v in runs.items()}
    result = {
        "records": records,
        "report_seconds": med["report"]["wall_seconds"],
        "report_peak_rss_mb": med["report"]["peak_rss_mb"],
        "inspect_seconds": med["inspect"]["wall_seconds"],
        "inspect_peak_rss_mb": med["inspect"]["peak_rss_mb"],
        "time_ratio_to_inspect": med["report"]["wall_seconds"] / med["inspect"]["wall_seconds"],
        "page_bytes": size,
        "within_limits": med["report"]["wall_seconds"] < LIMIT_SECONDS and med["report"]["peak_rss_mb"] < LIMIT_MB,
    }
    print(
        f"report of {records:,} records: {result['report_seconds']:.2f} s, {result['report_peak_rss_mb']:.0f} MB peak, "
        f"page {size / 1e6:.2f} MB; inspect (no --verify): {result['inspect_seconds']:.2f} s, "
        f"{result['inspect_peak_rss_mb']:.0f} MB; ratio {result['time_ratio_to_inspect']:.3f}x; "
        f"limits 15 s / 400 MB: {'met' if result['within_limits'] else 'NOT met'}"
    )
    return result


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    res = run(a.rounds, a.images)
    sys.exit(0 if res["within_limits"] else 1)
