"""The proxy tests' stack, as a user runs it: the Go binary built once,
`rolloutledger dev` on free loopback ports with its own --data, a real
llama-server serving SmolLM2-135M-Instruct (a real tokenizer and chat
template), and `rolloutledger proxy` in front of it with its own spool.

The engine comes from scripts/engine: LLAMA_SERVER names the llama-server
binary and ROLLOUTLEDGER_SMOLLM2_GGUF the model. Without them the tests skip,
or fail when CI=true. ROLLOUTLEDGER_BIN may name an already built binary.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ENGINE_HINT = 'scripts/engine/build.sh && eval "$(scripts/engine/models.sh)"'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(url: str, body: dict | None = None, timeout: float = 60) -> dict:
    """GET (body None) or POST JSON, and the decoded answer; raises on non-2xx."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def wait_ready(url: str, proc: subprocess.Popen, log: Path, what: str, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except (OSError, urllib.error.HTTPError):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start (exit {proc.poll()}): " + log.read_text(errors="replace")[-3000:])
        time.sleep(0.05)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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


def engine_files() -> tuple[str, str]:
    server, model = os.environ.get("LLAMA_SERVER", ""), os.environ.get("ROLLOUTLEDGER_SMOLLM2_GGUF", "")
    missing = [name for name, path in (("LLAMA_SERVER", server), ("ROLLOUTLEDGER_SMOLLM2_GGUF", model))
               if not path or not os.path.isfile(path)]
    if missing:
        why = f"{' and '.join(missing)} must name the engine's files (run: {ENGINE_HINT})"
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true and the inference engine is missing: " + why)
        pytest.skip("skipping: " + why)
    return server, model


@pytest.fixture(scope="session")
def engine(tmp_path_factory) -> str:
    """llama-server with SmolLM2 on a free port; its base URL."""
    server, model = engine_files()
    base = tmp_path_factory.mktemp("engine")
    log_path = base / "llama-server.log"
    for _ in range(3):  # a port found free may be taken before the server binds it
        port = free_port()
        with open(log_path, "wb") as log:
            proc = subprocess.Popen([server, "-m", model, "--host", "127.0.0.1", "--port", str(port),
                                     "-c", "4096", "-np", "2", "-t", "2", "--jinja", "--no-repack"],
                                    stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_ready(f"http://127.0.0.1:{port}/health", proc, log_path, "llama-server")
            break
        except RuntimeError:
            text = log_path.read_text(errors="replace")
            stop(proc)
            if "couldn't bind" not in text and "Address already in use" not in text:
                raise
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


@dataclass
class Stack:
    binary: str
    engine: str  # llama-server's base URL
    ledger: str  # rolloutledger dev's HTTP base URL
    brokers: str  # dev's Kafka address
    proxy: str  # the proxy's base URL
    tmp: Path

    def base_url(self, run: str, attempt: str) -> str:
        """The base URL a harness is given: identity in the path."""
        return f"{self.proxy}/r/{run}/a/{urllib.request.quote(attempt, safe='')}/v1"

    def drained(self, seconds: float = 120) -> None:
        """Waits until the proxy's spool has handed every turn to the ledger."""
        deadline, last = time.monotonic() + seconds, None
        while True:
            try:
                last = http_json(self.proxy + "/healthz", timeout=5)
            except urllib.error.HTTPError as e:
                last = json.loads(e.read() or b"{}")
            assert last.get("dead_letters", 0) == 0, f"the ledger refused facts: {last}"
            if last.get("spool_facts") == 0 and last.get("ledger") == "ok":
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the proxy's spool did not drain in {seconds} s: {last}")
            time.sleep(0.05)

    def facts(self, run: str) -> list[dict]:
        """The run's facts in log order, from an archive `rolloutledger
        export` writes from dev's Kafka (format: replay/archive.go)."""
        self.drained()
        out = self.tmp / f"{run}.rla"
        subprocess.run([self.binary, "export", "--brokers", self.brokers, "--run", run, "--out", str(out)],
                       check=True, capture_output=True, timeout=300)
        return read_archive(out)

    def turns(self, run: str) -> list[dict]:
        """The run's turn.generated facts' data, in turn order per attempt,
        with token_ids, observation_token_ids and logprobs decoded."""
        out = []
        for f in self.facts(run):
            if f["type"] != "turn.generated":
                continue
            d = dict(f["data"], v=f["v"])
            for k in ("token_ids", "observation_token_ids"):
                d[k] = int32le(d.get(k, ""))
            raw = base64.b64decode(d.get("logprobs", ""))
            d["logprobs"] = list(struct.unpack(f"<{len(raw) // 4}f", raw))
            out.append(d)
        return sorted(out, key=lambda d: (d["attempt"], d["turn"]))


def int32le(text: str) -> list[int]:
    raw = base64.b64decode(text)
    return list(struct.unpack(f"<{len(raw) // 4}i", raw))


def uvarint(b: bytes, i: int) -> tuple[int, int]:
    x, shift = 0, 0
    while True:
        c = b[i]
        i += 1
        x |= (c & 0x7F) << shift
        if c < 0x80:
            return x, i
        shift += 7


def read_archive(path: Path) -> list[dict]:
    """The facts of an archive (replay/archive.go): magic, frames of kind,
    uvarint length, payload and CRC; a fact frame's payload is seq, partition
    and offset varints, then the fact's record (JSON). The trailer's first
    offset is where the decisions start, after the last fact."""
    b = path.read_bytes()
    assert b[:8] == b"RLARCHV1" and b[-8:] == b"RLARCEND", f"{path} is not an archive"
    end = int.from_bytes(b[-64:-56], "little")
    i, facts = 8, []
    while i < end:
        kind = b[i]
        n, i = uvarint(b, i + 1)
        payload = b[i:i + n]
        i += n + 4
        if kind == ord("F"):
            j = 0
            for _ in range(3):  # seq, partition, offset: varints are as long as uvarints
                _, j = uvarint(payload, j)
            facts.append(json.loads(payload[j:]))
    return facts


@pytest.fixture(scope="session")
def stack(binary, engine, tmp_path_factory) -> Stack:
    base = tmp_path_factory.mktemp("proxy")
    addr, kafka, listen = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    env = dict(os.environ)
    env.pop("DATABASE_URL", None)  # dev without the Postgres read model
    dev_log, proxy_log = base / "dev.log", base / "proxy.log"
    with open(dev_log, "wb") as log:
        dev = subprocess.Popen([binary, "dev", "--data", str(base / "data"), "--addr", addr, "--kafka-addr", kafka,
                                "--partitions", "3"], stdout=log, stderr=subprocess.STDOUT, env=env)
    procs = [dev]
    try:
        wait_ready(f"http://{addr}/healthz", dev, dev_log, "rolloutledger dev", 60)
        with open(proxy_log, "wb") as log:
            proxy = subprocess.Popen([binary, "proxy", "--listen", listen, "--upstream", engine, "--engine", "llamacpp",
                                      "--ledger", f"http://{addr}", "--spool", str(base / "spool")],
                                     stdout=log, stderr=subprocess.STDOUT, env=env)
        procs.append(proxy)
        wait_ready(f"http://{listen}/healthz", proxy, proxy_log, "rolloutledger proxy", 120)
        yield Stack(binary=binary, engine=engine, ledger=f"http://{addr}", brokers=kafka, proxy=f"http://{listen}", tmp=base)
    finally:
        for p in reversed(procs):
            stop(p)
