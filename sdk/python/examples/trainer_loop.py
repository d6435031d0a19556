"""A toy trainer consuming a run's sealed batches from a ledger.

The "policy" is a unigram softmax over a small vocabulary (token id modulo
--vocab), trained with a policy-gradient step per batch: REINFORCE on the
served advantages over the trained tokens (loss mask 1). The importance
ratio of the current policy over the rollout policy is measured for what
gradient.applied reports: the share of tokens whose ratio exceeds --clip
and the log-prob gap per staleness. NumPy only; with pyarrow installed
(rolloutledger[arrow]) the samples arrive as Apache Arrow and reach NumPy
without a copy, and their digest is checked against the manifest before
training on them. After each step it saves the
weights, then reports gradient.applied (with the batch digest) and
policy.published in one request; the resume point lives in
<state-dir>/ledger-state.json, so a trainer killed at any moment and started
again continues with the next batch, never losing or repeating one.

    go run ./cmd/rolloutledger dev
    RUN=$(go run ./cmd/rolloutledger simulate --trainer=false --tokens --max-turns 20)
    python sdk/python/examples/trainer_loop.py --run "$RUN" --steps 4 --idle-timeout 10
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile

import numpy as np

import rolloutledger as rl


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default="http://127.0.0.1:7070", help="the ledger's base URL")
    p.add_argument("--run", required=True, help="the run to train on")
    p.add_argument("--steps", type=int, default=4, help="train until this step, then stop")
    p.add_argument("--state-dir", default=None, help="where weights and the resume point live (default: a directory per run under the temp dir)")
    p.add_argument("--idle-timeout", type=float, default=120.0, help="give up when no batch is sealed for this long (seconds)")
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--lr", type=float, default=0.5)
    p.add_argument("--clip", type=float, default=2.0, help="importance ratio above which a token counts as truncated")
    p.add_argument("--samples-format", default="auto", choices=["auto", "arrow", "ndjson"],
                   help="how samples travel: Apache Arrow (needs pyarrow), NDJSON, or Arrow when pyarrow is installed")
    return p.parse_args(argv)


def log_softmax(theta: np.ndarray) -> np.ndarray:
    z = theta - theta.max()
    return z - np.log(np.exp(z).sum())


def save_weights(theta: np.ndarray, state_dir: str, version: int) -> str:
    """Writes the weights of a version durably; returns the path."""
    path = os.path.join(state_dir, f"policy-v{version}.npy")
    fd, tmp = tempfile.mkstemp(dir=state_dir, suffix=".npy")
    with os.fdopen(fd, "wb") as f:
        np.save(f, theta)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def weights_digest(theta: np.ndarray) -> str:
    return "sha256:" + hashlib.sha256(theta.astype(np.float32).tobytes()).hexdigest()


def train_step(theta: np.ndarray, batch: rl.Batch, vocab: int, lr: float, clip: float):
    """One policy-gradient step on a batch; returns the new weights and the
    numbers gradient.applied reports."""
    samples = batch.samples(verify_digest=True)
    s = samples.packed()
    mask = s["loss_mask"].view(bool)
    tokens = s["token_ids"][mask].astype(np.int64) % vocab
    adv = s["token_advantages"][mask].astype(np.float64)
    rollout_lp = s["rollout_logprobs"][mask].astype(np.float64)
    staleness = batch.from_version - s["policy_versions"][mask]
    n = int(mask.sum())
    lp_all = log_softmax(theta)
    if n == 0:
        return theta, dict(loss=0.0, trained_tokens=0, truncated_fraction=0.0, logprob_gap={}, grad_norm=0.0), samples.source
    lp = lp_all[tokens]
    truncated = np.exp(np.minimum(lp - rollout_lp, 50.0)) > clip
    # loss = -(1/n) sum A * log pi(token); d log pi(t) / d theta = onehot(t) - pi
    loss = float(-(adv * lp).sum() / n)
    grad = -(np.bincount(tokens, weights=adv, minlength=vocab) - np.exp(lp_all) * adv.sum()) / n
    gap = {}
    for k in np.unique(staleness):
        sel = staleness == k
        if k >= 0:
            gap[int(k)] = round(float(np.abs(lp[sel] - rollout_lp[sel]).mean()), 6)
    stats = dict(
        loss=loss,
        trained_tokens=n,
        truncated_fraction=float(truncated.mean()),
        logprob_gap=gap,
        grad_norm=float(np.linalg.norm(grad)),
    )
    return theta - lr * grad, stats, samples.source


def main(argv=None) -> int:
    a = parse_args(argv)
    state_dir = a.state_dir or os.path.join(tempfile.gettempdir(), f"rolloutledger-trainer-{a.run}")
    os.makedirs(state_dir, exist_ok=True)
    state = rl.TrainerState(os.path.join(state_dir, "ledger-state.json"), a.run)

    with rl.Ledger(a.url, source="toy-trainer", samples_format=a.samples_format) as ledger:
        # Finish a report a crash interrupted, and check the state against
        # the ledger, before reading where to start.
        ledger.resume(state)
        if "checkpoint" in state.extra:
            theta = np.load(state.extra["checkpoint"])
        else:
            theta = np.zeros(a.vocab, dtype=np.float64)
        if state.version < 0:
            path = save_weights(theta, state_dir, 0)
            ledger.policy_published(a.run, version=0, checkpoint=path, digest=weights_digest(theta), precision="fp32", state=state)
        if state.step:
            print(f"resuming run {a.run} after step {state.step}", file=sys.stderr)
        if state.step >= a.steps:
            print(f"run {a.run}: already at step {state.step}")
            return 0
        for batch in ledger.batches(a.run, state=state, idle_timeout=a.idle_timeout, until=a.steps):
            theta, stats, source = train_step(theta, batch, a.vocab, a.lr, a.clip)
            # The weights are durable before the step is reported.
            path = save_weights(theta, state_dir, batch.seq)
            ledger.gradient_applied(
                batch,
                **stats,
                publish={"checkpoint": path, "digest": weights_digest(theta), "precision": "fp32"},
                state=state,
                extra={"checkpoint": path},
            )
            dropped = len(batch.dropped)
            print(
                f"step {batch.seq}: {len(batch.groups)} groups ({dropped} dropped), "
                f"{stats['trained_tokens']} trained tokens, loss {stats['loss']:.4f}, "
                f"grad norm {stats['grad_norm']:.4f}, truncated {stats['truncated_fraction']:.3f} ({source} samples, digest checked)",
                flush=True,
            )
    if state.step < a.steps:
        # A finite run (a simulated one, say) may seal fewer batches.
        print(f"run {a.run}: no batch after step {state.step} within {a.idle_timeout:g}s; stopping")
    print(f"run {a.run}: trained to step {state.step}, policy version {state.version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
