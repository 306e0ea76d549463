"""The detection benchmark: `convert --annotations COCO` against `convert` of the same images.

The images are the convert benchmark's 4,000 (bench/dataset.py); the annotations a COCO
instances file made for them once (bench/.cache/detection-4000-v2.json: 1-12 boxes an image, seeded,
2% of them partly outside the image so clipping is paid too, 10 categories). Each run is a fresh
process as a user runs it (`img2tfrecord convert IMAGES OUT --quiet`), the two alternate over the
rounds (the order rotates) and medians are reported: this machine is shared and noisy. The ratio
of the median wall times (detection / classification) is the per-image cost of the boxes, with
parsing the annotation file once; the target is at most 1.2. The ratio of CPU seconds (all the
process's threads and workers) is shown beside it: other work on a shared machine moves it less.

Usage: python bench/detection.py [--rounds 5]   (or python bench/run.py --only detection)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dataset  # noqa: E402
from verify import BIN, run_once  # noqa: E402

TARGET = 1.2


def annotations(images: str) -> str:
    """bench/.cache/detection-4000-v2.json: a COCO instances file for the bench images (made once)."""
    path = os.path.join(dataset.CACHE, "detection-4000-v2.json")
    if os.path.exists(path):
        return path
    from PIL import Image

    rng = random.Random(30)
    coco: dict[str, list[dict]] = {"images": [], "annotations": [], "categories": []}
    coco["categories"] = [{"id": i + 1, "name": c} for i, c in enumerate(dataset.CLASSES)]
    for cls in dataset.CLASSES:
        for name in sorted(os.listdir(os.path.join(images, cls))):
            with Image.open(os.path.join(images, cls, name)) as im:
                width, height = im.size
            image_id = len(coco["images"]) + 1
            coco["images"].append({"id": image_id, "file_name": f"{cls}/{name}", "width": width, "height": height})
            for _ in range(rng.randint(1, 12)):
                w, h = rng.uniform(8, width / 2), rng.uniform(8, height / 2)
                x, y = rng.uniform(0, width - w), rng.uniform(0, height - h)
                if rng.random() < 0.02:  # partly outside: clipped
                    x = -w / 4 if rng.random() < 0.5 else width - w * 0.75
                coco["annotations"].append(
                    {
                        "id": len(coco["annotations"]) + 1,
                        "image_id": image_id,
                        "category_id": rng.randint(1, len(dataset.CLASSES)),
                        "bbox": [round(x, 2), round(y, 2), round(w, 2), round(h, 2)],
                        "area": round(w * h, 2),
                        "iscrowd": int(rng.random() < 0.02),
                    }
                )
    with open(path + ".tmp", "w") as f:
        json.dump(coco, f)
    os.replace(path + ".tmp", path)
    return path


def run(rounds: int = 5) -> dict:
    images = dataset.make(4000)
    coco = annotations(images)
    out = os.path.join(dataset.CACHE, "detection-out")
    contenders = {
        "classification": [BIN, "convert", images, out, "--quiet", "--overwrite"],
        "detection": [BIN, "convert", images, out, "--quiet", "--overwrite", "--annotations", coco],
    }
    walls: dict[str, list[float]] = {k: [] for k in contenders}
    rss: dict[str, list[float]] = {k: [] for k in contenders}
    cpu: dict[str, list[float]] = {k: [] for k in contenders}
    keys = list(contenders)
    for r in range(rounds):
        for k in keys[r % len(keys) :] + keys[: r % len(keys)]:  # rotate: no contender always first
            shutil.rmtree(out, ignore_errors=True)
            x = run_once(contenders[k])
            walls[k].append(x["wall_seconds"])
            rss[k].append(x["peak_rss_mb"])
            cpu[k].append(x["cpu_seconds"])
            print(
                f"  round {r + 1}/{rounds}: {k}: {x['wall_seconds']:.2f} s, CPU {x['cpu_seconds']:.2f} s, {x['peak_rss_mb']:.0f} MB, "
                f"other work meanwhile {x['others_cores']:.2f} cores",
                file=sys.stderr,
            )
    shutil.rmtree(out, ignore_errors=True)
    median = {k: statistics.median(v) for k, v in walls.items()}
    ratio = median["detection"] / median["classification"]
    cpus = {k: statistics.median(v) for k, v in cpu.items()}
    cpu_ratio = cpus["detection"] / cpus["classification"]
    boxes = len(json.load(open(coco))["annotations"])
    print(f"\nconvert --annotations: 4,000 images, {boxes:,} boxes, medians of {rounds} alternated rounds")
    for k in keys:
        print(f"  {k:15s} {median[k]:6.2f} s  CPU {cpus[k]:6.2f} s  peak RSS {statistics.median(rss[k]):5.0f} MB")
    print(f"  detection / classification {ratio:.2f}{'  ok' if ratio <= TARGET else f'  (target <= {TARGET})'}")
    print(f"  detection / classification, CPU seconds {cpu_ratio:.2f}")
    return {
        "images": 4000,
        "boxes": boxes,
        "rounds": rounds,
        "walls": walls,
        "cpu": cpu,
        "median_seconds": median,
        "ratio": ratio,
        "cpu_ratio": cpu_ratio,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    run(ap.parse_args().rounds)


if __name__ == "__main__":
    main()
