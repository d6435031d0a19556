"""The trainer's fetch of a batch's samples into NumPy, NDJSON against Apache
Arrow (as the SDK asks for it: its repeated columns compressed with LZ4 when
pyarrow reads that, and as it is), beside np.load of the same arrays from a
local file.

    python sdk/python/bench/fetch_samples.py --url http://127.0.0.1:7070 --run R --seq 1
    python sdk/python/bench/fetch_samples.py --url http://127.0.0.1:7070 --make   # posts a run first

With --make it posts a run of --groups groups of --attempts attempts, each of
--tokens completion tokens in turns of --turn-tokens (inline token ids and
log-probs, catalogue version 2), and measures its batch 1. Each figure is
the best of --repeats runs (the machine is shared: the best is the least
disturbed; each Arrow fetch's first call, which pays the process's one-off
costs, is reported on its own and not among them), in tokens per second over the batch's tokens (observation
tokens included). The last line of the output is one JSON object with every
figure, for `rolloutledger bench` to read; `measure()` returns the same
object to a caller in Python.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time

import numpy as np

import rolloutledger as rl

COLUMNS = ("token_ids", "loss_mask", "rollout_logprobs", "policy_versions", "offsets")


def columns(samples) -> tuple[str, ...]:
    """The arrays samples carry: COLUMNS, and temperatures when the batch
    has them (rule version 4 on), so that np.load reads the same arrays as
    the fetch does."""
    return COLUMNS + (("temperatures",) if getattr(samples, "temperatures", None) is not None else ())


def make_run(ledger: rl.Ledger, *, groups: int, attempts: int, tokens: int, turn_tokens: int, seed: int = 1) -> str:
    """Posts a run whose batch 1 holds groups × attempts attempts of
    `tokens` completion tokens each; returns its id once batch 1 is sealed."""
    run = f"bench-samples-{rl.uuid7()[-12:]}"
    rng = np.random.default_rng(seed)
    ev = ledger.event
    cfg = rl.RunConfig(group_size=attempts, batch_groups=groups, enforce_admission=False)
    out = [ev(run, rl.RunStarted(config=cfg, model="bench", harness="bench", notes="samples fetch benchmark")),
           ev(run, rl.TaskRegistered(task="t-1", source="bench", kind="swe", tier=1, gates=[]))]
    ledger.post(out)
    turns = max(1, tokens // turn_tokens)
    ids = rng.integers(0, 151_936, size=turn_tokens * 4, dtype=np.int32)
    lps = -rng.exponential(0.5, size=turn_tokens * 4).astype(np.float32)
    for g in range(groups):
        group = f"g{g:03d}"
        evs = [ev(run, rl.GroupStarted(group=group, task="t-1", size=attempts, purpose="train"))]
        for a in range(attempts):
            att = f"{group}/a{a}"
            evs.append(ev(run, rl.AttemptStarted(attempt=att, group=group, task="t-1", engine="e", vm="vm", fork_ms=1)))
            for t in range(turns):
                off = (g * 131 + a * 17 + t * 7) % (turn_tokens * 3)
                evs.append(ev(run, rl.TurnGenerated(
                    attempt=att, turn=t, policy_version=0, prompt_tokens=100, completion_tokens=turn_tokens, cached_tokens=0,
                    token_ids=ids[off:off + turn_tokens], logprobs=lps[off:off + turn_tokens], finish="tool_call", latency_ms=1)))
            evs.append(ev(run, rl.AttemptFinished(attempt=att, outcome="submitted")))
            evs.append(ev(run, rl.RewardComputed(attempt=att, passed=a % 2 == 0, tests_passed=a % 3, tests_total=3, verifier="bench")))
        ledger.post(evs)
    deadline = time.monotonic() + 600
    while ledger.status(run)["batches_sealed"] < 1:
        if time.monotonic() > deadline:
            raise TimeoutError(f"run {run}: batch 1 not sealed within 600 s")
        time.sleep(0.2)
    return run


def _best(fn, repeats: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def _first_then_best(fn, repeats: int) -> tuple[float, float, object]:
    """The time of a first call, untimed in the best (it pays one-off
    costs: pyarrow's codec and thread pool starting, the first touch of
    memory the process never had), then the best of `repeats` calls: a
    trainer fetches batch after batch in one process."""
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    best, out = _best(fn, repeats)
    return first, best, out


def measure(url: str, run: str, seq: int = 1, repeats: int = 3) -> dict:
    """Times fetch+parse of batch `seq`'s samples as NDJSON and as Arrow
    (the SDK's default, compressed when pyarrow reads LZ4, and
    uncompressed), and np.load of the same arrays from .npy files and an
    .npz, and returns the figures."""
    compression = "lz4" if rl.samples.arrow_codec_available("lz4") else "none"
    with rl.Ledger(url, source="bench") as ledger:
        path = f"/v1/runs/{run}/batches/{seq}/samples"
        sizes = {}
        for fmt, media, query in (("ndjson", "application/x-ndjson", ""),
                                  ("arrow", "application/vnd.apache.arrow.stream", f"?compression={compression}"),
                                  ("arrow_uncompressed", "application/vnd.apache.arrow.stream", "")):
            sizes[fmt] = len(ledger._get(path + query, accept=media).body)
        # Arrow first: the NDJSON parse leaves a large heap behind, whose
        # collections would land in the next timings (a trainer holds no
        # such thing).
        f_ar, t_ar, ar = _first_then_best(lambda: ledger.samples(run, seq, format="arrow", compression=compression), repeats)
        f_au, t_au, au = _first_then_best(lambda: ledger.samples(run, seq, format="arrow", compression="none"), repeats)
        t_nd, nd = _best(lambda: ledger.samples(run, seq, format="ndjson"), repeats)
        # Whether the Arrow arrays are views of the body as read (one
        # record batch) or joined into new arrays (several).
        views = not getattr(ar, "_copied", True)
    cols = columns(ar)
    if cols != columns(nd) or cols != columns(au):
        raise AssertionError("the NDJSON and Arrow samples carry different columns")
    for name in cols:
        if not np.array_equal(getattr(nd, name), getattr(ar, name)) or not np.array_equal(getattr(au, name), getattr(ar, name)):
            raise AssertionError(f"the NDJSON and Arrow samples differ in {name}")
    n = ar.num_tokens
    del nd, au
    gc.collect()
    with tempfile.TemporaryDirectory() as d:
        files = {}
        for name in cols:
            files[name] = os.path.join(d, name + ".npy")
            np.save(files[name], np.asarray(getattr(ar, name)))
        npz = os.path.join(d, "samples.npz")
        np.savez(npz, **{name: np.asarray(getattr(ar, name)) for name in cols})
        npy_bytes = sum(os.path.getsize(f) for f in files.values())
        npz_bytes = os.path.getsize(npz)
        t_npy, _ = _best(lambda: {k: np.load(f) for k, f in files.items()}, repeats)
        t_npz, _ = _best(lambda: (lambda z: {k: z[k] for k in cols})(np.load(npz)), repeats)
    rate = lambda s: n / s if s > 0 else float("inf")  # noqa: E731
    return {
        "run": run, "seq": seq, "samples": len(ar), "tokens": n, "repeats": repeats, "columns": list(cols),
        "ndjson": {"seconds": t_nd, "tokens_per_s": rate(t_nd), "bytes": sizes["ndjson"], "bytes_per_token": sizes["ndjson"] / max(n, 1)},
        "arrow": {"seconds": t_ar, "tokens_per_s": rate(t_ar), "bytes": sizes["arrow"], "bytes_per_token": sizes["arrow"] / max(n, 1),
                  "views": views, "compression": compression, "first_seconds": f_ar},
        "arrow_uncompressed": {"seconds": t_au, "tokens_per_s": rate(t_au), "bytes": sizes["arrow_uncompressed"],
                               "bytes_per_token": sizes["arrow_uncompressed"] / max(n, 1), "first_seconds": f_au},
        "np_load_npy": {"seconds": t_npy, "tokens_per_s": rate(t_npy), "bytes": npy_bytes},
        "np_load_npz": {"seconds": t_npz, "tokens_per_s": rate(t_npz), "bytes": npz_bytes},
        "arrow_over_np_load": t_npy / t_ar if t_ar > 0 else None,
        "arrow_uncompressed_over_np_load": t_npy / t_au if t_au > 0 else None,
        "ndjson_over_np_load": t_npy / t_nd if t_nd > 0 else None,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default="http://127.0.0.1:7070")
    p.add_argument("--run", help="a run with a sealed batch --seq (else --make)")
    p.add_argument("--seq", type=int, default=1)
    p.add_argument("--make", action="store_true", help="post a run to measure first")
    p.add_argument("--groups", type=int, default=16)
    p.add_argument("--attempts", type=int, default=8)
    p.add_argument("--tokens", type=int, default=50_000, help="completion tokens per attempt")
    p.add_argument("--turn-tokens", type=int, default=2_000)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args(argv)
    if not a.run and not a.make:
        p.error("name a --run, or --make one")
    run = a.run
    if a.make:
        t0 = time.perf_counter()
        with rl.Ledger(a.url, source="bench", batch_bytes=4 << 20) as ledger:
            run = make_run(ledger, groups=a.groups, attempts=a.attempts, tokens=a.tokens, turn_tokens=a.turn_tokens)
        print(f"posted run {run} and sealed its batch 1 in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    r = measure(a.url, run, a.seq, a.repeats)
    print(f"batch {r['seq']} of {r['run']}: {r['samples']} samples, {r['tokens']:,} tokens (best of {r['repeats']})")
    for k in ("ndjson", "arrow", "arrow_uncompressed", "np_load_npy", "np_load_npz"):
        m = r[k]
        size = f", {m['bytes']:,} bytes" if m.get("bytes") else ""
        name = f"arrow ({m['compression']})" if k == "arrow" else k
        first = f", first call {m['first_seconds']:.3f} s" if "first_seconds" in m else ""
        print(f"  {name:18s} {m['seconds']:8.3f} s  {m['tokens_per_s'] / 1e6:8.1f} M tokens/s{size}{first}")
    print(f"  Arrow fetch = {r['arrow_over_np_load']:.2f} x np.load (.npy), uncompressed {r['arrow_uncompressed_over_np_load']:.2f} x;"
          f" NDJSON = {r['ndjson_over_np_load']:.3f} x")
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
