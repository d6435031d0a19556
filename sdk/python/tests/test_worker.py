"""The attempt context manager: facts in order, per-turn policy versions,
and infrastructure failures told apart from the worker's own bugs."""

from __future__ import annotations

import pytest

import rolloutledger as rl
from helpers import SMALL_CONFIG, logprobs, tokens


def setup_run(led, run):
    led.emit(run, rl.RunStarted(config=SMALL_CONFIG, model="toy", harness="unit"))
    led.emit(run, rl.TaskRegistered(task="t", source="unit", kind="agentic", tier=0))
    led.emit(run, rl.GroupStarted(group="p", task="t", size=2, purpose="probe"))
    for i, passed in enumerate([True, False]):
        with led.attempt(run, attempt=f"p/{i}", group="p", task="t", engine="e", vm=f"vm-p{i}") as att:
            att.turn(policy_version=0, prompt_tokens=3, completion_tokens=2, finish="stop")
        led.emit(run, rl.RewardComputed(attempt=f"p/{i}", passed=passed, tests_passed=int(passed), tests_total=1, verifier="v"))


def test_attempt_emits_in_order(ledger, run_id):
    setup_run(ledger, run_id)
    ledger.emit(run_id, rl.GroupStarted(group="g", task="t", size=2, purpose="train"))
    with ledger.attempt(run_id, attempt="g/0", group="g", task="t", engine="e-1", vm="vm-1", fork_ms=12) as att:
        att.turn(policy_version=0, prompt_tokens=10, token_ids=tokens(1, 3), logprobs=logprobs(1, 3), finish="tool_call", latency_ms=5)
        att.tool_call(tool="bash", exit_code=1, duration_ms=40, output_bytes=10)
        att.tool_call(tool="edit", output_bytes=20, to_file=True)
        att.turn(policy_version=1, prompt_tokens=20, token_ids=tokens(2, 2), logprobs=logprobs(2, 2),
                 observation_token_ids=tokens(3, 4), finish="tool_call")
        att.tool_call(tool="bash", background=True)
        att.compacted(tokens_before=500, tokens_after=100)
        att.turn(policy_version=1, prompt_tokens=5, token_ids=tokens(4, 1), logprobs=logprobs(4, 1), finish="stop")
        att.finish("context_budget")
    assert [e.type for e in att.events] == [
        "attempt.started", "turn.generated", "tool.called", "tool.called", "turn.generated", "tool.called",
        "context.compacted", "turn.generated", "attempt.finished"]
    assert [e.data.turn for e in att.events if e.type == "turn.generated"] == [0, 1, 2]
    assert [(e.data.turn, e.data.call) for e in att.events if e.type == "tool.called"] == [(0, 0), (0, 1), (1, 0)]
    assert att.events[6].data.turn == 1
    assert att.events[-1].data.outcome == "context_budget"
    assert att.policy_versions == [0, 1, 1]
    assert att.completion_tokens == 6
    ids = [e.id for e in att.events]
    assert ids == sorted(ids), "UUIDv7 ids follow the order of the facts"

    with ledger.attempt(run_id, attempt="g/1", group="g", task="t", engine="e-1", vm="vm-2") as att2:
        att2.turn(policy_version=1, prompt_tokens=10, token_ids=tokens(5, 2), logprobs=logprobs(5, 2), finish="stop")
    ledger.emit(run_id, rl.RewardComputed(attempt="g/0", passed=True, tests_passed=3, tests_total=3, verifier="v"))
    ledger.emit(run_id, rl.RewardComputed(attempt="g/1", passed=False, tests_passed=0, tests_total=3, verifier="v"))
    ledger.flush()

    (b,) = list(ledger.batches(run_id, max_batches=1, wait=10))
    got = {a["attempt"]: [t["policy_version"] for t in a["turns"]] for a in b.groups[0]["attempts"]}
    assert got == {"g/0": [0, 1, 1], "g/1": [1]}
    # Batch 1 trains from version 0: the turns of version 1 are ahead of it.
    s = b.samples()
    assert [x.segment for x in s if x.attempt == "g/0"] == [0, 1]


class Flaky(Exception):
    pass


