"""The test session's ledger: the Go binary built once from this repository
and `rolloutledger dev` started on free loopback ports with a temporary data
directory, torn down at the end.

ROLLOUTLEDGER_BIN may name an already built binary to skip the build. A
missing Go toolchain is an error, not a skip: the tests are about the live
server.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SDK = HERE.parent
REPO = SDK.parent.parent

sys.path.insert(0, str(HERE))


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
        pytest.fail("the Go toolchain is needed to build rolloutledger for these tests (or set ROLLOUTLEDGER_BIN)")
    out = tmp_path_factory.mktemp("bin") / "rolloutledger"
    subprocess.run([go, "build", "-o", str(out), "./cmd/rolloutledger"], cwd=REPO, check=True)
    return str(out)


class DevServer:
    def __init__(self, binary: str, data: Path):
        self.binary = binary
        self.data = data
        self.addr = f"127.0.0.1:{free_port()}"
        self.kafka_addr = f"127.0.0.1:{free_port()}"
        self.url = f"http://{self.addr}"
        self.log_path = data.parent / (data.name + ".log")
        self.proc: subprocess.Popen | None = None

    def start(self):
        env = dict(os.environ)
        # The SDK's tests need no Postgres projection; keep them hermetic.
        env.pop("DATABASE_URL", None)
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [self.binary, "dev", "--data", str(self.data), "--addr", self.addr, "--kafka-addr", self.kafka_addr],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rolloutledger dev exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"rolloutledger dev not healthy within 60 s:\n{self.tail()}")

    def tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture(scope="session")
def server(binary, tmp_path_factory):
    srv = DevServer(binary, tmp_path_factory.mktemp("ledger") / "data").start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def url(server) -> str:
    return server.url


@pytest.fixture
def ledger(url):
    import rolloutledger as rl

    with rl.Ledger(url, source="pytest", retry_timeout=20) as led:
        yield led


@pytest.fixture
def run_id(request) -> str:
    """A run id unique to the test."""
    import rolloutledger as rl

    name = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]
    return f"{name}-{rl.uuid7()[-8:]}"
