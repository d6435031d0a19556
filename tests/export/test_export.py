"""Every export format, loaded by the tools people load them with."""

from __future__ import annotations

import hashlib
import json
import urllib.request
from pathlib import Path

import duckdb
import jsonschema
import psycopg
import pyarrow.parquet as pq
import pytest

HERE = Path(__file__).resolve().parent
TABLES = ["attempts", "turns", "tool_calls", "batches", "samples", "tasks"]


def pg(ex, sql, *args):
    with psycopg.connect(ex.database_url) as conn:
        conn.execute(f'SET search_path = "{ex.schema}"')
        return conn.execute(sql, args).fetchall()


def batch_samples(ex, seq):
    with urllib.request.urlopen(f"{ex.url}/v1/runs/{ex.run}/batches/{seq}/samples") as r:
        return [json.loads(line) for line in r.read().splitlines() if line.strip()]


def test_parquet_tables_count_the_facts_and_decisions(exported):
    ex = exported
    d = ex.out / "parquet"
    t = {name: pq.read_table(d / f"{name}.parquet") for name in TABLES}
    count = lambda table: pg(ex, f"SELECT count(*) FROM {table} WHERE run = %s", ex.run)[0][0]
    assert t["attempts"].num_rows == count("attempts") > 0
    assert t["turns"].num_rows == count("turns") > 0
    assert t["tool_calls"].num_rows == count("tool_calls") > 0
    assert t["batches"].num_rows == count("batches") >= 3
    assert t["tasks"].num_rows == count("tasks") > 0
    # A task's admission is the fold's decision, as Postgres stored it.
    decided = {r[0]: tuple(r[1:]) for r in pg(ex, "SELECT task, decision, probes, passes, pass_rate FROM admissions WHERE run = %s", ex.run)}
    tasks = t["tasks"].to_pylist()
    assert {r["task"] for r in tasks} == {r[0] for r in pg(ex, "SELECT task FROM tasks WHERE run = %s", ex.run)}
    assert decided
    assert {r["task"]: (r["admission"], r["probes"], r["probe_passes"], r["probe_pass_rate"]) for r in tasks if r["admission"]} == decided
    # Attempts a batch trained on, and the turns it judged.
    att = t["attempts"].to_pandas()
    assert att["batch_seq"].notna().sum() == count("batch_attempts")
    assert t["turns"].to_pandas()["batch_seq"].notna().sum() == count("batch_turns")
    # Samples: as many, with the same tokens, as the API serves.
    samples = t["samples"].to_pandas()
    for seq in t["batches"].column("seq").to_pylist():
        served = batch_samples(ex, seq)
        mine = samples[samples.batch_seq == seq]
        assert len(mine) == len(served)
        for (_, row), s in zip(mine.iterrows(), served):
            assert (row.attempt, row.segment) == (s["attempt"], s["segment"])
            assert list(row.token_ids) == s["token_ids"]
            assert list(row.loss_mask) == s["loss_mask"]
            assert list(row.policy_versions) == s["policy_versions"]
    # The digest the batches table names is the one recorded.
    recorded = dict(pg(ex, "SELECT seq, digest FROM batches WHERE run = %s", ex.run))
    assert {r["seq"]: r["digest"] for r in t["batches"].to_pylist()} == recorded
    # Every file names the ledger head it was taken from.
    heads = {json.dumps(json.loads(pq.read_metadata(d / f"{n}.parquet").metadata[b"rolloutledger.heads"])) for n in TABLES}
    assert len(heads) == 1
    (head,) = json.loads(heads.pop())
    assert head["run"] == ex.run and head["head"]["size"] == head["facts"] > 0


def test_duckdb_answers_like_postgres(exported):
    """The staleness histogram over the run (docs/analysts.md)."""
    ex = exported
    want = pg(ex, """
        SELECT staleness, sum(turns)::bigint AS turns, sum(trained_turns)::bigint AS trained
          FROM staleness_histogram WHERE run = %s
         GROUP BY staleness ORDER BY staleness""", ex.run)
    got = duckdb.sql(f"""
        SELECT staleness, count(*) AS turns, count(*) FILTER (WHERE trained) AS trained
          FROM '{ex.out / "parquet" / "turns.parquet"}'
         WHERE run = '{ex.run}' AND batch_seq IS NOT NULL
         GROUP BY staleness ORDER BY staleness""").fetchall()
    assert got == [tuple(r) for r in want]
    assert len(got) >= 2, "a run with max_staleness 1 over three steps has turns at more than one staleness"


