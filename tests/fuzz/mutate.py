"""The fuzz target's mutators: a seeded corpus file in, a hostile variant out, the same for the same seed.

Each mutator takes the file's bytes and a `random.Random` and returns new bytes. Structure-aware ones
parse the file first (JSON, JSON lines, XML, YOLO lines, a classes list, data.yaml, CSV) and replace
what a hostile or careless tool would: numbers that overflow or are not numbers, types that are not
the expected one, lone surrogates, duplicated ids, names and keys, elements removed or doubled, deep
nesting, huge cells; byte-level ones flip, cut, splice and re-encode whatever the format. What the
readers must do with any of it is the oracle's business (fuzz_run.py), not this module's.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import random
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any

Mutator = Callable[[bytes, random.Random], bytes]

# ---- hostile values ------------------------------------------------------------------------------

BIG_DIGITS = "1" + "0" * 5000  # beyond int's default max-digits conversion limit (4300)
DEEP = 100_000  # JSON nesting deeper than any recursive parser's stack

# Raw JSON text (not all of it strict JSON: Python's json takes NaN and Infinity, ijson may not).
JSON_VALUES = [
    "1e400",
    "-1e400",
    "1e30",
    "1e19",
    "-80",
    "-1",
    "0",
    "-0",
    "0.0",
    "1e-400",
    "1.5",
    "NaN",
    "Infinity",
    "-Infinity",
    '"eighty"',
    '"80"',
    "[80]",
    "[]",
    "{}",
    "null",
    "true",
    "false",
    '""',
    '"\\ud800"',
    '"\\ud800x"',
    '"x\\udfff"',
    '"x\\u0000y"',
    '"\\ufeff"',
    '"$x^$"',
    '"a\\nb"',
    '"<img src=x onerror=alert(1)>.jpg"',
    '"../../etc/passwd"',
    '"/etc/passwd"',
    '"circle"',
    '"square"',
    "9" * 30,
    BIG_DIGITS,
    "-" + BIG_DIGITS,
    "18446744073709551616",
    "9223372036854775808",
    "-9223372036854775809",
    "2147483648",
    "[" * 60 + "]" * 60,
    "[" * 1500 + "]" * 1500,
    "[" * DEEP + "]" * DEEP,
    '{"a":' * 3000 + "1" + "}" * 3000,
    '"' + "x" * 200_000 + '"',
    "[" + ",".join(["1"] * 20_000) + "]",
    # segmentations and boxes as a hostile exporter writes them
    "[[1e300, 2, -1e300, 4, 5, 1e300]]",
    "[[1e8, 1e8, 2, 2, 3, 3]]",
    "[[0, 0, 100000000, 0, 100000000, 100000000]]",
    "[[1, 2, 3]]",
    "[[]]",
    "[[NaN, 1, 2, 3, 4, 5]]",
    '[["a", "b", "c", "d", "e", "f"]]',
    '{"counts": [99999999999], "size": [100000000, 100000000]}',
    '{"counts": [5, 5], "size": [30, 40]}',
    '{"counts": "abc", "size": [30, 40]}',
    '{"counts": "' + "\\u007f" * 50 + '", "size": [30, 40]}',
    '{"counts": [], "size": []}',
    "[1e30, 1e30, 1e30, 1e30]",
    "[0, 0, 1e400, 1e400]",
    "[-1e30, -1e30, 1e30, 1e30]",
    "[NaN, NaN, NaN, NaN]",
    "[1, 2, 3]",
    "[1, 2, 3, 4, 5]",
    '["1", "2", "3", "4"]',
]


class Raw(str):
    """JSON text put into the output as is (a value json.dumps could not write: 1e400, a duplicate key)."""


class Obj(list):  # type: ignore[type-arg]
    """A JSON object as its (key, value) pairs, so keys can repeat."""


def parse_json(text: str) -> Any:
    """JSON text as a tree of Obj and lists (ValueError for any text it cannot take, a deep one too)."""
    try:
        return json.loads(text, object_pairs_hook=Obj)
    except RecursionError:
        raise ValueError("nested too deep to mutate") from None


def dump_json(v: Any, rng: random.Random | None = None) -> str:
    """JSON text of a tree of Obj, list, Raw and plain values (indentation varied by `rng`)."""
    sep = ", " if rng is None or rng.random() < 0.7 else ","
    if isinstance(v, Raw):
        return str(v)
    if isinstance(v, Obj):
        return "{" + sep.join(json.dumps(k) + ": " + dump_json(x, rng) for k, x in v) + "}"
    if isinstance(v, list):
        return "[" + sep.join(dump_json(x, rng) for x in v) + "]"
    return json.dumps(v)


def _nodes(v: Any, out: list[tuple[Any, Any]], parent: Any = None, key: Any = None) -> None:
    """Every (container, index) below `v`: Obj pairs by their position, list items by theirs."""
    if isinstance(v, Obj):
        for i, (_, x) in enumerate(v):
            out.append((v, i))
            _nodes(x, out, v, i)
    elif isinstance(v, list) and not isinstance(v, Raw):
        for i, x in enumerate(v):
            out.append((v, i))
            _nodes(x, out, v, i)


def _get(c: Any, i: int) -> Any:
    return c[i][1] if isinstance(c, Obj) else c[i]


def _set(c: Any, i: int, x: Any) -> None:
    if isinstance(c, Obj):
        c[i] = (c[i][0], x)
    else:
        c[i] = x


def mutate_tree(tree: Any, rng: random.Random) -> Any:
    """One structural change of a parsed JSON tree (in place where it can; returns the tree)."""
    nodes: list[tuple[Any, Any]] = []
    _nodes(tree, nodes)
    if not nodes:
        return Raw(rng.choice(JSON_VALUES))
    op = rng.randrange(9)
    c, i = rng.choice(nodes)
    if op <= 2:  # a hostile value anywhere
        _set(c, i, Raw(rng.choice(JSON_VALUES)))
    elif op == 3:  # a key removed
        objs = [x for x, _ in nodes if isinstance(x, Obj) and x]
        if objs:
            o = rng.choice(objs)
            del o[rng.randrange(len(o))]
    elif op == 4:  # a list item doubled (duplicate ids, names, file names, boxes)
        lists = [x for x, _ in nodes if isinstance(x, list) and not isinstance(x, Obj) and x]
        if lists:
            lst = rng.choice(lists)
            j = rng.randrange(len(lst))
            lst.insert(rng.randrange(len(lst) + 1), copy.deepcopy(lst[j]))
    elif op == 5:  # a duplicate key with another value
        objs = [x for x, _ in nodes if isinstance(x, Obj) and x]
        if objs:
            o = rng.choice(objs)
            k, _ = rng.choice(o)
            o.insert(rng.randrange(len(o) + 1), (k, Raw(rng.choice(JSON_VALUES))))
    elif op == 6:  # a field copied between siblings: two categories of one name, two images of one id
        lists = [x for x, _ in nodes if isinstance(x, list) and not isinstance(x, Obj) and len(x) > 1]
        lists = [lst for lst in lists if all(isinstance(e, Obj) for e in lst)]
        if lists:
            lst = rng.choice(lists)
            a, b = rng.sample(range(len(lst)), 2)
            if lst[a]:
                k, v = rng.choice(lst[a])
                lst[b] = Obj([(kk, vv) for kk, vv in lst[b] if kk != k] + [(k, v)])
    elif op == 7:  # a value swapped with another node's (type confusion)
        c2, i2 = rng.choice(nodes)
        a, b = _get(c, i), _get(c2, i2)
        if a is not c2 and b is not c:
            _set(c, i, b)
            _set(c2, i2, a)
    else:  # a container emptied or a scalar wrapped in a list
        x = _get(c, i)
        _set(c, i, Obj() if isinstance(x, Obj) else [] if isinstance(x, list) else [x])
    return tree


# ---- mutators per format -------------------------------------------------------------------------


def json_file(data: bytes, rng: random.Random) -> bytes:
    try:
        tree = parse_json(data.decode("utf-8"))
    except ValueError:
        return bytes_level(data, rng)
    for _ in range(rng.randint(1, 3)):
        tree = mutate_tree(tree, rng)
    return dump_json(tree, rng).encode("utf-8")


JSONL_LINES = ["", "   ", "[1]", "null", '"x"', "{", "{}", '{"file_name": null}', '{"file_name": ["a"]}', "\x00"]


def jsonl_file(data: bytes, rng: random.Random) -> bytes:
    lines = data.decode("utf-8").splitlines()
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(6)
        j = rng.randrange(len(lines)) if lines else 0
        if op <= 2 and lines:
            try:
                lines[j] = dump_json(mutate_tree(parse_json(lines[j]), rng), rng)
            except ValueError:
                lines[j] = rng.choice(JSONL_LINES)
        elif op == 3 and lines:
            lines.insert(rng.randrange(len(lines) + 1), lines[j])  # a row doubled: one file_name twice
        elif op == 4:
            lines.insert(rng.randrange(len(lines) + 1), rng.choice(JSONL_LINES))
        elif lines:
            del lines[j]
    return ("\n".join(lines) + rng.choice(["\n", "", "\r\n"])).encode("utf-8")


XML_TEXTS = [
    "nan",
    "NaN",
    "inf",
    "-inf",
    "Infinity",
    "1e30",
    "1e400",
    "-1e400",
    "1e19",
    "1e-400",
    "-5",
    "0",
    "-0",
    "",
    " ",
    "abc",
    "１２",
    "٣",
    "0x10",
    "1_0",
    "2.5",
    BIG_DIGITS,
    "9223372036854775808",
    "c0.jpg",
    "s0.jpg",
    "square",
    "circle",
    "$x^$",
    "x" * 100_000,
    "../../etc/passwd",
]
XML_RAW = [
    '<!DOCTYPE a [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;"><!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">]>',
    '<!DOCTYPE a [<!ENTITY x SYSTEM "file:///etc/passwd">]>',
    "<?xml version='1.0' encoding='utf-16'?>",
    "<?xml version='1.0' encoding='latin-1'?>",
    "<?xml version='1.0' encoding='no-such-codec'?>",
]


def xml_file(data: bytes, rng: random.Random) -> bytes:
    try:
        root = ET.fromstring(data)
    except ET.ParseError:
        return bytes_level(data, rng)
    entity = False
    for _ in range(rng.randint(1, 3)):
        elements = list(root.iter())
        parents = {c: p for p in elements for c in p}
        e = rng.choice(elements)
        op = rng.randrange(8)
        if op <= 2:
            e.text = rng.choice(XML_TEXTS)
        elif op == 3 and e in parents:
            parents[e].remove(e)
        elif op == 4 and e in parents:
            parents[e].append(ET.fromstring(ET.tostring(e)))  # doubled: two <size>, two <bndbox>, ...
        elif op == 5:
            for child in list(e):
                e.remove(child)
            e.text = None
        elif op == 6:
            e.tag = rng.choice(["object", "size", "bndbox", "x", "annotation", "name", "filename"])
        else:
            entity = True
            e.text = "&c;&c;&c;" if rng.random() < 0.5 else "&x;"
    text = ET.tostring(root, encoding="unicode")
    if entity:
        text = text.replace("&amp;c;", "&c;").replace("&amp;x;", "&x;")
        text = rng.choice(XML_RAW[:2]) + text
    elif rng.random() < 0.1:
        text = rng.choice(XML_RAW[2:]) + text
    return text.encode("utf-8")


YOLO_TOKENS = [
    ".",
    "e",
    "+-",
    "-+",
    "nan",
    "inf",
    "-inf",
    "1e400",
    "1e-400",
    "-0.5",
    "2",
    "1e30",
    "0x1",
    "٣",
    "1_0",
    "99999999999999999999",
    BIG_DIGITS,
    "-1",
    "+0",
    "0.5",
    "",
]


def yolo_txt(data: bytes, rng: random.Random) -> bytes:
    lines = data.decode("utf-8").splitlines() or ["0 0.5 0.5 0.5 0.5"]
    for _ in range(rng.randint(1, 3)):
        j = rng.randrange(len(lines))
        words = lines[j].split() or ["0", "0.5", "0.5", "0.5", "0.5"]
        op = rng.randrange(7)
        if op <= 2:
            for _ in range(rng.randint(1, len(words))):
                words[rng.randrange(len(words))] = rng.choice(YOLO_TOKENS)
            lines[j] = " ".join(words)
        elif op == 3:
            lines[j] = " ".join(words + rng.choice([["0.1"], ["0.1"] * 6, ["x"]]))  # segments, keypoints, junk
        elif op == 4:
            lines[j] = " ".join(words[: rng.randrange(len(words))])
        elif op == 5:
            lines.insert(j, lines[j])
        else:
            lines[j] = rng.choice(["\t".join(words), "\x0c".join(words), words[0] + "\u2028" + " ".join(words)])
    return (rng.choice(["\n", "\r\n", "\r"]).join(lines) + "\n").encode("utf-8")


CLASS_NAMES = ["circle", "square", "", " ", "$x^$", "a\tb", "x" * 300, "\u2028", "<b>", "circle ", "Circle"]


def names_file(data: bytes, rng: random.Random) -> bytes:
    lines = data.decode("utf-8").splitlines()
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(4)
        if op == 0 and lines:
            lines.insert(rng.randrange(len(lines) + 1), rng.choice(lines))  # a name twice
        elif op == 1:
            lines.insert(rng.randrange(len(lines) + 1), rng.choice(CLASS_NAMES))
        elif op == 2 and lines:
            del lines[rng.randrange(len(lines))]
        else:
            lines += [f"c{i}" for i in range(rng.choice([1, 300, 20_000]))]
    return "\n".join(lines).encode("utf-8") + rng.choice([b"\n", b"", b"\r\n"])


YAML_NAMES = [
    "names: [circle, square]",
    "names: {0: circle, 1: square}",
    "names:\n  0: circle\n  0: square",
    "names:\n  0: circle\n  2: square",
    "names:\n  a: circle\n  b: square",
    "names:\n  -1: circle\n  0: square",
    "names:\n  1e400: circle",
    "names:\n  " + BIG_DIGITS + ": circle",
    "names:\n  1.5: circle\n  0: square",
    "names:\n  null: circle",
    "names:\n  [0]: circle",
    "names: null",
    "names: 5",
    "names: circle",
    "names: []",
    "names: {}",
    "names: [[a], b]",
    "names: [{a: 1}, b]",
    "names: [circle, circle]",
    "names: ['a, b', square]  # a comment",
    "names: [null, 1, 1.5, true]",
    "names: [!!binary aGVsbG8=, b]",
    "names: [!!python/object/apply:os.system ['echo pwned'], b]",
    "names: !!set {a, b}",
    'names: ["\\ud800", b]',
    "names: &a [x, *a]",
    'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
    "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nnames: [*e, *e]",
    "names:\n\t0: circle",
    "names: [" + ", ".join(f"c{i}" for i in range(20_000)) + "]",
    "names:\n" + "".join(f"  {i * 1000}: c{i}\n" for i in range(30)),
]
YAML_PATHS = ["path: /etc", "path: ../../..", "train: /dev/zero", "val: [a, b]", "train: 5", "path: null", "nc: 99"]


def data_yaml(data: bytes, rng: random.Random) -> bytes:
    text = data.decode("utf-8")
    op = rng.randrange(4)
    if op <= 1:  # the names block replaced
        head = text.split("names:")[0]
        text = head + rng.choice(YAML_NAMES) + "\n"
    elif op == 2:
        lines = text.splitlines()
        lines.insert(rng.randrange(len(lines) + 1), rng.choice(YAML_PATHS))
        text = "\n".join(lines) + "\n"
    else:
        text = text + rng.choice(["---\nnames: [x]\n", "...\n", "%YAML 9.9\n", "names: [x]\n", "\x00"])
    return text.encode("utf-8")


CSV_CELLS = [
    "x" * 200_000,
    BIG_DIGITS,
    "-" + BIG_DIGITS,
    "+" + BIG_DIGITS[:30],
    "1e400",
    "nan",
    "inf",
    "-inf",
    "",
    " ",
    "1_000",
    "0x10",
    "１２",
    "-2",
    "+5",
    "9223372036854775808",
    "1e39",
    "circle/c0.jpg",
    "square/s1.png",
    "../../etc/passwd",
    '"',
    "a\nb",
    "$x^$",
    "[1, 2]",
]


def csv_file(data: bytes, rng: random.Random) -> bytes:
    rows = list(csv.reader(io.StringIO(data.decode("utf-8"))))
    for _ in range(rng.randint(1, 3)):
        r = rng.randrange(len(rows))
        op = rng.randrange(6)
        if op <= 1 and rows[r]:
            rows[r][rng.randrange(len(rows[r]))] = rng.choice(CSV_CELLS)
        elif op == 2:
            rows[r].append(rng.choice(CSV_CELLS))  # a row longer than the header
        elif op == 3 and rows[r]:
            del rows[r][rng.randrange(len(rows[r]))]
        elif op == 4:
            rows.insert(rng.randrange(1, len(rows) + 1), list(rows[r]))  # a row doubled / the header as a row
        else:
            rows[0] = [rng.choice(["file_name", "caption", "", "labels", "file_name "]) for _ in rows[0]]
    out = io.StringIO()
    csv.writer(out, lineterminator=rng.choice(["\n", "\r\n"])).writerows(rows)
    return out.getvalue().encode("utf-8")


# ---- byte level ----------------------------------------------------------------------------------

BYTE_INSERTS = [b"\x00", b"\xff", b"\xed\xa0\x80", b"\xef\xbb\xbf", b"\xc3", b"\r", b"\x1b[31m", b"\xe2\x80\xa8"]


def bytes_level(data: bytes, rng: random.Random, others: list[bytes] | None = None) -> bytes:
    """Flips, cuts, inserts, splices and re-encodings: what a disk, a transfer or an editor does."""
    b = bytearray(data)
    op = rng.randrange(9)
    if op == 0 and b:
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    elif op == 1:
        del b[rng.randrange(len(b) + 1) :]  # truncated
    elif op == 2:
        i = rng.randrange(len(b) + 1)
        b[i:i] = rng.choice(BYTE_INSERTS)
    elif op == 3 and b:
        i = rng.randrange(len(b))
        del b[i : i + rng.randint(1, 64)]
    elif op == 4 and b:
        i = rng.randrange(len(b))
        j = min(len(b), i + rng.randint(1, 200))
        k = rng.randrange(len(b) + 1)
        b[k:k] = b[i:j]  # a span doubled
    elif op == 5 and others:
        other = rng.choice(others)
        i, j = rng.randrange(len(b) + 1), rng.randrange(len(other) + 1)
        b = b[:i] + other[j:]  # spliced with another seed file
    elif op == 6:
        codec = rng.choice(["utf-16", "utf-16-le", "utf-32", "latin-1"])
        try:
            b = bytearray(bytes(b).decode("utf-8").encode(codec))
        except (UnicodeDecodeError, UnicodeEncodeError):
            b = bytearray(b"\xff\xfe" + bytes(b))
    elif op == 7:
        b[0:0] = b"\xef\xbb\xbf" * rng.randint(1, 2)  # a BOM, or two
    else:
        b = bytearray(bytes(b).replace(b"\n", rng.choice([b"\r\n", b"\r", b"\n\n", b"\x00\n"])))
    return bytes(b)


MUTATORS: dict[str, Mutator] = {
    "json": json_file,
    "jsonl": jsonl_file,
    "xml": xml_file,
    "yolo": yolo_txt,
    "names": names_file,
    "yaml": data_yaml,
    "csv": csv_file,
}


def kind_of(name: str) -> str:
    """Which structure-aware mutator a corpus file takes, by its name."""
    if name.endswith(".jsonl"):
        return "jsonl"
    if re.search(r"(classes\.txt|obj\.names)$", name):
        return "names"
    suffix = name.rsplit(".", 1)[-1]
    return {"json": "json", "xml": "xml", "txt": "yolo", "yaml": "yaml", "yml": "yaml", "csv": "csv"}.get(suffix, "")


def mutate(name: str, data: bytes, rng: random.Random, others: list[bytes]) -> bytes:
    """`data` (the corpus file `name`) mutated: mostly by its structure, sometimes byte by byte, or both."""
    kind = kind_of(name)
    roll = rng.random()
    if kind and roll < 0.75:
        try:
            data = MUTATORS[kind](data, rng)
        except (ValueError, IndexError, csv.Error, RecursionError):  # UnicodeDecodeError is a ValueError
            data = bytes_level(data, rng, others)
        if roll < 0.12:
            data = bytes_level(data, rng, others)
        return data
    return bytes_level(data, rng, others)
