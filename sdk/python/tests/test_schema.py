"""The catalogue's JSON Schema: the copy this package ships is the one the Go
catalogue generates, the validator is driven by it, and it is a JSON Schema
that any draft 2020-12 validator can use for what it can express."""

from __future__ import annotations

import copy
import dataclasses
import json
from importlib import resources

import jsonschema
import pytest
from referencing import Registry, Resource

import rolloutledger as rl
from rolloutledger import _schema as S
from rolloutledger import _strict as D
from rolloutledger import errors as E
from rolloutledger.facts import Gate, RunConfig

from conftest import REPO
from test_vectors import VECTOR_CASES, body_of

REPO_SCHEMA = REPO / "events" / "schema" / "catalogue.schema.json"


def packaged_schema() -> bytes:
    return resources.files("rolloutledger").joinpath("catalogue.schema.json").read_bytes()


def test_packaged_schema_is_the_generated_one():
    assert packaged_schema() == REPO_SCHEMA.read_bytes(), (
        "the schema inside the package differs from events/schema/catalogue.schema.json: "
        "run go generate ./events/... and reinstall the SDK"
    )
    assert S.SCHEMA["x-rolloutledger-vocabulary"] == S.VOCABULARY
    assert S.SCHEMA == json.loads(REPO_SCHEMA.read_text("utf-8"))


def test_catalogue_comes_from_the_schema():
    branches = {(b["properties"]["type"]["const"], b["properties"]["v"]["const"]) for b in S.SCHEMA["oneOf"]}
    assert {(t, v) for t, versions in S.CATALOGUE.items() for v in versions} == branches
    assert set(S.CATALOGUE) == set(rl.FACT_TYPES)


@pytest.mark.parametrize("fact_type", sorted(rl.FACT_TYPES))
def test_builders_match_the_schema(fact_type):
    """The typed builders are written by hand: they must have the schema's
    fields, in its order, and leave its optional fields out by default."""
    check_builder(rl.FACT_TYPES[fact_type], S.FACTS[fact_type])


@pytest.mark.parametrize("cls, spec", [(RunConfig, S.RUN_CONFIG), (Gate, S.FACTS["task.registered"].by_name["gates"].sub)])
def test_nested_builders_match_the_schema(cls, spec):
    check_builder(cls, spec)


def check_builder(cls, spec):
    fields = [f for f in dataclasses.fields(cls) if f.init]
    assert [f.name for f in fields] == [f.name for f in spec.fields]
    for f in fields:
        if spec.by_name[f.name].optional:
            assert f.default is None, f"{cls.__name__}.{f.name} is optional and must default to None"


# --- the validator is driven by the schema ------------------------------------


def compile_catalogue(schema: dict) -> dict:
    return S._Compiler(schema).catalogue()


GROUP = {"group": "g-1", "task": "t-1", "size": 1, "purpose": "train"}


def test_rules_come_from_the_schema():
    schema = copy.deepcopy(S.SCHEMA)
    rule = schema["$defs"]["group.started.v1"]["x-rolloutledger-rules"][0]
    assert rule["field"] == "size"
    rule["minimum"] = 2
    spec = compile_catalogue(schema)["group.started"][1]
    with pytest.raises(rl.ValidationError) as ei:
        D.decode_data(spec, dict(GROUP))
    assert (ei.value.code, ei.value.field, ei.value.detail) == (E.INVALID_VALUE, "data.size", "a group holds at least 1 attempt, got 1")
    D.decode_data(S.CATALOGUE["group.started"][1], dict(GROUP))


def test_fields_come_from_the_schema():
    schema = copy.deepcopy(S.SCHEMA)
    schema["$defs"]["group.started.v1"]["properties"]["purpose"]["enum"].append("warmup")
    spec = compile_catalogue(schema)["group.started"][1]
    assert D.decode_data(spec, {**GROUP, "purpose": "warmup"})["purpose"] == "warmup"
    with pytest.raises(rl.ValidationError):
        D.decode_data(S.CATALOGUE["group.started"][1], {**GROUP, "purpose": "warmup"})


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda s: s["$defs"]["turn.generated.v1"]["x-rolloutledger-rules"][0].update(multipleOf=2), "multipleOf"),
        (lambda s: s["$defs"]["turn.generated.v1"]["properties"]["turn"].update(multipleOf=2), "multipleOf"),
        (lambda s: s["$defs"]["run-config"].update({"x-rolloutledger-report": "some"}), "x-rolloutledger-report"),
        (lambda s: s["$defs"]["gate"].update({"x-rolloutledger-new": True}), "x-rolloutledger-new"),
        (lambda s: s["x-rolloutledger-formats"]["uuid"].update(complete=False), "uuid"),
        (lambda s: s["$defs"]["turn.generated.v1"]["properties"]["turn"].update(format="int128"), "int128"),
    ],
)
def test_unknown_keywords_are_refused(change, words):
    """A schema that says more than this SDK understands is an error at
    import, not a rule silently skipped."""
    schema = copy.deepcopy(S.SCHEMA)
    change(schema)
    with pytest.raises(S.SchemaError, match=words):
        compile_catalogue(schema)


