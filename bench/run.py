"""`make bench`: img2tfrecord's throughput against baselines measured in the same run.

Every contender runs as its own process (so start-up and peak memory are real), the contenders
alternate over several rounds, and medians are reported: this machine is noisy. Each process
reports its own steady-state time (excluding interpreter and TensorFlow start-up); the harness
measures the whole process and the peak memory of its process tree (RSS summed over workers, and
PSS, which counts shared library pages once).

The dataset is 4,000 generated images; the runs convert 12,000 (each image hard-linked three
times under new names) so that steady state, which starts only after the contenders' start-up
(TensorFlow's ~2-3 s import for the baselines), lasts long enough to measure.

Then the read benchmark (bench/read.py): load() against a hand-written tf.data pipeline and
Keras' image_dataset_from_directory, first-batch latency and steady throughput; and the plan
benchmark (bench/plan.py): `convert --dry-run` on a million files against a plain-Python walk.

And the verify benchmark (`--only verify`, `make bench-verify`): inspect --verify against its
floor, TensorFlow's decode of the same images on every core, and against convert, on 16,000
images (bench/verify_floor.py); against convert on the 4,000 images (the ratio of whole-process
times), and on one worker against all cores (bench/verify.py);
the update benchmark (bench/update.py, `--only update`): update after +1% and compact
against a fresh conversion; and the detection benchmark (bench/detection.py, `--only
detection`): `convert --annotations` of a COCO file against `convert` of the same 4,000 images.

The start-up benchmark (bench/startup.py, `--only startup`): a 30-image conversion against
`import img2tfrecord` plus the record writer's load, and the first record against the plan's end.
The tracked ratios are printed beside the last release's (bench/releases.json, bench/release.py),
a drop of more than 5% flagged; `--record-release NAME` appends the run's at a release.

The report benchmark (bench/report.py, `--only report`: `report OUT` against `inspect OUT` on
100,000 images) runs only when asked for: converting its images takes minutes.

Usage: python bench/run.py [--images 12000] [--rounds 3] [--quick] [--only convert|read|plan|verify|update|report|detection|startup] [--record-release NAME] [--out bench/results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import psutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dataset
import detection
import plan
import read
import release
import report
import startup
import update
import verify
import verify_floor

PY = sys.executable
BIN = os.path.join(os.path.dirname(PY), "img2tfrecord")
CORES = os.cpu_count() or 1

# Both in-process contenders walk the dataset the same way (sorted, hidden files skipped).
_WALK = """
import io, json, os, sys, time
def files(root):
    for dirpath, dirs, names in os.walk(root):
        dirs.sort()
        yield from (os.path.join(dirpath, n) for n in sorted(names) if not n.startswith("."))
def report(n, b, t):
    print(json.dumps({"images": n, "bytes": b, "steady_seconds": time.perf_counter() - t}))
"""


def _copy_loop(durable: bool) -> str:
    """Read every file and append it to one file; `durable`: fsync that file at the end."""
    return (
        _WALK
        + """
t = time.perf_counter(); n = b = 0
with open(sys.argv[2], "wb") as out:
    for path in files(sys.argv[1]):
        with open(path, "rb") as f:
            data = f.read()
        out.write(data); n += 1; b += len(data)
"""
        + ("    out.flush(); os.fsync(out.fileno())\n" if durable else "")
        + "report(n, b, t)\n"
    )


COPY = _copy_loop(durable=False)
# The durable copy limit: the same, made durable (fsync) as a converter that fsyncs its shards
# must; `dd conv=fsync` does the same. The real limit of `keep --no-validate`.
DURABLE_COPY = _copy_loop(durable=True)


def _decode_loop(setup: str, per_image: str, finish: str) -> str:
    """A one-process loop: read each file and decode it at 1/8 scale (JPEG; others in full)."""
    return (
        _WALK
        + setup
        + """
from PIL import Image
t = time.perf_counter(); n = b = 0
for path in files(sys.argv[1]):
    with open(path, "rb") as f:
        data = f.read()
    im = Image.open(io.BytesIO(data))
    if im.format == "JPEG":
        im.draft(im.mode, (max(1, im.width // 8), max(1, im.height // 8)))
    im.load(); n += 1; b += len(data)
"""
        + per_image
        + finish
        + """
report(n, b, t)
"""
    )


# The cheapest decode that still reads the whole compressed stream: what default mode must do.
DECODE = _decode_loop("", "", "")

# The same, plus what any TFRecord converter must add: write every image's bytes as a record with
# tf.io.TFRecordWriter (into the page cache; no Example, no checksum, no fsync). Not a target:
# it shows how close to the decode floor a converter that writes with TensorFlow can get.
DECODE_WRITE = _decode_loop(
    """
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf
w = tf.io.TFRecordWriter(sys.argv[2])
""",
    "    w.write(data)\n",
    "w.close()\n",
)


@dataclass
class Contender:
    name: str
    argv: list[str]  # {data} and {out} are filled in
    runs: list[dict] = field(default_factory=list)

    def median(self, key: str) -> float:
        return statistics.median(r[key] for r in self.runs)


def _tree_memory(proc: psutil.Process, with_pss: bool) -> tuple[float, float, float]:
    """(RSS, PSS, largest process's RSS) in MB summed over a process and its children (PSS 0 unless asked: it is costly).

    RSS comes from /proc/PID/statm (cheap); PSS needs smaps_rollup, which makes the kernel walk
    every mapping (TensorFlow maps ~1 GB), so it is sampled less often to keep the harness's own
    CPU use, on the same cores as the contenders, small.
    """
    rss = pss = largest = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            one = p.memory_info().rss
            rss += one
            largest = max(largest, one)
            if with_pss:
                with open(f"/proc/{p.pid}/smaps_rollup") as f:
                    for line in f:
                        if line.startswith("Pss:"):
                            pss += int(line.split()[1]) * 1024
                            break
        except (psutil.Error, OSError):
            pass
    return rss / 1e6, pss / 1e6, largest / 1e6


def run_once(argv: list[str]) -> dict:
    """Run one contender; return its JSON report plus wall time and peak tree memory."""
    start = time.perf_counter()
    proc = psutil.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3"}
    )
    peak_rss = peak_pss = peak_one = 0.0
    samples = 0
    while proc.poll() is None:
        rss, pss, one = _tree_memory(proc, with_pss=samples % 5 == 4)
        peak_rss, peak_pss, peak_one = max(peak_rss, rss), max(peak_pss, pss), max(peak_one, one)
        samples += 1
        time.sleep(0.1)
    wall = time.perf_counter() - start
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}):\n{err.decode()[-2000:]}")
    report = json.loads(out.decode().strip().splitlines()[-1])
    images = report.get("images", 0)
    nbytes = report.get("input_bytes", report.get("bytes", 0))
    steady = report.get("steady_seconds", wall)
    steady_images = report.get("steady_images_per_second", images / steady)
    steady_mb = report.get("steady_mb_per_second", nbytes / 1e6 / steady)
    return {
        "wall_seconds": wall,
        "images": images,
        "images_per_second": images / wall,
        "mb_per_second": nbytes / 1e6 / wall,
        "steady_images_per_second": steady_images,
        "steady_mb_per_second": steady_mb,
        "peak_rss_mb": peak_rss,
        "peak_pss_mb": peak_pss,
        "peak_process_rss_mb": peak_one,
    }


def contenders(quick: bool) -> list[Contender]:
    convert = [BIN, "convert", "{data}", "{out}", "--json", "--quiet"]
    cs = [
        Contender("copy limit (python read+append)", [PY, "-c", COPY, "{data}", "{out}/copy.bin"]),
        Contender("durable copy limit (read+append+fsync)", [PY, "-c", DURABLE_COPY, "{data}", "{out}/copy.bin"]),
        Contender("decode floor (1 process, draft decode)", [PY, "-c", DECODE, "{data}"]),
        Contender("decode+write floor (1 process)", [PY, "-c", DECODE_WRITE, "{data}", "{out}/floor.tfrecord"]),
        Contender(
            "baseline (tutorial, 1 process)",
            [PY, os.path.join(os.path.dirname(__file__), "baseline.py"), "{data}", "{out}/base.tfrecord"],
        ),
        Contender(
            f"Inception build_image_data style, {CORES} threads",
            [PY, os.path.join(os.path.dirname(__file__), "inception.py"), "{data}", "{out}/inception"]
            + ["--threads", str(CORES), "--shards", str(4 * CORES)],
        ),
        Contender(f"ours default, {CORES} workers", convert + ["--workers", str(CORES)]),
        Contender("ours default, 1 worker", convert + ["--workers", "1"]),
        Contender(f"ours keep --no-validate, {CORES} workers", convert + ["--no-validate", "--workers", str(CORES)]),
        Contender(
            f"ours jpeg --resize 256, {CORES} workers",
            convert + ["--encoding", "jpeg", "--resize", "256", "--workers", str(CORES)],
        ),
        Contender(
            "ours jpeg --resize 256, 1 worker", convert + ["--encoding", "jpeg", "--resize", "256", "--workers", "1"]
        ),
    ]
    if os.environ.get("BENCH_BEAM", "1") != "0":
        try:
            import apache_beam  # noqa: F401

            cs.append(
                Contender(
                    f"ours default, Beam DirectRunner {CORES} workers",
                    convert + ["--engine", "beam", "--workers", str(CORES)],
                )
            )
        except ImportError:
            pass
    return [c for c in cs if not quick or "1 worker" not in c.name]


def help_seconds(args: list[str]) -> tuple[float, bool]:
    """Median wall time of `img2tfrecord ... --help`, and whether TensorFlow got imported."""
    times = []
    for _ in range(5):
        t = time.perf_counter()
        subprocess.run([BIN, *args], capture_output=True, check=True)
        times.append(time.perf_counter() - t)
    probe = (
        "import sys; from img2tfrecord.cli import main\n"
        f"try: main({args!r})\nexcept SystemExit: pass\n"
        "print('tensorflow' in sys.modules, file=sys.stderr)"
    )
    r = subprocess.run([PY, "-c", probe], capture_output=True, text=True)
    return statistics.median(times), r.stderr.strip().endswith("True")


def verify_all(rounds: int) -> dict:
    """The verify benchmarks: against its floor and convert (16,000 images), against convert
    (4,000), one worker against all cores (8,000)."""
    floor = {"against_floor": verify_floor.run(rounds)}
    print()
    return floor | {"against_convert": verify.against_convert(rounds)} | verify.run(rounds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=12000, help="a multiple of 4000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="fewer contenders, no 16k-image memory check")
    ap.add_argument(
        "--only",
        choices=("convert", "read", "plan", "verify", "update", "report", "detection", "startup"),
        help="run one of the benchmarks (default: all but report)",
    )
    ap.add_argument("--record-release", metavar="NAME", help="append this run's tracked ratios to bench/releases.json")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results.json"))
    args = ap.parse_args()
    if args.only == "plan":
        plan.main(["--rounds", str(args.rounds)])
        return
    if args.only in ("read", "verify", "update", "report", "detection", "startup"):
        result = {
            "read": lambda: {"read": read.run(args.rounds)},
            "verify": lambda: {"verify": verify_all(args.rounds)},
            "update": lambda: {"update": update.run(args.rounds)},
            "report": lambda: {"report": report.run(args.rounds)},
            "detection": lambda: {"detection": detection.run(max(args.rounds, 5))},
            "startup": lambda: {"startup": startup.run(max(args.rounds, 5), dataset.make(4000))},
        }[args.only]()
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
        print(f"\nresults: {args.out}")
        return

    data = dataset.make(args.images)
    work = tempfile.mkdtemp(prefix="img2tfrecord-bench-", dir=dataset.CACHE)
    cs = contenders(args.quick)
    try:
        for r in range(args.rounds):
            order = cs[r % len(cs) :] + cs[: r % len(cs)]  # rotate so no contender always runs first
            for c in order:
                out = os.path.join(work, "out")
                shutil.rmtree(out, ignore_errors=True)
                os.makedirs(out)
                argv = [a.replace("{data}", data).replace("{out}", out) for a in c.argv]
                if argv[:2] == [BIN, "convert"]:
                    shutil.rmtree(out)  # convert wants a fresh output directory
                c.runs.append(run_once(argv))
                print(
                    f"  round {r + 1}/{args.rounds}: {c.name}: {c.runs[-1]['steady_images_per_second']:.0f} img/s steady",
                    file=sys.stderr,
                )
        memory = {}
        if not args.quick:
            for n in (4000, 16000):
                out = os.path.join(work, f"mem{n}")
                memory[n] = run_once(
                    [BIN, "convert", dataset.make(n), out, "--json", "--quiet", "--workers", str(CORES)]
                )["peak_rss_mb"]
                shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    help_top, tf_top = help_seconds(["--help"])
    help_convert, tf_convert = help_seconds(["convert", "--help"])
    by = {c.name: c for c in cs}
    rows = []
    print(
        f"\nimg2tfrecord bench: {args.images} images ({sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(data) for f in fs) / 1e6:.0f} MB), "
        f"{CORES} cores, {platform.processor() or platform.machine()}, medians of {args.rounds} rounds\n"
    )
    header = f"{'contender':46s} {'img/s':>7s} {'MB/s':>7s} {'steady img/s':>12s} {'steady MB/s':>11s} {'peak RSS MB':>11s} {'peak PSS MB':>11s}"
    print(header)
    print("-" * len(header))
    for c in cs:
        row = {k: c.median(k) for k in c.runs[0]}
        rows.append({"name": c.name, **row, "runs": c.runs})
        print(
            f"{c.name:46s} {row['images_per_second']:7.0f} {row['mb_per_second']:7.1f} {row['steady_images_per_second']:12.0f} "
            f"{row['steady_mb_per_second']:11.1f} {row['peak_rss_mb']:11.0f} {row['peak_pss_mb']:11.0f}"
        )

    def m(name: str, key: str) -> float:
        return by[name].median(key)

    all_default, one_default = f"ours default, {CORES} workers", "ours default, 1 worker"
    nv, jpeg_all, jpeg_one = (
        f"ours keep --no-validate, {CORES} workers",
        f"ours jpeg --resize 256, {CORES} workers",
        "ours jpeg --resize 256, 1 worker",
    )
    ideal = CORES * m("decode floor (1 process, draft decode)", "steady_images_per_second")
    inception = f"Inception build_image_data style, {CORES} threads"
    ratios = {
        "default / baseline (whole process img/s)": (
            m(all_default, "images_per_second") / m("baseline (tutorial, 1 process)", "images_per_second"),
            2.0,
        ),
        "default / Inception style (whole process img/s)": (
            m(all_default, "images_per_second") / m(inception, "images_per_second"),
            1.5,
        ),
        "default / (cores x decode+write floor), steady img/s": (
            m(all_default, "steady_images_per_second")
            / (CORES * m("decode+write floor (1 process)", "steady_images_per_second")),
            0.9,
        ),
        "keep --no-validate / durable copy limit (steady MB/s)": (
            m(nv, "steady_mb_per_second") / m("durable copy limit (read+append+fsync)", "steady_mb_per_second"),
            0.9,
        ),
        "keep --no-validate / copy limit, page cache (steady MB/s)": (
            m(nv, "steady_mb_per_second") / m("copy limit (python read+append)", "steady_mb_per_second"),
            None,
        ),
        "default / ideal (cores x decode floor, steady img/s)": (
            m(all_default, "steady_images_per_second") / ideal,
            None,
        ),
    }
    if not args.quick:
        ratios["default: all cores / 1 worker (steady img/s)"] = (
            m(all_default, "steady_images_per_second") / m(one_default, "steady_images_per_second"),
            1.8,
        )
        ratios["jpeg --resize 256: all cores / 1 worker (steady img/s)"] = (
            m(jpeg_all, "steady_images_per_second") / m(jpeg_one, "steady_images_per_second"),
            1.8,
        )
    ratios["decode+write floor / decode floor (1 process, steady)"] = (
        m("decode+write floor (1 process)", "steady_images_per_second")
        / m("decode floor (1 process, draft decode)", "steady_images_per_second"),
        None,
    )
    beam = next((c.name for c in cs if "Beam" in c.name), None)
    if beam:
        ratios["Beam DirectRunner / local (whole process img/s)"] = (
            m(beam, "images_per_second") / m(all_default, "images_per_second"),
            None,
        )
    print()
    for name, (value, target) in ratios.items():
        verdict = "" if target is None else ("  ok" if value >= target else f"  MISSED (target >= {target})")
        print(f"{name:58s} {value:6.2f}{verdict}")
    for label, key, limit in (
        ("peak RSS of the process tree", "peak_rss_mb", 900),
        ("peak RSS of its largest process", "peak_process_rss_mb", 400),
    ):
        value = m(all_default, key)
        print(
            f"{label + ', ' + all_default + ' (MB)':58s} {value:6.0f}{'  ok' if value <= limit else f'  MISSED (target <= {limit})'}"
        )
    if memory:
        diff = memory[16000] - memory[4000]
        print(
            f"{'peak RSS 16,000 images - 4,000 images (MB)':58s} {diff:6.0f}{'  ok' if diff < 50 else '  MISSED (target < 50)'}"
        )
    drift = release.compare({k: v for k, (v, _) in ratios.items()}, args.images)
    if args.record_release:
        release.record(args.record_release, {k: v for k, (v, _) in ratios.items()}, args.images)
    print(f"{'img2tfrecord --help (s), imports TensorFlow':58s} {help_top:6.2f}  {tf_top}")
    print(f"{'img2tfrecord convert --help (s), imports TensorFlow':58s} {help_convert:6.2f}  {tf_convert}")
    result = {
        "machine": {
            "cores": CORES,
            "processor": platform.processor(),
            "python": platform.python_version(),
            "memory_gb": round(psutil.virtual_memory().total / 2**30),
        },
        "dataset": {"images": args.images, "path": data},
        "rounds": args.rounds,
        "contenders": rows,
        "ratios": {k: v for k, (v, _) in ratios.items()},
        "memory_by_dataset_size_mb": memory,
        "against_last_release": drift,
        "help_seconds": {"top": help_top, "convert": help_convert, "imports_tensorflow": tf_top or tf_convert},
    }
    if args.only != "convert":
        print()
        result["read"] = read.run(args.rounds)
    if args.only is None:
        print()
        plan.main(["--rounds", str(args.rounds)])  # writes bench/results-plan.json
        print()
        result["verify"] = verify_all(args.rounds)
        print()
        result["update"] = update.run(args.rounds)
        print()
        result["detection"] = detection.run(max(args.rounds, 5))
        print()
        result["startup"] = startup.run(max(args.rounds, 5), dataset.make(4000))
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"\nresults: {args.out}")


if __name__ == "__main__":
    main()
