"""Autotuning done once per kernel source and tuning key, for pool workers.

A Triton kernel under ``@triton.autotune`` (or a package's subclass of
Triton's ``Autotuner``, e.g. fla-core's ``fla_cache_autotune``) compiles and
benchmarks every config the first time it sees a tuning key (the values of
its ``key`` arguments and the tensors' dtypes). Each pool worker is a fresh
process with a private compile cache, so it did that again for every
candidate, every comparison shape and every dtype: fla-core's
``l2norm_fwd_kernel`` has 25 configs per key, and the original (the
reference) and every candidate that keeps a kernel unchanged tune the same
kernel again. Triton's own ``cache_results`` keeps results on disk, but in
the worker's private cache (a candidate can write there), and not at all
under the interpreter.

Here the result goes to the trusted side instead:

* in a worker (and the referee, and a project's test command through
  :func:`write_site_folder`), :func:`install` wraps
  ``Autotuner.prune_configs``, which Triton's ``run`` calls only for a key
  it has not tuned, just before benchmarking (a package's subclass that
  ends in ``super().run`` goes through it too; a launch of a tuned key costs
  nothing more). The record of (kernel source, device target and Triton
  version, tuning key, config list) is looked up in the records the parent
  handed over (a file read-only to the process); a hit returns its one
  config, which Triton takes without benchmarking. A miss is tuned as usual
  and its winner reported (:func:`flush`) to the process's own file;
* the parent (:class:`AutotuneStore`: one per device pool, one for the
  project's tests) reads that file after the job, keeps what passes its
  checks, and rewrites the files the next processes read; the records are
  also kept between commands (:func:`persist_path`).

Trust: what a worker or a candidate's tests report is untrusted: a record
can only name a config from the autotuner's own list (anything else is
ignored), and the first record of a key is kept (a later one cannot replace
it). The referee runs only the task's reference, and the tests of the
unmodified tree only the project's code: their records are trusted, replace
an untrusted one, and are all the referee reads, so the reference's configs
are never a candidate's choice. A candidate can at worst give a slower
config to a later candidate that shares its kernel source.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from typing import Any, Optional

KNOWN_ENV = "KERNELSMITH_AUTOTUNE_KNOWN"
NEW_ENV = "KERNELSMITH_AUTOTUNE_NEW"
#: what the parent reads of one worker's file
MAX_NEW_BYTES = 1 << 20
MAX_RECORDS = 20000
MAX_CONFIG_CHARS = 1000

_installed: dict[str, Any] = {}
_lock = threading.Lock()


def _kernel_identity(autotuner: Any) -> str:
    """The kernel's source identity: Triton's ``JITFunction.cache_key``
    (its source and the sources of what it calls), or, under the interpreter
    (no cache_key), a hash of the Python function's code."""
    jit = _innermost(autotuner.fn, lambda f: isinstance(getattr(f, "src", None), str) and hasattr(f, "parse"))
    if jit is not None:
        return _jit_identity(jit)
    # the interpreter's function: its compiled code, which is the same for
    # the same source wherever it was loaded from (a file, an exec'd string)
    fn = autotuner.fn
    while getattr(fn, "fn", None) is not None:
        fn = fn.fn
    return "code:" + hashlib.sha256(_code_text(getattr(fn, "__code__", None)).encode()).hexdigest()


def _innermost(fn: Any, test: Any) -> Any:
    """The first of ``fn``, ``fn.fn``, ``fn.fn.fn`` ... (an autotuner's
    wrappers: ``Heuristics``, a JITFunction) that passes ``test``, or None."""
    for _ in range(8):
        if fn is None:
            return None
        if test(fn):
            return fn
        fn = getattr(fn, "fn", None)
    return None


