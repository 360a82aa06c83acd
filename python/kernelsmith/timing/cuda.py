"""CUDA runner: events on the current stream, optional CUDA-graph capture of
``launches_per_sample`` calls, L2 flush before every sample.

Imported only when a CUDA device is used, so the package works without torch.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Optional, Sequence, Tuple

import torch

from .runners import Runner, call_with

#: bytes written to flush L2 between samples; larger than the L2 of any
#: current GPU (H100/H200: 50 MiB, B200: 126 MiB)
DEFAULT_FLUSH_BYTES = 256 * 2**20


class L2Flusher:
    def __init__(self, device: torch.device, nbytes: Optional[int] = DEFAULT_FLUSH_BYTES) -> None:
        """``nbytes=None``: twice the L2 the device reports alone
        (DEFAULT_FLUSH_BYTES where it reports none)."""
        l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)
        if nbytes is None:
            nbytes = 2 * l2 if l2 else DEFAULT_FLUSH_BYTES
        # Twice L2 at least: a write of exactly L2's size may leave lines of
        # the previous sample resident under non-LRU replacement.
        nbytes = max(int(nbytes), 2 * l2)
        self.buffer = torch.empty(nbytes // 4, dtype=torch.int32, device=device)

    def flush(self) -> None:
        self.buffer.zero_()


class CudaRunner(Runner):
    timer = "cuda_event"

    def __init__(
        self,
        fn: Callable[..., Any],
        input_sets: Optional[Sequence[Sequence[Any]]] = None,
        *,
        use_graph: bool = True,
        flusher: Optional[L2Flusher] = None,
    ) -> None:
        self._fn = fn
        self._sets = input_sets
        self.input_sets = len(input_sets) if input_sets else 1
        self._use_graph = use_graph
        self._flusher = flusher
        self._graph: Optional[torch.cuda.CUDAGraph] = None
        self.cuda_graph = False
        self.graph_fallback_reason = "" if use_graph else "disabled"
        self.launches_per_sample = 1
        self._next = 0

    # -- set-up -----------------------------------------------------------
    def _eager(self, n: int) -> None:
        for _ in range(n):
            call_with(self._fn, self._sets, self._next)
            self._next += 1

    def warmup(self, warmup_s: float, min_calls: int = 3) -> None:
        torch.cuda.synchronize()
        start = time.perf_counter()
        calls = 0
        while calls < min_calls or time.perf_counter() - start < warmup_s:
            self._eager(1)
            calls += 1
            if calls % 8 == 0:
                torch.cuda.synchronize()
        torch.cuda.synchronize()

    def _capture(self, launches: int) -> Tuple[Optional[torch.cuda.CUDAGraph], str]:
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        try:
            # Capture on a side stream, as torch.cuda.graphs does; warm the
            # allocator there first so capture does not see fresh cudaMallocs.
            with torch.cuda.stream(side):
                for j in range(min(launches, 3)):
                    call_with(self._fn, self._sets, j)
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            with torch.cuda.graph(graph):
                for j in range(launches):
                    call_with(self._fn, self._sets, j)
            torch.cuda.synchronize()
            return graph, ""
        except Exception as exc:  # noqa: BLE001 - any capture failure means eager timing
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001
                pass
            return None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"

    def time_region(self, launches: int, reps: int = 3) -> float:
        """Median event time of one call when run as `launches` calls
        (graph if captured, else eager), without flushing."""
        times = []
        for _ in range(reps):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            self._run_sample_body(launches)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e-3 / launches)
        times.sort()
        return times[len(times) // 2]

    def estimate_call_s(self) -> float:
        """Per-call time as it will be measured: via a one-call graph when
        graphs are on (launch overhead excluded), else eager."""
        if self._use_graph:
            graph, reason = self._capture(1)
            if graph is not None:
                self._graph = graph
                self.cuda_graph = True
                t = self.time_region(1, reps=5)
                self._graph = None
                self.cuda_graph = False
                return t
            self.graph_fallback_reason = reason
            self._use_graph = False
        return self.time_region(1, reps=5)

    def prepare(self, launches_per_sample: int) -> None:
        """Fix launches per sample and capture the graph (or fall back)."""
        n = max(1, int(launches_per_sample))
        if self.input_sets > 1:
            # Whole rounds over the input sets, so every set is used equally.
            n = math.ceil(max(n, self.input_sets) / self.input_sets) * self.input_sets
        self.launches_per_sample = n
        if self._use_graph:
            graph, reason = self._capture(n)
            if graph is not None:
                self._graph = graph
                self.cuda_graph = True
                self.graph_fallback_reason = ""
            else:
                self.graph_fallback_reason = reason
                self.cuda_graph = False

    # -- sampling ---------------------------------------------------------
    def _run_sample_body(self, launches: int) -> None:
        if self._graph is not None:
            self._graph.replay()
        else:
            self._eager(launches)

    def take(self) -> Tuple[torch.cuda.Event, torch.cuda.Event]:
        if self._flusher is not None:
            self._flusher.flush()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        self._run_sample_body(self.launches_per_sample)
        end.record()
        return start, end

    def resolve(self, handles: Sequence[Any]) -> list[float]:
        if handles:
            handles[-1][1].synchronize()
            torch.cuda.synchronize()
        return [s.elapsed_time(e) * 1e-3 / self.launches_per_sample for s, e in handles]

    def sync_bounded_region(self, samples: int) -> Tuple[float, float]:
        """(event_s, wall_s) for `samples` samples (0: an empty region), with
        device-wide synchronizations around the host clock; see hidden_work."""
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        start.record()
        for _ in range(samples):
            self._run_sample_body(self.launches_per_sample)
        end.record()
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        return start.elapsed_time(end) * 1e-3, t1 - t0
