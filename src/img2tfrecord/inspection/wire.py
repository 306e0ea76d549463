"""A bounded reader of serialized `tf.train.Example`s for `inspect`: the wire format walked in place.

Why not protobuf's parser (as before): it makes every value, so memory follows the number of
values, not the bytes. A packed int64 of one byte on the wire costs 8 in the parsed message, and a
map entry ~100: one 20 M-value record took 464 MB, and a record of a million keys builds a map of
a million entries before the first is looked at. Here the bytes are walked over a memoryview:
each feature's kind and value count are counted, not made (a packed int64 list by counting its
last-byte-of-varint bytes, a megabyte at a time), only each feature's first value is kept (a
slice for bytes), and at most `limit` keys per record, plus the keys the caller always wants
(`keep`), are kept at all; the rest are counted in `more_keys`. For a few keys the caller needs whole
(`collect`: a detection record's boxes) every value is kept too, up to `cap` per key, so a record
of a million boxes costs `cap` values. Memory: the record, plus its kept keys and collected values.

What it accepts is what protobuf's proto3 parser accepts for `tensorflow.Example`
(tests/inspection/test_inspect_bounds.py compares the two on random and damaged messages): unknown fields
and fields of a known number with another wire type are skipped, a repeated message merges
(a Feature's value lists concatenate; a later list of another kind replaces it, as a oneof does),
a map key seen twice keeps its last value, a map entry with an unknown field is not in the map, a key must be UTF-8, and a truncated field, an
invalid wire type, field number 0 or an unmatched end-group is an error (`WireError`).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Container, Iterator
from dataclasses import dataclass

_CHUNK = 1 << 20
_LOW = bytes(range(128))  # deleting these leaves a varint's continuation bytes
_TOO_LONG = re.compile(rb"[\x80-\xff]{10}")  # a varint is at most 10 bytes
_KINDS = {1: "bytes", 2: "float", 3: "int64"}
_MAX_FIELD = (1 << 29) - 1
MAX_COLLECTED = 1000  # values kept per collected key (`parse_example(collect=...)`); `count` counts them all


class WireError(ValueError):
    """The bytes are not a well-formed protobuf message of this shape; the message says where."""


@dataclass(slots=True)
class WireFeature:
    """One feature: its kind ("bytes", "float", "int64" or None: no list set), how many values,
    and the first value (an int, a float, or a memoryview of the bytes); `values`: the first
    `cap` values when the key was collected, else None."""

    kind: str | None = None
    count: int = 0
    first: int | float | memoryview | None = None
    values: list[int | float | memoryview] | None = None


@dataclass(slots=True)
class WireExample:
    """The kept features of one Example (key -> feature, in wire order), how many entries were
    not kept, and whether a `features` field was there at all."""

    features: dict[str, WireFeature]
    more_keys: int
    has_features: bool


def _varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise WireError(f"truncated varint at byte {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result & 0xFFFFFFFFFFFFFFFF, pos
        shift += 7
        if shift >= 70:
            raise WireError(f"varint longer than 10 bytes at byte {pos}")


# A field: (number, wire type, a, b): a varint's value in `a`; for the others the span [a, b).
_Field = tuple[int, int, int, int]


def _fields(buf: memoryview, pos: int, end: int) -> Iterator[_Field]:
    """The fields of the message in buf[pos:end]; groups (an obsolete encoding) are skipped."""
    while pos < end:
        at = pos
        tag, pos = _varint(buf, pos, end)
        num, wt = tag >> 3, tag & 7
        if num == 0 or num > _MAX_FIELD:
            raise WireError(f"invalid field number {num} at byte {at}")
        if wt == 0:
            value, pos = _varint(buf, pos, end)
            yield num, 0, value, pos
            continue
        if wt == 2:
            n, pos = _varint(buf, pos, end)
            size = n
        elif wt == 1:
            size = 8
        elif wt == 5:
            size = 4
        elif wt == 3:
            pos = _skip_group(buf, pos, end, num)
            continue
        elif wt == 4:
            raise WireError(f"end-group without a start at byte {at}")
        else:
            raise WireError(f"invalid wire type {wt} at byte {at}")
        if size > end - pos:
            raise WireError(f"truncated field {num} at byte {at}: {size:,} bytes claimed, {end - pos:,} left")
        yield num, wt, pos, pos + size
        pos += size


def _skip_group(buf: memoryview, pos: int, end: int, num: int) -> int:
    """Skip to past the end-group tag of group `num` (nested groups too); return that position."""
    open_groups = [num]
    while open_groups:
        if pos >= end:
            raise WireError(f"group {open_groups[-1]} is not closed")
        at = pos
        tag, pos = _varint(buf, pos, end)
        n, wt = tag >> 3, tag & 7
        if n == 0 or n > _MAX_FIELD:
            raise WireError(f"invalid field number {n} at byte {at}")
        if wt == 0:
            _, pos = _varint(buf, pos, end)
        elif wt in (1, 2, 5):
            if wt == 2:
                size, pos = _varint(buf, pos, end)
            else:
                size = 8 if wt == 1 else 4
            if size > end - pos:
                raise WireError(f"truncated field {n} at byte {at}")
            pos += size
        elif wt == 3:
            open_groups.append(n)
        elif wt == 4:
            if open_groups.pop() != n:
                raise WireError(f"end-group {n} does not match its start at byte {at}")
        else:
            raise WireError(f"invalid wire type {wt} at byte {at}")
    return pos


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _packed_varints(buf: memoryview, a: int, b: int) -> int:
    """How many varints buf[a:b] holds (its bytes below 0x80), a megabyte at a time."""
    if a == b:
        return 0
    if buf[b - 1] >= 0x80:
        raise WireError(f"truncated varint at byte {b}")
    if (m := _TOO_LONG.search(buf, a, b)) is not None:
        raise WireError(f"varint longer than 10 bytes at byte {m.start()}")
    cont = 0
    for i in range(a, b, _CHUNK):
        cont += len(bytes(buf[i : min(b, i + _CHUNK)]).translate(None, _LOW))
    return (b - a) - cont


def _value_list(
    buf: memoryview, kind: str, a: int, b: int, into: list[int | float | memoryview] | None, cap: int
) -> tuple[int, int | float | memoryview | None]:
    """(number of values, first value) of a BytesList/FloatList/Int64List message in buf[a:b];
    its values appended to `into` too (when not None) until it holds `cap`."""
    count = 0
    first: int | float | memoryview | None = None
    for num, wt, x, y in _fields(buf, a, b):
        if num != 1:
            continue
        if kind == "bytes":
            if wt == 2:
                count += 1
                if first is None:
                    first = buf[x:y]
                if into is not None and len(into) < cap:
                    into.append(buf[x:y])
        elif kind == "int64":
            if wt == 0:
                count += 1
                if first is None:
                    first = _signed(x)
                if into is not None and len(into) < cap:
                    into.append(_signed(x))
            elif wt == 2:
                n = _packed_varints(buf, x, y)
                if n and first is None:
                    first = _signed(_varint(buf, x, y)[0])
                count += n
                if into is not None:
                    _take_varints(buf, x, y, into, cap)
        elif wt == 5:
            count += 1
            if first is None:
                first = struct.unpack_from("<f", buf, x)[0]
            if into is not None and len(into) < cap:
                into.append(struct.unpack_from("<f", buf, x)[0])
        elif wt == 2:
            if (y - x) % 4:
                raise WireError(f"packed floats of {y - x} bytes at byte {x}, not a multiple of 4")
            if y > x and first is None:
                first = struct.unpack_from("<f", buf, x)[0]
            count += (y - x) // 4
            if into is not None:
                n = min((y - x) // 4, max(0, cap - len(into)))
                into.extend(struct.unpack_from(f"<{n}f", buf, x))
    return count, first


def _take_varints(buf: memoryview, a: int, b: int, into: list[int | float | memoryview], cap: int) -> None:
    """Append the packed int64s of buf[a:b] (already checked whole) to `into` until it holds `cap`."""
    while a < b and len(into) < cap:
        v, a = _varint(buf, a, b)
        into.append(_signed(v))


def _feature(buf: memoryview, a: int, b: int, prev: WireFeature | None, cap: int = -1) -> WireFeature:
    """A Feature message merged into `prev` (a repeated message field merges, as protobuf does);
    with `cap` >= 0 its values are collected, up to `cap`."""
    f = prev if prev is not None else WireFeature()
    if cap >= 0 and f.values is None:
        f.values = []
    for num, wt, x, y in _fields(buf, a, b):
        kind = _KINDS.get(num)
        if kind is None or wt != 2:
            continue
        if f.kind != kind:  # a oneof: another kind replaces what was set
            f = WireFeature(kind, 0, None, [] if cap >= 0 else None)
        count, first = _value_list(buf, kind, x, y, f.values, cap)
        f.count += count
        if f.first is None:
            f.first = first
    return f


def _entry(buf: memoryview, a: int, b: int, collect: Container[str], cap: int) -> tuple[str, WireFeature | None] | None:
    """(key, feature) of the map entry in buf[a:b]; None when it has an unknown field (protobuf then
    leaves it out of the map). Values are collected when the key is in `collect`: decided at the
    value with the key seen so far (a serializer writes the key first), walked again in the rare
    entry whose final key says otherwise."""
    key_span: tuple[int, int] | None = None
    value: WireFeature | None = None
    unknown = False
    collected: bool | None = None
    for n3, w3, p, q in _fields(buf, a, b):
        if w3 != 2 or n3 not in (1, 2):
            unknown = True
        elif n3 == 1:
            key_span = (p, q)
            try:
                bytes(buf[p:q]).decode("utf-8")
            except UnicodeDecodeError:
                raise WireError(f"a feature key that is not UTF-8 at byte {p}") from None
        elif n3 == 2:
            if collected is None:
                collected = bool(collect) and _text(buf, key_span) in collect
            value = _feature(buf, p, q, value, cap if collected else -1)
    if unknown:
        return None
    key = _text(buf, key_span)
    if collected is not None and collected != (key in collect):
        value = None
        for n3, w3, p, q in _fields(buf, a, b):
            if n3 == 2 and w3 == 2:
                value = _feature(buf, p, q, value, cap if key in collect else -1)
    return key, value


# Small map entries seen before, by their bytes: most of a dataset's entries repeat from record to
# record (format, channels, label, class text, often height and width), and walking them was most of
# the time `inspect --verify`'s one reading thread spent on a record. Bounded: cleared when full.
_ENTRY_CACHE: dict[tuple[bytes, Container[str], int], tuple[str, WireFeature | None] | None] = {}
_CACHED_ENTRY_BYTES = 64
_CACHE_ENTRIES = 4096
_MISS = object()


def _cached_entry(
    buf: memoryview, a: int, b: int, collect: Container[str], cap: int
) -> tuple[str, WireFeature | None] | None:
    """`_entry` of buf[a:b], from the cache when it is small and was seen before. The features given
    out are shared, so read-only. A new one is walked in its own copy, so what it keeps (a bytes
    value's memoryview) holds that copy, not the record; one that does not parse is walked again in
    place, so its error names its position in the record."""
    if b - a > _CACHED_ENTRY_BYTES:
        return _entry(buf, a, b, collect, cap)
    raw = bytes(buf[a:b])
    key = (raw, collect, cap)
    try:
        hit = _ENTRY_CACHE.get(key, _MISS)
    except TypeError:  # an unhashable `collect`
        return _entry(buf, a, b, collect, cap)
    if hit is not _MISS:
        return hit  # type: ignore[return-value]
    try:
        entry = _entry(memoryview(raw), 0, len(raw), collect, cap)
    except WireError:
        return _entry(buf, a, b, collect, cap)
    if len(_ENTRY_CACHE) >= _CACHE_ENTRIES:
        _ENTRY_CACHE.clear()
    _ENTRY_CACHE[key] = entry
    return entry


def _text(buf: memoryview, span: tuple[int, int] | None) -> str:
    """A key's text (checked as UTF-8 when its field was read); "" when the entry has none."""
    return bytes(buf[span[0] : span[1]]).decode("utf-8") if span else ""


def parse_example(
    data: bytes,
    keep: Container[str] = (),
    limit: int = 1 << 62,
    collect: Container[str] = (),
    cap: int = MAX_COLLECTED,
) -> WireExample:
    """Walk a serialized Example; raises WireError where protobuf's parser raises DecodeError.

    Keeps the features whose key is in `keep` and the first `limit` other keys (in wire order);
    the values of keys in `collect` (which should be in `keep`) up to `cap` each, in `values`.
    """
    buf = memoryview(data)
    features: dict[str, WireFeature] = {}
    others = more = 0
    has = False
    for num, wt, a, b in _fields(buf, 0, len(buf)):
        if num != 1 or wt != 2:
            continue
        has = True
        for n2, w2, x, y in _fields(buf, a, b):
            if n2 != 1 or w2 != 2:
                continue
            entry = _cached_entry(buf, x, y, collect, cap)
            if entry is None:  # protobuf keeps such an entry among the unknown fields, not in the map
                continue
            key, value = entry
            if key in features or key in keep:
                features[key] = value or WireFeature()
            elif others < limit:
                others += 1
                features[key] = value or WireFeature()
            else:
                more += 1
    return WireExample(features, more, has)