def _jit_identity(fn: Any) -> str:
    """What Triton's ``cache_key`` hashes (the source, the kernels it calls,
    the constexpr globals it uses) without its first-line number, which
    differs between the project's file and the evaluated program built from
    it (a header, markers): the same kernel, the same tuning. Falls back to
    the source alone where Triton's internals differ."""
    import inspect

    try:
        from triton.language.core import constexpr
        from triton.runtime.jit import DependenciesFinder

        finder = DependenciesFinder(
            name=fn._fn_name, globals=fn.__globals__, nonlocals=inspect.getclosurevars(fn.fn).nonlocals, src=fn.src
        )
        finder.visit(fn.parse())
        consts = sorted(
            (name, repr(val)) for (name, _), (val, _) in finder.used_global_vals.items() if isinstance(val, constexpr)
        )
        text = finder.ret + json.dumps(consts)
    except Exception:  # noqa: BLE001 - another Triton: the kernel's own source
        text = fn.src
    return "jit:" + hashlib.sha256(text.encode()).hexdigest()


def _code_text(code: Any) -> str:
    if code is None:
        return ""
    consts = [_code_text(c) if hasattr(c, "co_code") else repr(c) for c in code.co_consts]
    return json.dumps([code.co_code.hex(), consts, list(code.co_names), list(code.co_varnames)])


def _target() -> str:
    """Triton's version and the device target (timings are the device's)."""
    if "target" not in _installed:
        import triton

        if os.environ.get("TRITON_INTERPRET") == "1":
            _installed["target"] = f"triton {triton.__version__} interpreter"
        else:
            from triton.runtime import driver

            _installed["target"] = f"triton {triton.__version__} {driver.active.get_current_target()}"
    return _installed["target"]


def tuning_key(autotuner: Any, args: tuple, kwargs: dict[str, Any]) -> tuple:
    """The key Triton's ``Autotuner.run`` tunes under: the ``key`` arguments'
    values, then the dtype of every tensor argument (``args`` by position,
    ``kwargs`` by name)."""
    named = {**dict(zip(autotuner.arg_names, args)), **kwargs}
    named = {k: v for k, v in named.items() if k in autotuner.arg_names}
    key = [named[k] for k in autotuner.keys if k in named]
    key += [str(v.dtype) for v in named.values() if hasattr(v, "dtype")]
    return tuple(key)


def record_key(kernel: str, target: str, key: tuple, configs: list[Any]) -> str:
    text = json.dumps([kernel, target, [str(k) for k in key], sorted(str(c) for c in configs)])
    return hashlib.sha256(text.encode()).hexdigest()


def _stamp(path: Optional[str]) -> Optional[tuple[int, int]]:
    try:
        st = os.stat(path) if path else None
    except OSError:
        return None
    return None if st is None else (st.st_mtime_ns, st.st_size)


class _Handover:
    def __init__(self, known_path: Optional[str], new_path: Optional[str]) -> None:
        self.known: dict[str, str] = {}
        self.known_path = known_path
        self._stamp: Optional[tuple[int, int]] = None
        self._load()
        self.new_path = new_path
        self.handed = 0  # keys taken from the parent's records (nothing benchmarked)
        self.tuned = 0  # keys tuned here and reported
        # keys being tuned: (autotuner, tuning key, record key), reported by flush()
        # and what :func:`precompile` did for it
        self.pending: list[tuple[Any, tuple, str, dict[str, Any]]] = []

    def _load(self) -> None:
        """The parent's records, again when the file changed since: a
        process started before they were written (the referee of a pool
        started beside ``task init``'s tests) still takes them."""
        stamp = _stamp(self.known_path)
        if stamp is None or stamp == self._stamp or not self.known_path:
            return
        self._stamp = stamp
        try:
            with open(self.known_path, encoding="utf-8") as f:
                data = json.load(f)
            records = {str(k): str(v) for k, v in (data.get("records") or {}).items()}
        except (OSError, ValueError, AttributeError):
            return
        for key, config in records.items():
            self.known.setdefault(key, config)

    def lookup(self, rk: str) -> Optional[str]:
        if rk not in self.known:
            self._load()
        return self.known.get(rk)


