"""format.jsontext writes what json.dumps(indent=2, ensure_ascii=False) writes, for any JSON value
(dataset.json's bytes must not depend on which of the two wrote it)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import examples
from img2tfrecord.format import jsontext

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text()
keys = st.text() | st.integers() | st.floats(allow_nan=False) | st.booleans() | st.none()
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.tuples(inner, inner) | st.dictionaries(keys, inner, max_size=5),
    max_leaves=40,
)


def reference(obj: object) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False)


@settings(max_examples=examples(600), deadline=None)
@given(values)
def test_same_text_as_json_dumps(obj: object) -> None:
    try:
        expected = reference(obj)
    except (TypeError, ValueError):  # e.g. two keys that json writes alike: compare on what json accepts
        return
    assert jsontext.dumps(obj) == expected


@pytest.mark.parametrize(
    "obj",
    [
        {},
        [],
        {"a": {}, "b": [], "c": [[]], "d": [{}]},
        {'é\u2028\x00"\\': ["\udce9", "\U0001f600", math.inf, -math.inf, math.nan, -0.0, 1e300, 10**40]},
        {7: "int key", 2.5: "float key", True: "bool key", None: "null key"},
        [True, False, None, 0, -1, 1.0, "x"],
    ],
)
def test_edge_cases(obj: object) -> None:
    assert jsontext.dumps(obj) == reference(obj)


def test_what_json_refuses_is_refused() -> None:
    with pytest.raises(TypeError):
        jsontext.dumps({"a": {1, 2}})
    with pytest.raises(TypeError):
        jsontext.dumps({(1, 2): "tuple key"})
