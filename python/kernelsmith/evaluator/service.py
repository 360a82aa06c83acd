"""The Evaluator: static checks in the caller, everything else in sandboxed
worker processes, one process per candidate.

``mode="pool"`` (the default): a warm pool per device (evaluator/pool.py): a
zygote that imported torch, the backend and the worker code once forks a
child per candidate, and spare children wait ready (device context
created) ahead of demand; every child serves one candidate and is killed
with all it started. ``mode="fresh"``: a new ``python -m ...worker`` per
candidate (the start-up is paid every time; kept as the baseline the
throughput benchmark compares against).

Either way, compile and correctness of several candidates overlap, and each
device has one timing slot (evaluator/contention.py): the worker that times
has the device to itself while the device's other workers stand still.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import os
import queue
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence, Union

from . import phases
from ..backends.base import Backend, get_backend
from ..result import EvalResult
from ..task import MAX_TRIALS, Task
from .contention import DeviceGate, ReferenceBaselines, TimingPolicy, host_cpu_count
from .devices import detect_gpus
from .memory import CONTEXT_BYTES, MemoryAdmission, default_memory_source, run_admitted
from .pool import PoolError
from .sandbox import Limits, run_worker
from .pool import UID_BASE, DevicePool, _UidPool
from .referee import Referee, default_lanes
from .finalists import hold_to_alone, apply_verdicts, check_reference_spread

TaskLike = Union[Task, str, Path]


def _once(fn: Callable[[], None]) -> Callable[[], None]:
    """``fn`` called at most once, from any thread."""
    lock, called = threading.Lock(), []

    def call() -> None:
        with lock:
            if called:
                return
            called.append(True)
        fn()

    return call


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
    mode: "pool" (warm zygote per device, forked children, spares ahead of
        demand) or "fresh" (a new Python process per candidate).
    workers: how many candidates are evaluated at once; default: 4 per GPU
        in pool mode (compile and correctness of three overlap the fourth's
        timing), 2 on a CPU-only host, one per device in fresh mode.
    devices: device ids handed to workers through CUDA_VISIBLE_DEVICES
        (e.g. ``[0, 1, 2, 3]``). None (the default): every local GPU,
        detected without initialising CUDA here (evaluator/devices.py), no
        pinning on a CPU-only host. ``[]``: leave CUDA_VISIBLE_DEVICES alone.
    timeout_s: wall-clock limit per candidate (time stood still while another
        worker timed does not count); None = the task's ``timeout_s``.
    cpu_limit_s / memory_limit_mb: see :class:`~kernelsmith.evaluator.sandbox.Limits`.
    isolation: "auto" (bwrap when it works, else plain process; in pool mode
        as root also one uid per child), "bwrap" (fail if unavailable) or
        "process".
    timing: time correct candidates (disable for fast correctness-only runs).
    spares: children per device kept ready ahead of demand (pool mode).
    cpu_threads: host threads for the reference's PyTorch ops and the
        backend's CPU device (PoCL); default 1 on a CPU-only host (the same
        for both sides, and one core each even with a busy neighbour), None
        (library default) on GPU hosts.
    timing_policy: contention and drift rules (evaluator/contention.py).
    device_memory: the free-memory source of a device (``device -> object
        with free_bytes()``, evaluator/memory.py); default nvidia-smi for a
        GPU, the host's available memory for CPU workers. Workers are
        admitted by their task's footprint against it.
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
        mode: str = "pool",
        spares: Optional[int] = None,
        cpu_threads: Optional[int] = -1,
        timing_policy: Optional[TimingPolicy] = None,
        device_memory: Optional[Any] = None,
    ) -> None:
        if isolation not in ("auto", "bwrap", "process"):
            raise ValueError(f"isolation must be 'auto', 'bwrap' or 'process', got '{isolation}'")
        if mode not in ("pool", "fresh"):
            raise ValueError(f"mode must be 'pool' or 'fresh', got '{mode}'")
        self._backend = get_backend(backend) if isinstance(backend, str) else backend
        if devices is None:
            devices = detect_gpus()
        self.devices: list[Optional[str]] = [str(d) for d in devices] if devices else [None]
        gpu = bool(devices)
        self.mode = mode
        per_device = (4 if gpu else 2) if mode == "pool" else 1
        self.workers = int(workers or per_device * len(self.devices))
        if self.workers < 1:
            raise ValueError("workers must be >= 1")
        self.spares = int(spares if spares is not None else (min(2, self.workers) if mode == "pool" else 0))
        if cpu_threads == -1:
            cpu_threads = None if gpu else 1
        if cpu_threads is not None and not 1 <= int(cpu_threads) <= host_cpu_count():
            raise ValueError(f"cpu_threads must be in 1..{host_cpu_count()}, got {cpu_threads}")
        self.cpu_threads = cpu_threads
        self.timeout_s = timeout_s
        self.cpu_limit_s = cpu_limit_s
        self.memory_limit_mb = memory_limit_mb
        self.isolation = isolation
        self.timing = timing
        baselines = ReferenceBaselines()
        self.gates = {d: DeviceGate(d, timing_policy, baselines) for d in self.devices}
        # device memory, scheduled (evaluator/memory.py): one admission per device
        source = device_memory or default_memory_source
        self.memory = {
            d: MemoryAdmission(source(d), per_job_bytes=CONTEXT_BYTES if d is not None else 0) for d in self.devices
        }
        self._slots: "queue.Queue[Optional[str]]" = queue.Queue()
        for i in range(self.workers):
            self._slots.put(self.devices[i % len(self.devices)])
        # twice the workers: a thread whose worker is done runs the parent's
        # checks while another thread's job takes the worker slot (pool.run)
        self._pool = concurrent.futures.ThreadPoolExecutor(2 * self.workers, thread_name_prefix="ks-eval")
        self._backends: dict[str, Backend] = {}
        self._device_pools: dict[tuple[str, Optional[str]], Any] = {}
        self._referees: dict[tuple[str, Optional[str]], Any] = {}  # fresh mode's (the pool has its own)
        self._referee_root: Optional[str] = None
        self._pools_lock = threading.Lock()
        self._uids: Any = None
        self._cancelled = False

    # -- helpers --------------------------------------------------------
    def _device_pool(self, backend: Backend, device: Optional[str]) -> Any:
        key = (backend.name, device)
        with self._pools_lock:
            if self._cancelled:  # cancel(): no new pool for the evaluations it killed
                raise PoolError("the evaluator was cancelled")
            pool = self._device_pools.get(key)
            if pool is not None and not pool.zygote.alive():
                pool.close()  # a zygote that died (killed from outside): start a new one
                pool = None
            if pool is None:
                if self._uids is None and hasattr(os, "geteuid") and os.geteuid() == 0:
                    # one uid per child that can exist at once, across devices and backends
                    self._uids = _UidPool(UID_BASE, 4 * (self.workers + self.spares * len(self.devices)) + 8)
                pool = DevicePool(
                    backend,
                    device,
                    isolation=self.isolation,
                    cpu_threads=self.cpu_threads,
                    spares=self.spares,
                    gate=self.gates[device],
                    uids=self._uids,
                    referee_lanes=self._referee_lanes(device),
                )
                self._device_pools[key] = pool
            return pool

    def _referee_lanes(self, device: Optional[str]) -> int:
        """The referee's processes for ``device`` (referee.default_lanes),
        one where the device has a single worker: one job's checks at a
        time need no second process."""
        per_device = -(-self.workers // len(self.devices))
        return default_lanes(device) if per_device > 1 else 1

    def _pool_referee(self, backend: Backend, device: Optional[str]) -> Any:
        """The device pool's referee, with the pool's autotune records
        brought up to date first (records kept since the pool was made:
        ``task init``'s tests, run beside its start) so that its priming
        takes them instead of tuning again."""
        pool = self._device_pool(backend, device)
        if pool.autotune is not None:
            pool.autotune.refresh()
        return pool.referee

    def _referee(self, backend: Backend, device: Optional[str]) -> Any:
        """Fresh mode: one trusted referee process per (backend, device), as
        each device pool has."""
        key = (backend.name, device)
        with self._pools_lock:
            ref = self._referees.get(key)
            if ref is not None and ref.proc.poll() is not None:
                ref.close()
                ref = None
            if ref is None:
                if self._referee_root is None:
                    self._referee_root = tempfile.mkdtemp(prefix="ks-referee-")
                root = os.path.join(self._referee_root, f"{backend.name}-{device or 'cpu'}")
                os.makedirs(root, exist_ok=True)
                ref = Referee(
                    backend,
                    device,
                    self.isolation,
                    self.cpu_threads,
                    root,
                    self.gates[device],
                    lanes=self._referee_lanes(device),
                )
                self._referees[key] = ref
            return ref

    def _evaluate(
        self, task: Task, source: str, trials: Optional[int], submitted: float, finalists: Sequence[str] = ()
    ) -> EvalResult:
        started = time.monotonic()
        backend = self.backend_for(task)
        if trials is not None and not 1 <= int(trials) <= MAX_TRIALS:
            raise ValueError(f"trials must be in 1..{MAX_TRIALS}, got {trials}")
        report = backend.static_check(source)
        common = dict(task_id=task.id, backend=backend.name, warnings=list(report.warnings))
        if report.errors:
            return EvalResult(
                category="compile", error="\n".join(report.errors), isolation="none (static check)", **common
            )
        if report.hacks:
            return EvalResult(
                category="hacked",
                hacked=True,
                hack_reasons=list(report.hacks),
                isolation="none (static check)",
                **common,
            )
        limits = Limits(
            timeout_s=self.timeout_s or task.config.timeout_s,
            cpu_limit_s=self.cpu_limit_s,
            memory_limit_mb=self.memory_limit_mb,
        )
        asked = time.monotonic()
        device = self._slots.get()
        queued = time.monotonic() - submitted
        # more threads than slots (the parent's checks of one job beside the
        # next job's worker): the wait for a slot is the queue's, not the
        # evaluation's
        slot_wait = time.monotonic() - asked
        slot_back = _once(lambda: self._slots.put(device))

        run = self._runner(task, source, trials, limits, finalists, device, slot_back)
        try:
            try:
                referee = self._pool_referee(backend, device) if self.mode == "pool" else self._referee(backend, device)
            except PoolError:  # as in run(): once more on a new pool
                referee = self._pool_referee(backend, device)
            if not referee.primed(task):  # the footprint below primes it: the reference on every input set
                phases.report("the referee runs the reference")
            result = run_admitted(
                self.memory[device],
                lambda: referee.footprint(task, limits.timeout_s),
                referee.primed(task),
                task.config.memory_margin,
                run,
            )
        finally:
            slot_back()
        result.task_id = task.id
        result.backend = backend.name
        result.warnings = list(dict.fromkeys(list(report.warnings) + list(result.warnings)))
        result.phases = {"queue": round(queued, 4), **result.phases}
        # the evaluation's own time; waiting for a free worker is phases["queue"]
        result.wall_s = round(time.monotonic() - started - slot_wait, 3)
        return result

    def _runner(
        self,
        task: Task,
        source: str,
        trials: Optional[int],
        limits: Limits,
        finalists: Sequence[str],
        device: Optional[str],
        slot_back: Callable[[], None],
    ) -> Callable[[], EvalResult]:
        """The evaluation itself, as run_admitted calls it. In the pool the
        worker slot goes to the next job once the child has answered, while
        this thread runs the parent's checks; the device memory admitted for
        the job stays held until they end (the referee's check of a job at
        KernelBench's upstream sizes holds tens of GiB of its own, which the
        admission does not count: a job admitted alone then waits for it)."""
        backend = self.backend_for(task)

        def run() -> EvalResult:
            if self.mode == "pool":
                try:
                    return self._device_pool(backend, device).run(
                        task, source, trials, self.timing, limits, finalists, slot_back
                    )
                except PoolError:
                    # the pool itself failed (its zygote was killed from outside):
                    # a harness fault, not the candidate's; once more on a new pool
                    return self._device_pool(backend, device).run(
                        task, source, trials, self.timing, limits, finalists, slot_back
                    )
            return run_worker(
                task=task,
                source=source,
                backend=backend,
                trials=trials,
                timing=self.timing,
                limits=limits,
                device=device,
                isolation=self.isolation,
                gate=self.gates[device],
                cpu_threads=self.cpu_threads,
                finalists=finalists,
                # a finalists' re-timing too: the referee checks each finalist's audit rounds
                referee=self._referee(backend, device),
            )

        return run

    # -- API ------------------------------------------------------------
    def submit(
        self, task: TaskLike, source: str, trials: Optional[int] = None
    ) -> "concurrent.futures.Future[EvalResult]":
        # in a copy of the caller's context: a listener routed there
        # (phases.routed, the daemon's per-request stage stream) hears this
        # evaluation's stages from the pool thread that runs it
        return self._pool.submit(
            contextvars.copy_context().run, self._evaluate, self._task(task), source, trials, time.monotonic()
        )

    def evaluate(self, task: TaskLike, source: str, trials: Optional[int] = None) -> EvalResult:
        """Evaluate one candidate (blocking)."""
        return self.submit(task, source, trials).result()

    async def evaluate_async(self, task: TaskLike, source: str, trials: Optional[int] = None) -> EvalResult:
        return await asyncio.wrap_future(self.submit(task, source, trials))

    def evaluate_many(self, items: Iterable[tuple[TaskLike, str]], trials: Optional[int] = None) -> list[EvalResult]:
        """Evaluate (task, source) pairs over the pool; results in input order."""
        futures = [self.submit(task, source, trials) for task, source in items]
        return [f.result() for f in futures]

    def stream(
        self, items: Iterable[tuple[TaskLike, str]], trials: Optional[int] = None
    ) -> Iterator[tuple[int, EvalResult]]:
        """Evaluate a batch (e.g. one GRPO group) over every device and yield
        ``(index, result)`` as each finishes."""
        futures = {self.submit(task, source, trials): i for i, (task, source) in enumerate(items)}
        for future in concurrent.futures.as_completed(futures):
            yield futures[future], future.result()

    async def evaluate_many_async(
        self, items: Iterable[tuple[TaskLike, str]], trials: Optional[int] = None
    ) -> list[EvalResult]:
        return list(await asyncio.gather(*(self.evaluate_async(t, s, trials) for t, s in items)))

    def warm_up(self, tasks: Sequence[TaskLike] = (), wait: bool = True) -> float:
        """Start every device's zygote (and its spares) for the backends of
        ``tasks`` (or the evaluator's fixed backend) now instead of at the
        first candidate; returns the seconds it took. No-op in fresh mode."""
        started = time.monotonic()
        if self.mode != "pool":
            return 0.0
        backends = {
            b.name: b
            for b in (
                [self._backend] if self._backend is not None else [self.backend_for(self._task(t)) for t in tasks]
            )
        }
        pools = [self._device_pool(b, d) for b in backends.values() for d in self.devices]
        if wait:
            for pool in pools:
                pool.wait_spares()
                referee = getattr(pool, "referee", None)
                for task in tasks:
                    task = self._task(task)
                    if referee is not None and self.backend_for(task).name == pool.backend.name:
                        referee.prime(task)
        return time.monotonic() - started

    def preload(self, task: TaskLike) -> None:
        """Start the pool of ``task``'s backend on every device and load the
        task's reference module (its imports, no run) in each device's
        trusted referee, ahead of the first candidate: ``task init`` does it
        beside the project's tests. Priming (the reference's runs) waits for
        the first evaluation, which refreshes the pool's autotune records
        first. Fresh mode: nothing to start."""
        if self.mode != "pool":
            return
        task = self._task(task)
        backend = self.backend_for(task)
        for device in self.devices:
            self._device_pool(backend, device).referee.load(task)

    def _trusted_referee(self, task: Task, device: Optional[str]) -> Any:
        """The referee of ``device`` for ``task``'s backend (the pool's own, or fresh mode's)."""
        backend = self.backend_for(task)
        return self._device_pool(backend, device).referee if self.mode == "pool" else self._referee(backend, device)

    def footprint(self, task: TaskLike, device: Optional[str] = "first") -> Any:
        """The task's footprint (evaluator/memory.py ``Footprint``: bytes of
        parameters, inputs, outputs and the reference's peak during forward)
        as the trusted referee of ``device`` (default: the first) measures
        it, priming the task there when it has not yet; None when the
        reference failed."""
        task = self._task(task)
        return self._trusted_referee(task, self.devices[0] if device == "first" else device).footprint(task)

    def check_task(self, task: TaskLike, timeout_s: Optional[float] = None) -> dict[str, Any]:
        """The trusted referee's look at ``task`` (its priming, on the first
        device): ``{"primed": [input sets], "degenerate": [trivial forms that
        pass the tolerance on the task's own inputs], "probes": {...}}``
        (evaluator/probes.py; ``probes`` only for a degenerate task), or
        ``{"error": ...}`` when the reference could not be run. Cached per
        task; the pool's first candidates of the task would prime it anyway."""
        task = self._task(task)
        return self._trusted_referee(task, self.devices[0]).prime(
            task, timeout_s or self.timeout_s or task.config.timeout_s
        )

    def confirm_best(self, task: TaskLike, sources: Sequence[str], alone: bool = True) -> dict[str, Any]:
        """Re-time finalists head to head: every source (each already judged
        correct by :meth:`evaluate`) against the reference on the same input
        sets in one worker, each comparison in its own timing slot and judged
        as a step's timing is (contention, drift, and the reference against
        the reference timed alone there: evaluator/finalists.py), and the top
        two against each other. With ``alone``, the reliable winner is then
        re-timed in a worker of its own and its figure held to that one.
        Returns ``{"finalists": [{index, correct, speedup, speedup_ci_low,
        speedup_ci_high, runtime_ms, ref_runtime_ms, verdict,
        timing_reliable, unreliable_reasons, alone, capped, error}],
        "head_to_head": {...}, "result": EvalResult}``; a source that fails
        the static checks is left out with its reason. Each timed row is
        judged by its own audit rounds too (``audit``: their figures; a row
        they find hacked is ``correct: False, hacked: True`` with the reason
        as ``error``, and with ``alone`` is decided by its alone re-timing:
        ``hacked_next_to_others``). Only a row that is correct, not hacked,
        timed, not suspicious and ``timing_reliable`` may become a best
        (``finalists.reliable``)."""
        entries, head, result = self._head_to_head(self._task(task), sources)
        if alone:
            rows = {e["index"]: e for e in entries}

            def retime_alone(index: int) -> Optional[dict[str, Any]]:
                again, _, _ = self._head_to_head(self._task(task), [sources[index]])
                return again[0] if again else None

            hold_to_alone([rows[i] for i in sorted(rows)], retime_alone)
        return {"finalists": entries, "head_to_head": head, "result": result}

    def _head_to_head(
        self, task: Task, sources: Sequence[str]
    ) -> tuple[list[dict[str, Any]], dict[str, Any], Optional[EvalResult]]:
        backend = self.backend_for(task)
        entries: list[dict[str, Any]] = []
        kept: list[int] = []
        for i, source in enumerate(sources):
            report = backend.static_check(source)
            if report.errors or report.hacks:
                entries.append({"index": i, "correct": False, "error": "; ".join(report.errors + report.hacks)})
            else:
                kept.append(i)
        if not kept:
            return entries, {}, None
        future = self._pool.submit(
            self._evaluate, task, sources[kept[0]], None, time.monotonic(), [sources[i] for i in kept]
        )
        result = future.result()
        timed = (result.timing or {}).get("finalists") or []
        apply_verdicts(timed, result.load)  # local indices: the gate's records name them so
        policy = self.gates[self.devices[0]].policy
        on_gpu = (result.hardware or {}).get("kind") == "gpu"
        check_reference_spread(timed, policy.gpu_drift_tolerance if on_gpu else policy.side_effect_tolerance)
        for entry in timed:
            entry["index"] = kept[int(entry["index"])]
            entries.append(entry)
        head = dict((result.timing or {}).get("head_to_head") or {})
        hacked = [e["index"] for e in timed if e.get("audit_hacked")]  # by now the caller's indices
        for key in ("first", "second"):
            if key in head:
                head[key] = kept[int(head[key])]
                if head[key] in hacked and "error" not in head:
                    # ranked by the worker on figures its audit rounds refuted
                    head["error"] = f"finalist {head[key]}'s audit rounds found its figures forged"
        if not timed:  # the worker failed before timing: every finalist shares its verdict
            entries += [{"index": i, "correct": False, "error": result.error or result.category} for i in kept]
        return sorted(entries, key=lambda e: e["index"]), head, result

    def cancel(self) -> None:
        """Stop now (an interrupted run's Ctrl-C): evaluations not started
        are dropped and those running are killed with their pool's zygote
        (its children die with it), instead of close() waiting for them
        (8-13 s for the OpenCL example on 2 cores). Their futures end with
        an error or a harness fault; nothing may use the evaluator after,
        but close(), which then returns at once. In fresh mode the running
        workers are waited for, as by close()."""
        with self._pools_lock:
            self._cancelled = True
            pools = list(self._device_pools.values())
        self._pool.shutdown(wait=False, cancel_futures=True)
        for pool in pools:
            pool.zygote.close()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        with self._pools_lock:
            for pool in self._device_pools.values():
                pool.close()
            self._device_pools.clear()
            for ref in self._referees.values():
                ref.close()
            self._referees.clear()
        if self._referee_root is not None:
            shutil.rmtree(self._referee_root, ignore_errors=True)
            self._referee_root = None

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
