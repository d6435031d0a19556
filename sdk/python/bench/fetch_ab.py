"""The trainer's fetch of a batch from two ledgers side by side (say, a
build before a change and one after), alternating with np.load of the same
arrays, so both are measured under the same load in one run:

    python sdk/python/bench/fetch_ab.py --a http://127.0.0.1:7070 --b http://127.0.0.1:7071

Each ledger gets a run like fetch_samples.py --make's (--groups groups of 8
attempts of 50,000 tokens); then --rounds rounds each fetch A's batch 1, B's
and np.load the arrays. Prints best and median per figure and the ratios
np.load / fetch, with the load average at the start and the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

import rolloutledger as rl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fetch_samples import COLUMNS, make_run  # noqa: E402


def load() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", required=True, help="URL of ledger A")
    p.add_argument("--b", required=True, help="URL of ledger B")
    p.add_argument("--groups", type=int, default=16)
    p.add_argument("--rounds", type=int, default=15)
    a = p.parse_args(argv)
    urls = {"A": a.a, "B": a.b}
    runs = {}
    for k, u in urls.items():
        with rl.Ledger(u, source="bench", batch_bytes=4 << 20) as led:
            runs[k] = make_run(led, groups=a.groups, attempts=8, tokens=50_000, turn_tokens=2_000)
    leds = {k: rl.Ledger(u, source="bench") for k, u in urls.items()}
    ref = leds["A"].samples(runs["A"], 1, format="arrow")
    times: dict[str, list[float]] = {"A": [], "B": [], "np.load": []}
    with tempfile.TemporaryDirectory() as d:
        files = {}
        for name in COLUMNS:
            files[name] = os.path.join(d, name + ".npy")
            np.save(files[name], np.asarray(getattr(ref, name)))
        print(f"load average at the start: {load()}")
        for i in range(a.rounds):
            for k in ("A", "B"):
                t0 = time.perf_counter()
                s = leds[k].samples(runs[k], 1, format="arrow")
                times[k].append(time.perf_counter() - t0)
                if i == 0:
                    print(f"{k}: {urls[k]}, {s.num_tokens:,} tokens, arrays {'joined into new memory' if s._copied else 'views of the body'}")
                del s
            t0 = time.perf_counter()
            arrays = {k: np.load(f) for k, f in files.items()}
            times["np.load"].append(time.perf_counter() - t0)
            del arrays
        print(f"load average at the end: {load()}")
    n = ref.num_tokens
    for k, v in times.items():
        print(f"{k:8s} best {min(v) * 1e3:7.1f} ms ({n / min(v) / 1e6:6.1f} M tokens/s), median {statistics.median(v) * 1e3:7.1f} ms")
    for k in ("A", "B"):
        best = min(times["np.load"]) / min(times[k])
        med = statistics.median(times["np.load"]) / statistics.median(times[k])
        print(f"{k}: fetch = {best:.2f} x np.load (best), {med:.2f} x (median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