def test_infrastructure_failure_and_worker_bug(ledger, run_id):
    with pytest.raises(rl.InfrastructureError):
        with ledger.attempt(run_id, attempt="a1", group="g", task="t", engine="e", vm="v") as a1:
            a1.turn(policy_version=0, prompt_tokens=1, completion_tokens=1, finish="stop")
            raise rl.InfrastructureError("microVM lost its host")
    assert [e.type for e in a1.events][-1] == "attempt.failed"
    assert a1.events[-1].data.reason == "microVM lost its host"

    with pytest.raises(Flaky):
        with ledger.attempt(run_id, attempt="a2", group="g", task="t", engine="e", vm="v", infra=(Flaky,)) as a2:
            raise Flaky("sandbox\x00timeout")
    assert [e.type for e in a2.events] == ["attempt.started", "attempt.failed"]
    assert a2.events[-1].data.reason == "sandbox timeout"

    with pytest.raises(KeyError):
        with ledger.attempt(run_id, attempt="a3", group="g", task="t", engine="e", vm="v") as a3:
            raise KeyError("a bug in the worker")
    assert [e.type for e in a3.events] == ["attempt.started"], "a worker bug is not blamed on anyone"

    with ledger.attempt(run_id, attempt="a4", group="g", task="t", engine="e", vm="v", retry_of="a1") as a4:
        a4.fail("verifier VM never came up")
    assert [e.type for e in a4.events] == ["attempt.started", "attempt.failed"]
    assert a4.events[0].data.retry_of == "a1"
    with pytest.raises(RuntimeError):
        a4.turn(policy_version=0, prompt_tokens=1, completion_tokens=1, finish="stop")

    with pytest.raises(ValueError):
        with ledger.attempt(run_id, attempt="a5", group="g", task="t", engine="e", vm="v") as a5:
            a5.tool_call(tool="bash")  # no turn yet
    with pytest.raises(rl.ValidationError) as ei:
        with ledger.attempt(run_id, attempt="a6", group="g", task="t", engine="e", vm="v") as a6:
            a6.turn(policy_version=0, prompt_tokens=1, token_ids=[1, 2], logprobs=[-0.1], finish="stop")
    assert ei.value.field == "data.logprobs"
    ledger.flush()


def test_whole_sequences_with_prompt_ids(ledger, run_id):
    """Turns given their whole prompt ids are written as version 3: the
    first carries its whole prompt, a turn extending the previous one only
    its new tokens, a rewritten context its whole prompt again. The batch's
    samples hold every token of each sequence from the first prompt token,
    with the sampling temperature, in NDJSON and Arrow alike."""
    setup_run(ledger, run_id)
    ledger.emit(run_id, rl.GroupStarted(group="g", task="t", size=2, purpose="train"))
    hot = rl.Sampling(temperature=0.5)
    with ledger.attempt(run_id, attempt="g/0", group="g", task="t", engine="e-1", vm="vm-1") as att:
        att.turn(policy_version=0, prompt_ids=[1, 2, 3], token_ids=[4, 5], logprobs=[-0.5, -0.25], finish="tool_call", sampling=hot)
        att.turn(policy_version=0, prompt_ids=[1, 2, 3, 4, 5, 6], token_ids=[7], logprobs=[-1.0], finish="tool_call", sampling=hot)
        att.turn(policy_version=0, prompt_ids=[9, 10], token_ids=[11], logprobs=[-2.0], finish="stop")
    with ledger.attempt(run_id, attempt="g/1", group="g", task="t", engine="e-1", vm="vm-2") as att1:
        att1.turn(policy_version=0, prompt_tokens=3, token_ids=[1], logprobs=[-1.0], finish="stop")
    ledger.emit(run_id, rl.RewardComputed(attempt="g/0", passed=True, tests_passed=1, tests_total=1, verifier="v"))
    ledger.emit(run_id, rl.RewardComputed(attempt="g/1", passed=False, tests_passed=0, tests_total=1, verifier="v"))
    turns = [e for e in att.events if e.type == "turn.generated"]
    assert [e.v for e in turns] == [3, 3, 3]
    assert turns[1].data.parent == 0 and turns[1].data.prefix_tokens == 5 and list(turns[1].data.observation_token_ids) == [6]
    assert turns[2].data.parent is None and turns[2].data.diverged == rl.Divergence(turn=1, at=0)
    ledger.flush()
    (b,) = list(ledger.batches(run_id, max_batches=1, wait=10))
    for fmt in ("ndjson", "arrow"):
        s = ledger.samples(run_id, b.seq, format=fmt, verify_digest=True)
        first = [x for x in s if x.attempt == "g/0"]
        assert [x.segment for x in first] == [0, 1]
        assert first[0].token_ids.tolist() == [1, 2, 3, 4, 5, 6, 7]
        assert first[0].loss_mask.tolist() == [0, 0, 0, 1, 1, 0, 1]
        assert first[0].temperatures.tolist() == [0.5] * 7
        assert first[1].token_ids.tolist() == [9, 10, 11] and first[1].temperatures.tolist() == [1, 1, 1]