def test_exports_from_kafka_and_archive_are_identical(exported):
    ex = exported
    for p in sorted(ex.out.rglob("*")):
        if p.is_file() and "from-archive" not in p.parts:
            twin = ex.out / "from-archive" / p.relative_to(ex.out)
            assert hashlib.sha256(p.read_bytes()).digest() == hashlib.sha256(twin.read_bytes()).digest(), p


def test_hf_layout_loads_with_datasets(exported):
    import datasets

    ex = exported
    root = ex.out / "hf"
    card = (root / "README.md").read_text()
    assert card.startswith("---\nconfigs:\n")
    for name in TABLES:
        ds = datasets.load_dataset("parquet", data_dir=str(root / "data" / name), split="train")
        assert ds.num_rows == pq.read_table(ex.out / "parquet" / f"{name}.parquet").num_rows
        assert f"- config_name: {name}" in card
        # The shard is the Parquet export's file, byte for byte, and the card names its hash.
        shard = root / "data" / name / "train-00000-of-00001.parquet"
        assert shard.read_bytes() == (ex.out / "parquet" / f"{name}.parquet").read_bytes()
        assert hashlib.sha256(shard.read_bytes()).hexdigest() in card
    by_config = datasets.load_dataset(str(root), "batches", split="train")
    assert by_config.num_rows >= 3
    head = json.loads(pq.read_metadata(root / "data" / "batches" / "train-00000-of-00001.parquet").metadata[b"rolloutledger.heads"])[0]
    assert head["head"]["root"] in card


