"""Worker entry for the curation execution filter: ``python -m kernelsmith.curate.worker``.

Started by :mod:`kernelsmith.curate.runner` under the evaluator's sandbox
(fresh process group with a hard wall-clock limit, bwrap when available,
scrubbed environment, rlimits set here before any module code runs). One
worker checks a batch of modules, each under its own budget of CPU seconds (and a wall-clock backstop), and streams one
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
import re
import signal
import sys
import time
import traceback
from collections import Counter
from typing import Any, Optional

import resource
from .inputs import init_prelude, repair_init, repair_inputs, PRELUDE_MARK, InputVariant


class Channel:
    """JSON lines to the parent on a private copy of stdout; module code that
    prints goes to stderr (the log) and cannot corrupt the protocol."""

    def __init__(self) -> None:
        self.out = os.fdopen(os.dup(1), "w", buffering=1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        self.inp = sys.stdin

    def send(self, **msg: Any) -> None:
        self.out.write(json.dumps(msg) + "\n")
        self.out.flush()

    def stage(self, stage: str) -> None:
        self.send(type="stage", stage=stage)


def _set_limits(memory_limit_mb: Optional[int]) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if memory_limit_mb:
        limit = int(memory_limit_mb) * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _set_cpu_limit(seconds: Optional[float]) -> None:
    if not seconds:
        return
    used = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(used.ru_utime + used.ru_stime + seconds) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 5))


# operators that only move or view data; not counted as compute for difficulty
VIEW_OPS = {
    "view",
    "_unsafe_view",
    "reshape",
    "permute",
    "transpose",
    "t",
    "expand",
    "squeeze",
    "unsqueeze",
    "detach",
    "clone",
    "contiguous",
    "alias",
    "slice",
    "select",
    "split",
    "split_with_sizes",
    "chunk",
    "unbind",
    "as_strided",
    "lift_fresh",
    "empty",
    "empty_like",
    "zeros",
    "zeros_like",
    "ones",
    "ones_like",
    "full",
    "full_like",
    "arange",
    "_to_copy",
    "copy_",
    "to",
    "flatten",
    "expand_as",
    "view_as",
    "new_empty",
    "new_zeros",
    "new_ones",
    "scalar_tensor",
    "sym_size",
    "sym_stride",
    "size",
    "stride",
    "is_same_size",
    "index_select",
    "cat",
    "stack",
    "_reshape_alias",
    "fill_",
    "zero_",
}
CONTAINER_MODULES = {"Sequential", "ModuleList", "ModuleDict", "Identity"}


class ModuleTimeout(Exception):
    pass


# --timeout is a budget of CPU seconds (ITIMER_PROF): a module's verdict does
# not depend on the other jobs of a shared machine (at load 3-8 a wall-clock
# alarm timed out 148 modules, at load 2 70). A wall-clock alarm at
# WALL_FACTOR times the budget is the backstop for a module that sleeps or
# waits; the runner's hard limit comes after both.
WALL_FACTOR = 2.5


def _on_alarm(signum: int, frame: Any) -> None:
    raise ModuleTimeout("wall" if signum == signal.SIGALRM else "cpu")


def _arm(cpu_s: float, wall_s: float) -> None:
    signal.setitimer(signal.ITIMER_PROF, max(0.001, cpu_s))
    signal.setitimer(signal.ITIMER_REAL, max(0.001, wall_s))


def _disarm() -> None:
    signal.setitimer(signal.ITIMER_PROF, 0)
    signal.setitimer(signal.ITIMER_REAL, 0)


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


def _load_plain(text: str, workdir: str, name: str) -> Any:
    """Import the task file as Python imports a module: a file on disk, a
    module object registered in ``sys.modules`` (``@dataclass`` looks its
    module up there), no ``__future__`` flags inherited from this worker."""
    import importlib.util

    path = os.path.join(workdir, f"{name}.py")
    with open(path, "w") as fh:
        fh.write(text)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return mod


def _flat_tensors(inputs: list[Any]) -> list[Any]:
    return _tensors(list(inputs))


def _equals_an_input(outs: list[Any], ins: list[Any]) -> bool:
    """An output that is one of the inputs, values in the same order (a view,
    a reshape or a copy): the module computes nothing."""
    import torch

    for o in outs:
        for i in _flat_tensors(ins):
            if o.numel() == i.numel() and o.numel() > 0 and o.dtype == i.dtype:
                a, b = o.reshape(-1), i.reshape(-1)
                if (a.is_floating_point() and torch.allclose(a, b, rtol=1e-5, atol=1e-6)) or (
                    not a.is_floating_point() and torch.equal(a, b)
                ):
                    return True
    return False


def _arg_sig(x: Any) -> Any:
    import torch

    if isinstance(x, torch.Tensor):
        return f"T{tuple(x.shape)}{str(x.dtype)[6:]}"
    if isinstance(x, (list, tuple)):
        return [_arg_sig(v) for v in x]
    if isinstance(x, float):
        return "f"  # constants (eps, scales) do not make a different kernel
    if isinstance(x, (int, bool, str)) or x is None:
        return x
    return type(x).__name__


def _trace_ops(model: Any, inputs: list[Any]) -> tuple[list[str], str, Any]:
    """(aten operator names, signature of the graph: operators with their
    tensor shapes and non-float arguments, in call order, the output): the
    first probe forward is this traced one, so tracing costs no extra run."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    ops: list[str] = []
    sig: list[str] = []

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            ops.append(func.overloadpacket.__name__)
            sig.append(f"{func}{_arg_sig(list(args))}{_arg_sig(sorted((kwargs or {}).items()))}")
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Recorder():
        out = model(*inputs)
    return ops, hashlib.sha256("\n".join(sig).encode()).hexdigest()[:16], out


