"""Worker entry for the curation execution filter: ``python -m kernelsmith.curate.worker``.

Started by :mod:`kernelsmith.curate.runner` under the evaluator's sandbox
(fresh process group with a hard wall-clock limit, bwrap when available,
scrubbed environment, rlimits set here before any module code runs). One
worker checks a batch of modules, each under its own timer, and streams one
``{"type": "module", ...}`` message per module so that a crash or a hard
timeout loses only the module in progress (announced before it starts with a
``{"type": "stage", "stage": "module:<id>"}`` message).

For each module and each input variant, in order, until one passes:
exec the program, build ``Model(*get_init_inputs())`` in eval mode, run it on
two different random inputs and once more on the first; the outputs must be
tensors, finite, equal on equal inputs (deterministic) and different on
different inputs. The passing run is also traced (aten operator names through
a TorchDispatchMode) for the structural hash and the family features.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import time
import traceback
from collections import Counter
from typing import Any

from ..evaluator.worker import Channel, _set_cpu_limit, _set_limits

# operators that only move or view data; not counted as compute for difficulty
VIEW_OPS = {"view", "_unsafe_view", "reshape", "permute", "transpose", "t", "expand", "squeeze", "unsqueeze",
            "detach", "clone", "contiguous", "alias", "slice", "select", "split", "split_with_sizes", "chunk",
            "unbind", "as_strided", "lift_fresh", "empty", "empty_like", "zeros", "zeros_like", "ones", "ones_like",
            "full", "full_like", "arange", "_to_copy", "copy_", "to", "flatten", "expand_as", "view_as", "new_empty",
            "new_zeros", "new_ones", "scalar_tensor", "sym_size", "sym_stride", "size", "stride", "is_same_size",
            "index_select", "cat", "stack", "_reshape_alias", "fill_", "zero_"}
CONTAINER_MODULES = {"Sequential", "ModuleList", "ModuleDict", "Identity"}


class ModuleTimeout(Exception):
    pass


def _on_alarm(signum: int, frame: Any) -> None:
    raise ModuleTimeout()


def _tensors(out: Any) -> list[Any]:
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _tensors(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in _tensors(o)]
    return []


def _same(a: list[Any], b: list[Any]) -> bool:
    import torch

    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if x.is_floating_point() or x.is_complex():
            if not torch.allclose(x, y, rtol=1e-5, atol=1e-6, equal_nan=True):
                return False
        elif not torch.equal(x, y):
            return False
    return True


def _trace_ops(model: Any, inputs: list[Any]) -> list[str]:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    ops: list[str] = []

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            ops.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Recorder():
        model(*inputs)
    return ops


def _fx_ops(model: Any) -> list[str]:
    import torch.fx

    gm = torch.fx.symbolic_trace(model)
    out = []
    for node in gm.graph.nodes:
        if node.op == "call_module":
            out.append(type(gm.get_submodule(node.target)).__name__)
        elif node.op in ("call_function", "call_method"):
            out.append(getattr(node.target, "__name__", str(node.target)))
    return out


def _module_stats(model: Any) -> dict[str, Any]:
    kinds: Counter[str] = Counter()
    depth = 0
    custom = 0
    for name, m in model.named_modules():
        if m is model:
            continue
        cls = type(m)
        is_torch = cls.__module__.startswith("torch.")
        if not is_torch:
            custom += 1
        if is_torch and cls.__name__ not in CONTAINER_MODULES and not list(m.children()):
            kinds[cls.__name__] += 1
        depth = max(depth, name.count(".") + 1)
    params = sum(p.numel() for p in model.parameters())
    return {"leaf_modules": dict(kinds), "custom_submodules": custom, "depth": depth, "params": int(params)}


def check_module(item: dict[str, Any], seeds: tuple[int, int], timeout_s: float) -> dict[str, Any]:
    import torch

    last: dict[str, Any] = {"status": "no_inputs", "detail": "no input variant"}
    for vi, variant in enumerate(item["variants"]):
        code = item["source"] + "\n\n" + variant
        ns: dict[str, Any] = {"__name__": f"curated_{item['id']}"}
        stage = "import"
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            torch.set_default_dtype(torch.float32)
            exec(compile(code, f"<module {item['id']}>", "exec"), ns)
            stage = "init"
            torch.manual_seed(seeds[0])
            model = ns["Model"](*ns["get_init_inputs"]())
            model.eval()
            stage = "forward"
            started = time.perf_counter()
            with torch.no_grad():
                torch.manual_seed(seeds[0])
                in1 = ns["get_inputs"]()
                out1 = _tensors(model(*in1))
                forward_s = time.perf_counter() - started
                torch.manual_seed(seeds[1])
                in2 = ns["get_inputs"]()
                out2 = _tensors(model(*in2))
                torch.manual_seed(seeds[0])
                in1b = ns["get_inputs"]()
                out1b = _tensors(model(*in1b))
            stage = "check"
            if not out1:
                raise _Drop("no_tensor_output", "forward returned no tensor")
            if any((t.is_floating_point() or t.is_complex()) and not bool(torch.isfinite(t).all()) for t in out1 + out2):
                raise _Drop("non_finite", "output has NaN or Inf")
            if not _same(out1, out1b):
                raise _Drop("nondeterministic", "different outputs for the same inputs")
            if _same(out1, out2):
                raise _Drop("input_independent", "the same outputs for different inputs")
            stage = "trace"
            trace_method = "dispatch"
            try:
                torch.manual_seed(seeds[0])
                ops = _trace_ops(model, ns["get_inputs"]())
            except Exception:
                try:
                    trace_method, ops = "fx", _fx_ops(model)
                except Exception:
                    trace_method, ops = "none", []
            signal.setitimer(signal.ITIMER_REAL, 0)
            compute = [o for o in ops if o not in VIEW_OPS]
            return {
                "status": "ok", "detail": "", "variant": vi, "forward_ms": round(forward_s * 1000, 3),
                "ops": dict(Counter(ops)), "compute_ops": len(compute), "trace": trace_method,
                "op_graph_hash": hashlib.sha256("\n".join(ops).encode()).hexdigest()[:16] if ops else None,
                "output_shapes": [list(t.shape) for t in out1], **_module_stats(model),
            }
        except _Drop as d:
            last = {"status": d.reason, "detail": d.detail, "variant": vi}
            if d.reason in ("input_independent", "nondeterministic", "non_finite"):
                break  # other input shapes will not change what the module computes
        except ModuleTimeout:
            last = {"status": "timeout", "detail": f"over {timeout_s:g} s during {stage}", "variant": vi}
            break
        except ModuleNotFoundError as exc:
            last = {"status": "missing_import", "detail": str(exc), "variant": vi}
            break
        except BaseException as exc:  # any failure of untrusted code is a verdict on it
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                last = {"status": f"{stage}_error", "detail": f"{type(exc).__name__} raised", "variant": vi}
                break
            tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
            last = {"status": f"{stage}_error", "detail": tb[:500], "variant": vi}
            if stage == "import":
                break
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    return last


class _Drop(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def main() -> None:
    chan = Channel()
    job = json.loads(chan.inp.readline())
    _set_limits(job)
    chan.stage("import torch")
    import torch

    torch.set_num_threads(max(1, int(job.get("threads", 1))))
    _set_cpu_limit(job.get("cpu_limit_s"))
    signal.signal(signal.SIGALRM, _on_alarm)
    seeds = (int(job["seeds"][0]), int(job["seeds"][1]))
    for item in job["modules"]:
        chan.stage(f"module:{item['id']}")
        try:
            res = check_module(item, seeds, float(job["module_timeout_s"]))
        except BaseException as exc:  # a module broke the harness itself; still report
            res = {"status": "runtime_error", "detail": f"{type(exc).__name__}: {exc}"[:500]}
        try:
            chan.send(type="module", id=item["id"], result=res)
        except (TypeError, ValueError):
            chan.send(type="module", id=item["id"], result={"status": "runtime_error", "detail": "unserialisable result"})
    chan.send(type="result", result={"done": len(job["modules"])})
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
