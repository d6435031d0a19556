"""Bearer tokens against `rolloutledger serve` with a token file, on the real
Kafka broker at $KAFKA_BROKERS: the token option and $ROLLOUTLEDGER_TOKEN,
and 401/403 as AuthenticationError/PermissionDeniedError naming the event and
field. Skipped (failed with CI=true) when no broker answers."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request

import pytest

import rolloutledger as rl
from conftest import free_port
from helpers import small_run_events

TOKENS = {
    "admin": "adm-" + "a" * 40,
    "producer": "pro-" + "p" * 40,
    "trainer": "tra-" + "t" * 40,
    "reader": "rea-" + "r" * 40,
}
SCOPED = "pra-" + "q" * 40  # a producer limited to runs named scoped-*


def kafka_brokers() -> str:
    brokers = os.environ.get("KAFKA_BROKERS", "127.0.0.1:9092")
    host, _, port = brokers.split(",")[0].rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
    except OSError as e:
        msg = f"no Kafka broker at {brokers}: {e}"
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true and a required server is missing: " + msg)
        pytest.skip(msg)
    return brokers


@pytest.fixture(scope="module")
def secure_url(binary, tmp_path_factory):
    brokers = kafka_brokers()
    d = tmp_path_factory.mktemp("secure")
    tokens = [{"name": n, "token": t, "role": n} for n, t in TOKENS.items()]
    tokens.append({"name": "scoped", "sha256": __import__("hashlib").sha256(SCOPED.encode()).hexdigest(), "role": "producer", "runs": ["scoped-*"]})
    (d / "tokens.json").write_text(json.dumps(tokens))
    addr = f"127.0.0.1:{free_port()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROLLOUTLEDGER_TOKEN")}
    env.pop("DATABASE_URL", None)
    log = open(d / "serve.log", "wb")
    proc = subprocess.Popen(
        [binary, "serve", "--addr", addr, "--brokers", brokers, "--topic-prefix", f"sdk-auth-{rl.uuid7()[-12:]}",
         "--partitions", "2", "--data", str(d / "data"), "--tokens-file", str(d / "tokens.json"),
         "--only", "ingest,projector,api"],
        stdout=log, stderr=subprocess.STDOUT, env=env,
    )
    url = f"http://{addr}"
    deadline = time.monotonic() + 60
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"serve exited with {proc.returncode}:\n{(d / 'serve.log').read_text()[-4000:]}")
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("serve not healthy within 60 s")
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        text = (d / "serve.log").read_text(errors="replace")
        for secret in list(TOKENS.values()) + [SCOPED]:
            assert secret not in text, "a token reached serve's log"


def test_without_a_token(secure_url, run_id, monkeypatch):
    monkeypatch.delenv("ROLLOUTLEDGER_TOKEN", raising=False)
    with rl.Ledger(secure_url, retry_timeout=5) as led:
        with pytest.raises(rl.AuthenticationError) as ei:
            led.post(small_run_events(run_id)[0][:1])
        assert ei.value.status == 401 and ei.value.code == "unauthorized"
        assert "ROLLOUTLEDGER_TOKEN" in str(ei.value)
        with pytest.raises(rl.AuthenticationError):
            led.runs()
        # /healthz stays open.
        assert led.healthz()["status"] == "ok"


def test_unknown_token(secure_url, run_id):
    with rl.Ledger(secure_url, token="nope-" + "x" * 40, retry_timeout=5) as led:
        with pytest.raises(rl.AuthenticationError):
            led.post(small_run_events(run_id)[0][:1])


def test_token_from_the_environment(secure_url, run_id, monkeypatch):
    monkeypatch.setenv("ROLLOUTLEDGER_TOKEN", TOKENS["producer"])
    with rl.Ledger(secure_url, retry_timeout=5) as led:
        evs, _ = small_run_events(run_id)
        assert len(led.post(evs)) == len(evs)


def test_producer_may_not_publish_trainer_facts(secure_url, run_id):
    with rl.Ledger(secure_url, token=TOKENS["producer"], retry_timeout=5) as led:
        evs, _ = small_run_events(run_id)
        bad = rl.Event(run_id, rl.PolicyPublished(version=1, checkpoint="ckpt/1", digest="sha256:00", precision="bf16"), source="pytest")
        with pytest.raises(rl.PermissionDeniedError) as ei:
            led.post(evs[:2] + [bad])
        e = ei.value
        assert (e.status, e.code, e.index, e.field) == (403, "forbidden", 2, "type")
        assert "policy.published" in e.message
    with rl.Ledger(secure_url, token=TOKENS["trainer"], retry_timeout=5) as led:
        assert len(led.post([bad])) == 1
        assert led.next_batch(run_id, 0, wait=0) is None


def test_scoped_token_cannot_write_another_run(secure_url, run_id):
    with rl.Ledger(secure_url, token=SCOPED, retry_timeout=5) as led:
        mine = small_run_events("scoped-" + run_id)[0][:2]
        assert len(led.post(mine)) == 2
        with pytest.raises(rl.PermissionDeniedError) as ei:
            led.post(small_run_events(run_id)[0][:1])
        assert (ei.value.index, ei.value.field) == (0, "run")


def test_reader_reads_and_cannot_write(secure_url, run_id):
    with rl.Ledger(secure_url, token=TOKENS["reader"], retry_timeout=5) as led:
        assert isinstance(led.runs(), list)
        with pytest.raises(rl.PermissionDeniedError) as ei:
            led.post(small_run_events(run_id)[0][:1])
        assert ei.value.index is None


def test_flusher_reports_an_unknown_token(secure_url, run_id):
    led = rl.Ledger(secure_url, token="nope-" + "y" * 40, retry_timeout=5)
    evs, _ = small_run_events(run_id)
    led.send(evs[0])
    with pytest.raises(rl.AuthenticationError) as ei:
        led.flush(timeout=30)
    assert len(ei.value.events) == 1
    with pytest.raises(rl.AuthenticationError):
        led.close(timeout=5)