def test_newer_vocabulary_is_refused():
    schema = copy.deepcopy(S.SCHEMA)
    schema["x-rolloutledger-vocabulary"] = S.VOCABULARY + 1
    with pytest.raises(S.SchemaError, match="vocabulary"):
        S._load(json.dumps(schema))


RULE_MESSAGES = [
    # The Go decoder's words (events/rules_test.go), from the same templates.
    ("turn.generated", {"cached_tokens": 901, "prompt_tokens": 900}, "data.cached_tokens", "901 cached tokens exceed 900 prompt tokens"),
    ("turn.generated", {"token_ids": "AQAAAAIAAAA="}, "data.token_ids", "2 token ids for 3 completion tokens"),
    ("turn.generated", {"version_segments": []}, "data.version_segments", "no version segments: a turn has at least one"),
    ("turn.generated", {"version_segments": [{"start": 2, "policy_version": 1}]}, "data.version_segments[0].start",
     "the first segment starts at token 2, not 0"),
    ("turn.generated", {"version_segments": [{"start": 0, "policy_version": 1}, {"start": 0, "policy_version": 2}]},
     "data.version_segments[1].start", "starts at token 0, not after the previous segment's start 0"),
    ("turn.generated", {"version_segments": [{"start": 0, "policy_version": 1}, {"start": 3, "policy_version": 2}]},
     "data.version_segments[1].start", "starts at token 3, past the last of 3 completion tokens"),
    ("turn.generated", {"version_segments": [{"start": 0, "policy_version": 4}, {"start": 1, "policy_version": 4}]},
     "data.version_segments[1].policy_version",
     "policy version 4 does not follow the previous segment's 4: versions only move forward, and a version's tokens are one segment"),
    ("turn.generated", {"text_cut": 12}, "data.text", "text_cut 12 given without text"),
    ("turn.generated", {"logprobs": "AAAAvwAAwH8AAAAA"}, "data.logprobs[1]", "NaN is not a finite number"),
    ("turn.generated", {"token_ids": "AQAAAP7///8DAAAA"}, "data.token_ids[1]", "must not be negative, got -2"),
    ("turn.generated", {"token_ids": "AQAAAAIAAAADAAA="}, "data.token_ids", "11 bytes is not a whole number of int32 values"),
    ("turn.generated", {"token_ids": "AQAAAAIAAAADAAB="}, "data.token_ids", "not base64: the unused bits of the last group are not zero (the encoding is not canonical)"),
    ("turn.generated", {"token_ids": "AQAA AIAAAADAAAA"}, "data.token_ids", "not base64: ' ' at byte 4 is not in the standard alphabet (A-Z a-z 0-9 + /)"),
    ("tool.called", {"output": "x", "output_cut": 60000}, "data.output_cut", "60000 bytes cut from an output of 52000 bytes"),
    ("gradient.applied", {"to_version": 2}, "data.to_version", "to_version 2 does not follow from_version 2"),
    ("gradient.applied", {"logprob_gap": {"0": 0.1, "07": 0.2}}, "data.logprob_gap.07", 'key "07" is not a staleness (a non-negative integer)'),
    (
        "run.started",
        {"config": {"pass_band": [0.9, 0.1, 0.2], "group_size": 4, "min_group": 5, "efficiency_weight": 1, "partial_credit_cap": 0.5}},
        "data.config.pass_band",
        "data.config.pass_band: want [low, high], got 3 numbers; "
        "data.config.min_group: must be between 1 and group_size 4, got 5; "
        "data.config.partial_credit_cap: must be in [0, 1 − efficiency_weight/2) = [0, 0.5), got 0.5",
    ),
    (
        "run.started",
        {"config": {"pass_band": [0.9, 0.1], "efficiency_weight": 2, "partial_credit_cap": 0}},
        "data.config.pass_band",
        "data.config.pass_band: want 0 <= low <= high <= 1, got [0.9, 0.1]; "
        "data.config.efficiency_weight: must be in [0, 2), got 2; "
        "data.config.partial_credit_cap: must be in [0, 1 − efficiency_weight/2) = [0, 0), got 0",
    ),
]

