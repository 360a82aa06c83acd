"""Worker process entry: ``python -m kernelsmith.evaluator.worker``.

Runs one candidate against one task and reports an EvalResult dict. It is
started fresh for every candidate by :mod:`kernelsmith.evaluator.sandbox`,
inside bwrap when available.

The conversation with the parent (message names, the channel) is
:mod:`kernelsmith.evaluator.protocol`; the correctness trials are
:mod:`~kernelsmith.evaluator.trials`, the timing
:mod:`~kernelsmith.evaluator.worker_timing`, and every hack check a unit of
:mod:`kernelsmith.evaluator.checks`. This module loads the reference and the
program and runs them in that order.
"""

from __future__ import annotations

import faulthandler
import inspect
import os
import resource
import sys
import time
import traceback
from typing import Any, Callable, Optional

# loaded with the worker, before the program: the integrity snapshot and the
# module fence see them as they see this module
from . import checks as _checks  # noqa: F401
from . import trials as _trials  # noqa: F401
from . import worker_timing as _worker_timing  # noqa: F401
from .checks import Context, Verdict
from .protocol import RESULT, Channel
from ..backends.base import get_backend
from .memory import tried_bytes, is_out_of_memory, CallMeter
from ..hardware import HardwareInfo
from ..task import Task
from ..timing.gpu_state import open_nvml
from .trials import checkpoint, run_trials, run_checked
from .worker_timing import run_finalists, time_candidate
from .worker_audit import audit_timing
from ..backends.triton.autotune import install, flush
from .checks import enforce
from .checks.base import BEFORE_LOAD
from .policy import freeze
from .task_inputs import draw_inputs, init_inputs

CANDIDATE_MODULE = "candidate"


def _set_limits(job: dict[str, Any]) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    mem = job.get("memory_limit_mb")
    if mem:
        limit = int(mem) * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _set_cpu_limit(seconds: Optional[float]) -> None:
    if not seconds:
        return
    used = resource.getrusage(resource.RUSAGE_SELF)
    base = used.ru_utime + used.ru_stime
    soft = int(base + seconds) + 1
    # the hard limit a little higher: SIGXCPU at the soft limit, SIGKILL at the hard
    resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 5))


