"""What a fetch over loopback TCP can reach on this machine, beside np.load.

    python sdk/python/bench/loopback_floor.py [--mb 134] [--rounds 15]

The trainer's fetch of a sealed batch is a file sent with sendfile by the
API and read into one NumPy buffer by the SDK. This measures that path with
nothing of the ledger in it: a child process sends a file of --mb megabytes
over a fresh loopback connection with os.sendfile, and this process reads it
with recv_into into a NumPy buffer, fresh (page faults included) or warm (a
buffer reused), with the kernel's receive-buffer tuning or with SO_RCVBUF
set before connecting (the kernel caps it at net.core.rmem_max and doubles
it). np.load of the same bytes as one .npy file is the reference, as in
fetch_samples.py. Rounds alternate the ways, and the best and median of
each are printed with np.load's time over theirs.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np


def serve(path: str) -> None:
    size = os.path.getsize(path)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    print(s.getsockname()[1], flush=True)
    while True:
        c, _ = s.accept()
        c.recv(1)
        with open(path, "rb") as f:
            off = 0
            while off < size:
                off += os.sendfile(c.fileno(), f.fileno(), off, size - off)
        c.close()


def fetch(port: int, size: int, buf, rcvbuf: int) -> float:
    t = time.perf_counter()
    c = socket.socket()
    if rcvbuf:
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    c.connect(("127.0.0.1", port))
    c.send(b"g")
    mv, n = memoryview(buf), 0
    while n < size:
        k = c.recv_into(mv[n:], min(16 << 20, size - n))
        if k == 0:
            raise ConnectionError(f"the sender closed after {n} of {size} bytes")
        n += k
    c.close()
    return time.perf_counter() - t


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=int, default=134, help="bytes sent, in MB (134: the 6.4 M-token batch's Arrow body)")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--serve", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.serve:
        serve(a.serve)
        return 0
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "a.npy")
        np.save(path, np.random.default_rng(1).integers(0, 1 << 30, a.mb * 1_000_000 // 4, dtype=np.int32))
        size = os.path.getsize(path)
        child = subprocess.Popen([sys.executable, __file__, "--serve", path], stdout=subprocess.PIPE, text=True)
        try:
            port = int(child.stdout.readline())
            warm = np.empty(size, np.uint8)
            warm[:] = 0
            ways = {
                "fresh buffer, kernel-tuned": lambda: fetch(port, size, np.empty(size, np.uint8), 0),
                "warm buffer, kernel-tuned": lambda: fetch(port, size, warm, 0),
                "fresh buffer, SO_RCVBUF 4 MiB": lambda: fetch(port, size, np.empty(size, np.uint8), 4 << 20),
                "warm buffer, SO_RCVBUF 4 MiB": lambda: fetch(port, size, warm, 4 << 20),
                "np.load": lambda: (lambda t: (np.load(path), time.perf_counter() - t)[1])(time.perf_counter()),
            }
            times = {k: [] for k in ways}
            for _ in range(a.rounds):
                for k, f in ways.items():
                    times[k].append(f())
        finally:
            child.kill()
    ref = sorted(times["np.load"])
    print(f"{size / 1e6:.0f} MB, {a.rounds} rounds, load average {os.getloadavg()[0]:.1f}")
    for k, v in times.items():
        v = sorted(v)
        best, med = v[0], v[len(v) // 2]
        print(f"  {k:30s} best {best * 1e3:7.1f} ms  median {med * 1e3:7.1f} ms  "
              f"np.load over it: {ref[0] / best:.2f} (best), {ref[len(ref) // 2] / med:.2f} (median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