VALID_DATA = {
    "turn.generated": {
        "attempt": "a-1", "turn": 0, "prompt_tokens": 900, "completion_tokens": 3, "cached_tokens": 600,
        "version_segments": [{"start": 0, "policy_version": 2}], "token_ids": "AQAAAAIAAAADAAAA",
        "logprobs": "AAAAvwAAgL4AAAC+", "finish": "stop", "latency_ms": 8,
    },
    "tool.called": {
        "attempt": "a-1", "turn": 0, "call": 0, "tool": "bash", "exit_code": 0, "duration_ms": 1, "output_bytes": 52000,
        "to_file": False, "background": False, "timed_out": False,
    },
    "gradient.applied": {
        "step": 2, "batch": 2, "batch_digest": "sha256:ab", "from_version": 1, "to_version": 2, "loss": -0.1,
        "trained_tokens": 10, "truncated_fraction": 0, "logprob_gap": {"1": 0.065}, "grad_norm": 0.5,
    },
    "run.started": {"config": {}, "model": "m", "harness": "h"},
}


@pytest.mark.parametrize("fact_type, change, field, detail", RULE_MESSAGES, ids=[f"{m[0]} {m[2]}" for m in RULE_MESSAGES])
def test_rule_messages_are_the_servers(fact_type, change, field, detail):
    data = {**VALID_DATA[fact_type], **change}
    data = {k: x for k, x in data.items() if x is not None}
    if fact_type == "gradient.applied" and "to_version" in change:
        data["from_version"] = 2
    with pytest.raises(rl.ValidationError) as ei:
        D.decode_fact(fact_type, data)
    assert (ei.value.field, ei.value.detail) == (field, detail)


def test_go_number_words():
    for x, want in [(0.5, "0.5"), (2.0, "2"), (123456.0, "123456"), (1234567.0, "1.234567e+06"), (1e-05, "1e-05"),
                    (0.0001, "0.0001"), (-0.0, "-0"), (1e21, "1e+21"), (0.1 + 0.2, "0.30000000000000004")]:
        assert D._go_g(x) == want


# --- the schema for other languages -------------------------------------------

# Invalid vectors a plain JSON Schema validator accepts, and why: what the
# schema leaves to the x-rolloutledger keywords and the formats.
NOT_EXPRESSIBLE = {
    "v3/parent not before the turn": "a bound set by another field (turn)",
    "v3/prefix_tokens without parent": "an optional integer's zero is absent to the rule, present to dependentRequired",
    "v3/prefix_tokens over prompt_tokens": "a bound set by another field (prompt_tokens)",
    "v3/observation not the new prompt tokens": "a length set by two fields (prompt_tokens - prefix_tokens)",
    "v3/first turn observation not the whole prompt": "a length set by two fields (prompt_tokens - prefix_tokens)",
    "v3/diverged not before the turn": "a bound set by a field of the enclosing object (turn)",
    "v3/tags unsorted": "sorted order (uniqueItems says only unique)",
    "v3/vocabulary chunk past chunks": "a bound set by another field (chunks)",
    "v3/vocabulary first past size": "a bound set by another field (size)",
    "v3/vocabulary offsets overrun size": "an array length bound by two fields (size - first) inside binary",
    "v3/vocabulary pieces without offsets": "binary strings are absent when empty: dependentRequired cannot say it",
    **{
        f"surrogate/{name}": "a lone surrogate escape, which a plain parser reads into the string"
        for name in ("lone high", "lone low", "high then not low", "high then high", "high at the end",
                     "low after an escaped backslash", "in a nested object", "in 2nd event")
    },
    "wrong_type/exponent for int": "integers are integer literals (format int64)",
    "wrong_type/int64 overflow": "the width of int64 is the format's",
    "wrong_type/float overflow": "a literal beyond binary64 (format double)",
    "wrong_type/float32 overflow in logprobs": "a literal beyond binary32 (format float32)",
    "wrong_type/float overflow in a map": "a literal beyond binary64 (format double)",
    "at/before year 0 in UTC": "years 0000-9999 in UTC (format date-time)",
    "at/after year 9999 in UTC": "years 0000-9999 in UTC (format date-time)",
    "turn/token_ids length": "length set by completion_tokens",
    "turn/empty token_ids": "length set by completion_tokens",
    "turn/logprobs length": "length set by completion_tokens",
    "turn/cached over prompt": "bound set by prompt_tokens",
    "reward/tests_passed over tests_total": "bound set by tests_total",
    "compacted/tokens_after over tokens_before": "bound set by tokens_before",
    "gradient/to_version equal": "bound set by from_version",
    "gradient/to_version below": "bound set by from_version",
    "config/partial_credit_cap at the limit": "bound set by efficiency_weight",
    "config/partial_credit_cap at the default limit": "bound set by efficiency_weight's default",
    "config/pass_band reversed": "low <= high",
    "config/min_group over group_size": "bound set by group_size",
    "duplicate_field/envelope run": "keys given twice",
    "duplicate_field/same value": "keys given twice",
    "duplicate_field/data": "keys given twice",
    "duplicate_field/escaped key": "keys given twice",
    "duplicate_field/first in document order": "keys given twice",
    "duplicate_field/gate": "keys given twice",
    "duplicate_field/config": "keys given twice",
    "duplicate_field/in the 2nd event": "keys given twice",
    "v2/segment member twice": "keys given twice",
    "v2/segments out of order": "starts ascending (x-rolloutledger-rules items)",
    "v2/segments at one token": "starts ascending (x-rolloutledger-rules items)",
    "v2/segment past the completion": "starts below completion_tokens",
    "v2/two segments of no tokens": "starts below completion_tokens",
    "v2/versions going back": "versions ascending (x-rolloutledger-rules items)",
    "v2/one version in two segments": "versions ascending (x-rolloutledger-rules items)",
    "v2/base64 non-zero padding bits": "strict base64: the unused bits (x-rolloutledger-binary)",
    "v2/not whole int32 values": "the byte count inside base64 (x-rolloutledger-binary)",
    "v2/not whole float32 values": "the byte count inside base64 (x-rolloutledger-binary)",
    "v2/negative token id": "values inside base64 (x-rolloutledger-items)",
    "v2/negative token id among many": "values inside base64 (x-rolloutledger-items)",
    "v2/negative observation id": "values inside base64 (x-rolloutledger-items)",
    "v2/logprob NaN": "values inside base64 (x-rolloutledger-items)",
    "v2/logprob +Inf": "values inside base64 (x-rolloutledger-items)",
    "v2/logprob -Inf": "values inside base64 (x-rolloutledger-items)",
    "v2/logprob above 0": "values inside base64 (x-rolloutledger-items)",
    "v2/token_ids length": "length set by completion_tokens, inside base64",
    "v2/logprobs length": "length set by completion_tokens, inside base64",
    "v2/token_ids without logprobs": "requiredBy: an empty binary string is absent, so no dependentRequired",
    "v2/logprobs with empty token_ids": "requiredBy: an empty binary string is absent, so no dependentRequired",
    "v2/text_cut without text": "requiredBy: a zero cut is absent, so no dependentRequired",
    "v2/text_cut with empty text": "requiredBy: a zero cut is absent, so no dependentRequired",
    "v2/text over MaxTextBytes": "a bound in UTF-8 bytes (x-rolloutledger-maxBytes), within maxLength in characters",
    "v2/tool input_cut without input": "requiredBy: a zero cut is absent, so no dependentRequired",
    "v2/tool output_cut without output": "requiredBy: a zero cut is absent, so no dependentRequired",
    "v2/tool output_cut over output_bytes": "bound set by output_bytes",
    "v2/task prompt_cut without prompt": "requiredBy: a zero cut is absent, so no dependentRequired",
}