def flush() -> int:
    """Report the keys tuned since the last flush (their winners are in the
    autotuners' caches by now): into this process's known records, for the
    same kernel under another autotuner (the reference's next to a
    candidate's), and to the parent's file. Called before a worker reports
    its result, after each referee request, at a test process's exit, and
    when the next key is tuned. The number reported."""
    state: Optional[_Handover] = _installed.get("handover")
    if state is None or not state.pending:
        return 0
    lines, waiting = [], []
    for tuner, key, rk, compiled in state.pending:
        config = tuner.cache.get(key)
        if config is None:
            waiting.append((tuner, key, rk, compiled))
            continue
        state.known.setdefault(rk, str(config))
        state.tuned += 1
        lines.append(
            json.dumps(
                {
                    "key": rk,
                    "config": str(config),
                    "kernel": getattr(getattr(tuner, "base_fn", None), "__name__", ""),
                    "precompile": compiled,
                }
            )
        )
    state.pending = waiting
    if lines and state.new_path:
        try:
            with open(state.new_path, "a", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in lines))
        except OSError:
            pass
    return len(lines)


#: ``off``: a key's configs are compiled one after the other inside Triton's
#: benchmark, as Triton does; otherwise (the default) side by side in forked
#: children first (:func:`precompile`)
PRECOMPILE_ENV = "KERNELSMITH_AUTOTUNE_PRECOMPILE"
#: at most this many compiles at once (default: the cores this process may
#: run on, at most 16)
PROCS_ENV = "KERNELSMITH_AUTOTUNE_COMPILE_PROCS"
#: a forked compile that runs longer is stopped (Triton then compiles that
#: config itself)
PRECOMPILE_TIMEOUT_S = 120.0


def compile_procs(configs: int) -> int:
    """How many compiles :func:`precompile` runs at once for ``configs`` configs."""
    value = os.environ.get(PROCS_ENV, "")
    try:
        cap = int(value) if value else min(16, len(os.sched_getaffinity(0)))
    except (ValueError, OSError):
        cap = 1
    return max(0, min(cap, configs))


