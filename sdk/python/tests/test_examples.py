"""The examples run to completion against the live ledger, as the README
shows them: the toy rollout worker and the trainer loop, and the trainer
loop on a run pushed by `rolloutledger simulate`."""

from __future__ import annotations

import os
import subprocess
import sys

import rolloutledger as rl
from helpers import check_for

from conftest import HERE

EXAMPLES = HERE.parent / "examples"


def py(script, *args, timeout=120, env=None):
    r = subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True, timeout=timeout,
                       env=None if env is None else {**os.environ, **env})
    assert r.returncode == 0, f"{script} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    return r


def test_rollout_worker_then_trainer_loop(url, tmp_path):
    run = py("rollout_worker.py", "--url", url, "--groups", "6", "--batch-groups", "2").stdout.strip()
    with rl.Ledger(url) as led:
        check_for(lambda: led.status(run)["batches_sealed"] == 3, what="three sealed batches")
        st = led.status(run)
        assert st["tasks_admitted"] == 3 and st["findings"] == 0
    out = py("trainer_loop.py", "--url", url, "--run", run, "--steps", "3", "--state-dir", str(tmp_path)).stdout
    steps = [line for line in out.splitlines() if line.startswith("step")]
    assert [line.split(":")[0] for line in steps] == ["step 1", "step 2", "step 3"]
    # pyarrow is in the test extras: the samples came as Arrow, and their
    # digest matched the manifest's.
    assert all(line.endswith("(arrow samples, digest checked)") for line in steps), steps
    assert f"run {run}: trained to step 3, policy version 3" in out
    # Started again, it has nothing left to do.
    again = py("trainer_loop.py", "--url", url, "--run", run, "--steps", "3", "--state-dir", str(tmp_path))
    assert "already at step 3" in again.stdout
    with rl.Ledger(url) as led:
        assert led.status(run)["findings"] == 0


def test_rollout_worker_as_version_1(url):
    """An old producer's run: ROLLOUTLEDGER_FACT_VERSION=1 writes version 1
    facts, which the ledger takes as it always did."""
    run = py("rollout_worker.py", "--url", url, "--groups", "4", "--batch-groups", "2",
             env={"ROLLOUTLEDGER_FACT_VERSION": "1"}).stdout.strip()
    with rl.Ledger(url) as led:
        check_for(lambda: led.status(run)["batches_sealed"] == 2, what="two sealed batches")
        assert led.status(run)["findings"] == 0


def test_trainer_loop_on_a_simulated_run(binary, url, tmp_path):
    sim = subprocess.run(
        [binary, "simulate", "--url", url, "--trainer=false", "--tokens", "--tasks", "8", "--steps", "2",
         "--batch-groups", "2", "--group-size", "4", "--max-turns", "10", "--workers", "1"],
        capture_output=True, text=True, timeout=120,
    )
    assert sim.returncode == 0, sim.stderr
    run = sim.stdout.strip()
    out = py("trainer_loop.py", "--url", url, "--run", run, "--steps", "2", "--state-dir", str(tmp_path),
             "--idle-timeout", "60").stdout
    assert f"run {run}: trained to step 2, policy version 2" in out
    assert "(arrow samples, digest checked)" in out
    # Asked for more than the run seals, it stops once no batch comes.
    more = py("trainer_loop.py", "--url", url, "--run", run, "--steps", "9", "--state-dir", str(tmp_path),
              "--idle-timeout", "0.5").stdout
    assert f"run {run}: no batch after step 2 within 0.5s; stopping" in more
