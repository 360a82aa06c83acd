"""The audit rounds' chunk hash on a CUDA device: the fused Triton kernel
(evaluator/audit_fused.py ``fused_digests``) against the torch path
(evaluator/audit.py ``chunk_digests``, what the worker calls now).

For each size it checks that both give the same digests bit for bit (and
that the referee's ``digest_of_chunk`` on the host agrees on a few chunks),
then times one hash of each (CUDA events, median of several calls after a
warm-up): the fused launch alone (device tensor), the fused launch with its
host list (what the torch path returns: a synchronisation included) and the
torch path. It also checks every supported dtype once on the device, with a
shorter last chunk, and captures ``fused_digests`` in a CUDA graph, replays it
after ``set_keys`` with a new nonce and checks the replay's digests against
``chunk_digests`` with that nonce. Exits 1 on any mismatch. On the GPU
machine:

    PYTHONPATH=python python3 benchmarks/gpu_audit_hash.py
"""

from __future__ import annotations

import statistics
import sys
from typing import Any, Callable

import torch

from kernelsmith.evaluator import audit
from kernelsmith.evaluator import audit_fused as fused

NONCE = 0x1234_5678_9ABC  # protocol.py draws 62-bit nonces
NEW_NONCE = 0x2545_F491_4F6C_DD1D
SIZES = [
    ("16K float32", (16 * 1024,)),
    ("1M float32", (1024 * 1024,)),
    ("64M float32", (64 * 1024 * 1024,)),
    ("16K x 4096 float32 (one stacked tensor)", (4096, 16 * 1024)),
]
DTYPES = [
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.uint8,
    torch.bool,
    torch.complex64,
]

failures: list[str] = []


def _check(what: str, ok: bool) -> None:
    print(f"  {'ok      ' if ok else 'MISMATCH'} {what}")
    if not ok:
        failures.append(what)


def _random_bits(dtype: torch.dtype, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """A CUDA tensor of ``dtype`` with random bit patterns (sign bits and NaNs
    included, so the words' sign extension counts)."""
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen, device="cuda") > 0.5
    if dtype == torch.complex64:
        return torch.view_as_complex(_random_bits(torch.float32, (*shape, 2), gen))
    size = torch.empty(0, dtype=dtype).element_size()
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[size]
    info = torch.iinfo(as_int)
    return torch.randint(info.min, info.max, shape, generator=gen, device="cuda", dtype=as_int).view(dtype)


def _median_ms(fn: Callable[[], Any], reps: int, warmup: int = 3) -> float:
    """The median of ``reps`` timed calls of ``fn``, each between two CUDA
    events on the current stream (a call that synchronises inside is timed
    whole)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _equal_on(t: torch.Tensor, name: str) -> None:
    """fused == torch path on the device, and the referee's host recomputation
    of the first, a middle and the last chunk."""
    keys = fused.keys_of(NONCE, t.device)
    got = fused.digests_list(fused.fused_digests(t, keys))
    expected = audit.chunk_digests(t, NONCE)
    _check(f"{name}: fused == chunk_digests ({len(expected)} chunks)", got == expected)
    words = audit.words(t.cpu())
    bounds = audit.chunk_bounds(words.numel())
    picks = sorted({0, len(bounds) // 2, len(bounds) - 1})
    referee = [audit.digest_of_chunk(words[bounds[k][0] : bounds[k][1]], bounds[k][0], NONCE) for k in picks]
    _check(f"{name}: referee's digest_of_chunk on the host, chunks {picks}", referee == [got[k] for k in picks])


def _graph_replay(t: torch.Tensor, name: str) -> float:
    """Capture one fused_digests call, replay it after set_keys with a new
    nonce, check it; returns the median replay time in ms."""
    keys = fused.keys_of(NONCE, t.device)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # compile and warm up outside the capture
        fused.fused_digests(t, keys)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fused.fused_digests(t, keys)
    graph.replay()
    _check(f"{name}: graph replay, first nonce", fused.digests_list(out) == audit.chunk_digests(t, NONCE))
    fused.set_keys(keys, NEW_NONCE)
    graph.replay()
    _check(
        f"{name}: graph replay after set_keys(new nonce)", fused.digests_list(out) == audit.chunk_digests(t, NEW_NONCE)
    )
    return _median_ms(graph.replay, reps=20)


def main() -> int:
    if not torch.cuda.is_available():
        print("needs a CUDA device", file=sys.stderr)
        return 2
    if not fused.triton_runs(torch.zeros(1, device="cuda")):
        print("Triton is not available: fused_digests would fall back to the torch path", file=sys.stderr)
        return 2
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    gen = torch.Generator(device="cuda").manual_seed(0)

    print("\nevery dtype, 1,000,003 elements (a shorter last chunk):")
    for dtype in DTYPES:
        _equal_on(_random_bits(dtype, (1_000_003,), gen), str(dtype))
    view = _random_bits(torch.float32, (2048, 3000), gen).t()
    _equal_on(view, "a transposed (non-contiguous) float32 3000x2048")

    rows = []
    for name, shape in SIZES:
        print(f"\n{name}:")
        t = torch.randn(shape, generator=gen, device="cuda")
        _equal_on(t, name)
        keys = fused.keys_of(NONCE, t.device)
        reps = 50 if t.numel() <= 1 << 20 else 10
        fused_ms = _median_ms(lambda: fused.fused_digests(t, keys), reps)
        fused_list_ms = _median_ms(lambda: fused.digests_list(fused.fused_digests(t, keys)), reps)
        torch_ms = _median_ms(lambda: audit.chunk_digests(t, NONCE), reps)
        graph_ms = _graph_replay(t, name)
        rows.append((name, t.numel(), torch_ms, fused_ms, fused_list_ms, graph_ms))

    print("\ntime per hash (ms, median; CUDA events):")
    header = (
        f"{'output':<42} {'elements':>11} {'torch path':>11} {'fused':>9} {'fused+list':>11} "
        f"{'graph':>9} {'torch/fused':>12} {'GB/s fused':>11}"
    )
    print(header)
    for name, numel, torch_ms, fused_ms, fused_list_ms, graph_ms in rows:
        gbs = numel * 4 / (fused_ms * 1e-3) / 1e9  # the output's bytes over the fused time (each is read twice)
        print(
            f"{name:<42} {numel:>11,} {torch_ms:>11.3f} {fused_ms:>9.3f} {fused_list_ms:>11.3f} "
            f"{graph_ms:>9.3f} {torch_ms / fused_ms:>11.1f}x {gbs:>11.0f}"
        )
    print("(torch path and fused+list return the host list; fused and graph leave the digests on the device)")

    if failures:
        print(f"\n{len(failures)} MISMATCH(ES):", *failures, sep="\n  ", file=sys.stderr)
        return 1
    print("\nall digests equal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