def test_atif_validates(exported):
    ex = exported
    schema = json.loads((HERE / "atif-v1.4.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    lines = (ex.out / "atif.jsonl").read_text().splitlines()
    attempts = pq.read_table(ex.out / "parquet" / "attempts.parquet").to_pandas()
    assert len(lines) == len(attempts)
    with_tokens = 0
    for line, (_, att) in zip(lines, attempts.iterrows()):
        tr = json.loads(line)
        validator.validate(tr)
        assert tr["session_id"] == f"{ex.run}/{att.attempt}"
        assert [s["step_id"] for s in tr["steps"]] == list(range(1, len(tr["steps"]) + 1))
        assert tr["final_metrics"]["total_steps"] == len(tr["steps"]) == att.turns + 1
        for s in tr["steps"]:
            m = s.get("metrics", {})
            if "completion_token_ids" in m:
                with_tokens += 1
                assert len(m["completion_token_ids"]) == len(m["logprobs"]) == m["completion_tokens"]
            calls = {c["tool_call_id"] for c in s.get("tool_calls", [])}
            results = {r["source_call_id"] for r in s.get("observation", {}).get("results", [])}
            assert calls == results
        reward = tr["final_metrics"]["extra"]["reward"]
        assert (reward is None) == (att.batch_seq != att.batch_seq)  # NaN: no batch
    assert with_tokens > 0
    try:
        from harbor.models.trajectories import Trajectory  # the reference models, when installed
    except ImportError:
        return
    for line in lines:
        Trajectory.model_validate_json(line)


def check_chat(line: dict) -> None:
    """A tokenizer-free check of a chat conversation: roles in order, every
    tool call answered exactly once, by a tool message after it and before
    the next assistant message."""
    msgs = line["messages"]
    assert msgs and msgs[0]["role"] in ("system", "user")
    open_calls: set[str] = set()
    seen: set[str] = set()
    for i, m in enumerate(msgs):
        assert set(m) <= {"role", "content", "tool_calls", "tool_call_id", "content_cut"}, m
        assert isinstance(m["content"], str)
        assert m.get("content_cut", 1) > 0, f"message {i}: content_cut 0 is left out, not written"
        role = m["role"]
        if role in ("system", "user"):
            assert not open_calls, f"message {i}: {role} before the tool calls {open_calls} were answered"
        elif role == "assistant":
            assert not open_calls, f"message {i}: assistant before the tool calls {open_calls} were answered"
            for c in m.get("tool_calls", []):
                assert c["type"] == "function" and c["function"]["name"]
                json.loads(c["function"]["arguments"])
                assert c["id"] not in seen, f"tool call id {c['id']} used twice"
                seen.add(c["id"])
                open_calls.add(c["id"])
        elif role == "tool":
            assert m["tool_call_id"] in open_calls, f"message {i}: a result for {m['tool_call_id']}, which is not an open call"
            open_calls.remove(m["tool_call_id"])
        else:
            raise AssertionError(f"message {i}: role {role}")
    assert not open_calls, f"unanswered tool calls {open_calls}"


def test_messages_round_trip(exported):
    ex = exported
    text = (ex.out / "messages.jsonl").read_text()
    lines = [json.loads(l) for l in text.splitlines()]
    attempts = pq.read_table(ex.out / "parquet" / "attempts.parquet").to_pandas()
    tool_calls = pq.read_table(ex.out / "parquet" / "tool_calls.parquet").num_rows
    assert len(lines) == len(attempts)
    calls = 0
    for line, (_, att) in zip(lines, attempts.iterrows()):
        check_chat(line)
        assert line["metadata"]["attempt"] == att.attempt
        assert sum(m["role"] == "assistant" for m in line["messages"]) == att.turns
        calls += sum(len(m.get("tool_calls", [])) for m in line["messages"])
        # Round trip: encoding again gives the line back.
        assert json.loads(json.dumps(line)) == line
    assert 0 < calls <= tool_calls


def test_checker_refuses_broken_pairing():
    ok = {"messages": [{"role": "user", "content": "q"},
                       {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
                       {"role": "tool", "tool_call_id": "c1", "content": "out"}]}
    check_chat(ok)
    for broken in (ok["messages"][:2], [ok["messages"][0], ok["messages"][2]], ok["messages"] + [ok["messages"][2]]):
        with pytest.raises(AssertionError):
            check_chat({"messages": broken})


def test_samples_types_match_the_api(exported):
    """The samples table gives every column the API's Arrow samples carry
    the same type and nullability."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    ex = exported
    seq = pq.read_table(ex.out / "parquet" / "batches.parquet").column("seq")[0].as_py()
    req = urllib.request.Request(f"{ex.url}/v1/runs/{ex.run}/batches/{seq}/samples",
                                 headers={"Accept": "application/vnd.apache.arrow.stream"})
    with urllib.request.urlopen(req) as r:
        served = ipc.open_stream(r.read()).schema
    mine = pq.read_schema(ex.out / "parquet" / "samples.parquet")
    for f in served:
        m = mine.field(f.name)
        assert m.nullable == f.nullable, f.name
        if pa.types.is_list(f.type):
            assert pa.types.is_list(m.type) and m.type.value_type == f.type.value_type, f.name
            assert m.type.value_field.nullable == f.type.value_field.nullable, f.name
        else:
            assert m.type == f.type, f.name


def test_histograms_are_typed_and_agree(exported):
    """A batch's segment staleness histogram counts its turns' segments."""
    ex = exported
    d = ex.out / "parquet"
    by_batch = duckdb.sql(f"""
        SELECT seq, h.value AS staleness, h.count AS segments
          FROM (SELECT seq, unnest(segment_staleness_histogram) AS h FROM '{d / "batches.parquet"}')
         ORDER BY ALL""").fetchall()
    by_turns = duckdb.sql(f"""
        SELECT batch_seq, s AS staleness, count(*) AS segments
          FROM (SELECT batch_seq, unnest(segment_staleness) AS s FROM '{d / "turns.parquet"}' WHERE batch_seq IS NOT NULL)
         GROUP BY ALL ORDER BY ALL""").fetchall()
    assert by_batch == by_turns and by_batch
    b = pq.read_schema(d / "batches.parquet")
    for name in ("segment_staleness_histogram", "in_flight", "in_queue"):
        t = b.field(name).type
        assert str(t.value_type) == "struct<value: int64 not null, count: int64 not null>" and not t.value_field.nullable, name


def test_samples_load_with_datasets_as_int32(exported):
    """docs/analysts.md: the samples, streamed with the arrow format, keep
    the types the trainer's API serves; the numpy format would give int64."""
    import numpy as np
    from datasets import load_dataset

    ex = exported
    want = pq.read_table(ex.out / "parquet" / "samples.parquet")
    ds = load_dataset("parquet", data_dir=str(ex.out / "hf" / "data" / "samples"), split="train", streaming=True).with_format("arrow")
    tokens = rows = 0
    for batch in ds.iter(batch_size=16):
        ids = batch["token_ids"].combine_chunks()
        flat, starts = ids.values.to_numpy(), ids.offsets.to_numpy()
        mask = batch["loss_mask"].combine_chunks().values.to_numpy()
        lps = batch["rollout_logprobs"].combine_chunks().values.to_numpy()
        assert (flat.dtype, mask.dtype, lps.dtype) == (np.int32, np.uint8, np.float32)
        assert len(starts) == batch.num_rows + 1 and len(flat) == len(mask) == len(lps)
        tokens += len(flat)
        rows += batch.num_rows
    assert rows == want.num_rows > 0
    assert tokens == sum(len(x) for x in want.column("token_ids").to_pylist()) > 0