@pytest.fixture(scope="module")
def plain():
    """Validators of an event and of a request body, from the schema alone:
    custom keywords ignored, formats annotations only."""
    schema = json.loads(REPO_SCHEMA.read_text("utf-8"))
    registry = Registry().with_resource(schema["$id"], Resource.from_contents(schema))
    event = jsonschema.Draft202012Validator({"$ref": schema["$id"]}, registry=registry)
    batch = jsonschema.Draft202012Validator({"$ref": schema["$id"] + "#/$defs/batch"}, registry=registry)
    return lambda value: (batch if isinstance(value, list) else event).iter_errors(value)


def test_schema_is_a_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(json.loads(REPO_SCHEMA.read_text("utf-8")))


def parsed(case):
    try:
        return json.loads(body_of(case))
    except (ValueError, RecursionError):
        return None  # not JSON to a plain parser: nothing for a schema to judge


@pytest.mark.parametrize("case", [v for v in VECTOR_CASES if v["valid"]], ids=lambda v: v["name"])
def test_valid_vectors_pass_plain_validation(case, plain):
    errors = [e.message for e in plain(parsed(case))]
    assert errors == []


@pytest.mark.parametrize("case", [v for v in VECTOR_CASES if not v["valid"]], ids=lambda v: v["name"])
def test_expressible_invalid_vectors_fail_plain_validation(case, plain):
    value = parsed(case)
    if value is None:
        assert case["error"]["code"] in (E.MALFORMED, E.EMPTY, E.WRONG_TYPE), "only bodies that are not JSON are skipped"
        return
    refused = next(iter(plain(value)), None) is not None
    if case["name"] in NOT_EXPRESSIBLE:
        assert not refused, f"a plain validator now refuses it: take it out of NOT_EXPRESSIBLE ({NOT_EXPRESSIBLE[case['name']]})"
    else:
        assert refused, "a plain validator accepts it: make the schema say it, or list it in NOT_EXPRESSIBLE with why"


def test_not_expressible_names_vectors():
    names = {v["name"] for v in VECTOR_CASES if not v["valid"]}
    assert set(NOT_EXPRESSIBLE) <= names
