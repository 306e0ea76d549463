"""The start-up benchmark (`make bench-startup`; part of `make bench`): what a conversion costs
before its steady state, against what it cannot avoid.

Issue 41 item 3 ("no start-up tax"): the worker pool starts while the plan is made and the record
writer loads meanwhile, so

- a 30-image conversion (sample_data) takes at most 1.1x its floor: `python -c "import
  img2tfrecord"` plus the record writer's load (one process that imports the package and loads
  the writer, as the converter must);
- a conversion's first record is written no later than the walk's end plus one image's encode:
  `first_record_seconds - planned_seconds` of convert's --json summary, against one image's
  encode on one worker (the run's workers / its steady images per second).

Contenders alternate over the rounds; medians are reported. Wall times, so a busy machine moves
them: compare the ratios, which are taken in the same rounds.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable
BIN = os.path.join(os.path.dirname(PY), "img2tfrecord")
SAMPLE = os.path.join(os.path.dirname(HERE), "sample_data")
CORES = os.cpu_count() or 1
ENV = os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3"}

IMPORT = [PY, "-c", "import img2tfrecord"]
FLOOR = [PY, "-c", "import img2tfrecord\nfrom img2tfrecord.tf_import import record_io\nrecord_io()"]


def _timed(argv: list[str]) -> tuple[float, dict]:
    """Wall seconds of one process, and its --json answer (if it printed one)."""
    start = time.perf_counter()
    r = subprocess.run(argv, capture_output=True, text=True, env=ENV)
    wall = time.perf_counter() - start
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    lines = r.stdout.strip().splitlines()
    return wall, (json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {})


def _convert(data: str, out: str, workers: int | None) -> tuple[float, dict]:
    shutil.rmtree(out, ignore_errors=True)
    extra = ["--workers", str(workers)] if workers else []
    return _timed([BIN, "convert", data, out, "--json", "--quiet", *extra])


def run(rounds: int = 5, big: str | None = None) -> dict:
    """Alternate the contenders `rounds` times; print and return medians and ratios. `big`: a
    larger image folder (the bench's 4,000 images) for the first-record gap on all cores."""
    work = tempfile.mkdtemp(prefix="img2tfrecord-startup-")
    times: dict[str, list[float]] = {"import": [], "floor": [], "convert 30": [], "convert big": []}
    gaps: dict[str, list[float]] = {"30": [], "big": []}
    per_image: list[float] = []
    try:
        for r in range(rounds):
            for name in (["import", "floor", "convert 30", "convert big"] * 2)[r % 4 : r % 4 + 4]:
                if name == "import":
                    times[name].append(_timed(IMPORT)[0])
                elif name == "floor":
                    times[name].append(_timed(FLOOR)[0])
                elif name == "convert 30":
                    wall, s = _convert(SAMPLE, os.path.join(work, "small"), None)
                    times[name].append(wall)
                    gaps["30"].append(s["first_record_seconds"] - s["planned_seconds"])
                elif big:
                    wall, s = _convert(big, os.path.join(work, "big"), CORES)
                    times[name].append(wall)
                    gaps["big"].append(s["first_record_seconds"] - s["planned_seconds"])
                    per_image.append(s["workers"] / s["steady_images_per_second"])
            print(f"  startup round {r + 1}/{rounds} done", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items() if v}
    result: dict = {"seconds": med, "first_record_after_plan_seconds": {}, "ratios": {}}
    print(f"\nstart-up, medians of {rounds} rounds (wall s)")
    for name, value in med.items():
        print(f"  {name:58s} {value:6.3f}")
    checks = [
        ("30-image convert / (import img2tfrecord + record writer's load)", med["convert 30"] / med["floor"], 1.1)
    ]
    for key, gap in gaps.items():
        if gap:
            result["first_record_after_plan_seconds"][key] = statistics.median(gap)
    if per_image:
        encode = statistics.median(per_image)
        result["one_image_encode_seconds"] = encode
        gap = result["first_record_after_plan_seconds"]["big"]
        checks.append((f"first record after the plan / one image's encode ({CORES} workers)", gap / encode, 1.0))
    for name, value, target in checks:
        result["ratios"][name] = value
        verdict = "  ok" if value <= target else f"  MISSED (target <= {target})"
        print(f"{name:72s} {value:6.2f}{verdict}")
    gap30 = result["first_record_after_plan_seconds"].get("30")
    if gap30 is not None:
        print(f"{'30-image convert: first record after the plan (s)':72s} {gap30:6.3f}")
    return result


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    import dataset

    print(json.dumps(run(int(sys.argv[1]) if len(sys.argv) > 1 else 5, dataset.make(4000)), indent=2))