def precompile(autotuner: Any, configs: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Compile the ``configs`` of a key about to be tuned side by side, so
    that Triton's benchmark of each config (one after the other, each
    compiling first) finds it in its compile cache. fla-core tunes 25
    configs a key; on the H200 its tests spent 143 of 156 s in the compiler
    (``benchmarks/bench_autotune_compile.py``). The compiles are the ones
    Triton's ``_bench`` would make: the same arguments and config keywords
    through the kernel's own ``run`` with ``warmup=True`` (no launch). Each runs
    in a forked child of this process that only compiles (the GPU is never
    touched there: the device and stream are the parent's, the target was
    read by the parent) and writes Triton's compile cache, which the
    parent's benchmark then reads; a config that fails or outlives
    ``PRECOMPILE_TIMEOUT_S`` is left to Triton's benchmark, which reports it
    as it always did. Nothing under the interpreter. What was done:
    ``{"mode", "configs", "compiled", "seconds"}``."""
    import time

    mode = "off" if os.environ.get(PRECOMPILE_ENV, "").strip().lower() in ("off", "0", "none") else "fork"
    done: dict[str, Any] = {"mode": mode, "configs": len(configs), "compiled": 0, "seconds": 0.0}
    procs = compile_procs(len(configs))
    if mode == "off" or procs < 2 or os.environ.get("TRITON_INTERPRET") == "1":
        done["mode"] = "off"
        return done
    nargs = getattr(autotuner, "nargs", None) or {}
    args = [nargs[name] for name in autotuner.arg_names if name in nargs]
    run = getattr(autotuner.fn, "run", None)
    if not callable(run) or len(args) != len(nargs):
        done["mode"] = "off"
        return done
    # what Triton's _bench calls, self.fn.run(*args, **kwargs, **config), where
    # kwargs carry the launch's grid and warmup=False: here warmup=True
    # (compile, no launch)
    kwargs = {**kwargs, "warmup": True}
    kwargs.setdefault("grid", (1,))

    def warmup(config: Any) -> Any:
        return run(*args, **kwargs, **config.all_kwargs())

    started = time.monotonic()
    try:
        done["compiled"], errors = _precompile_forked(autotuner, warmup, configs, procs)
    except Exception as exc:  # noqa: BLE001 - Triton tunes as it would have without this
        errors = [f"{type(exc).__name__}: {exc}"]
    if errors:  # what failed to compile, as the compiler said it (Triton's benchmark says it again)
        done["error"] = errors[0][:300]
        done["errors"] = len(errors)
    done["seconds"] = round(time.monotonic() - started, 3)
    return done


def _precompile_forked(autotuner: Any, warmup: Any, configs: list[Any], procs: int) -> tuple[int, list[str]]:
    import fcntl
    import signal
    import time
    import warnings

    from triton.runtime import driver

    jit = _innermost(autotuner.fn, lambda f: hasattr(f, "device_caches") and hasattr(f, "run"))
    if jit is None:
        return 0, ["no JITFunction under the autotuner"]
    active = driver.active
    device = active.get_current_device()
    jit.device_caches[device]  # the binder and the target, read here: a child must not touch the GPU
    read_end, write_end = os.pipe()  # a failed child's one line: why
    pending = list(configs)
    running: dict[int, float] = {}
    compiled = 0
    try:
        while pending or running:
            while pending and len(running) < procs:
                config = pending.pop(0)
                with warnings.catch_warnings():  # Python 3.12: "multi-threaded, use of fork() may lead to deadlocks"
                    warnings.simplefilter("ignore", DeprecationWarning)
                    pid = os.fork()
                if pid == 0:  # the child: compile one config into the cache, nothing else
                    code = 1
                    try:
                        os.close(read_end)
                        active.get_current_device = lambda: device
                        active.get_current_stream = lambda *a, **k: 0
                        warmup(config)
                        code = 0
                    except BaseException as exc:  # noqa: BLE001 - reported, then left to Triton's benchmark
                        try:
                            fcntl.fcntl(write_end, fcntl.F_SETFL, os.O_NONBLOCK)  # a full pipe drops the line
                            line = f"{config}: {type(exc).__name__}: {exc}".replace("\n", " ")[:400]
                            os.write(write_end, (line + "\n").encode("utf-8", "replace"))
                        except BaseException:  # noqa: BLE001
                            pass
                    finally:
                        os._exit(code)
                running[pid] = time.monotonic()
            time.sleep(0.005)
            for pid, since in list(running.items()):
                try:
                    got, status = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    running.pop(pid)
                    continue
                if got == pid:
                    running.pop(pid)
                    compiled += int(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0)
                elif time.monotonic() - since > PRECOMPILE_TIMEOUT_S:
                    os.kill(pid, signal.SIGKILL)
    finally:
        for pid in running:  # only after a failure here: none outlives this call
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as f:
            errors = f.read(1 << 16).decode("utf-8", "replace").splitlines()
    return compiled, errors


#: ``WARMUP,REP`` in milliseconds: how long each config of a key is
#: benchmarked where the autotuner uses Triton's default benchmark (Triton's
#: own default is 25,100); ``triton`` keeps Triton's. An autotuner given its
#: own ``do_bench``, ``warmup``/``rep`` or CUDA graphs is never changed.
BENCH_ENV = "KERNELSMITH_AUTOTUNE_BENCH_MS"
DEFAULT_BENCH_MS = (5.0, 20.0)


def bench_ms() -> Optional[tuple[float, float]]:
    """The (warm-up, repetition) budget in ms of :func:`shorten_benchmark`,
    or None to leave Triton's default alone."""
    value = os.environ.get(BENCH_ENV, "").strip().lower()
    if value in ("triton", "off", "default", "0"):
        return None
    if not value:
        return DEFAULT_BENCH_MS
    try:
        warm, _, rep = value.partition(",")
        pair = (float(warm), float(rep or warm))
    except ValueError:
        return DEFAULT_BENCH_MS
    return pair if pair[0] >= 0 and pair[1] > 0 else DEFAULT_BENCH_MS


