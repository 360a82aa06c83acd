"""Time tinyops.rms_norm on one shape; prints one line ``rms_norm ROWSxCOLS: T ms``."""
import argparse
import time

import torch

from tinyops import rms_norm


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--cols", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    x = torch.randn(args.rows, args.cols)
    w = torch.randn(args.cols)
    rms_norm(x, w)  # first call compiles (or warms the interpreter)
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        rms_norm(x, w)
        times.append(time.perf_counter() - start)
    times.sort()
    print(f"rms_norm {args.rows}x{args.cols}: {times[len(times) // 2] * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
