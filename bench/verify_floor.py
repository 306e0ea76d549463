"""Verify against its floor: `inspect --verify` against TensorFlow decoding the same images, nothing else.

`inspect --verify` keeps TensorFlow's own decoder as its proof, so its floor is that decoder on
every core: the dataset's images taken out of its records first (untimed, held in memory as
batches of 32), then decoded on one thread per core, each calling one traced `tf.map_fn` over a
batch at a time: `tf.io.decode_jpeg(ratio=8)` for JPEGs (1/8 scale, as verify), `decode_image`
at full size for the rest, only the shape kept. Of the ways of calling TensorFlow measured (CPU
time an image, one core, the bench's JPEGs), a traced batch is the cheapest: one eager call per
image costs ~15% more, a `tf.data` map ~2.5x; so this is the floor.

Contenders, each a fresh process, alternated over the rounds (the order rotates), medians:

* floor: the images decoded as above, images / the decoding's wall time;
* verify after start-up: `inspect DIR --verify --json` in one process that first verified 32
  images (TensorFlow's import, tracing), images / the second run's wall time (bench/verify.py's
  STEADY); `--workers` left to its default (one per core);
* verify, whole process: `img2tfrecord inspect DIR --verify --json`, as a user runs it;
* convert, whole process: `img2tfrecord convert` of the same images into a fresh folder, default
  options (DIR is the same conversion, made once).

Ratios of one run (the targets of issue 41, item 2): verify after start-up / floor >= 0.85;
verify / convert, whole process wall time: <= 1.0 on 16,000 images, <= 1.5 on 4,000 (where
TensorFlow's ~3 s import dominates). A ratio that misses its target is printed as MISSED.
The load of the machine (`uptime`'s 1-minute average, and the cores other processes kept busy
during each run) is printed with the figures: this machine is shared.

Usage: python bench/verify_floor.py [--images 16000] [--rounds 3]   (or make bench-verify)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dataset  # noqa: E402
import verify  # noqa: E402

PY, BIN, CORES = verify.PY, verify.BIN, verify.CORES
VERIFY_OVER_FLOOR = 0.85  # at least
VERIFY_OVER_CONVERT = {16000: 1.0, 4000: 1.5}  # at most, by dataset size

# TensorFlow decoding the dataset's images on every core, nothing else (argv: dataset folder, threads).
FLOOR = """
import glob, json, os, queue, sys, threading, time
from img2tfrecord.tf_import import tensorflow  # TensorFlow imported quietly, as verify does
tf = tensorflow()
files = sorted(glob.glob(os.path.join(sys.argv[1], "*-of-*")))
threads = int(sys.argv[2])
parse = lambda r: tf.io.parse_single_example(r, {"image/encoded": tf.io.FixedLenFeature([], tf.string)})["image/encoded"]
images = tf.data.TFRecordDataset(files).map(parse)
jpeg = lambda x: tf.strings.substr(x, 0, 3) == b"\\xff\\xd8\\xff"
batches = [("jpeg", b) for b in images.filter(jpeg).batch(32)]
batches += [("other", b) for b in images.filter(lambda x: tf.logical_not(jpeg(x))).batch(32)]
def traced(fn):
    spec = tf.TensorSpec([3], tf.int32)
    return tf.function(
        lambda b: tf.map_fn(fn, b, fn_output_signature=spec, parallel_iterations=1),
        input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
decode = {
    "jpeg": traced(lambda x: tf.shape(tf.io.decode_jpeg(x, channels=0, ratio=8))),
    "other": traced(lambda x: tf.shape(tf.io.decode_image(x, channels=0, expand_animations=False))),
}
for kind, b in batches[:1] + batches[-1:]:
    decode[kind](b[:1])  # traced before the clock starts
work = queue.SimpleQueue()
for item in batches:
    work.put(item)
def worker():
    while True:
        try:
            kind, b = work.get_nowait()
        except queue.Empty:
            return
        decode[kind](b).numpy()
t, cpu = time.perf_counter(), time.process_time()
pool = [threading.Thread(target=worker) for _ in range(threads)]
for p in pool:
    p.start()
for p in pool:
    p.join()
seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
print(json.dumps({"images": sum(int(b.shape[0]) for _, b in batches), "steady_seconds": seconds, "steady_cpu_seconds": cpu}))
"""


def _load() -> float:
    """The machine's 1-minute load average (`uptime`'s first figure)."""
    return os.getloadavg()[0]


def run(rounds: int = 3, images: int = 16000) -> dict:
    out = verify.converted(images)
    total = sum(
        s["records"]
        for sp in json.load(open(os.path.join(out, "dataset.json")))["splits"].values()
        for s in sp["shards"]
    )
    tiny = verify.small()
    src = dataset.make(images)
    fresh = os.path.join(dataset.CACHE, f"verify-floor-convert-{images}")
    contenders = {
        "floor": [PY, "-c", FLOOR, out, str(CORES)],
        "verify after start-up": [PY, "-c", verify.STEADY, out, tiny, str(CORES)],
        "verify, whole process": [BIN, "inspect", out, "--verify", "--json"],
        "convert, whole process": [BIN, "convert", src, fresh, "--quiet"],
    }
    runs: dict[str, list[dict]] = {k: [] for k in contenders}
    keys = list(contenders)
    loads = []
    for r in range(rounds):
        for k in keys[r % len(keys) :] + keys[: r % len(keys)]:  # rotate: no contender always first
            subprocess.run(["rm", "-rf", fresh], check=True)
            loads.append(_load())
            x = verify.run_once(contenders[k], stderr_ok=k.startswith("convert"))  # its duplicates warning
            stdout = x.pop("stdout").decode().strip()
            if k in ("floor", "verify after start-up"):
                x |= json.loads(stdout.splitlines()[-1])
                x["rate"] = total / x["steady_seconds"]
                x["steady_cpu_ms"] = x["steady_cpu_seconds"] / total * 1e3
            else:
                x["rate"] = total / x["wall_seconds"]
            runs[k].append(x)
            print(
                f"  round {r + 1}/{rounds}: {k}: {x['rate']:.0f} img/s, wall {x['wall_seconds']:.2f} s, "
                f"CPU {x['cpu_seconds']:.1f} s, other work meanwhile {x['others_cores']:.2f} cores, load {loads[-1]:.1f}",
                file=sys.stderr,
            )
    subprocess.run(["rm", "-rf", fresh], check=True)
    rows = {
        k: {
            "images_per_second": statistics.median(x["rate"] for x in v),
            "wall_seconds": statistics.median(x["wall_seconds"] for x in v),
            "cpu_ms_per_image": statistics.median(x["cpu_seconds"] for x in v) / total * 1e3,
            "steady_cpu_ms": statistics.median(x["steady_cpu_ms"] for x in v) if "steady_cpu_ms" in v[0] else None,
            "others_cores": statistics.median(x["others_cores"] for x in v),
            "rates": [x["rate"] for x in v],
        }
        for k, v in runs.items()
    }
    # ratios of one round each, then their median: the contenders of a round shared its load
    per_round = [
        {
            "verify after start-up / floor": runs["verify after start-up"][i]["rate"] / runs["floor"][i]["rate"],
            "verify / convert, whole process": runs["verify, whole process"][i]["wall_seconds"]
            / runs["convert, whole process"][i]["wall_seconds"],
            # the same after start-up as CPU time an image: what the ratio is on an idle machine, where
            # both keep every core busy; a steadier figure than wall time when others take cores
            "floor / verify, CPU ms an image after start-up": runs["floor"][i]["steady_cpu_ms"]
            / runs["verify after start-up"][i]["steady_cpu_ms"],
        }
        for i in range(rounds)
    ]
    ratios = {k: statistics.median(p[k] for p in per_round) for k in per_round[0]}
    limit = VERIFY_OVER_CONVERT.get(images, 1.0)
    targets = {
        "verify after start-up / floor": (">=", VERIFY_OVER_FLOOR),
        "verify / convert, whole process": ("<=", limit),
        "floor / verify, CPU ms an image after start-up": (">=", VERIFY_OVER_FLOOR),
    }
    print(
        f"\ninspect --verify against its floor: {total:,} images, {CORES} cores, medians of {rounds} alternated rounds, "
        f"load average {min(loads):.1f}-{max(loads):.1f}\n"
    )
    header = (
        f"{'':24s} {'img/s':>7s} {'wall s':>8s} {'CPU ms/img':>11s} {'steady CPU ms/img':>18s} {'others, cores':>14s}"
        "  img/s by round"
    )
    print(header + "\n" + "-" * len(header))
    for k, row in rows.items():
        each = ", ".join(f"{v:.0f}" for v in row["rates"])
        steady = f"{row['steady_cpu_ms']:18.2f}" if row["steady_cpu_ms"] is not None else f"{'':18s}"
        print(
            f"{k:24s} {row['images_per_second']:7.0f} {row['wall_seconds']:8.2f} {row['cpu_ms_per_image']:11.2f} "
            f"{steady} {row['others_cores']:14.2f}  {each}"
        )
    print()
    for name, value in ratios.items():
        op, target = targets[name]
        ok = value >= target if op == ">=" else value <= target
        rounds_text = ", ".join(f"{p[name]:.2f}" for p in per_round)
        print(f"{name:46s} {value:5.2f}{'  ok' if ok else f'  MISSED (target {op} {target})'}  (rounds: {rounds_text})")
    busy = statistics.median(x["others_cores"] for v in runs.values() for x in v)
    if busy > 0.25:  # the contenders then got what others left them, unevenly: a wall ratio says little
        print(
            f"other work kept {busy:.2f} of {CORES} cores busy meanwhile (median): the wall-time ratios are not "
            "reliable, the CPU one is"
        )
    return {
        "images": total,
        "cores": CORES,
        "rounds": rounds,
        "load_average": loads,
        "contenders": rows,
        "ratios": ratios,
        "ratios_by_round": per_round,
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=16000, help="a multiple of 4000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", help="also write the figures to this JSON file")
    a = ap.parse_args()
    result = run(a.rounds, a.images)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=2)