def shorten_benchmark(autotuner: Any) -> str:
    """Benchmark this autotuner's configs for :func:`bench_ms` instead of
    Triton's default 25 ms of warm-up and 100 ms of repetitions per config.
    fla-core's tests tune 14 keys of up to 25 configs: on the H100 the
    default benchmark took 3.1 s a key, more than the side-by-side compile
    (1.35 s; ``benchmarks/prof_autotune_parallel.py``). For a kernel of a few
    microseconds 20 ms is still thousands of calls, and a kernel of a
    millisecond gets 20; Triton takes the median either way. Only an
    autotuner on Triton's default benchmark is changed (no ``do_bench``,
    ``warmup``, ``rep`` or CUDA graphs of its own). What was used, or "" when
    nothing was changed."""
    budget = bench_ms()
    if (
        budget is None
        or not hasattr(autotuner, "_do_bench")
        or autotuner._do_bench is not None
        or getattr(autotuner, "num_warmups", None) is not None
        or getattr(autotuner, "num_reps", None) is not None
        or getattr(autotuner, "use_cuda_graph", False)
    ):
        return ""
    try:
        from triton.testing import do_bench
    except ImportError:
        return ""
    warm, rep = budget

    def bench(kernel_call: Any, quantiles: Any) -> Any:
        return do_bench(kernel_call, warmup=warm, rep=rep, quantiles=quantiles)

    # Triton reads ``do_bench`` through a cached property: the instance's
    # own attribute comes first, whether or not the property was read before
    autotuner.__dict__["do_bench"] = bench
    return f"{warm:g},{rep:g} ms"


def install(known_path: Optional[str] = None, new_path: Optional[str] = None) -> Optional[_Handover]:
    """Wrap Triton's ``Autotuner.prune_configs`` in this process (once); the
    paths default to the environment (``KERNELSMITH_AUTOTUNE_KNOWN`` / ``_NEW``).

    ``prune_configs`` is what Triton's ``run`` calls when a tuning key is not
    in the autotuner's cache, just before it benchmarks the configs it
    returns (and only then): a known record returns its one config, which
    Triton takes without benchmarking. A launch of a key already tuned costs
    nothing more than before (the timed calls go through ``run`` untouched)."""
    known_path = known_path or os.environ.get(KNOWN_ENV)
    new_path = new_path or os.environ.get(NEW_ENV)
    if not known_path and not new_path:
        return None
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        return None
    with _lock:
        flush()  # what an earlier installation tuned goes to its own file
        handover = _Handover(known_path, new_path)
        _installed["handover"] = handover
        if "original" in _installed:
            return handover
        original = Autotuner.prune_configs
        _installed["original"] = original

    def prune_configs(self: Any, kwargs: dict[str, Any], *rest: Any, **more: Any) -> Any:
        pruned = original(self, kwargs, *rest, **more)
        state: Optional[_Handover] = _installed.get("handover")
        if state is None or len(pruned) < 2:
            return pruned
        try:
            flush()
            key = tuning_key(self, (), {**(getattr(self, "nargs", None) or {}), **kwargs})
            rk = record_key(_kernel_identity(self), _target(), key, list(self.configs))
            chosen = state.lookup(rk)
            match = next((c for c in pruned if str(c) == chosen), None) if chosen else None
        except Exception:  # noqa: BLE001 - a key we cannot build: Triton tunes as it would anyway
            return pruned
        if match is not None:
            state.handed += 1
            return [match]
        compiled = precompile(self, pruned, kwargs)
        bench = shorten_benchmark(self)
        if bench:
            compiled = {**compiled, "bench": bench}
        state.pending.append((self, key, rk, compiled))
        return pruned

    Autotuner.prune_configs = prune_configs  # type: ignore[method-assign]
    return handover


def uninstall() -> None:
    """Triton's own ``Autotuner.prune_configs`` again (tests)."""
    with _lock:
        original = _installed.pop("original", None)
        _installed.pop("handover", None)
        if original is not None:
            from triton.runtime.autotuner import Autotuner

            Autotuner.prune_configs = original  # type: ignore[method-assign]


def install_when_imported() -> None:
    """:func:`install` as soon as Triton's autotuner module is imported (now
    if it is): for a process that may never import Triton (the project's
    test command and its subprocesses), which then pays nothing."""
    import sys

    import atexit

    atexit.register(flush)  # a test process exits normally: what it tuned goes to the parent
    if "triton.runtime.autotuner" in sys.modules:
        install()
        return
    import importlib.abc
    import importlib.machinery

    class _Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
            if name != "triton.runtime.autotuner":
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            loader = getattr(spec, "loader", None)
            if loader is None or not hasattr(loader, "exec_module"):
                return spec
            run_module = loader.exec_module

            def exec_module(module: Any) -> None:
                run_module(module)
                sys.meta_path[:] = [f for f in sys.meta_path if f is not finder]
                install()

            loader.exec_module = exec_module  # type: ignore[method-assign]
            return spec

    finder = _Finder()
    sys.meta_path.insert(0, finder)


