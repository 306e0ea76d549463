"""The read benchmark: `img2tfrecord.load()` against the pipelines a user would otherwise write.

Every contender decodes, resizes to 224x224 (float32, bilinear) and batches by 32 the same images:
the 4,000 of the convert benchmark, converted once (`--shards 8 --index`), or read from their
folder by Keras. Each run is a fresh process (TensorFlow's tracing of a pipeline's functions
happens once per process, so first-batch latency is only real there), contenders alternate over
the rounds and medians are reported. Timed from after `import tensorflow` (and img2tfrecord):

* first batch: from building the dataset to holding its first batch (load()'s framing check,
  tracing its map functions, reading and decoding the first 32 images);
* steady batches/s: the rest of one pass over the split.

Contenders: load(); load() without naming the image of a record that fails to decode (what
that check costs); a hand-written `tf.data.TFRecordDataset` pipeline (parse two keys,
`decode_image`, resize); `keras.utils.image_dataset_from_directory` over the source folder.

Usage: python bench/read.py [--rounds 3]   (or python bench/run.py --only read)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dataset

PY = sys.executable
BIN = os.path.join(os.path.dirname(PY), "img2tfrecord")
SIZE, BATCH = 224, 32

READ = """
import json, os, sys, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf
import img2tfrecord.loader as reader
kind, out, src = sys.argv[1:4]
SIZE, BATCH = int(sys.argv[4]), int(sys.argv[5])
t0 = time.perf_counter()
if kind in ("load", "load-unnamed"):
    reader._NAME_ERRORS = kind == "load"
    ds = reader.load(out, "train", image_size=(SIZE, SIZE)).batch(BATCH)
elif kind == "hand":
    files = sorted(tf.io.gfile.glob(os.path.join(out, "train-?????-of-?????")))
    spec = {"image/encoded": tf.io.FixedLenFeature([], tf.string), "image/class/label": tf.io.FixedLenFeature([], tf.int64)}
    def parse(serialized):
        ex = tf.io.parse_single_example(serialized, spec)
        image = tf.io.decode_image(ex["image/encoded"], channels=3, expand_animations=False)
        return tf.image.resize(image, [SIZE, SIZE]), ex["image/class/label"]
    ds = (tf.data.TFRecordDataset(files, num_parallel_reads=tf.data.AUTOTUNE)
          .map(parse, num_parallel_calls=tf.data.AUTOTUNE).batch(BATCH).prefetch(tf.data.AUTOTUNE))
else:
    import keras
    ds = keras.utils.image_dataset_from_directory(src, image_size=(SIZE, SIZE), batch_size=BATCH, shuffle=False, verbose=False)
it = iter(ds)
next(it)
t1 = time.perf_counter()
n = 1
for _ in it:
    n += 1
t2 = time.perf_counter()
print(json.dumps({"first_batch_seconds": t1 - t0, "batches": n, "steady_batches_per_second": (n - 1) / (t2 - t1)}))
"""

CONTENDERS = {
    "load": "img2tfrecord.load()",
    "load-unnamed": "load(), decode errors not named",
    "hand": "hand-written TFRecordDataset pipeline",
    "keras": "keras image_dataset_from_directory",
}


def prepare(work: str) -> tuple[str, str]:
    """(converted output, source folder): the convert benchmark's 4,000 images, converted once."""
    src = dataset.make(4000)
    out = os.path.join(dataset.CACHE, "read-4000")
    if not os.path.exists(os.path.join(out, "dataset.json")):
        subprocess.run([BIN, "convert", src, out, "--shards", "8", "--index", "--quiet", "--overwrite"], check=True)
    return out, src


def run(rounds: int = 3, work: str | None = None) -> dict:
    out, src = prepare(work or dataset.CACHE)
    runs: dict[str, list[dict]] = {k: [] for k in CONTENDERS}
    order = list(CONTENDERS)
    for r in range(rounds):
        for kind in order[r % len(order) :] + order[: r % len(order)]:
            res = subprocess.run(
                [PY, "-c", READ, kind, out, src, str(SIZE), str(BATCH)],
                capture_output=True,
                text=True,
                env=os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3"},
            )
            if res.returncode != 0:
                raise SystemExit(f"read bench {kind} failed:\n{res.stderr[-2000:]}")
            runs[kind].append(json.loads(res.stdout.strip().splitlines()[-1]))
            last = runs[kind][-1]
            print(
                f"  read round {r + 1}/{rounds}: {CONTENDERS[kind]}: first batch {last['first_batch_seconds']:.2f} s, "
                f"{last['steady_batches_per_second']:.1f} batches/s",
                file=sys.stderr,
            )
    med = {
        k: {m: statistics.median(x[m] for x in v) for m in ("first_batch_seconds", "steady_batches_per_second")}
        for k, v in runs.items()
    }
    print(
        f"\nread bench: {runs['load'][0]['batches']} batches of {BATCH} ({SIZE}x{SIZE}, decode + resize), medians of {rounds} rounds\n"
    )
    header = f"{'contender':40s} {'first batch s':>13s} {'steady batches/s':>16s}"
    print(header)
    print("-" * len(header))
    for k, name in CONTENDERS.items():
        print(f"{name:40s} {med[k]['first_batch_seconds']:13.2f} {med[k]['steady_batches_per_second']:16.1f}")
    ratio = med["load"]["steady_batches_per_second"] / med["hand"]["steady_batches_per_second"]
    naming = 1 - med["load"]["steady_batches_per_second"] / med["load-unnamed"]["steady_batches_per_second"]
    per_record_us = (
        (1 / med["load"]["steady_batches_per_second"] - 1 / med["load-unnamed"]["steady_batches_per_second"])
        / BATCH
        * 1e6
    )
    first = med["load"]["first_batch_seconds"]
    print()
    print(f"{'load() first batch (s)':58s} {first:6.2f}{'  ok' if first <= 0.3 else '  MISSED (target <= 0.3)'}")
    print(
        f"{'load() / hand-written, steady batches/s':58s} {ratio:6.2f}{'  ok' if ratio >= 0.95 else '  MISSED (target >= 0.95)'}"
    )
    print(
        f"{'naming decode errors: share of load() throughput':58s} {naming:6.1%}{'  ok' if naming < 0.02 else '  MISSED (target < 2%)'}"
    )
    print(f"{'naming decode errors: cost per record (us)':58s} {per_record_us:6.1f}")
    return {
        "rounds": rounds,
        "medians": med,
        "runs": runs,
        "load_vs_hand": ratio,
        "naming_share": naming,
        "naming_us_per_record": per_record_us,
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "read-results.json"))
    args = ap.parse_args()
    result = run(args.rounds)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"\nresults: {args.out}")
