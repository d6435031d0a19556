"""The typed builders, ids, times and numbers, without a server."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import re
import struct

import numpy as np
import pytest

import rolloutledger as rl
from rolloutledger._json import format_float, float32_from
from rolloutledger._time import format_at, parse_at
from rolloutledger.ids import parse_event_id, uuid7, uuid7_time_ms

UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def test_uuid7_layout_and_order():
    ids = [uuid7() for _ in range(5000)]
    assert all(UUID7.match(i) for i in ids)
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids), "ids made by one process sort in creation order"
    import time

    now = time.time_ns() // 1_000_000
    assert abs(uuid7_time_ms(ids[-1]) - now) < 5_000
    assert all(parse_event_id(i) == i for i in ids[:10])


@pytest.mark.parametrize(
    "s,ok",
    [
        ("0192f0c4-7a1e-7c3b-9d2e-4b1f8a6c0d11", True),
        ("0192F0C4-7A1E-7C3B-9D2E-4B1F8A6C0D11", True),
        ("0192f0c4-7a1e-4c3b-ad2e-4b1f8a6c0d11", True),  # any version
        ("0192f0c4-7a1e-7c3b-cd2e-4b1f8a6c0d11", False),  # Microsoft variant
        ("00000000-0000-0000-0000-000000000000", False),
        ("ffffffff-ffff-ffff-ffff-ffffffffffff", False),
        ("{0192f0c4-7a1e-7c3b-9d2e-4b1f8a6c0d11}", False),
        ("0192f0c47a1e7c3b9d2e4b1f8a6c0d11", False),
        ("0192f0c4-7a1e-7c3b-9d2e-4b1f8a6c0d1é", False),
    ],
)
def test_parse_event_id(s, ok):
    assert (parse_event_id(s) is not None) == ok
    if ok:
        assert parse_event_id(s) == s.lower()


@pytest.mark.parametrize(
    "text,canonical",
    [
        ("2026-11-29T19:10:00.123Z", "2026-11-29T19:10:00.123Z"),
        ("2026-11-29T19:10:00.100000Z", "2026-11-29T19:10:00.1Z"),
        ("2026-11-29T19:10:00.000Z", "2026-11-29T19:10:00Z"),
        ("2026-11-29T19:10:00.123456789Z", "2026-11-29T19:10:00.123456789Z"),
        ("2026-11-29T19:10:00.1234567891Z", None),  # at most nine fraction digits
        ("2026-11-29T21:10:00+02:00", "2026-11-29T19:10:00Z"),
        ("2026-11-29T9:10:00Z", None),  # hours have two digits
        ("2026-11-29T19:10:00,5Z", None),  # the fraction follows a '.'
        ("2026-11-29T19:10:00+24:00", None),  # offsets stop at 23:59
        ("2026-11-29T19:10:00-23:59", "2026-11-30T19:09:00Z"),
        ("2024-02-29T00:00:00Z", "2024-02-29T00:00:00Z"),
        ("0000-01-01T00:00:00-00:01", "0000-01-01T00:01:00Z"),
        ("2026-02-29T00:00:00Z", None),
        ("2026-11-29T24:00:00Z", None),
        ("2026-11-29T19:10:60Z", None),
        ("2026-11-29T19:10:00+01:60", None),
        ("2026-11-29T19:10:00+25:00", None),
        ("2026-11-29t19:10:00Z", None),
        ("2026-11-29T19:10:00z", None),
        ("2026-11-29T19:10:00", None),
        ("0000-01-01T00:00:00+01:00", None),
        ("9999-12-31T23:30:00-01:00", None),
    ],
)
def test_at(text, canonical):
    got = parse_at(text)
    assert (format_at(*got) if got else None) == canonical


def test_at_from_datetime():
    ev = rl.Event("r", rl.GroupClosed(group="g", reason="x"), source="s",
                  at=dt.datetime(2026, 1, 2, 3, 4, 5, 600000, tzinfo=dt.timezone(dt.timedelta(hours=1))))
    assert ev.at == "2026-01-02T02:04:05.6Z"
    with pytest.raises(ValueError):
        rl.Event("r", rl.GroupClosed(group="g", reason="x"), source="s", at=dt.datetime(2026, 1, 2))


@pytest.mark.parametrize(
    "x,bits,want",
    [
        (0.0, 64, "0"), (-0.0, 64, "-0"), (1.0, 64, "1"), (0.1, 64, "0.1"), (1e-6, 64, "0.000001"),
        (1e-7, 64, "1e-7"), (1.5e-10, 64, "1.5e-10"), (1e20, 64, "100000000000000000000"), (1e21, 64, "1e+21"),
        (123.456, 64, "123.456"), (5e-324, 64, "5e-324"),
        (float32_from(0.1), 32, "0.1"), (float32_from(1 / 3), 32, "0.33333334"), (float32_from(16777217), 32, "16777216"),
        (float32_from(1e-7), 32, "1e-7"), (float32_from(3.4028235e38), 32, "3.4028235e+38"),
    ],
)
def test_format_float(x, bits, want):
    assert format_float(x, bits) == want
    back = float(json.loads(want))
    assert (float32_from(back) if bits == 32 else back) == x


def test_float32_rounds_from_the_decimal():
    # Halfway between two float32s as a float64, but not as a decimal.
    lo = struct.unpack("<f", struct.pack("<I", 0x3F800000))[0]
    hi = struct.unpack("<f", struct.pack("<I", 0x3F800001))[0]
    mid = (lo + hi) / 2
    exact = str(decimal.Decimal(mid))
    assert float32_from(mid, exact) == lo  # a tie: to even
    assert float32_from(mid, exact + "0000000001") == hi  # just above
    assert float32_from(mid, repr(mid)) == hi  # the shortest float64 text is above the tie
    assert float32_from(mid, "1.0000000596046447") == lo
    with pytest.raises(ValueError):
        float32_from(3.4028236e38, "3.4028236e38")


def turn(**kw):
    base = dict(attempt="a-1", turn=0, policy_version=1, prompt_tokens=100, completion_tokens=3, cached_tokens=50,
                token_ids=[11, 12, 13], logprobs=[-0.5, -0.25, 0.0], finish="tool_call", latency_ms=900)
    base.update(kw)
    return rl.TurnGenerated(**base)


@pytest.mark.parametrize(
    "fact,code,field",
    [
        (turn(token_ids=[], logprobs=[-0.5, -0.25, 0.0]), "missing_field", "data.token_ids"),  # empty is absent in v2
        (turn(token_ids=None), "missing_field", "data.token_ids"),
        (turn(logprobs=None), "missing_field", "data.logprobs"),
        (turn(logprobs=[-0.5, 0.25, 0]), "invalid_value", "data.logprobs[1]"),
        (turn(token_ids=[1, -2, 3]), "invalid_value", "data.token_ids[1]"),
        (turn(token_ids=[1, 2**31, 3]), "wrong_type", "data.token_ids"),
        (turn(token_ids=[1, None, 3]), "wrong_type", "data.token_ids[1]"),
        (turn(turn=1.0), "wrong_type", "data.turn"),
        (turn(turn=True), "wrong_type", "data.turn"),
        (turn(turn=None), "wrong_type", "data.turn"),
        (turn(latency_ms=2**63), "wrong_type", "data.latency_ms"),
        (turn(cached_tokens=101), "invalid_value", "data.cached_tokens"),
        (turn(finish="done"), "invalid_value", "data.finish"),
        (turn(attempt="a 1"), "invalid_value", "data.attempt"),
        (turn(logprobs=[-1e39, 0, 0]), "wrong_type", "data.logprobs"),
        (turn(logprobs=[0.0, float("-inf"), 0]), "invalid_value", "data.logprobs[1]"),
        (turn(token_ids=["1", "2", "3"]), "wrong_type", "data.token_ids"),
        (turn(token_ids=[1.5, 2, 3]), "wrong_type", "data.token_ids"),
        (turn(token_ids=np.zeros((3, 1), dtype=np.int32)), "wrong_type", "data.token_ids"),
        (turn(policy_version=None, version_segments=[(0, 1), (0, 2)]), "invalid_value", "data.version_segments[1].start"),
        (turn(policy_version=None, version_segments=[(0, 2), (1, 1)]), "invalid_value", "data.version_segments[1].policy_version"),
        (turn(policy_version=None, version_segments=[(0, 1), (3, 2)]), "invalid_value", "data.version_segments[1].start"),
        (turn(policy_version=None, version_segments=[]), "invalid_value", "data.version_segments"),
        (turn(policy_version=None), "wrong_type", "data.version_segments"),  # None for a required field is null
        (turn(text_cut=5), "missing_field", "data.text"),
        (turn(text="a\x00b"), "invalid_value", "data.text"),
        (rl.ToolCalled(attempt="a", turn=0, call=0, tool="t", exit_code=0, duration_ms=0, output_bytes=3, output="abc", output_cut=9), "invalid_value", "data.output_cut"),
        (rl.TaskRegistered(task="t", source="s", kind="swe", tier=1, prompt_cut=3), "missing_field", "data.prompt"),
        (turn(logprobs=[float("nan"), 0, 0]), "invalid_value", "data.logprobs[0]"),
        (rl.GroupStarted(group="g", task="t", size=0, purpose="train"), "invalid_value", "data.size"),
        (rl.AttemptStarted(attempt="a", group="g", task="t", engine="e", vm="v", fork_ms=1, retry_of=""), "invalid_value", "data.retry_of"),
        (rl.RewardComputed(attempt="a", passed=False, tests_passed=6, tests_total=5, verifier="v"), "invalid_value", "data.tests_passed"),
        (rl.RewardComputed(attempt="a", passed="yes", tests_passed=1, tests_total=5, verifier="v"), "wrong_type", "data.passed"),
        (rl.ContextCompacted(attempt="a", turn=1, tokens_before=10, tokens_after=11), "invalid_value", "data.tokens_after"),
        (rl.AttemptFailed(attempt="a", reason=""), "invalid_value", "data.reason"),
        (rl.AttemptFailed(attempt="a", reason="x" * 65537), "invalid_value", "data.reason"),
        (rl.AttemptFinished(attempt="a", outcome="gave_up"), "invalid_value", "data.outcome"),
        (rl.TaskRegistered(task="t", source="s", kind="math", tier=1), "invalid_value", "data.kind"),
        (rl.TaskRegistered(task="t", source="s", kind="swe", tier=1, gates=[rl.Gate(name="\x00", passed=True)]), "invalid_value", "data.gates[0].name"),
        (rl.RunStarted(config=rl.RunConfig(group_size=4, min_group=5), model="m", harness="h"), "invalid_value", "data.config.min_group"),
        (rl.RunStarted(config=rl.RunConfig(pass_band=[0.9, 0.1], min_probes=0), model="m", harness="h"), "invalid_value", "data.config.pass_band"),
        (rl.RunStarted(config=rl.RunConfig(partial_credit_cap=0.95), model="m", harness="h"), "invalid_value", "data.config.partial_credit_cap"),
        (rl.RunStarted(config=rl.RunConfig(advantage="ppo"), model="m", harness="h"), "invalid_value", "data.config.advantage"),
        (rl.RunStarted(config={"groupsize": 8}, model="m", harness="h"), "unknown_field", "data.config.groupsize"),
        (rl.GradientApplied(step=0, batch=1, batch_digest="d", from_version=0, to_version=1, loss=0.1, trained_tokens=1, truncated_fraction=0.0, logprob_gap={}, grad_norm=1.0), "invalid_value", "data.step"),
        (rl.GradientApplied(step=1, batch=1, batch_digest="d", from_version=1, to_version=1, loss=0.1, trained_tokens=1, truncated_fraction=0.0, logprob_gap={}, grad_norm=1.0), "invalid_value", "data.to_version"),
        (rl.GradientApplied(step=1, batch=1, batch_digest="d", from_version=0, to_version=1, loss=0.1, trained_tokens=1, truncated_fraction=1.5, logprob_gap={}, grad_norm=1.0), "invalid_value", "data.truncated_fraction"),
        (rl.GradientApplied(step=1, batch=1, batch_digest="d", from_version=0, to_version=1, loss=0.1, trained_tokens=1, truncated_fraction=0.1, logprob_gap={"01": 0.1}, grad_norm=1.0), "invalid_value", "data.logprob_gap.01"),
        (rl.GradientApplied(step=1, batch=1, batch_digest="d", from_version=0, to_version=1, loss=0.1, trained_tokens=1, truncated_fraction=0.1, logprob_gap={1: -0.1}, grad_norm=1.0), "invalid_value", "data.logprob_gap.1"),
        (rl.PolicyPublished(version=-1, checkpoint="c", digest="d", precision="fp8"), "invalid_value", "data.version"),
    ],
)
def test_builder_refusals(fact, code, field):
    with pytest.raises(rl.ValidationError) as ei:
        rl.Event("run-1", fact, source="w").encode()
    assert (ei.value.code, ei.value.index, ei.value.field) == (code, 0, field)


@pytest.mark.parametrize(
    "kw,code,field",
    [
        (dict(run="a b"), "invalid_value", "run"),
        (dict(run=".."), "invalid_value", "run"),
        (dict(source="w 1"), "invalid_value", "source"),
        (dict(id="not-a-uuid"), "invalid_value", "id"),
        (dict(at="yesterday"), "invalid_value", "at"),
        (dict(type="turn.gen"), "unknown_type", "type"),
        (dict(v=2), "unknown_version", "v"),
    ],
)
def test_envelope_refusals(kw, code, field):
    args = dict(run="run-1", source="w")
    args.update({k: v for k, v in kw.items() if k in ("run", "source")})
    ev = rl.Event(args["run"], rl.GroupClosed(group="g", reason="x"), source=args["source"],
                  **{k: v for k, v in kw.items() if k in ("id", "at", "type", "v")})
    with pytest.raises(rl.ValidationError) as ei:
        ev.encode()
    assert (ei.value.code, ei.value.field) == (code, field)


def test_numpy_inputs_and_round_trip():
    ids = np.array([5, 6, 7], dtype=np.int64)
    lps = np.array([-0.1, -0.2, -0.3], dtype=np.float32)
    fact = turn(token_ids=ids, logprobs=lps, policy_version=np.int64(4), observation_token_ids=(1, 2))
    ev = rl.Event("run-1", fact, source="w")
    rec = ev.encode()
    back = rl.validate_body(rec)[0]
    assert back.id == ev.id and back.type == "turn.generated" and back.v == 2
    assert back.data.token_ids.dtype == np.int32 and back.data.token_ids.tolist() == [5, 6, 7]
    assert back.data.logprobs.dtype == np.float32 and np.array_equal(back.data.logprobs, lps)
    assert back.data.version_segments == [(0, 4)]
    data = json.loads(rec)["data"]
    assert data["logprobs"] == base64.b64encode(lps.astype("<f4").tobytes()).decode()
    assert data["token_ids"] == base64.b64encode(ids.astype("<i4").tobytes()).decode()
    assert back.encode() == rec
    # Version 1 writes JSON arrays, and reads back as the same fact.
    v1 = rl.Event("run-1", fact, source="w", v=1).encode()
    assert json.loads(v1)["data"]["logprobs"] == [-0.1, -0.2, -0.3]
    assert json.loads(v1)["data"]["policy_version"] == 4
    assert rl.validate_body(v1)[0].data.version_segments == [(0, 4)]


def test_version_segments_and_text():
    n = 2048
    rng = np.random.default_rng(7)
    ids = rng.integers(0, 151936, size=n, dtype=np.int32)
    lps = -rng.exponential(0.7, size=n).astype(np.float32)
    segs = np.array([[0, 3], [1500, 4]])
    fact = turn(policy_version=None, version_segments=segs, completion_tokens=n, token_ids=ids, logprobs=lps,
                text="é" * 40000)  # 80,000 bytes: over the bound
    ev = rl.Event("run-1", fact, source="w")
    back = rl.validate_body(ev.encode())[0].data
    assert back.version_segments == [(0, 3), (1500, 4)]
    assert len(back.text.encode()) == 65536 and back.text == "é" * 32768 and back.text_cut == 80000 - 65536
    assert np.array_equal(back.token_ids, ids) and np.array_equal(back.logprobs, lps)
    # A cut on a character boundary: a 3-byte character straddling the bound
    # goes whole.
    t = rl.TurnGenerated(attempt="a", turn=0, policy_version=1, prompt_tokens=1, completion_tokens=0,
                         text="a" * 65535 + "✓" + "b", text_cut=10, finish="stop", latency_ms=1).validate()
    assert t.text == "a" * 65535 and t.text_cut == 10 + 4
    # Version 1 cannot hold what version 2 says.
    for f, field in [(fact, "data.version_segments"), (turn(text="hi"), "data.text")]:
        with pytest.raises(rl.ValidationError) as ei:
            rl.Event("run-1", f, source="w", v=1).encode()
        assert (ei.value.code, ei.value.field) == ("invalid_value", field)
    with pytest.raises(ValueError):
        turn(version_segments=[(0, 1)])  # and policy_version


def test_tool_and_task_text():
    out = "line\n" * 20000  # 100,000 bytes
    tool = rl.ToolCalled(attempt="a", turn=0, call=0, tool="bash", exit_code=0, duration_ms=3, output_bytes=len(out),
                         input="cat log", output=out).validate()
    assert tool.input == "cat log" and tool.input_cut is None
    assert len(tool.output) == 65536 and tool.output_cut == len(out) - 65536
    task = rl.TaskRegistered(task="t", source="s", kind="swe", tier=1, prompt="Fix it.").validate()
    assert task.prompt == "Fix it."
    rec = rl.Event("r", rl.ToolCalled(attempt="a", turn=0, call=0, tool="t", exit_code=0, duration_ms=0, output_bytes=0, input_cut=0),
                   source="w").encode()
    assert b"input_cut" not in rec  # a zero cut is left out, as absent


def test_fact_version(monkeypatch):
    f = turn()
    assert rl.Event("r", f, source="w").v == 2
    assert rl.Event("r", rl.GroupClosed(group="g", reason="x"), source="w").v == 1
    monkeypatch.setenv("ROLLOUTLEDGER_FACT_VERSION", "1")
    ev = rl.Event("r", f, source="w")
    assert ev.v == 1 and json.loads(ev.encode())["data"]["token_ids"] == [11, 12, 13]
    assert rl.Event("r", f, source="w", fact_version=2).v == 2
    assert rl.Ledger("http://127.0.0.1:9", fact_version=2).event("r", f).v == 2
    monkeypatch.setenv("ROLLOUTLEDGER_FACT_VERSION", "9")
    assert rl.Event("r", f, source="w").v == 2
    assert rl.Ledger("http://127.0.0.1:9", fact_version=1).event("r", f).v == 1
    monkeypatch.setenv("ROLLOUTLEDGER_FACT_VERSION", "two")
    with pytest.raises(ValueError):
        rl.Event("r", f, source="w")
    with pytest.raises(ValueError):
        rl.Ledger("http://127.0.0.1:9", fact_version=0)


def test_every_builder_encodes_canonically():
    facts = [
        rl.RunStarted(model="m", harness="h"),
        rl.TaskRegistered(task="t", source="s", kind="agentic", tier=0),
        rl.GroupStarted(group="g", task="t", size=1, purpose="eval"),
        rl.AttemptStarted(attempt="a", group="g", task="t", engine="e", vm="v", fork_ms=0),
        turn(token_ids=None, logprobs=None),
        rl.ToolCalled(attempt="a", turn=0, call=0, tool="bash", exit_code=-1, duration_ms=0, output_bytes=0),
        rl.ContextCompacted(attempt="a", turn=0, tokens_before=2, tokens_after=1),
        rl.AttemptFinished(attempt="a", outcome="timeout"),
        rl.AttemptFailed(attempt="a", reason="lost"),
        rl.RewardComputed(attempt="a", passed=True, tests_passed=0, tests_total=0, verifier="v"),
        rl.GroupClosed(group="g", reason="r"),
        rl.PolicyPublished(version=0, checkpoint="c", digest="d", precision="bf16"),
        rl.GradientApplied(step=1, batch=1, batch_digest="d", from_version=0, to_version=1, loss=-0.0, trained_tokens=0, truncated_fraction=0, logprob_gap={0: 0.05}, grad_norm=0),
        rl.VocabularyRegistered(engine="vllm", model="m", size=4, chunk=0, chunks=1, first=0, pieces=b"ab\x00c", offsets=[1, 2, 3, 4]),
        # Version 3: a child turn sharing 3 prompt tokens with turn 0; a
        # greedy temperature and parent 0 are values, not absent.
        rl.TurnGenerated(attempt="a", turn=1, policy_version=0, prompt_tokens=5, completion_tokens=1, observation_token_ids=[7, 8],
                         token_ids=[9], logprobs=[-0.5], finish="abort", latency_ms=1, parent=0, prefix_tokens=3,
                         sampling=rl.Sampling(temperature=0.0, seed=-1), engine=rl.EngineInfo(name="vllm"), tags=["client_cut", "refused"]),
        rl.ToolCalled(attempt="a", turn=0, call=1, tool="bash", exit_code=0, duration_ms=0, output_bytes=0, call_id="call_1", exit_unknown=True),
    ]
    assert {f.TYPE for f in facts} == set(rl.FACT_TYPES)
    for f in facts:
        rec = rl.Event("run-1", f, source="w").encode()
        assert rl.validate_body(rec)[0].encode() == rec
    v3 = json.loads(rl.Event("run-1", facts[-2], source="w").encode())
    assert v3["v"] == 3 and v3["data"]["parent"] == 0 and v3["data"]["sampling"] == {"temperature": 0, "seed": -1}
    assert json.loads(rl.Event("run-1", facts[4], source="w").encode())["v"] == 2  # a plain turn stays at version 2
    with pytest.raises(rl.ValidationError) as e:
        rl.TurnGenerated(attempt="a", turn=1, policy_version=0, prompt_tokens=6, completion_tokens=0, observation_token_ids=[7, 8],
                         finish="stop", latency_ms=1, parent=0, prefix_tokens=3).validate()
    assert e.value.field == "data.observation_token_ids"
    with pytest.raises(rl.ValidationError) as e:
        rl.TurnGenerated(attempt="a", turn=1, policy_version=0, prompt_tokens=5, completion_tokens=0, finish="stop", latency_ms=1,
                         tags=["refused", "client_cut"]).validate()
    assert e.value.field == "data.tags[1]"
    assert rl.RunStarted(model="m", harness="h").validate().config == rl.RunConfig()
    assert rl.RunConfig(batch_groups=2).effective()["batch_groups"] == 2