def _fingerprint(outs: list[Any]) -> str:
    """Outputs on the shared probe inputs, rounded to 3 significant digits:
    equal for two modules that compute the same function."""
    import torch

    h = hashlib.sha256()
    for t in outs:
        h.update(str(tuple(t.shape)).encode())
        v = t.detach().double().reshape(-1)[:4096]
        if t.is_floating_point() or t.is_complex():
            v = torch.where(v == 0, v, torch.sign(v) * torch.round(torch.log10(v.abs()) * 300))
        h.update(v.numpy().tobytes())
    return h.hexdigest()[:16]


def _nbytes(xs: list[Any]) -> int:
    return int(sum(t.numel() * t.element_size() for t in _flat_tensors(xs)))


_SHAPE_ERROR = re.compile(r"shape|size of tensor|must match|dimension|out of range|cannot be multiplied", re.I)


def _size_checks(mod: Any, fns: list[tuple[str, str]], built: Any = None) -> dict[str, dict[str, Any]]:
    """Run each ``(function, label)``'s inputs through the module on the meta
    device: the shapes of a size class are consistent without computing
    anything. label -> {"ok": True/False/None, ...}.

    ``built``: the model the real checks used, moved to the meta device (no
    second construction: a constructor that computes a 4096-row sinusoid
    table in Python paid for it twice). A set it cannot verify, or rejects,
    is checked again on a model built on the meta device, as before: only
    that one decides a size error (a moved model keeps the state its probe
    forward cached)."""
    out: dict[str, dict[str, Any]] = {}
    if not fns:
        return out
    if built is not None:
        try:
            first = _size_checks_on(mod, fns, built.to("meta"))
        except ModuleTimeout:
            return {label: dict(_OVER) for _, label in fns}
        except Exception:
            first = {}
        again = [(fn, label) for fn, label in fns if (first.get(label) or {}).get("ok") is not True]
        if not again:
            return first
        if any((first.get(label) or {}).get("detail") == _OVER["detail"] for _, label in again):
            return {label: first.get(label) or dict(_OVER) for _, label in fns}
        rest = _size_checks(mod, again)
        return {
            label: (first[label] if (first.get(label) or {}).get("ok") is True else rest.get(label, dict(_OVER)))
            for _, label in fns
        }
    return _size_checks_on(mod, fns, None)