#: the ``sitecustomize`` of a project's test command: hands the results over
#: there too, then runs the environment's own sitecustomize, if any
_SITECUSTOMIZE = """# kernelsmith: Triton autotune results handed over (kernelsmith/backends/triton/autotune.py)
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
if os.environ.get("KERNELSMITH_AUTOTUNE_KNOWN") or os.environ.get("KERNELSMITH_AUTOTUNE_NEW"):
    try:
        import _ks_triton_autotune
        _ks_triton_autotune.install_when_imported()
    except Exception as exc:  # the tests run as they would without it
        print(f"kernelsmith: autotune hand-over not installed: {exc}", file=sys.stderr)
try:
    import importlib.machinery
    import importlib.util

    _spec = importlib.machinery.PathFinder.find_spec(
        "sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != _here])
    if _spec is not None and _spec.loader is not None:
        _module = importlib.util.module_from_spec(_spec)
        _spec.loader.exec_module(_module)
except Exception:
    pass
"""


def write_site_folder(folder: str) -> str:
    """A folder to put first on a process's PYTHONPATH: its sitecustomize
    installs the hand-over (this file, copied: the process need not be able
    to import kernelsmith)."""
    os.makedirs(folder, mode=0o755, exist_ok=True)
    with open(os.path.join(folder, "sitecustomize.py"), "w", encoding="utf-8") as f:
        f.write(_SITECUSTOMIZE)
    with (
        open(__file__, encoding="utf-8") as src,
        open(os.path.join(folder, "_ks_triton_autotune.py"), "w", encoding="utf-8") as dst,
    ):
        dst.write(src.read())
    # the trusted kernel layer's reader, for TRITON_CACHE_MANAGER (SITE_CACHE_MANAGER)
    # lazy: backends.triton.cache pulls in triton, which backends.triton.autotune does not load on its own
    from . import cache as _triton_cache

    with (
        open(_triton_cache.__file__, encoding="utf-8") as src,
        open(os.path.join(folder, "_ks_triton_cache.py"), "w", encoding="utf-8") as dst,
    ):
        dst.write(src.read())
    return folder


#: ``TRITON_CACHE_MANAGER`` for a process with :func:`write_site_folder`'s folder on its path
SITE_CACHE_MANAGER = "_ks_triton_cache:LayeredCacheManager"
#: the same for the trusted test run that seeds the layer from the user's cache
SITE_SEEDING_MANAGER = "_ks_triton_cache:SeedingCacheManager"


#: the records kept between commands (``task init``, then ``evolve``): a JSON
#: file; ``KERNELSMITH_AUTOTUNE_CACHE`` names another, ``off`` keeps none
CACHE_ENV = "KERNELSMITH_AUTOTUNE_CACHE"


def persist_path() -> Optional[str]:
    value = os.environ.get(CACHE_ENV, "")
    if value.lower() in ("off", "0", "none"):
        return None
    if value:
        return value
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "kernelsmith", "triton-autotune.json")


def store_folder(root: str) -> str:
    """Where a device pool rooted at ``root`` keeps its store (the referee reads it too)."""
    return os.path.join(root, "autotune")


def _valid(key: Any, config: Any) -> bool:
    return (
        isinstance(key, str)
        and len(key) == 64
        and all(c in "0123456789abcdef" for c in key)
        and isinstance(config, str)
        and 0 < len(config) <= MAX_CONFIG_CHARS
    )


