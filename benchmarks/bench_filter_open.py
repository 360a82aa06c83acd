"""The cost of an open for writing under the worker's syscall filter
(docs/evaluator.md, "Forged verdicts through the channel" (4)): a Python loop
of `os.close(os.open(path, O_WRONLY | O_CLOEXEC))` on an existing file, with
PyTorch imported (a process of the worker's size), first without the filter,
then with it installed in the same process.

    PYTHONPATH=python python3 benchmarks/bench_filter_open.py
"""

from __future__ import annotations

import os
import socket
import statistics
import tempfile
import time

import torch  # noqa: F401  (loaded as in the worker)

from kernelsmith import _core

CALLS = 2000
REPEATS = 5


def per_call_us(path: str) -> list[float]:
    """Microseconds per open+close, one figure per repetition."""
    out = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(CALLS):
            os.close(os.open(path, os.O_WRONLY | os.O_CLOEXEC))
        out.append((time.perf_counter() - start) / CALLS * 1e6)
    return out


def show(label: str, figures: list[float]) -> None:
    print(
        f"{label}: min {min(figures):.1f} median {statistics.median(figures):.1f} "
        f"max {max(figures):.1f} us per open(O_WRONLY)+close",
        flush=True,
    )


def main() -> None:
    with tempfile.NamedTemporaryFile(prefix="ks_open_cost_") as f:
        show("without the filter", per_call_us(f.name))
        ours, _theirs = socket.socketpair()
        _core.syscall_filter_install([ours.fileno()])
        show("with the filter   ", per_call_us(f.name))
        # closing the protected socket at exit would end the process
        os._exit(0)


if __name__ == "__main__":
    main()
