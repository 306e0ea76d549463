"""Exact split shares per class: how many images of a class each `--split` fraction gets, and
which ones, still decided by the seeded path hash (conversion.plan.splits.order_key).

* At convert (`exact`): a class of n images gives a split of fraction f floor(f*n) or ceil(f*n)
  images (largest remainder across the class's splits, ties in the splits' order); the class's
  images in hash order go the first k1 to the first split, the next k2 to the second, ... So the
  assignment depends only on the tree and the seed, never on the worker count or the engine.
* At update (`top_up`): an image the dataset holds keeps its split; each new one, in hash order,
  goes to the split furthest below its class's target share (f * the class's images with it),
  ties by the image's hash. From exact shares, any sequence of additions keeps every split of
  every class within one image of f*n; removals are balanced only by later additions.
* With `--split-group` (`fill`, `top_up`): a group (images whose paths give one group key) is one
  unit: the biggest first (ties by the key's hash), each to the split it fits best, counted in
  images, so shares are exact as far as the group sizes allow and no group crosses splits.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

NO_SPLIT = 255  # in a `which` array: an image not (yet) given a split
EPSILON = 1e-9  # f * n computed in floating point: 0.29 * 100 is 28.999999999999996


def largest_remainder(n: int, fractions: Sequence[float]) -> list[int]:
    """Images per split for a class of `n`: floor(f*n) each, the rest one each to the largest
    remainders (ties in the splits' order); they add up to n."""
    exact = [f * n for f in fractions]
    counts = [math.floor(x + EPSILON) for x in exact]
    rest = n - sum(counts)
    order = sorted(range(len(fractions)), key=lambda j: (-(exact[j] - counts[j]), j))
    for j in order[: max(0, rest)]:
        counts[j] += 1
    return counts


def exact(keys: np.ndarray, classes: Sequence[np.ndarray], fractions: Sequence[float], which: np.ndarray) -> None:
    """Set `which[i]` (by image number) to the split index of every image of `classes` (each an
    array of image numbers in image/filename order): per class, by hash order, the first k1 to
    split 0, the next k2 to split 1, ... (`largest_remainder`); equal hashes keep filename order."""
    import numpy as np

    splits = np.arange(len(fractions), dtype=np.uint8)
    for numbers in classes:
        if not len(numbers):
            continue
        order = np.argsort(keys[numbers], kind="stable")
        which[numbers[order]] = np.repeat(splits, largest_remainder(len(numbers), fractions))


def tie_break(key: int, tied: list[int]) -> int:
    """One of the `tied` split indexes, chosen by the image's (or group's) 64-bit hash."""
    return tied[(key * len(tied)) >> 64]


@dataclass
class Unit:
    """Images that go to one split together: one image, or a `--split-group` group."""

    key: int  # the seeded hash of the image's path or of the group key
    images: list[int] = field(default_factory=list)  # image numbers
    per_class: dict[int, int] = field(default_factory=dict)  # class index -> images

    def add(self, image: int, cls: int) -> None:
        self.images.append(image)
        self.per_class[cls] = self.per_class.get(cls, 0) + 1


def ordered(units: Mapping[object, Unit]) -> list[Unit]:
    """Biggest units first (they are the hardest to fit), then by hash, then by first image."""
    return sorted(units.values(), key=lambda u: (-len(u.images), u.key, u.images[0]))


def fill(units: list[Unit], totals: Mapping[int, int], fractions: Sequence[float], which: np.ndarray) -> None:
    """Convert with groups: each class's targets by `largest_remainder`; each unit (biggest first)
    to the split where most of its images still fit its classes' targets, then where the most
    room is left, then by its hash."""
    room = {c: largest_remainder(n, fractions) for c, n in totals.items()}
    m = len(fractions)
    for u in units:
        fits = [sum(min(k, room[c][j]) for c, k in u.per_class.items()) for j in range(m)]
        left = [sum(room[c][j] for c in u.per_class) for j in range(m)]
        best = max(zip(fits, left))
        j = tie_break(u.key, [j for j in range(m) if (fits[j], left[j]) == best])
        for c, k in u.per_class.items():
            room[c][j] -= k
        which[u.images] = j


def top_up(units: list[Unit], counts: dict[int, list[int]], fractions: Sequence[float], which: np.ndarray) -> None:
    """Update: each new unit (in `units`' order) to the split furthest below its classes' target
    shares once it is in (f * images - held, summed over its classes weighted by its images),
    ties by its hash; `counts` (class -> images per split the dataset keeps) grows as they go."""
    m = len(fractions)
    for u in units:
        deficit = [0.0] * m
        for c, k in u.per_class.items():
            held = counts.setdefault(c, [0] * m)
            total = sum(held) + k
            for j in range(m):
                deficit[j] += k * (fractions[j] * total - held[j])
        best = max(deficit)
        j = tie_break(u.key, [j for j in range(m) if deficit[j] >= best - EPSILON])
        for c, k in u.per_class.items():
            counts[c][j] += k
        which[u.images] = j
