"""What a trial's commitment to a large output costs the worker
(checks/referee_evidence.committed_chunks): the chunk hashes of the whole
output (audit.round_digests: one Triton kernel on a CUDA device, the torch
path elsewhere) and the host copy of the 4 chunks the parent picks, per
output size, on this machine's device (CUDA if there is one, else the CPU).
An output of at most evidence.EVIDENCE_FULL_ELEMENTS elements is handed over
whole and commits nothing.

    PYTHONPATH=python python3 benchmarks/bench_commit_hash.py [--sizes 9000000,67108864] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from kernelsmith.evaluator.audit import chunk_bound, round_digests
from kernelsmith.evaluator.evidence import EVIDENCE_FULL_ELEMENTS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="9000000,67108864", help="output elements, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    print(f"# device {device}; outputs over {EVIDENCE_FULL_ELEMENTS} elements commit")
    print("# elements | hash median s | 4 chunks to host median s | per element ns")
    for n in (int(x) for x in args.sizes.split(",")):
        out = torch.rand(n, device=device)
        round_digests(out, 1)  # compiled (CUDA) or warm before timing
        hashes, copies = [], []
        for k in range(args.repeats):
            sync()
            t0 = time.perf_counter()
            round_digests(out, k + 2)
            sync()
            t1 = time.perf_counter()
            for c in (0, 300, 700, 1023):
                lo, hi = chunk_bound(n, c) or (0, 0)
                out[lo:hi].to("cpu", copy=True)
            sync()
            hashes.append(t1 - t0)
            copies.append(time.perf_counter() - t1)
        h = statistics.median(hashes)
        print(f"{n} | {h:.4f} | {statistics.median(copies):.4f} | {h / n * 1e9:.1f}")


if __name__ == "__main__":
    main()
