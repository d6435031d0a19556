"""Runs examples/trainer_loop.py, killing the process (os._exit, as a crash
would: no cleanup, no flush) at one point of one step.

    CRASH_AT=<point>:<step> python crashing_trainer.py <trainer_loop args>

Points: "before_report" (trained, weights saved, nothing reported),
"after_begin" (the report is in the state file, not sent), "after_post"
(sent and acknowledged, not committed), "after_commit" (committed).
"""

import os
import runpy
import sys
from pathlib import Path

import rolloutledger as rl

EXIT = 17
point, _, step = os.environ["CRASH_AT"].partition(":")
step = int(step)

_gradient_applied = rl.Ledger.gradient_applied
_begin = rl.TrainerState.begin
_commit = rl.TrainerState.commit


def gradient_applied(self, batch, **kw):
    if point == "before_report" and batch.seq == step:
        os._exit(EXIT)
    return _gradient_applied(self, batch, **kw)


def pending_step(state):
    return (state.pending or {}).get("commit", {}).get("step")


def begin(self, records, commit):
    _begin(self, records, commit)
    if point == "after_begin" and commit.get("step") == step:
        os._exit(EXIT)


def commit(self):
    s = pending_step(self)
    if point == "after_post" and s == step:
        os._exit(EXIT)
    _commit(self)
    if point == "after_commit" and s == step:
        os._exit(EXIT)


rl.Ledger.gradient_applied = gradient_applied
rl.TrainerState.begin = begin
rl.TrainerState.commit = commit

example = Path(__file__).resolve().parent.parent / "examples" / "trainer_loop.py"
sys.argv = [str(example)] + sys.argv[1:]
runpy.run_path(str(example), run_name="__main__")
