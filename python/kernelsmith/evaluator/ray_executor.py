"""Evaluations on a Ray cluster: one Ray task per candidate, one GPU each.

The Ray task runs the local evaluator's own code path on the node it lands
on (``Evaluator.evaluate``: static checks, then a fresh sandboxed worker
process from :mod:`kernelsmith.evaluator.sandbox`), so isolation is exactly
that of a local evaluation; candidate code never runs in the Ray worker
process itself. Only the task (as a dict) and the source travel to the node,
and only the EvalResult (as a dict) travels back. LLM calls stay in the
driver: RayEvaluator is a drop-in ``evaluator=`` for kernelsmith.evolve.

GPU pinning: a task asks for ``num_gpus=1``; Ray sets CUDA_VISIBLE_DEVICES
for it, and the Ray task hands that device to the sandboxed worker, so two
candidates never share a GPU. Without GPUs in the cluster it asks for one
CPU instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from typing import Any, Iterable, Optional, Union

from ..backends.base import Backend, get_backend
from ..result import EvalResult
from ..task import Task
from .service import Evaluator, TaskBackends

TaskLike = Union[Task, str, os.PathLike]


def _evaluate_on_node(
    task_data: dict[str, Any], source: str, trials: Optional[int], options: dict[str, Any]
) -> dict[str, Any]:
    """Body of the Ray task (module level, so Ray pickles it by reference)."""
    devices = None
    if options.pop("use_gpu", False):
        import ray

        ids = [str(i) for i in ray.get_gpu_ids()]
        # Ray's assignment, as the worker's CUDA_VISIBLE_DEVICES: physical ids,
        # so the sandboxed worker sees exactly the GPU this task holds.
        devices = [",".join(ids)] if ids else None
    # one candidate per Ray task: a fresh worker; a warm pool (zygote and
    # spares) would be started and thrown away for every task
    options.setdefault("mode", "fresh")
    evaluator = Evaluator(workers=1, devices=devices, **options)
    try:
        return evaluator.evaluate(Task.from_dict(task_data), source, trials).to_dict()
    finally:
        evaluator.close()


class RayEvaluator(TaskBackends):
    """Same API as :class:`~kernelsmith.evaluator.Evaluator` (evaluate,
    evaluate_async, evaluate_many, evaluate_many_async, backend_for, close),
    backed by Ray tasks.

    address: Ray cluster address; None uses RAY_ADDRESS or starts a local
        instance (an already initialised Ray is reused as it is).
    num_gpus: GPUs per candidate; None = 1 when the cluster has GPUs, else 0.
    num_cpus: CPUs per candidate when no GPU is used (default 1).
    max_in_flight: candidates submitted at once; None = no limit beyond the
        cluster's resources (Ray queues the rest).
    Other arguments are passed to the Evaluator on the node.
    """

    def __init__(
        self,
        backend: Union[str, Backend, None] = None,
        *,
        address: Optional[str] = None,
        num_gpus: Optional[float] = None,
        num_cpus: float = 1,
        max_in_flight: Optional[int] = None,
        timeout_s: Optional[float] = None,
        cpu_limit_s: Optional[float] = None,
        memory_limit_mb: Optional[int] = 8192,
        isolation: str = "auto",
        timing: bool = True,
        init_kwargs: Optional[dict[str, Any]] = None,
    ) -> None:
        import ray

        if isolation not in ("auto", "bwrap", "process"):
            raise ValueError(f"isolation must be 'auto', 'bwrap' or 'process', got '{isolation}'")
        self._owns_ray = False
        if not ray.is_initialized():
            kwargs = dict(include_dashboard=False, log_to_driver=False)
            kwargs.update(init_kwargs or {})
            ray.init(address=address, **kwargs)
            self._owns_ray = True
        self._ray = ray
        self._backend = get_backend(backend) if isinstance(backend, str) else backend
        self._backends: dict[str, Backend] = {}
        if num_gpus is None:
            num_gpus = 1 if ray.cluster_resources().get("GPU", 0) >= 1 else 0
        self.num_gpus = num_gpus
        self.options = dict(
            timeout_s=timeout_s,
            cpu_limit_s=cpu_limit_s,
            memory_limit_mb=memory_limit_mb,
            isolation=isolation,
            timing=timing,
        )
        resources = {"num_gpus": num_gpus} if num_gpus else {"num_cpus": num_cpus}
        # Ray retries a task whose node died; a candidate that crashes its
        # sandboxed worker is a verdict, not a Ray failure, so no retries.
        self._remote = ray.remote(max_retries=0, **resources)(_evaluate_on_node)
        self._slots = asyncio.Semaphore(max_in_flight) if max_in_flight else None
        self._closed = False

    # -- helpers --------------------------------------------------------------
    # backend_for (from TaskBackends) gives the driver's backend object, for
    # prompt tips; hardware facts come from the nodes' results (EvalResult.hardware).

    def _submit_ref(self, task: TaskLike, source: str, trials: Optional[int]) -> Any:
        if self._closed:
            raise RuntimeError("RayEvaluator is closed")
        task = self._task(task)
        data = task.to_dict()
        data.pop("id", None)
        if self._backend is not None:  # the same override as the local evaluator's backend argument
            data["config"]["backend"] = self._backend.name
        options = dict(self.options, use_gpu=bool(self.num_gpus))
        return self._remote.remote(data, source, trials, options)

    @staticmethod
    def _result(data: dict[str, Any]) -> EvalResult:
        return EvalResult.from_dict(data)

    # -- API --------------------------------------------------------------------
    def submit(
        self, task: TaskLike, source: str, trials: Optional[int] = None
    ) -> "concurrent.futures.Future[EvalResult]":
        ref = self._submit_ref(task, source, trials)
        future: concurrent.futures.Future[EvalResult] = concurrent.futures.Future()
        inner = ref.future()

        def done(f: concurrent.futures.Future) -> None:
            try:
                future.set_result(self._result(f.result()))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                future.set_exception(_ray_error(exc))

        inner.add_done_callback(done)
        return future

    def evaluate(self, task: TaskLike, source: str, trials: Optional[int] = None) -> EvalResult:
        return self.submit(task, source, trials).result()

    async def evaluate_async(self, task: TaskLike, source: str, trials: Optional[int] = None) -> EvalResult:
        if self._slots is None:
            return await asyncio.wrap_future(self.submit(task, source, trials))
        async with self._slots:
            return await asyncio.wrap_future(self.submit(task, source, trials))

    def evaluate_many(self, items: Iterable[tuple[TaskLike, str]], trials: Optional[int] = None) -> list[EvalResult]:
        """All candidates go to the cluster at once; results in input order."""
        futures = [self.submit(task, source, trials) for task, source in items]
        return [f.result() for f in futures]

    async def evaluate_many_async(
        self, items: Iterable[tuple[TaskLike, str]], trials: Optional[int] = None
    ) -> list[EvalResult]:
        return list(await asyncio.gather(*(self.evaluate_async(t, s, trials) for t, s in items)))

    def close(self) -> None:
        """Stops accepting work; shuts Ray down only if this object started it."""
        if self._closed:
            return
        self._closed = True
        if self._owns_ray:
            self._ray.shutdown()

    def __enter__(self) -> "RayEvaluator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _ray_error(exc: BaseException) -> BaseException:
    """A Ray task error carries the remote traceback; surface the cause."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc
