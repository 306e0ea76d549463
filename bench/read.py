"""The read benchmark: `img2tfrecord.load()` against the pipelines a user would otherwise write.

Every contender decodes, resizes to 224x224 (float32, bilinear) and batches by 32 the same images:
the 4,000 of the convert benchmark, converted once (`--shards 8 --index`), or read from their
folder by Keras. Each run is a fresh process (TensorFlow's tracing of a pipeline's functions
happens once per process, so first-batch latency is only real there), contenders alternate over
the rounds and medians are reported. Timed from after `import tensorflow` (and img2tfrecord):

* first batch: from building the dataset to holding its first batch (load()'s framing check,
  tracing its map functions, reading and decoding the first 32 images);
* steady batches/s: the rest of the passes over the split, and the CPU time (all threads) an
  image took then: on a noisy machine a steadier measure of the work than wall time.

Contenders: load(); a hand-written `tf.data.TFRecordDataset` pipeline (parse two keys,
`decode_image`, resize); `keras.utils.image_dataset_from_directory` over the source folder.

What load()'s in-graph checks cost (they name the shard, record and image/filename of what
TensorFlow cannot read, parse or decode): a difference of a few microseconds a record is lost in
the noise of decoding, so it is measured on its own, in one process: load()'s checked pipeline
and its unchecked one (what verify="none" builds), both with a decoder that does nothing,
alternating, as CPU microseconds a record; and then as a share of load()'s CPU time a record.

Usage: python bench/read.py [--rounds 3] [--epochs 2]   (or python bench/run.py --only read)
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
EPOCHS = int(sys.argv[6])
if kind == "load":
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
it = iter(ds.repeat(EPOCHS))
next(it)
t1, c1 = time.perf_counter(), time.process_time()
n = 1
for _ in it:
    n += 1
t2, c2 = time.perf_counter(), time.process_time()
print(json.dumps({"first_batch_seconds": t1 - t0, "batches": n, "steady_batches_per_second": (n - 1) / (t2 - t1),
                  "steady_cpu_us_per_record": (c2 - c1) / ((n - 1) * BATCH) * 1e6}))
"""

CONTENDERS = {
    "load": "img2tfrecord.load()",
    "hand": "hand-written TFRecordDataset pipeline",
    "keras": "keras image_dataset_from_directory",
}

# The checks alone: load()'s checked pipeline and its unchecked one (verify="none") over the split,
# with a decoder that does nothing, in turn; prints the median CPU microseconds a record of each.
CHECKS = """
import json, os, statistics, sys, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import img2tfrecord.loader as reader
tf = reader.tensorflow()
out, passes = sys.argv[1], int(sys.argv[2])
files, man, records = reader._split_files(out, "train")
counts = reader._check_shards(files, "none", "framing", man, "train")
spec = reader.features_spec()
image_of = lambda ex: tf.strings.length(ex["image/encoded"])  # reads the field, decodes nothing
out_ = lambda ex, img: (img, ex["image/class/label"])
def build(on):  # the checked pipeline, or the unchecked one load(verify="none") builds
    if on:
        ds = reader._checked_records(tf, files, counts, "", spec, image_of, out_, False, None, min(len(files), 16), True)
    else:
        ds = reader._plain_records(tf, files, "", spec, image_of, out_, False, None, min(len(files), 16), True)
    return ds.batch(256)
sets = {True: build(True), False: build(False)}
for ds in sets.values():
    for _ in ds: pass  # warm: page cache, function instantiation
times = {True: [], False: []}
for _ in range(passes):
    for on, ds in sets.items():
        t = time.process_time()  # CPU time of all threads: what the checks take from decoding
        for _ in ds: pass
        times[on].append((time.process_time() - t) / records * 1e6)
print(json.dumps({"on_us": statistics.median(times[True]), "off_us": statistics.median(times[False])}))
"""


def prepare() -> tuple[str, str]:
    """(converted output, source folder): the convert benchmark's 4,000 images, converted once."""
    src = dataset.make(4000)
    out = os.path.join(dataset.CACHE, "read-4000")
    if not os.path.exists(os.path.join(out, "dataset.json")):
        subprocess.run([BIN, "convert", src, out, "--shards", "8", "--index", "--quiet", "--overwrite"], check=True)
    return out, src


def run(rounds: int = 3, epochs: int = 2) -> dict:
    out, src = prepare()
    runs: dict[str, list[dict]] = {k: [] for k in CONTENDERS}
    order = list(CONTENDERS)
    for r in range(rounds):
        for kind in order[r % len(order) :] + order[: r % len(order)]:
            res = subprocess.run([PY, "-c", READ, kind, out, src, str(SIZE), str(BATCH), str(epochs)], capture_output=True, text=True,
                                 env=os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3"})  # fmt: skip
            if res.returncode != 0:
                raise SystemExit(f"read bench {kind} failed:\n{res.stderr[-2000:]}")
            runs[kind].append(json.loads(res.stdout.strip().splitlines()[-1]))
            last = runs[kind][-1]
            print(f"  read round {r + 1}/{rounds}: {CONTENDERS[kind]}: first batch {last['first_batch_seconds']:.2f} s, "
                  f"{last['steady_batches_per_second']:.1f} batches/s", file=sys.stderr)  # fmt: skip
    metrics = ("first_batch_seconds", "steady_batches_per_second", "steady_cpu_us_per_record")
    med = {k: {m: statistics.median(x[m] for x in v) for m in metrics} for k, v in runs.items()}
    print(
        f"\nread bench: {runs['load'][0]['batches']} batches of {BATCH} ({epochs} passes over 4,000 images; {SIZE}x{SIZE}, decode + resize), "
        f"medians of {rounds} rounds\n"
    )
    header = f"{'contender':40s} {'first batch s':>13s} {'steady batches/s':>16s} {'CPU us/image':>12s}"
    print(header)
    print("-" * len(header))
    for k, name in CONTENDERS.items():
        print(
            f"{name:40s} {med[k]['first_batch_seconds']:13.2f} {med[k]['steady_batches_per_second']:16.1f} {med[k]['steady_cpu_us_per_record']:12.0f}"
        )
    ratio = med["load"]["steady_batches_per_second"] / med["hand"]["steady_batches_per_second"]
    res = subprocess.run(
        [PY, "-c", CHECKS, out, "15"], capture_output=True, text=True, env=os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3"}
    )
    if res.returncode != 0:
        raise SystemExit(f"read bench checks failed:\n{res.stderr[-2000:]}")
    checks = json.loads(res.stdout.strip().splitlines()[-1])
    per_record_us = checks["on_us"] - checks["off_us"]
    naming = per_record_us / med["load"]["steady_cpu_us_per_record"]  # CPU against CPU: the cores decode all the time
    first = med["load"]["first_batch_seconds"]
    print()
    print(f"{'load() first batch (s)':58s} {first:6.2f}{'  ok' if first <= 0.3 else '  MISSED (target <= 0.3)'}")
    print(
        f"{'load() / hand-written, steady batches/s':58s} {ratio:6.2f}{'  ok' if ratio >= 0.95 else '  MISSED (target >= 0.95)'}"
    )
    cpu_ratio = med["hand"]["steady_cpu_us_per_record"] / med["load"]["steady_cpu_us_per_record"]
    print(
        f"{'load() / hand-written, images per CPU second':58s} {cpu_ratio:6.2f}{'  ok' if cpu_ratio >= 0.95 else '  MISSED (target >= 0.95)'}"
    )
    print(
        f"{'load() checks: CPU us a record (on - off, decoding aside)':58s} {per_record_us:6.1f}  ({checks['on_us']:.1f} - {checks['off_us']:.1f})"
    )
    print(
        f"{'load() checks: share of load() CPU time a record':58s} {naming:6.1%}{'  ok' if naming < 0.02 else '  MISSED (target < 2%)'}"
    )
    return {
        "rounds": rounds,
        "epochs": epochs,
        "medians": med,
        "runs": runs,
        "load_vs_hand": ratio,
        "load_vs_hand_cpu": cpu_ratio,
        "checks_us_per_record": checks,
        "checks_share": naming,
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--epochs",
        type=int,
        default=2,
        help="passes over the split in each run (steady state is all but the first batch)",
    )
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results-read.json"))
    args = ap.parse_args()
    result = run(args.rounds, args.epochs)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"\nresults: {args.out}")