_OVER = {"ok": None, "detail": "the meta-device check ran over its time budget"}


def _size_checks_on(mod: Any, fns: list[tuple[str, str]], model: Any) -> dict[str, dict[str, Any]]:
    import torch

    out: dict[str, dict[str, Any]] = {}
    over = _OVER
    try:
        if model is None:
            with torch.device("meta"), torch.no_grad():
                model = mod.Model(*mod.get_init_inputs())
                model.eval()
        params = int(sum(p.numel() * p.element_size() for p in model.parameters()))
    except ModuleTimeout:
        return {label: dict(over) for _, label in fns}
    except Exception as exc:  # the constructor needs real data: nothing checkable here
        return {label: _unverified(exc) for _, label in fns}
    for fn, label in fns:
        if label in out:
            continue
        try:
            with torch.device("meta"), torch.no_grad():
                ins = getattr(mod, fn)()
                outs = _tensors(model(*ins))
            out[label] = {
                "ok": True,
                "bytes": _nbytes(ins) + _nbytes(outs) + params,
                "output_shapes": [list(t.shape) for t in outs],
            }
        except ModuleTimeout:  # this set and the rest stay unverified
            for _, rest in fns:
                out.setdefault(rest, dict(over))
            break
        except (NotImplementedError, TypeError) as exc:  # an operator without a meta kernel: not checkable here
            out[label] = {"ok": None, "detail": f"{type(exc).__name__}: {exc}"[:200]}
        except Exception as exc:
            out[label] = _unverified(exc)
            if out[label]["ok"] is False:
                break  # the caller drops the module
    return out


def _unverified(exc: BaseException) -> dict[str, Any]:
    msg = f"{type(exc).__name__}: {exc}"
    # only a shape error says the size class is wrong; anything else (an
    # operator the meta device lacks, dtype handling) leaves it unverified
    if not isinstance(exc, (NotImplementedError, TypeError)) and _SHAPE_ERROR.search(msg) and "meta" not in msg.lower():
        return {"ok": False, "detail": msg[:300]}
    return {"ok": None, "detail": msg[:200]}


def _uninitialised(model: Any) -> list[str]:
    """Floating parameters holding NaN right after construction: the
    constructor left them as ``torch.empty`` (filled with NaN while it ran),
    so their values would be whatever the allocator returned."""
    import torch

    bad = []
    for name, p in model.named_parameters():
        if isinstance(p, torch.nn.parameter.UninitializedParameter):
            continue  # a lazy layer's: created by its first forward
        if (p.is_floating_point() or p.is_complex()) and p.numel() and bool(torch.isnan(p).any()):
            bad.append(name)
    return bad


def _fill_plan(model: Any, names: list[str]) -> list[tuple[str, float]]:
    """(name, std) for each uninitialised parameter: the config's
    ``initializer_range`` when the model has one (what transformers'
    ``_init_weights`` draws from), else the mean spread of the model's other
    weight matrices, else 0.02; biases zero."""
    import torch

    std = None
    for m in model.modules():
        r = getattr(getattr(m, "config", None), "initializer_range", None)
        if isinstance(r, (int, float)) and 0 < float(r) < 1:
            std = float(r)
            break
    if std is None:
        skip = set(names)
        spreads = [
            float(p.detach().float().std())
            for n, p in model.named_parameters()
            if n not in skip
            and p.dim() >= 2
            and p.is_floating_point()
            and p.numel() > 1
            and not isinstance(p, torch.nn.parameter.UninitializedParameter)
            and bool(torch.isfinite(p).all())
        ]
        spreads = [x for x in spreads if x > 0]
        std = sum(spreads) / len(spreads) if spreads else 0.02
    params = dict(model.named_parameters())
    return [
        (n, 0.0 if (n.rsplit(".", 1)[-1].startswith("bias") and params[n].dim() == 1) else round(std, 6)) for n in names
    ]


