"""`bench/run.py --only plan`: walk + plan of a million files against a plain-Python floor.

The tree is 10 class folders of hard links to one small real JPEG (a million links cost one inode
and ~60 MB of directory entries; no million images needed), made once under bench/.cache/ (never
committed) and reused. Two processes are compared, alternated over rounds, medians reported:

* the floor: an `os.scandir` walk keeping (path, size) tuples, sorted and shuffled, the least a
  Python tool can do to know which files go where;
* ours: `img2tfrecord convert INPUT OUT --dry-run --json` (walk, labels, split, shuffle, shards,
  the summary; no TensorFlow), and the same with `--split train=0.8,validation=0.2` (a split per
  class, exact to one image).

Each is timed as a whole process (interpreter start-up included) and its peak RSS is the
kernel's (`wait4`'s ru_maxrss). Bytes per image = (peak RSS at 1 M files - peak RSS at 10 k
files) / (1 M - 10 k): what each image costs the planning process, start-up and imports removed.
Targets (issue 13, item 4): time <= 1.5x the floor, <= 150 bytes per image (100 M images in
< 15 GB on a Beam driver).

Usage: python bench/plan.py [--images 1000000] [--small 10000] [--rounds 3] [--out bench/results-plan.json]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CACHE = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".cache")
PY = sys.executable
BIN = os.path.join(os.path.dirname(PY), "img2tfrecord")
CLASSES = 10
LINKS_PER_FILE = 50_000  # ext4 allows 65,000 links to one inode: one copy of the image per 50,000 links

FLOOR = """
import os, random, sys
root = sys.argv[1]
found = []
for c in os.scandir(root):
    if c.is_dir():
        for e in os.scandir(c.path):
            found.append((e.path, e.stat().st_size))
found.sort()
random.Random(0).shuffle(found)
print(len(found))
"""


def _image_bytes() -> bytes:
    """One small real JPEG (Pillow), the target of every link."""
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (32, 24), (200, 120, 40)).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def make_tree(n: int) -> str:
    """bench/.cache/plan-<n>/class_XX/img_XXXXXXXX.jpg: n hard links in 10 classes (made once)."""
    root = os.path.join(CACHE, f"plan-{n}")
    done = os.path.join(root, ".complete")
    if os.path.exists(done):
        return root
    os.makedirs(root, exist_ok=True)
    data = _image_bytes()
    t = time.perf_counter()
    for c in range(CLASSES):
        folder = os.path.join(root, f"class_{c:02d}")
        os.makedirs(folder, exist_ok=True)
        for i in range(c, n, CLASSES):
            source = os.path.join(root, f".source-{i // LINKS_PER_FILE}.jpg")  # hidden: the walk skips it
            if i % LINKS_PER_FILE < CLASSES and not os.path.exists(source):
                with open(source, "wb") as f:
                    f.write(data)
            try:
                os.link(source, os.path.join(folder, f"img_{i:08d}.jpg"))
            except FileExistsError:
                pass
    open(done, "w").close()
    print(f"  made {n:,} links in {root} ({time.perf_counter() - t:.0f} s)", file=sys.stderr)
    return root


def run_once(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of one process, from the kernel's accounting of that child."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}):\n{err[-2000:]}")
    return wall, usage.ru_maxrss / 1024  # KiB on Linux


def contenders(tree: str, out: str) -> dict[str, list[str]]:
    return {
        "floor (scandir, (path, size) tuples, sort, shuffle)": [PY, "-c", FLOOR, tree],
        "ours: convert --dry-run --json": [BIN, "convert", tree, out, "--dry-run", "--json"],
        "ours, --split train=0.8,validation=0.2": [
            *[BIN, "convert", tree, out, "--dry-run", "--json"],
            *["--split", "train=0.8,validation=0.2"],
        ],
    }


def run(images: int = 1_000_000, small: int = 10_000, rounds: int = 3) -> dict:
    big, little = make_tree(images), make_tree(small)
    out = tempfile.mkdtemp(prefix="plan-out-")
    os.rmdir(out)  # a dry run refuses nothing for a missing output
    names = list(contenders(big, out))
    runs: dict[str, dict[str, list[tuple[float, float]]]] = {n: {"big": [], "small": []} for n in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]  # alternate who goes first
        for name in order:
            for size, tree in (("small", little), ("big", big)):
                runs[name][size].append(run_once(contenders(tree, out)[name]))
            wall, rss = runs[name]["big"][-1]
            print(f"  round {r + 1}/{rounds}: {name}: {wall:.2f} s, {rss:.0f} MB", file=sys.stderr)
    rows = {}
    for name in names:
        wall = statistics.median(w for w, _ in runs[name]["big"])
        rss = statistics.median(m for _, m in runs[name]["big"])
        rss_small = statistics.median(m for _, m in runs[name]["small"])
        rows[name] = {
            "wall_seconds": round(wall, 3),
            "peak_rss_mb": round(rss, 1),
            "peak_rss_mb_small": round(rss_small, 1),
            "bytes_per_image": round((rss - rss_small) * 2**20 / (images - small), 1),
            "runs": runs[name],
        }
    floor, ours = rows[names[0]], rows[names[1]]
    ratio = ours["wall_seconds"] / floor["wall_seconds"]
    print(f"\nwalk + plan: {images:,} files in {CLASSES} classes, medians of {rounds} rounds\n")
    header = f"{'contender':52s} {'wall s':>7s} {'peak RSS MB':>11s} {'bytes/image':>11s}"
    print(header)
    print("-" * len(header))
    for name, row in rows.items():
        print(f"{name:52s} {row['wall_seconds']:7.2f} {row['peak_rss_mb']:11.0f} {row['bytes_per_image']:11.0f}")
    print()
    print(f"{'dry run / floor (wall time)':52s} {ratio:7.2f}{'  ok' if ratio <= 1.5 else '  MISSED (target <= 1.5)'}")
    bpi = ours["bytes_per_image"]
    print(f"{'bytes per image, dry run':52s} {bpi:7.0f}{'  ok' if bpi <= 150 else '  MISSED (target <= 150)'}")
    return {"images": images, "small": small, "rounds": rounds, "contenders": rows, "ratio": ratio}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=1_000_000)
    ap.add_argument("--small", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results-plan.json"))
    args = ap.parse_args(argv)
    result = run(args.images, args.small, args.rounds)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"\nresults: {args.out}")


if __name__ == "__main__":
    main()
