"""Rules ingest holds new facts to that a plain JSON parser would let
through: an escape of half a UTF-16 surrogate pair (a parser turns it into
U+FFFD, or into a string that is not Unicode) and an entity id with a "." or
".." path segment. The shared vectors (test_vectors.py) hold the server's
verdicts on bodies; these are the builders' and helpers' side."""

from __future__ import annotations

import json

import pytest

import rolloutledger as rl
from rolloutledger._schema import valid_entity_id

from conftest import REPO

VECTORS = json.loads((REPO / "testdata" / "vectors" / "events.json").read_text())
FAILED = next(v["body"] for v in VECTORS if v["name"] == "valid/attempt_failed")


@pytest.mark.parametrize(
    "reason",
    ["lost \ud800 host", "\udc00", "\ud83d" + "A", "\ud83d\ud83d\ude00", "lost\udbff"],
)
def test_builder_refuses_a_lone_surrogate(reason):
    with pytest.raises(rl.ValidationError) as ei:
        rl.Event("run-1", rl.AttemptFailed(attempt="a-1", reason=reason), source="w").encode()
    e = ei.value
    assert (e.code, e.index, e.field) == ("invalid_value", 0, "data.reason")
    assert "surrogate" in e.detail


def test_body_with_a_lone_surrogate_names_the_event_and_field():
    bad = FAILED.replace('"microVM lost its host"', '"microVM \\ud800 lost its host"')
    assert bad != FAILED
    with pytest.raises(rl.ValidationError) as ei:
        rl.validate_body("[" + FAILED + "," + bad + "]")
    assert (ei.value.code, ei.value.index, ei.value.field) == ("invalid_value", 1, "data.reason")


@pytest.mark.parametrize(
    "text, want",
    [
        ('"\\ud83d\\ude00"', "\U0001f600"),  # a pair is one character
        ('"\\\\ud800"', "\\ud800"),  # an escaped backslash, then text
        ('"\\u00e9\\uffff"', "\u00e9\uffff"),
    ],
)
def test_escapes_that_are_characters_pass(text, want):
    body = FAILED.replace('"microVM lost its host"', text)
    [ev] = rl.validate_body(body)
    assert ev.data.reason == want


@pytest.mark.parametrize(
    "field, value",
    [
        ("attempt", "."),
        ("attempt", ".."),
        ("attempt", "./a-1"),
        ("attempt", "../a-1"),
        ("attempt", "a/./1"),
        ("attempt", "a/../../1"),
        ("attempt", "a-1/."),
        ("attempt", "a-1/.."),
    ],
)
def test_builder_refuses_dot_segments(field, value):
    with pytest.raises(rl.ValidationError) as ei:
        rl.Event("run-1", rl.AttemptFailed(**{"attempt": "a-1", "reason": "x", field: value}), source="w").encode()
    e = ei.value
    assert (e.code, e.field) == ("invalid_value", "data." + field)
    assert "path segment" in e.detail


def test_source_with_a_dot_segment_is_refused():
    with pytest.raises(rl.ValidationError) as ei:
        rl.Event("run-1", rl.GroupClosed(group="g", reason="x"), source="engine/..").encode()
    assert (ei.value.code, ei.value.field) == ("invalid_value", "source")


@pytest.mark.parametrize(
    "s, ok",
    [
        ("a", True),
        ("g-17/a0", True),
        (".a/b./..c/.../a..b", True),
        ("/a//b/", True),
        ("a" * 200, True),
        ("a" * 201, False),
        ("", False),
        (".", False),
        ("..", False),
        ("a/../b", False),
        ("./a", False),
        ("a/.", False),
        ("a b", False),
    ],
)
def test_valid_entity_id(s, ok):
    assert valid_entity_id(s) is ok
