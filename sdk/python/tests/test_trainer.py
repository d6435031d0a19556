"""Trainer resume: a trainer killed at any point of a step and started again
reports every step exactly once (one gradient.applied id per step, whatever
was sent twice), trains every batch, and matches the ledger's digests."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict

import pytest

import rolloutledger as rl
from helpers import Proxy, small_run_events

from conftest import HERE

STEPS = 3


def run_trainer(url, run, state_dir, crash=None):
    env = dict(__import__("os").environ)
    args = [sys.executable]
    if crash:
        env["CRASH_AT"] = crash
        args.append(str(HERE / "crashing_trainer.py"))
    else:
        args.append(str(HERE.parent / "examples" / "trainer_loop.py"))
    args += ["--url", url, "--run", run, "--steps", str(STEPS), "--state-dir", str(state_dir), "--idle-timeout", "20"]
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("point", ["before_report", "after_begin", "after_post", "after_commit"])
def test_resume_after_crash(url, run_id, tmp_path, point):
    events, _ = small_run_events(run_id, train_groups=STEPS + 1)
    barrier = next(i for i, e in enumerate(events) if e.type == "group.started" and e.data.group == f"train-{STEPS}")
    with rl.Ledger(url) as led:
        led.post(events[:barrier])
    proxy = Proxy(url)  # records everything the trainers send
    try:
        crashed = run_trainer(proxy.url, run_id, tmp_path, crash=f"{point}:2")
        assert crashed.returncode == 17, crashed.stderr
        done = run_trainer(proxy.url, run_id, tmp_path)
        assert done.returncode == 0, done.stderr
        assert "resuming" in done.stderr
    finally:
        proxy.close()

    printed = [int(line.split(":")[0].split()[1]) for line in (crashed.stdout + done.stdout).splitlines() if line.startswith("step ")]
    # A step is printed once reported. Crashing before the report, the
    # restarted trainer trains batch 2 again; crashing after it, the restart
    # finishes the report and goes on with batch 3.
    assert printed == ([1, 2, 3] if point == "before_report" else [1, 3])

    ids = defaultdict(set)  # (type, step or version) -> event ids sent
    copies = defaultdict(int)
    for body in proxy.bodies:
        for ev in json.loads(body):
            key = (ev["type"], ev["data"].get("step", ev["data"].get("version")))
            ids[key].add(ev["id"])
            copies[key] += 1
    assert sorted(k for k in ids if k[0] == "gradient.applied") == [("gradient.applied", s) for s in range(1, STEPS + 1)]
    assert sorted(k for k in ids if k[0] == "policy.published") == [("policy.published", v) for v in range(0, STEPS + 1)]
    assert all(len(v) == 1 for v in ids.values()), f"a step reported under two ids: {dict(ids)}"
    resent = {k for k, n in copies.items() if n > 1}
    if point == "after_post":
        assert resent == {("gradient.applied", 2), ("policy.published", 2)}, "the pending report is sent again, same bytes"
    else:
        assert resent == set()

    state = rl.TrainerState(tmp_path / "ledger-state.json", run_id)
    assert (state.step, state.version, state.pending) == (STEPS, STEPS, None)
    with rl.Ledger(url) as led:
        led.post(events[barrier:])
        # Once batch STEPS+1 is sealed, every report before it was applied:
        # a wrong digest or a duplicated fact would be a finding.
        assert [b.seq for b in led.batches(run_id, start_after=STEPS, max_batches=1, wait=10)] == [STEPS + 1]
        assert led.status(run_id)["findings"] == 0
        assert state.digest == led.batch(run_id, STEPS).digest


def test_state_of_another_run_or_ledger_is_refused(ledger, run_id, tmp_path):
    events, _ = small_run_events(run_id, train_groups=1)
    ledger.post(events)
    (b,) = list(ledger.batches(run_id, max_batches=1, wait=10))
    state = rl.TrainerState(tmp_path / "s.json", run_id)
    ledger.gradient_applied(b, loss=0.0, trained_tokens=1, truncated_fraction=0.0, logprob_gap={}, grad_norm=0.0, state=state)
    assert (state.step, state.digest) == (1, b.digest)
    with pytest.raises(rl.ResumeError):
        rl.TrainerState(tmp_path / "s.json", "another-run")
    state.digest = "sha256:" + "1" * 64
    state.save()
    with pytest.raises(rl.ResumeError, match="digest"):
        next(ledger.batches(run_id, state=rl.TrainerState(tmp_path / "s.json", run_id)))
