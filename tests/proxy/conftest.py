"""The proxy tests' stack, as a user runs it: the Go binary built once,
`rolloutledger dev` on free loopback ports with its own --data, a real
llama-server serving SmolLM2-135M-Instruct (a real tokenizer and chat
template), and `rolloutledger proxy` in front of it with its own spool.
An agent's tool calls go through a second llama-server with the same model
and a template that renders tools, behind a second proxy on the same ledger.

The engine comes from scripts/engine: LLAMA_SERVER names the llama-server
binary and ROLLOUTLEDGER_SMOLLM2_GGUF the model. Without them the tests skip,
or fail when CI=true. ROLLOUTLEDGER_BIN may name an already built binary.
"""

from __future__ import annotations

import ast
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


def start_engine(base: Path, *extra: str):
    """llama-server with SmolLM2 on a free port (extra: more flags); yields
    its base URL and stops it after."""
    server, model = engine_files()
    log_path = base / "llama-server.log"
    for _ in range(3):  # a port found free may be taken before the server binds it
        port = free_port()
        with open(log_path, "wb") as log:
            proc = subprocess.Popen([server, "-m", model, "--host", "127.0.0.1", "--port", str(port),
                                     "-c", "4096", "-np", "2", "-t", "2", "--jinja", "--no-repack", *extra],
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


@pytest.fixture(scope="session")
def engine(tmp_path_factory) -> str:
    """llama-server with SmolLM2 and its own chat template."""
    yield from start_engine(tmp_path_factory.mktemp("engine"))


def tools_template() -> str:
    """The ChatML template with Hermes-style tool calls that the tiny test
    model carries, read out of its writer (scripts/engine/tiny_gguf.py)
    without running it."""
    tree = ast.parse((REPO / "scripts" / "engine" / "tiny_gguf.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "CHAT_TEMPLATE" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("scripts/engine/tiny_gguf.py has no CHAT_TEMPLATE")


@pytest.fixture(scope="session")
def tools_engine(tmp_path_factory) -> str:
    """llama-server with SmolLM2 and a template that renders tools and tool
    calls (SmolLM2's own renders neither), so the engine parses the tool
    calls it generates into tool_calls, as it does for Qwen or Hermes."""
    base = tmp_path_factory.mktemp("tools-engine")
    template = base / "chatml_tools.jinja"
    template.write_text(tools_template())
    yield from start_engine(base, "--chat-template-file", str(template))


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
            if last.get("spool_facts") == 0 and last.get("held_turns") == 0 and last.get("ledger") == "ok":
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


@dataclass
class Ledger:
    addr: str  # rolloutledger dev's HTTP address
    brokers: str  # dev's Kafka address
    env: dict


@pytest.fixture(scope="session")
def ledger(binary, tmp_path_factory) -> Ledger:
    """`rolloutledger dev` on free ports, without the Postgres read model."""
    base = tmp_path_factory.mktemp("ledger")
    addr, kafka = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    env = dict(os.environ)
    env.pop("DATABASE_URL", None)
    dev_log = base / "dev.log"
    with open(dev_log, "wb") as log:
        dev = subprocess.Popen([binary, "dev", "--data", str(base / "data"), "--addr", addr, "--kafka-addr", kafka,
                                "--partitions", "3"], stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        wait_ready(f"http://{addr}/healthz", dev, dev_log, "rolloutledger dev", 60)
        yield Ledger(addr=addr, brokers=kafka, env=env)
    finally:
        stop(dev)


def start_proxy(binary: str, engine: str, ledger: Ledger, base: Path):
    """`rolloutledger proxy` in front of engine, with its own spool; yields
    the Stack and stops the proxy after."""
    listen = f"127.0.0.1:{free_port()}"
    proxy_log = base / "proxy.log"
    with open(proxy_log, "wb") as log:
        proxy = subprocess.Popen([binary, "proxy", "--listen", listen, "--upstream", engine, "--engine", "llamacpp",
                                  "--ledger", f"http://{ledger.addr}", "--spool", str(base / "spool")],
                                 stdout=log, stderr=subprocess.STDOUT, env=ledger.env)
    try:
        wait_ready(f"http://{listen}/healthz", proxy, proxy_log, "rolloutledger proxy", 120)
        yield Stack(binary=binary, engine=engine, ledger=f"http://{ledger.addr}", brokers=ledger.brokers,
                    proxy=f"http://{listen}", tmp=base)
    finally:
        stop(proxy)


@pytest.fixture(scope="session")
def stack(binary, engine, ledger, tmp_path_factory) -> Stack:
    yield from start_proxy(binary, engine, ledger, tmp_path_factory.mktemp("proxy"))


@pytest.fixture(scope="session")
def tools_stack(binary, tools_engine, ledger, tmp_path_factory) -> Stack:
    """A second proxy, in front of the engine that parses tool calls, on
    the same ledger."""
    yield from start_proxy(binary, tools_engine, ledger, tmp_path_factory.mktemp("tools-proxy"))