class AutotuneStore:
    """The parent's autotune records for one device pool (or one command's
    project tests).

    Records come from processes that run candidate code (workers, the
    project's tests: untrusted; the first record of a key is kept, a later
    one cannot replace it) and from the referee (trusted: it runs only the
    task's reference; its record replaces an untrusted one). ``known_path``
    holds all of them, for workers and tests; ``trusted_path`` only the
    trusted ones, for the referee, so the reference's configs are never a
    candidate's choice. Both are rewritten after each change, read-only to
    the processes that read them. The records are also kept in
    :func:`persist_path` (merged, the same rules), so the ``evolve`` after a
    ``task init`` does not tune again."""

    def __init__(self, folder: str, persist: Optional[str] = "default") -> None:
        os.makedirs(folder, mode=0o755, exist_ok=True)
        os.chmod(folder, 0o755)
        self.known_path = os.path.join(folder, "known.json")
        self.trusted_path = os.path.join(folder, "trusted.json")
        self.site_dir: Optional[str] = None  # write_site_folder's, for a process started by a command
        self.persist_path = persist_path() if persist == "default" else persist
        self.records: dict[str, str] = {}
        self.trusted: set[str] = set()  # keys whose record the referee made
        self.rejected = 0
        self._lock = threading.Lock()
        self._persist_stamp = _stamp(self.persist_path)
        if self.persist_path:
            self._merge(self._read_persisted())
        self._write()

    def refresh(self) -> int:
        """Take what another store kept in :func:`persist_path` since this
        one last read it (``task init``'s tests, finished after a pool that
        was started beside them made its store); the number kept."""
        stamp = _stamp(self.persist_path)
        if stamp is None or stamp == self._persist_stamp:
            return 0
        with self._lock:
            self._persist_stamp = stamp
            kept = self._merge(self._read_persisted())
            if kept:
                self._write()
        return kept

    def job_paths(self, workdir: str) -> dict[str, str]:
        """The two paths a job's worker is given."""
        return {"known": self.known_path, "new": os.path.join(workdir, ".ks-autotune.jsonl")}

    def absorb(self, new_path: str, trusted: bool = False) -> int:
        """Take a finished process's records; the number kept."""
        try:
            if os.path.islink(new_path) or not os.path.isfile(new_path):
                return 0
            with open(new_path, "rb") as f:
                data = f.read(MAX_NEW_BYTES)
        except OSError:
            return 0
        entries = []
        for raw in data.decode("utf-8", errors="replace").splitlines():
            try:
                entry = json.loads(raw)
                key, config = entry["key"], entry["config"]
            except (ValueError, KeyError, TypeError):
                self.rejected += 1
                continue
            if not _valid(key, config):
                self.rejected += 1
                continue
            entries.append((key, config, trusted))
        with self._lock:
            kept = self._merge(entries)
            if kept:
                self._write()
                self._persist()
        return kept

    def _merge(self, entries: list[tuple[str, str, bool]]) -> int:
        kept = 0
        for key, config, trusted in entries:
            if trusted:
                if key in self.trusted:
                    continue  # the referee's first record stays too
                self.trusted.add(key)
            elif key in self.records or len(self.records) >= MAX_RECORDS:
                continue  # the first record of a key stays
            self.records[key] = config
            kept += 1
        return kept

    def _read_persisted(self) -> list[tuple[str, str, bool]]:
        try:
            with open(self.persist_path, encoding="utf-8") as f:  # type: ignore[arg-type]
                data = json.load(f)
            trusted = set(data.get("trusted") or [])
            return [(k, v, k in trusted) for k, v in (data.get("records") or {}).items() if _valid(k, v)]
        except (OSError, ValueError, AttributeError, TypeError):
            return []

    def _persist(self) -> None:
        if not self.persist_path:
            return
        try:
            # another command may have added records since: theirs and ours, the same rules
            self._merge(self._read_persisted())
            os.makedirs(os.path.dirname(self.persist_path) or ".", exist_ok=True)
            self._dump(self.persist_path, self.records, sorted(self.trusted))
        except OSError:
            pass  # a cache: without it the next command tunes again

    def _write(self) -> None:
        self._dump(self.known_path, self.records)
        self._dump(self.trusted_path, {k: v for k, v in self.records.items() if k in self.trusted})

    @staticmethod
    def _dump(path: str, records: dict[str, str], trusted: Optional[list[str]] = None) -> None:
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"records": records, **({"trusted": trusted} if trusted is not None else {})}, f)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)


__all__ = [
    "AutotuneStore",
    "flush",
    "install",
    "install_when_imported",
    "persist_path",
    "record_key",
    "store_folder",
    "tuning_key",
    "uninstall",
    "write_site_folder",
]