SIZE_BUDGET_S = 2.0  # seconds for the meta-device size checks of one module


def check_module(
    item: dict[str, Any],
    seeds: tuple[int, int],
    timeout_s: float,
    workdir: str = ".",
    trivial_atol: float = 1e-3,
    size_budget_s: float = SIZE_BUDGET_S,
) -> dict[str, Any]:
    """Verdict on one module: each variant is a complete task file, loaded as a
    plain module; the first variant that passes wins."""
    import torch

    last: dict[str, Any] = {"status": "no_inputs", "detail": "no input variant"}
    # CPU seconds per stage, over all variants (where the filter's time goes)
    cpu: Counter[str] = Counter()
    mark: list[Any] = [time.process_time(), "import"]

    def _enter(st: str) -> str:
        now = time.process_time()
        cpu[mark[1]] += now - mark[0]
        mark[0], mark[1] = now, st
        return st

    reuse: Any = None
    reusable = False
    errors: list[str] = []  # each failed variant's error (the verdict's detail is the last one's)
    texts: list[str] = list(item["variants"])
    # the variants' input templates: a forward error that says what input it
    # expected (normalized shape, in_features, channels, rank) becomes a
    # repaired variant, tried next on the same model (at most max_repairs)
    specs: list[dict[str, Any]] = [dict(s) for s in item.get("specs") or []]
    if len(specs) != len(texts):
        specs = []
    repairs_left = int(item.get("max_repairs", 4)) if specs else 0
    tried = {tuple(s["inputs"]) for s in specs}
    cpu_deadline = time.process_time() + timeout_s
    wall_deadline = time.monotonic() + timeout_s * WALL_FACTOR
    init_repairs_left = int(item.get("max_repairs", 4)) if specs else 0
    initialised: list[str] = []  # parameters the task's prelude initialises
    vi = -1
    while vi + 1 < len(texts):
        vi += 1
        text = texts[vi]
        name = f"curated_{item['id']}_{vi}".replace("-", "_")
        stage = _enter("import")
        # one budget for the whole module, all its variants (a timer per
        # variant let a module of six slow variants run into the runner's hard
        # limit, which kills the worker: a fresh one re-imports everything)
        left_cpu, left_wall = cpu_deadline - time.process_time(), wall_deadline - time.monotonic()
        if left_cpu <= 0 or left_wall <= 0:
            last = {
                "status": "timeout",
                "detail": f"over {timeout_s:g} s of CPU before variant {vi}"
                if left_cpu <= 0
                else f"over {timeout_s * WALL_FACTOR:g} s of wall-clock time before variant {vi}",
                "variant": vi,
            }
            break
        _arm(left_cpu, left_wall)
        try:
            torch.set_default_dtype(torch.float32)
            mod = _load_plain(text, workdir, name)
            probe_fn = "get_inputs_small" if hasattr(mod, "get_inputs_small") else "get_inputs"
            stage = _enter("init")
            if reuse is not None:
                # the variants differ only in their forward inputs (same
                # program, same constructor arguments, same seed): the model
                # the previous variant built is the one this one would build
                model, reuse = reuse, None
            else:
                torch.manual_seed(seeds[0])
                # memory the constructor leaves uninitialised (torch.empty) is NaN,
                # not whatever the allocator returned: such a module is non-finite
                # under every seed instead of only under some
                torch.use_deterministic_algorithms(True, warn_only=True)
                try:
                    model = mod.Model(*mod.get_init_inputs())
                finally:
                    torch.use_deterministic_algorithms(False)
                model.eval()
                # checked before any forward: an expert the probe inputs do not
                # route to still holds allocator garbage in the evaluator
                empty = _uninitialised(model)
                if empty and specs and not specs[vi].get("prelude") and item.get("init_fix", True):
                    # the task itself initialises them (as the package's own
                    # _init_weights would): every variant from this one on gets
                    # the prelude, and this one is built again from its new text
                    prelude = init_prelude(_fill_plan(model, empty))
                    for k in range(vi, len(texts)):
                        specs[k] = {**specs[k], "prelude": prelude}
                        texts[k] = _render_repair(texts[k], specs[k], item.get("size", "medium"))
                    initialised = empty
                    vi -= 1
                    continue
                if empty:
                    raise _Drop(
                        "non_finite",
                        "parameters left uninitialised by the constructor (torch.empty): " + ", ".join(empty[:5]),
                    )
            # lazy layers take their shapes from the first input: never reused,
            # and traced after a first forward has materialised them (as Conv)
            lazy = any(isinstance(p, torch.nn.parameter.UninitializedParameter) for p in model.parameters())
            reusable = bool(item.get("same_init")) and not lazy
            stage = _enter("forward")
            probe = getattr(mod, probe_fn)
            with torch.no_grad():
                torch.manual_seed(seeds[0])
                in1 = probe()
                # the first forward is the traced one (operator graph, family features)
                trace_method, graph, trace_error, ops = "dispatch", None, "", []
                try:
                    if lazy:
                        trace_method = "later"
                        raw1 = model(*in1)
                    else:
                        ops, graph, raw1 = _trace_ops(model, in1)
                except ModuleTimeout:
                    raise
                except Exception as exc:
                    if lazy:
                        raise
                    trace_error = f"{type(exc).__name__}: {exc}"[:300]
                    trace_method = "none"
                    torch.manual_seed(seeds[0])
                    in1 = probe()
                    raw1 = model(*in1)  # a module that fails untraced too: forward_error
                out1 = _tensors(raw1)
                torch.manual_seed(seeds[1])
                in2 = probe()
                out2 = _tensors(model(*in2))
                torch.manual_seed(seeds[0])
                in1b = probe()
                started = time.perf_counter()
                out1b = _tensors(model(*in1b))
                forward_s = time.perf_counter() - started
                stage = _enter("check")
                if not out1:
                    raise _Drop("no_tensor_output", "forward returned no tensor")
                floats = [t for t in out1 + out2 if t.is_floating_point() or t.is_complex()]
                if any(not bool(torch.isfinite(t).all()) for t in floats):
                    empty = _uninitialised(model)
                    raise _Drop(
                        "non_finite",
                        "output has NaN or Inf"
                        + (
                            f"; parameters left uninitialised by the constructor (torch.empty): {', '.join(empty[:5])}"
                            if empty
                            else ""
                        ),
                    )
                if not _same(out1, out1b):
                    raise _Drop("nondeterministic", "different outputs for the same inputs")
                if (
                    floats
                    and all(t.numel() == 0 or float(t.abs().max()) <= trivial_atol for t in floats)
                    and len(floats) == len(out1 + out2)
                ):
                    raise _Drop(
                        "trivial_output",
                        f"every output is within {trivial_atol:g} of zero: zeros would pass the correctness tolerance",
                    )
                if _same(out1, out2):
                    raise _Drop("input_independent", "the same outputs for different inputs")
                if _equals_an_input(out1, in1):
                    raise _Drop("identity", "an output equals an input (a view or copy of it)")
                # each input separately: an argument that does not change the output is ignored
                tensor_args = [k for k, x in enumerate(in1) if _tensors([x])]
                if len(tensor_args) > 1:
                    for k in tensor_args:
                        mixed = list(in1)
                        mixed[k] = in2[k]
                        if _same(out1, _tensors(model(*mixed))):
                            raise _Drop("ignores_input", f"the output does not depend on input {k}")
            stage = _enter("trace")
            if trace_method == "later":
                trace_method = "dispatch"
                try:
                    torch.manual_seed(seeds[0])
                    ops, graph, _ = _trace_ops(model, probe())
                except ModuleTimeout:
                    raise
                except Exception as exc:
                    trace_error, trace_method = f"{type(exc).__name__}: {exc}"[:300], "none"
            if trace_method == "none":
                try:
                    trace_method, ops = "fx", _fx_ops(model)
                    graph = hashlib.sha256("\n".join(ops).encode()).hexdigest()[:16] if ops else None
                except Exception:
                    trace_method, ops = "none", []
            stage = _enter("size")
            sizes = {
                "small": {
                    "ok": True,
                    "bytes": _nbytes(in1)
                    + _nbytes(out1)
                    + int(sum(p.numel() * p.element_size() for p in model.parameters())),
                }
            }
            fns = [
                (fn, label)
                for fn, label in (
                    ("get_inputs", "default"),
                    ("get_inputs_large", "large"),
                    ("get_inputs_medium", "medium"),
                )
                if hasattr(mod, fn) and fn != probe_fn
            ]
            # the meta-device check is bookkeeping, not a check of the module:
            # its own short budget (an einsum on meta tensors of the large set
            # took 76 s for XLNet); over it, the sizes stay unverified
            _arm(
                min(cpu_deadline - time.process_time(), size_budget_s),
                min(wall_deadline - time.monotonic(), size_budget_s * WALL_FACTOR),
            )
            checked = _size_checks(mod, fns, built=model)
            for fn, label in fns:
                got = checked.get(label)
                if got is None:
                    continue
                sizes[label] = got
                if got["ok"] is False:
                    raise _Drop("size_error", f"{fn}: {got['detail']}")
            _disarm()
            compute = [o for o in ops if o not in VIEW_OPS]
            last = {
                "status": "ok",
                "detail": "",
                "variant": vi,
                "forward_ms": round(forward_s * 1000, 3),
                "ops": dict(Counter(ops)),
                "compute_ops": len(compute),
                "trace": trace_method,
                "op_graph_hash": graph,
                "fingerprint": _fingerprint(out1),
                "sizes": sizes,
                "trace_error": trace_error,
                "output_shapes": [list(t.shape) for t in out1],
                **_module_stats(model),
            }
            break
        except _Drop as d:
            last = {"status": d.reason, "detail": d.detail, "variant": vi}
            if d.reason not in ("size_error",):
                break  # other input shapes will not change what the module computes
        except ModuleTimeout as exc:
            last = {
                "status": "timeout",
                "variant": vi,
                "detail": f"over {timeout_s * WALL_FACTOR:g} s of wall-clock time during {stage} (budget "
                f"{timeout_s:g} s of CPU)"
                if str(exc) == "wall"
                else f"over {timeout_s:g} s of CPU during {stage}",
            }
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
            errors.append(f"v{vi} {stage}: {tb[:300]}")
            config_caused = stage == "init" or (
                stage == "forward"
                and ("can only be called on Attention layers" in tb or tb.strip() == "KeyError: None")
            )
            if config_caused and specs and init_repairs_left > 0:
                # a config validation error that names the value it expected:
                # the constructor arguments are repaired and this variant (and
                # the later ones that share its arguments) built again
                fixed = _init_repair(specs[vi]["init_args"], f"{type(exc).__name__}: {exc}")
                if fixed:
                    init_repairs_left -= 1
                    old_args = specs[vi]["init_args"]
                    for k in range(vi, len(texts)):
                        if specs[k]["init_args"] == old_args:
                            specs[k] = {**specs[k], "init_args": fixed, "note": "repaired"}
                            texts[k] = _render_repair(texts[k], specs[k], item.get("size", "medium"))
                    vi -= 1
                    continue
            if stage == "import" or (stage == "init" and item.get("same_init")):
                break  # the other variants only change the forward inputs
            if stage == "forward" and reusable:
                reuse = model
            if stage == "forward" and repairs_left > 0:
                # after the heuristic variants (a module one of them fits keeps it)
                for ins in _repairs(specs[vi], tb):
                    if repairs_left <= 0 or tuple(ins) in tried:
                        continue
                    tried.add(tuple(ins))
                    repairs_left -= 1
                    spec = {**specs[vi], "inputs": ins, "note": "repaired"}
                    texts.append(_render_repair(text, spec, item.get("size", "medium")))
                    specs.append(spec)
        finally:
            _disarm()
            sys.modules.pop(name, None)
            _enter("import")
    if (
        last.get("status") == "ok"
        and specs
        and (specs[last["variant"]].get("note") == "repaired" or specs[last["variant"]].get("prelude"))
    ):
        last["repaired"] = specs[last["variant"]]
        last["text_sha"] = hashlib.sha256(texts[last["variant"]].encode()).hexdigest()[:16]
    if initialised and last.get("status") == "ok":
        last["initialised"] = initialised[:50]
    last["cpu_s"] = {k: round(v, 4) for k, v in cpu.items()}
    if errors and last.get("status") != "ok":
        last["errors"] = errors
    return last


