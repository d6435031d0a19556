"""A toy rollout fleet writing a small run into a ledger.

It plays the scheduler (run.started, tasks, groups), the rollout workers
(attempts with turns, tool calls and compactions, one lost to the
infrastructure and retried in its slot) and the verifier (rewards), all
through the SDK. The "model" samples random tokens; what matters is the
shape of the facts. It prints the run id on stdout.

    go run ./cmd/rolloutledger dev            # in another terminal
    python sdk/python/examples/rollout_worker.py --groups 8 --batch-groups 2
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import rolloutledger as rl


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default="http://127.0.0.1:7070", help="the ledger's base URL")
    p.add_argument("--run", default=None, help="run id (default: toy-<random>)")
    p.add_argument("--tasks", type=int, default=3, help="tasks registered and probed")
    p.add_argument("--groups", type=int, default=8, help="train groups")
    p.add_argument("--group-size", type=int, default=4, help="attempts per train group")
    p.add_argument("--batch-groups", type=int, default=2, help="groups per batch (run config)")
    p.add_argument("--max-turns", type=int, default=6, help="most turns of an attempt")
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args(argv)


def rollout(att: rl.Attempt, rng: np.random.Generator, max_turns: int, version: int) -> int:
    """One attempt of the toy agent; returns how many tests it passed of 4."""
    turns = int(rng.integers(1, max_turns + 1))
    observation = None
    for t in range(turns):
        n = int(rng.integers(8, 64))
        ids = rng.integers(0, 4096, size=n, dtype=np.int32)
        lps = -rng.exponential(0.7, size=n).astype(np.float32)
        last = t == turns - 1
        att.turn(
            policy_version=version,
            prompt_tokens=200 + 60 * t,
            cached_tokens=150,
            token_ids=ids,
            logprobs=lps,
            observation_token_ids=observation,
            finish="stop" if last else "tool_call",
            latency_ms=int(rng.integers(100, 900)),
        )
        if not last:
            out = int(rng.integers(10, 20_000))
            att.tool_call(
                tool=str(rng.choice(["bash", "edit", "pytest"])),
                exit_code=int(rng.choice([0, 0, 0, 1])),
                duration_ms=int(rng.integers(5, 3000)),
                output_bytes=out,
                to_file=out > 8192,  # long output goes to a file
                background=bool(rng.random() < 0.1),
            )
            observation = rng.integers(0, 4096, size=int(rng.integers(2, 16)), dtype=np.int32)
            if t == 3:
                att.compacted(tokens_before=8000, tokens_after=2000)
    att.finish("submitted")
    return int(rng.integers(0, 5))


def main(argv=None) -> str:
    a = parse_args(argv)
    rng = np.random.default_rng(a.seed)
    run = a.run or f"toy-{rl.uuid7()[-12:]}"
    config = rl.RunConfig(group_size=a.group_size, batch_groups=a.batch_groups, min_probes=4)
    with rl.Ledger(a.url, source="toy-scheduler") as ledger:
        ledger.emit(run, rl.RunStarted(config=config, model="toy-unigram", harness="toy-harness", notes="examples/rollout_worker.py"))
        tasks = [f"toy/task-{i}" for i in range(a.tasks)]
        for i, task in enumerate(tasks):
            gates = [rl.Gate(name=g, passed=True) for g in ("builds", "tests-run", "not-flaky")]
            ledger.emit(run, rl.TaskRegistered(task=task, source="toy-suite", kind="swe", tier=i % 3, gates=gates))
            # Probes: two of four pass, inside the default 15%-85% band.
            group = f"probe/{i}"
            ledger.emit(run, rl.GroupStarted(group=group, task=task, size=4, purpose="probe"))
            for j in range(4):
                attempt = f"{group}/a{j}"
                with ledger.attempt(run, attempt=attempt, group=group, task=task, engine="engine-0", vm=f"vm-p{i}-{j}", fork_ms=30) as att:
                    rollout(att, rng, 2, version=0)
                ledger.emit(run, rl.RewardComputed(attempt=attempt, passed=j < 2, tests_passed=4 if j < 2 else 1, tests_total=4, verifier="toy-pytest"))

        for g in range(a.groups):
            task = tasks[g % len(tasks)]
            group = f"train/{g}"
            ledger.emit(run, rl.GroupStarted(group=group, task=task, size=a.group_size, purpose="train"))
            passed_any = failed_any = False
            for j in range(a.group_size):
                attempt = f"{group}/a{j}"
                retry_of = None
                if g == 0 and j == 0:
                    # The first attempt's microVM dies; a retry takes its slot.
                    try:
                        with ledger.attempt(run, attempt=attempt + "-lost", group=group, task=task, engine="engine-1", vm="vm-dead", fork_ms=41) as att:
                            raise rl.InfrastructureError("microVM lost its host")
                    except rl.InfrastructureError:
                        retry_of = attempt + "-lost"
                with ledger.attempt(run, attempt=attempt, group=group, task=task, engine=f"engine-{j % 2}",
                                    vm=f"vm-{g}-{j}", fork_ms=int(rng.integers(20, 60)), retry_of=retry_of) as att:
                    tests = rollout(att, rng, a.max_turns, version=0)
                # Keep every group informative: one solve and one failure at least.
                passed = tests == 4 or (j == a.group_size - 1 and not passed_any)
                if j == a.group_size - 1 and not failed_any:
                    passed = False
                passed_any |= passed
                failed_any |= not passed
                ledger.emit(run, rl.RewardComputed(attempt=attempt, passed=passed, tests_passed=4 if passed else min(tests, 3),
                                                   tests_total=4, verifier="toy-pytest"))
        ledger.flush()
        print(f"pushed run {run}: {a.groups} train groups, {a.groups // a.batch_groups} batches expected", file=sys.stderr)
    print(run)
    return run


if __name__ == "__main__":
    main()
