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
import itertools

import torch

from kernelsmith import timing as kt
from kernelsmith.evaluator.audit import chunk_bound, round_digests
from kernelsmith.evaluator.evidence import EVIDENCE_FULL_ELEMENTS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="9000000,67108864", help="output elements, comma-separated")
    parser.add_argument("--repeats", type=int, default=3, help="samples of each (kernelsmith.timing.bench)")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    # each call its own sample, a few of them: a hash of 64M elements takes seconds on the CPU
    opts = dict(device=device, min_samples=args.repeats, max_samples=args.repeats, target_sample_s=1e-9)
    opts.update(max_launches_per_sample=1, warmup_s=0.0, keep_samples=False, check_hidden_work=False)
    print(f"# device {device}; outputs over {EVIDENCE_FULL_ELEMENTS} elements commit")
    print("# elements | hash median s | 4 chunks to host median s | per element ns")
    for n in (int(x) for x in args.sizes.split(",")):
        out = torch.rand(n, device=device)
        nonces = itertools.count(1)  # a new key each call, as each commitment has
        hashes = kt.bench(lambda: round_digests(out, next(nonces)), **opts).median_s
        bounds = [chunk_bound(n, c) or (0, 0) for c in (0, 300, 700, 1023)]
        copies = kt.bench(lambda: [out[lo:hi].to("cpu", copy=True) for lo, hi in bounds], **opts).median_s
        print(f"{n} | {hashes:.4f} | {copies:.4f} | {hashes / n * 1e9:.1f}")


if __name__ == "__main__":
    main()
