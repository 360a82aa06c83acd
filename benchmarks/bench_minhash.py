"""Near-duplicate detection throughput of the C++ MinHash LSH (kernelsmith._core.MinHashLSH).

Synthetic nn.Module sources (~40 random statements each, 10% of them
near-duplicates of an earlier one) at 10k and 50k modules; prints modules/s
for signing+indexing (add_many) and for finding groups (groups()), and a
pure-Python baseline (the same shingles, signatures with Python integers) on
a subsample for the ratio.

    PYTHONPATH=python python benchmarks/bench_minhash.py [--sizes 10000 50000] [--threads 0]
"""

from __future__ import annotations

import argparse
import random
import time

from kernelsmith import _core

OPS = [
    "relu",
    "gelu",
    "conv2d",
    "linear",
    "softmax",
    "matmul",
    "sigmoid",
    "tanh",
    "layer_norm",
    "dropout",
    "max_pool2d",
    "avg_pool2d",
    "bmm",
    "cat",
    "exp",
]


def module(rng: random.Random, n: int = 40) -> str:
    lines = ["class M(nn.Module):", "    def forward(self, x):"]
    for _ in range(n):
        lines.append(
            f"        v{rng.randrange(50)} = torch.{rng.choice(OPS)}(v{rng.randrange(50)}, {rng.randrange(1000)})"
        )
    return "\n".join(lines + ["        return x"])


def corpus(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    docs: list[str] = []
    for i in range(n):
        if i > 10 and rng.random() < 0.1:
            base = docs[rng.randrange(len(docs))].splitlines()
            base[rng.randrange(2, len(base) - 1)] = "        y = torch.relu(x)"
            docs.append("\n".join(base))
        else:
            docs.append(module(rng))
    return docs


def python_baseline(docs: list[str], num_perm: int = 128) -> float:
    p = (1 << 61) - 1
    rng = random.Random(1)
    ab = [(rng.randrange(1, p), rng.randrange(p)) for _ in range(num_perm)]
    t = time.perf_counter()
    for d in docs:
        sh = _core.minhash_shingles(d, 5)
        [min((a * x + b) % p for x in sh) for a, b in ab]
    return len(docs) / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[10000, 50000])
    ap.add_argument("--threads", type=int, default=0, help="signature threads (0: all cores)")
    args = ap.parse_args()
    print(f"{'modules':>8} {'add_many mod/s':>15} {'groups mod/s':>13} {'total mod/s':>12} {'near-dup groups':>16}")
    for n in args.sizes:
        docs = corpus(n)
        lsh = _core.MinHashLSH(num_perm=128, bands=32, shingle=5, threshold=0.8)
        t0 = time.perf_counter()
        lsh.add_many(docs, threads=args.threads)
        t1 = time.perf_counter()
        groups = lsh.groups()
        t2 = time.perf_counter()
        dup = sum(1 for i, g in enumerate(groups) if g != i)
        print(f"{n:>8} {n / (t1 - t0):>15.0f} {n / (t2 - t1):>13.0f} {n / (t2 - t0):>12.0f} {dup:>16}")
    sub = corpus(500, seed=3)
    py = python_baseline(sub)
    lsh = _core.MinHashLSH()
    t = time.perf_counter()
    lsh.add_many(sub, threads=1)
    cpp = len(sub) / (time.perf_counter() - t)
    print(f"signatures, 1 thread, 500 modules: C++ {cpp:.0f} mod/s, pure Python {py:.0f} mod/s, ratio {cpp / py:.0f}x")


if __name__ == "__main__":
    main()