_INPUTS_START = "def get_inputs():\n    # size class"


def _init_repair(init_args: list[str], error: str) -> Optional[list[str]]:
    try:
        return repair_init(list(init_args), error)
    except Exception:  # a message the parser did not expect: no repair
        return None


def _repairs(spec: dict[str, Any], error: str) -> list[list[str]]:
    try:
        return repair_inputs(list(spec["inputs"]), error)
    except Exception:  # a message the parser did not expect: no repair
        return []


def render_repair(text: str, spec: dict[str, Any], size: str) -> str:
    """The task file of a repaired variant: the checked file's program, the
    new inputs (and the spec's prelude) rendered as every variant is (the
    pipeline writes the same)."""
    cut = text.rfind(PRELUDE_MARK)
    if cut < 0:
        cut = text.rindex(_INPUTS_START)
    return text[:cut] + InputVariant.from_dict(spec).render(size)


_render_repair = render_repair


class _Drop(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def main() -> None:
    """Job header line, then one ``{"type": "module", ...}`` line per module;
    a verdict line back for each. Ends at end of input (the parent closed or died)."""
    chan = Channel()
    job = json.loads(chan.inp.readline())
    _set_limits(job.get("memory_limit_mb"))
    chan.stage("import torch")
    import torch

    # what the mined modules import (torch, the allowed packages) is imported
    # once per worker, before any per-module timer starts
    for pkg in job.get("preload", []):
        try:
            __import__(pkg)
        except Exception:
            pass
    torch.set_num_threads(max(1, int(job.get("threads", 1))))
    # the first dispatch trace imports parts of torch (_inductor, slowly); done
    # here, before any module's alarm could cut that import short and leave it
    # half initialised for every later module
    _trace_ops(torch.nn.Linear(2, 2), [torch.randn(1, 2)])
    _set_cpu_limit(job.get("cpu_limit_s"))
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.signal(signal.SIGPROF, _on_alarm)
    seeds = (int(job["seeds"][0]), int(job["seeds"][1]))
    chan.send(type="ready")
    for line in chan.inp:
        if not line.strip():
            continue
        item = json.loads(line)
        try:
            res = check_module(
                item,
                seeds,
                float(job["module_timeout_s"]),
                workdir=os.getcwd(),
                trivial_atol=float(job.get("trivial_atol", 1e-3)),
            )
        except BaseException as exc:  # a module broke the harness itself; still report
            res = {"status": "runtime_error", "detail": f"{type(exc).__name__}: {exc}"[:500]}
        try:
            chan.send(type="module", id=item["id"], result=res)
        except (TypeError, ValueError):
            chan.send(
                type="module", id=item["id"], result={"status": "runtime_error", "detail": "unserialisable result"}
            )
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
