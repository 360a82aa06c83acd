"""The Evaluator: static checks in the caller, everything else in sandboxed
worker processes, one fresh worker per candidate.

A fresh worker per candidate costs one Python + torch (+ triton) start-up
(about 2-4 s on a CPU, similar on a GPU host plus CUDA context creation) but
means no state, leaked memory, poisoned CUDA context or monkey-patch survives
from one candidate to the next. Throughput comes from running ``workers``
of them at once, each pinned to one device.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import time
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence, Union

from ..backends.base import Backend, get_backend
from ..result import EvalResult
from ..task import MAX_TRIALS, Task
from .devices import detect_gpus
from .sandbox import Limits, run_worker

TaskLike = Union[Task, str, Path]


class TaskBackends:
    """One backend object per backend name (or the evaluator's fixed one),
    shared by the local and the Ray evaluator."""

    _backend: Optional[Backend] = None
    _backends: dict[str, Backend]

    def backend_for(self, task: Task) -> Backend:
        if self._backend is not None:
            return self._backend
        name = task.config.backend
        if name not in self._backends:
            self._backends[name] = get_backend(name)
        return self._backends[name]

    @staticmethod
    def _task(task: TaskLike) -> Task:
        return task if isinstance(task, Task) else Task.load(task)


class Evaluator(TaskBackends):
    """Evaluate candidate programs against tasks.

    backend: backend name (or instance) used for every task; None = each
        task's own ``backend`` setting.
    workers: how many candidates are evaluated at once (one process each);
        default: one per device, 1 on a CPU-only host.
    devices: device ids handed to workers through CUDA_VISIBLE_DEVICES, one
        per concurrently running worker (e.g. ``[0, 1, 2, 3]``). None (the
        default): every local GPU, detected without initialising CUDA here
        (``CUDA_VISIBLE_DEVICES``, else ``nvidia-smi -L``; see
        evaluator/devices.py), no pinning on a CPU-only host. ``[]``: leave
        CUDA_VISIBLE_DEVICES alone.
    timeout_s: wall-clock limit per candidate; None = the task's ``timeout_s``.
    cpu_limit_s / memory_limit_mb: see :class:`~kernelsmith.evaluator.sandbox.Limits`.
    isolation: "auto" (bwrap when it works, else plain process), "bwrap"
        (fail if unavailable) or "process".
    timing: time correct candidates (disable for fast correctness-only runs).
    """

    def __init__(
        self,
        backend: Union[str, Backend, None] = None,
        workers: Optional[int] = None,
        devices: Optional[Sequence[Union[int, str]]] = None,
        timeout_s: Optional[float] = None,
        cpu_limit_s: Optional[float] = None,
        memory_limit_mb: Optional[int] = 8192,
        isolation: str = "auto",
        timing: bool = True,
    ) -> None:
        if isolation not in ("auto", "bwrap", "process"):
            raise ValueError(f"isolation must be 'auto', 'bwrap' or 'process', got '{isolation}'")
        self._backend = get_backend(backend) if isinstance(backend, str) else backend
        if devices is None:
            devices = detect_gpus()
        self.devices: list[Optional[str]] = [str(d) for d in devices] if devices else [None]
        # One worker per device: two workers on one GPU disturb each other's timings.
        self.workers = int(workers or (len(devices) if devices else 1))
        if self.workers < 1:
            raise ValueError("workers must be >= 1")
        self.timeout_s = timeout_s
        self.cpu_limit_s = cpu_limit_s
        self.memory_limit_mb = memory_limit_mb
        self.isolation = isolation
        self.timing = timing
        self._slots: "queue.Queue[Optional[str]]" = queue.Queue()
        for i in range(self.workers):
            self._slots.put(self.devices[i % len(self.devices)])
        self._pool = concurrent.futures.ThreadPoolExecutor(self.workers, thread_name_prefix="ks-eval")
        self._backends: dict[str, Backend] = {}

    # -- helpers --------------------------------------------------------
    def _evaluate(self, task: Task, source: str, trials: Optional[int]) -> EvalResult:
        started = time.monotonic()
        backend = self.backend_for(task)
        if trials is not None and not 1 <= int(trials) <= MAX_TRIALS:
            raise ValueError(f"trials must be in 1..{MAX_TRIALS}, got {trials}")
        report = backend.static_check(source)
        common = dict(task_id=task.id, backend=backend.name, warnings=list(report.warnings))
        if report.errors:
            return EvalResult(category="compile", error="\n".join(report.errors), isolation="none (static check)", **common)
        if report.hacks:
            return EvalResult(category="hacked", hacked=True, hack_reasons=list(report.hacks),
                              isolation="none (static check)", **common)
        limits = Limits(
            timeout_s=self.timeout_s or task.config.timeout_s,
            cpu_limit_s=self.cpu_limit_s,
            memory_limit_mb=self.memory_limit_mb,
        )
        device = self._slots.get()
        try:
            result = run_worker(task=task, source=source, backend=backend, trials=trials, timing=self.timing,
                                limits=limits, device=device, isolation=self.isolation)
        finally:
            self._slots.put(device)
        result.task_id = task.id
        result.backend = backend.name
        result.warnings = list(dict.fromkeys(list(report.warnings) + list(result.warnings)))
        result.wall_s = round(time.monotonic() - started, 3)
        return result

    # -- API ------------------------------------------------------------
    def submit(self, task: TaskLike, source: str, trials: Optional[int] = None) -> "concurrent.futures.Future[EvalResult]":
        return self._pool.submit(self._evaluate, self._task(task), source, trials)

    def evaluate(self, task: TaskLike, source: str, trials: Optional[int] = None) -> EvalResult:
        """Evaluate one candidate (blocking)."""
        return self.submit(task, source, trials).result()

    async def evaluate_async(self, task: TaskLike, source: str, trials: Optional[int] = None) -> EvalResult:
        return await asyncio.wrap_future(self.submit(task, source, trials))

    def evaluate_many(
        self, items: Iterable[tuple[TaskLike, str]], trials: Optional[int] = None
    ) -> list[EvalResult]:
        """Evaluate (task, source) pairs over the worker pool; results in input order."""
        futures = [self.submit(task, source, trials) for task, source in items]
        return [f.result() for f in futures]

    async def evaluate_many_async(
        self, items: Iterable[tuple[TaskLike, str]], trials: Optional[int] = None
    ) -> list[EvalResult]:
        return list(await asyncio.gather(*(self.evaluate_async(t, s, trials) for t, s in items)))

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