def _signature_problem(ref_cls: type, new_cls: type, method: str) -> Optional[str]:
    try:
        ref_sig = inspect.signature(getattr(ref_cls, method))
        new_sig = inspect.signature(getattr(new_cls, method))
    except (TypeError, ValueError, AttributeError):
        return None
    new_params = list(new_sig.parameters.values())[1:]
    if any(p.kind in (p.VAR_POSITIONAL,) for p in new_params):
        return None
    ref_params = list(ref_sig.parameters.values())[1:]
    ref_pos = [p for p in ref_params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    new_pos = [p for p in new_params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required_new = [p for p in new_pos if p.default is p.empty]
    if any(p.kind == p.VAR_POSITIONAL for p in ref_pos):
        return None
    if len(required_new) > len(ref_pos) or len(new_pos) < len(ref_pos):
        fmt = lambda ps: ", ".join(p.name for p in ps)  # noqa: E731
        return (
            f"ModelNew.{method}({fmt(new_params)}) does not match Model.{method}({fmt(ref_params)}): "
            f"ModelNew must accept the same arguments as the reference Model ({len(ref_pos)} positional)."
        )
    return None


def prepare(backend_name: str, cpu_threads: Optional[int], ahead: bool = False) -> Any:
    """What a worker does before it knows its candidate: import the backend,
    create the device context, fix the host thread count. ``ahead``: a
    pool's spare, prepared before a candidate waits for it."""
    backend = get_backend(backend_name)
    backend.prepare_worker(ahead=ahead)
    if backend.device() == "cuda":
        # lazy: evaluator.census pulls in torch, numpy, which evaluator.worker does not load on its own
        from .census import warm_up

        warm_up()
    if cpu_threads:
        import torch

        # The reference's CPU ops run on exactly this many threads, whatever
        # the host's load: an OpenMP team waiting on a busy core made
        # PyTorch's softmax 40x slower and candidates look 3x faster.
        torch.set_num_threads(int(cpu_threads))
    return backend


def _load_reference(task: Any, ref_path: str) -> Any:
    import types

    ref = types.ModuleType("ks_reference")
    ref.__file__ = ref_path
    # as a plain module runs: in sys.modules (decorators such as dataclass
    # look it up) and without this file's own `from __future__` flags
    sys.modules["ks_reference"] = ref
    exec(compile(task.reference_source, ref_path, "exec", dont_inherit=True), ref.__dict__)  # noqa: S102
    for name in ("Model", "get_inputs"):
        if not hasattr(ref, name):
            raise Verdict(category="harness", error=f"task reference defines no {name}")
    return ref


#: this worker's device memory meter (one job per process), set by run_job
_meter: Optional[Any] = None


def _memory_facts(exc: BaseException, fault: str, where: str, metered: bool = True) -> dict[str, Any]:
    """What the device's memory looked like at an out-of-memory ``exc``
    (memory.CallMeter.facts), for the parent to attribute."""
    if _meter is None:
        return {"fault": fault, "where": where[:300], "tried_bytes": tried_bytes(str(exc))}
    return _meter.facts(exc, fault, where, metered)


def _harness(what: str, exc: BaseException) -> "Verdict":
    """The reference itself failed: the task's (or the machine's) fault,
    never charged to the candidate (an out-of-memory goes to the parent's
    attribution with what the worker saw: memory.attribute_memory_fault)."""
    oom = is_out_of_memory(exc)
    kind = "ran out of memory" if oom else "failed"
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    extra = {"memory": _memory_facts(exc, "harness", what)} if oom else {}
    return Verdict(
        category="harness",
        error=f"the task's reference {kind} ({what}): {text[-1500:]}. "
        "This is not the candidate's fault: fix the task (sizes, packages) or the machine.",
        **extra,
    )


def guard_channel(chan: Channel, backend: Any = None) -> None:
    """The channel protected from here on (Channel.guard); a missing filter
    is said on the log. Before it, where ``backend`` drives a CUDA device,
    the NVML handle the timing reads clocks through (timing.gpu_state.nvml):
    taken here, before the filter and the program, a reading in the timing
    slot is microseconds (asked later, in the slot, NVML did not start in a
    pool worker on the H100, and every reading was an nvidia-smi)."""
    if backend is not None and backend.device() == "cuda":
        import torch  # lazy: the job loaded it already (run_job); this module does not need it

        open_nvml(torch.cuda.current_device())
    problem = chan.guard()
    if problem:
        print(
            f"kernelsmith worker: {problem}; the channel's descriptors are still checked before each message",
            file=sys.stderr,
            flush=True,
        )


def run_job(job: dict[str, Any], chan: Channel, out: dict[str, Any], backend: Any = None) -> dict[str, Any]:
    """The evaluation of one candidate (or of a run's finalists): the
    reference loaded, the program loaded and checked on every trial, then
    timed; ``out`` is the result as it stands (what a verdict adds to)."""
    phases: dict[str, float] = out.setdefault("phases", {})
    started = time.monotonic()
    if isinstance(job.get("autotune"), dict):  # the parent's autotune records (backends/triton/autotune.py)
        install(job["autotune"].get("known"), job["autotune"].get("new"))
    task = Task.from_dict(job["task"])
    if backend is None:
        chan.stage("import")
        backend = prepare(job["backend"], job.get("cpu_threads"))
        phases["startup"] = round(time.monotonic() - started, 4)
        started = time.monotonic()
    import torch  # noqa: F401 - as the modules below: loaded before the CPU limit and the integrity snapshot

    # lazy: evaluator.census pulls in torch, numpy, which evaluator.worker does not load on its own
    from . import census, correctness, guards, probes  # noqa: F401 - watched by the integrity snapshot

    _set_cpu_limit(job.get("cpu_limit_s"))
    global _meter

    _meter = CallMeter(backend.device() == "cuda")
    # HardwareInfo.of: a backend written against the old dict interface still records the shared names.
    out["hardware"] = HardwareInfo.of(backend.hardware_info()).to_dict()
    # -- reference (trusted, but loaded here so the caller never runs task code)
    chan.stage("load reference")
    try:
        ref = _load_reference(task, os.path.abspath(job["reference_path"]))
        init_args = init_inputs(ref)
    except Verdict:
        raise
    except BaseException as exc:  # a missing package, a broken task
        raise _harness("loading reference.py", exc)
    if job.get("finalists"):
        return run_finalists(job, chan, out, backend, task, ref, init_args)
    ctx = _context(job, chan, out, backend, task, ref)
    _load_candidate(ctx, init_args)
    phases["load"] = round(time.monotonic() - started, 4)
    _start_census(ctx)
    run_trials(ctx)
    out.update(category="ok", compiled=True, correct=True, kernels_launched=ctx.kernels, torch_ops=ctx.torch_ops)
    if job.get("timing", True) and task.config.timing.enabled:
        time_candidate(ctx)
        checkpoint(ctx)
        # the parent's own clock on the program's call (audit.py)
        audit_timing(ctx)
    return out


def _context(job: dict[str, Any], chan: Channel, out: dict[str, Any], backend: Any, task: Any, ref: Any) -> Context:
    """What the trials, the timing and the checks share for this candidate.
    The checks' values are frozen here, before the program is loaded (the op
    guard and the census read only this copy: integrity v3, policy.py), and
    every check takes what it compares with later (checks.base.BEFORE_LOAD:
    the integrity snapshot, the evaluator's constants, the threads running)."""
    import torch

    # lazy: evaluator.correctness pulls in torch, numpy, which evaluator.worker does not load on its own
    from . import correctness as cmp

    cfg = task.config
    cand_path = os.path.abspath(job["candidate_path"])
    device, dtype = backend.device(), getattr(torch, cfg.dtype)
    cmp.set_comparison(getattr(cfg, "comparison", None))  # a task's accuracy contract (KernelBench-X)
    allowed = list(backend.default_allowed_torch_ops) + list(cfg.allowed_torch_ops)

    def make_inputs(gen: Callable[[], Any]) -> list[Any]:
        torch.manual_seed(chan.seed())
        return draw_inputs(gen, device, dtype)

    def clone(vals: list[Any]) -> list[Any]:
        return [v.clone() if isinstance(v, torch.Tensor) else v for v in vals]

    atol, rtol = cfg.tolerances()
    t0 = time.monotonic()
    frozen = freeze(allowed, policy=cfg.policy, min_coverage=cfg.min_coverage)
    ctx = Context(
        job=job,
        chan=chan,
        out=out,
        backend=backend,
        task=task,
        cfg=cfg,
        ref=ref,
        cmp=cmp,
        device=device,
        dtype=dtype,
        atol=atol,
        rtol=rtol,
        trials=int(job.get("trials") or cfg.trials),
        cand_path=cand_path,
        workdir=os.path.dirname(cand_path),
        # only the throughput benchmark turns the v2 checks off, to measure their cost
        checks_on=os.environ.get("KS_BENCH_NO_CENSUS", "") != "1",
        frozen=frozen,
        policy=frozen.policy,
        meter=_meter,
        phases=out["phases"],
        harness=_harness,
        fail_from=_failure(backend, cand_path),
        make_inputs=make_inputs,
        clone=clone,
        calls=0,
    )
    enforce(BEFORE_LOAD, ctx)
    # the v2 checks' own time besides the census's: the "census" phase
    ctx.spent = time.monotonic() - t0
    ctx.run_checked = lambda args, where: run_checked(ctx, args, where)
    return ctx


def _failure(backend: Any, cand_path: str) -> Callable[..., Verdict]:
    """``fail_from(exc, where, category=None, fault="candidate",
    metered=True)``: the program's exception as its verdict (the backend
    classifies it and trims its traceback to the program's frames)."""

    def fail_from(
        exc: BaseException, where: str, category: Optional[str] = None, fault: str = "candidate", metered: bool = True
    ) -> Verdict:
        cat = category or backend.classify_exception(exc)
        text = backend.trim_traceback(exc, cand_path)
        # an out-of-memory is attributed by the parent from what the device
        # held (memory.attribute_memory_fault), not by where it surfaced
        extra = {"memory": _memory_facts(exc, fault, where, metered)} if cat == "oom" else {}
        return Verdict(category=cat, error=f"{where}:\n{text}", compiled=cat not in ("compile",), **extra)

    return fail_from


def _load_candidate(ctx: Context, init_inputs: list) -> None:
    """The program loaded (an integrity checkpoint after), its ModelNew
    checked against Model's signatures, both models built from the same
    seed and moved to the device."""
    import torch

    ctx.chan.stage("load candidate")
    guard_channel(ctx.chan, ctx.backend)
    try:
        cand = ctx.backend.load_candidate(ctx.cand_path, CANDIDATE_MODULE)
    except BaseException as exc:  # the candidate's top level may raise anything
        checkpoint(ctx)
        raise ctx.fail_from(exc, "Loading the program failed", "compile")
    checkpoint(ctx)
    ModelNew = getattr(cand, "ModelNew", None)
    if ModelNew is None or not isinstance(ModelNew, type) or not issubclass(ModelNew, torch.nn.Module):
        raise Verdict(
            category="compile",
            error="The program defines no ModelNew(nn.Module) class; define one with the same constructor and forward signatures as Model.",
        )
    for method in ("__init__", "forward"):
        problem = _signature_problem(ctx.ref.Model, ModelNew, method)
        if problem:
            raise Verdict(category="compile", error=problem)
    ctx.init_seed_index = ctx.chan.seeds_received
    _build_models(ctx, ModelNew, init_inputs)


def _build_models(ctx: Context, ModelNew: type, init_inputs: list) -> None:
    """Model and ModelNew from the same seed, on the device; a warning where
    their matching parameters differ."""
    import torch

    fail_from, device, dtype = ctx.fail_from, ctx.device, ctx.dtype
    seed = ctx.chan.seed()
    torch.manual_seed(seed)
    try:
        model = ctx.ref.Model(*init_inputs)
    except BaseException as exc:
        raise _harness("Model(*get_init_inputs())", exc)
    ctx.chan.stage("construct ModelNew")
    torch.manual_seed(seed)
    try:
        model_new = ModelNew(*init_inputs)
    except TypeError as exc:
        raise fail_from(
            exc, "ModelNew(*get_init_inputs()) failed (it must take the same arguments as Model)", "compile"
        )
    except BaseException as exc:
        raise fail_from(exc, "ModelNew(*get_init_inputs()) failed")
    try:
        model = model.to(device=device, dtype=dtype)
    except BaseException as exc:
        raise _harness(f"moving Model to {device}", exc)
    try:
        model_new = model_new.to(device=device, dtype=dtype)
    except BaseException as exc:  # the program's parameters: its memory
        raise fail_from(exc, f"moving ModelNew to {device} failed")
    ctx.model, ctx.model_new = model, model_new
    # Same seed, so matching parameter shapes should hold matching values; a
    # difference means ModelNew initialised its weights in another order.
    lazy = torch.nn.parameter.UninitializedParameter  # a Lazy* layer's weights before its first call
    ref_params = {n: p for n, p in model.named_parameters() if not isinstance(p, lazy)}
    for name, p in model_new.named_parameters():
        if isinstance(p, lazy):
            continue
        if name in ref_params and ref_params[name].shape == p.shape and not torch.equal(ref_params[name], p):
            ctx.out.setdefault("warnings", []).append(
                f"parameter {name} differs from the reference's after seeding; create parameters in the same order as Model"
            )
            break


def _start_census(ctx: Context) -> None:
    """The kernel census for the program's calls, and the result's lists of
    what they launched and ran."""
    # lazy: evaluator.census pulls in torch, numpy, which evaluator.worker does not load on its own
    from .census import Census

    out = ctx.out
    ctx.kernels = out.setdefault("kernels_launched", [])
    ctx.torch_ops = out.setdefault("torch_ops", [])
    ctx.census = Census(
        ctx.frozen.allowed_ops,
        cuda=ctx.device == "cuda",
        host_memory=ctx.device != "cuda",
        enabled=ctx.checks_on,
        policy=ctx.frozen,
    )
    out["census"] = (
        {"policy": ctx.policy} if ctx.checks_on else {"policy": ctx.policy, "disabled": "KS_BENCH_NO_CENSUS=1"}
    )


def serve(chan: Channel, job: dict[str, Any], backend: Any = None) -> None:
    """Run one job and send its result; never returns (skips interpreter
    teardown: candidate atexit hooks, CUDA teardown)."""
    _set_limits(job)
    partial: dict[str, Any] = {}
    try:
        result = run_job(job, chan, partial, backend)
    except Verdict as v:
        result = {**partial, **v.fields}
    except SystemExit:
        raise
    except BaseException as exc:  # harness bug or something the candidate broke; still report
        result = {"category": "runtime", "error": "evaluation failed:\n" + traceback.format_exc(limit=-3)}
        if is_out_of_memory(exc):
            # outside the program's calls (they end in a Verdict): the
            # harness's own memory, e.g. making the inputs; the parent
            # attributes it (memory.attribute_memory_fault)
            result.update(category="harness", memory=_memory_facts(exc, "harness", chan.last_stage))
    if _meter is not None:
        result.setdefault("memory", {}).update(_meter.summary())
    if isinstance(job.get("autotune"), dict):  # what was tuned here, for the parent, before it reads it
        flush()
    try:
        chan.send(type=RESULT, result=result)
    except Exception:
        chan.send(
            type=RESULT, result={"category": "runtime", "error": "result not serialisable: " + repr(result)[:2000]}
        )
    sys.stderr.flush()
    os._exit(0)


def main() -> None:
    chan = Channel.stdio()
    faulthandler.enable(file=sys.stderr, all_threads=False)
    try:
        serve(chan, chan.receive())
    except SystemExit as exc:
        # the program's sys.exit, or the parent gone: ended here without the
        # interpreter's teardown, whose closing of the channel the
        # system-call filter would take for an attack on it
        code = exc.code
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
        sys.stderr.flush()
        os._exit(code if isinstance(code, int) else (0 if code is None else 1))


if __name__ == "__main__":
    main()
