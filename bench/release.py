"""The last release's `make bench` figures, kept in bench/releases.json, against this run's.

A ratio that drifts a few percent a release goes unseen in one run's noise (issue 41 item 4: the
default conversion fell from 3.25x the tutorial converter to 3.07x and 2.88x over two releases):
so `make bench` prints each tracked ratio beside the last release's and flags a drop of more than
5%. Those ratios are taken within one run (contenders alternated), so a busy machine moves them
less than the raw rates; a flagged drop is worth a quiet rerun before a hunt.
"""

from __future__ import annotations

import json
import os

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "releases.json")
DROP = 0.05  # flagged: more than 5% below the last release


def _load() -> dict:
    with open(PATH) as f:
        return json.load(f)


def compare(ratios: dict[str, float], images: int) -> dict[str, dict[str, float | bool]]:
    """Print each ratio the last release recorded beside this run's (of `images` images: only the
    release's own count compares, start-up weighs less in a longer run); return them with `dropped`."""
    data = _load()
    releases = data["releases"]
    if not releases:
        return {}
    if images != data["images"]:
        print(f"\n(the releases' figures are for --images {data['images']}: this run of {images:,} is not compared)")
        return {}
    last = releases[-1]
    out: dict[str, dict[str, float | bool]] = {}
    print(f"\nagainst {last['release']}, a drop of more than {DROP:.0%} flagged:")
    for name, then in last["ratios"].items():
        if name not in ratios:
            continue
        now = ratios[name]
        dropped = now < then * (1 - DROP)
        out[name] = {"now": now, "last_release": then, "change": now / then - 1, "dropped": dropped}
        verdict = f"  DROP of {1 - now / then:.0%}" if dropped else "  ok"
        print(f"{name:58s} {now:6.2f} (was {then:.2f}, {now / then - 1:+.0%}){verdict}")
    return out


def record(name: str, ratios: dict[str, float], images: int) -> None:
    """Append this run's figures of the tracked ratios as release `name` (run at a release)."""
    data = _load()
    if images != data["images"]:
        raise SystemExit(f"--record-release: run with --images {data['images']}, as the releases' figures are")
    tracked = list(data["releases"][-1]["ratios"]) if data["releases"] else list(ratios)
    data["releases"].append({"release": name, "ratios": {k: round(ratios[k], 2) for k in tracked if k in ratios}})
    with open(PATH, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    print(f"recorded release {name} in {PATH}")
