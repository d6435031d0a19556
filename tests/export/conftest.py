"""The export tests' run: the Go binary built once, `rolloutledger dev` on
free loopback ports with a small simulated run pushed through it, the run
exported in every format from its Kafka and from its archive, and the
read model rebuilt from the same log into a fresh Postgres schema.

ROLLOUTLEDGER_BIN may name an already built binary. DATABASE_URL must name a
PostgreSQL database; the schema the tests create is dropped at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def binary(tmp_path_factory) -> str:
    given = os.environ.get("ROLLOUTLEDGER_BIN")
    if given:
        return given
    go = shutil.which("go")
    if go is None:
        pytest.fail("the Go toolchain is needed to build rolloutledger (or set ROLLOUTLEDGER_BIN)")
    out = tmp_path_factory.mktemp("bin") / "rolloutledger"
    subprocess.run([go, "build", "-o", str(out), "./cmd/rolloutledger"], cwd=REPO, check=True)
    return str(out)


@dataclass
class Exported:
    run: str
    url: str
    brokers: str
    out: Path
    archive: Path
    schema: str
    database_url: str
    binary: str

    def rl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([self.binary, *args], capture_output=True, text=True, check=check, timeout=300)


@pytest.fixture(scope="session")
def exported(binary, tmp_path_factory):
    db = os.environ.get("DATABASE_URL")
    if not db:
        pytest.fail("DATABASE_URL must name a PostgreSQL database (source the services' environment)")
    base = tmp_path_factory.mktemp("export")
    addr, kafka = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    env = dict(os.environ)
    env.pop("DATABASE_URL", None)  # the read model is rebuilt below, into its own schema
    log = open(base / "dev.log", "ab")
    proc = subprocess.Popen([binary, "dev", "--data", str(base / "data"), "--addr", addr, "--kafka-addr", kafka],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    schema = "export_test_" + uuid.uuid4().hex[:8]
    try:
        url = f"http://{addr}"
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("rolloutledger dev did not start: " + (base / "dev.log").read_text()[-2000:])
                time.sleep(0.05)
        ex = Exported(run="export-" + uuid.uuid4().hex[:8], url=url, brokers=kafka, out=base / "out",
                      archive=base / "run.rla", schema=schema, database_url=db, binary=binary)
        ex.rl("simulate", "--url", url, "--run", ex.run, "--seed", "5", "--tasks", "16", "--steps", "3",
              "--batch-groups", "3", "--max-turns", "16", "--max-staleness", "1", "--tokens", "--trainer")
        # Wait for the projector to finish: verify passes while it is still
        # behind, and an export taken then would miss the decisions still to
        # come. Done means verify passes and finds the same facts, the same
        # decision records and the same uncommitted count twice in a row.
        deadline, settled = time.monotonic() + 120, None
        while True:
            r = ex.rl("replay", "--brokers", kafka, "--run", ex.run, "--verify", "--json", check=False)
            state = None
            if r.returncode == 0:
                rep = json.loads(r.stdout)
                state = (rep["facts"], rep["recorded_records"], rep.get("uncommitted", 0))
            if state is not None and state == settled:
                break
            settled = state
            if time.monotonic() > deadline:
                pytest.fail("the projector did not catch up with the run within 120 s")
            time.sleep(0.5)
        k = ["--brokers", kafka, "--run", ex.run]
        ex.rl("export", *k, "--out", str(ex.archive))
        for fmt, out in [("parquet", "parquet"), ("hf", "hf"), ("atif", "atif.jsonl"), ("messages", "messages.jsonl")]:
            ex.rl("export", *k, "--format", fmt, "--out", str(ex.out / out))
            ex.rl("export", "--archive", str(ex.archive), "--format", fmt, "--out", str(ex.out / "from-archive" / out))
        env = dict(os.environ, DATABASE_URL=db)
        subprocess.run([binary, "projections", "rebuild", "postgres", "--brokers", kafka, "--schema", schema, "--no-progress"],
                       check=True, env=env, capture_output=True, timeout=300)
        yield ex
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        import psycopg

        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
