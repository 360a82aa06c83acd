"""The trusted referee: the comparison the candidate cannot reach.

The worker compares the program's outputs with the reference in the process
the program runs in, so a program could forge that comparison (patch it,
poison the reference). The referee is a separate process per device that
never runs candidate code. After a worker reports a correct result, the
parent hands the referee the task, the two seeds it issued for one trial
(the model's and the inputs'; the parent drew them, the worker only names
which), and the file of outputs the worker wrote for that trial: the
program's and the in-worker reference's. The referee builds the reference
itself from those seeds, on the same device, and compares:

* the program's outputs against its reference: a mismatch the worker called
  correct is a forged verdict (``hacked``);
* the worker's reference against its own: a mismatch means the reference
  next to the program was tampered with (``hacked``). Both build the
  reference the same way from the same seeds (``get_init_inputs`` under a
  fixed seed), so an honest run always agrees within the tolerance.

The outputs file is untrusted input: a JSON header line, then the raw bytes;
counts, dtypes and sizes are checked before anything is read.

Protocol: JSON lines on stdin (requests) and stdout (answers).
"""
from __future__ import annotations

import json
import os
import sys
import types
from typing import Any, Optional

from .._process import kill_group
from ..task import Task
from .probes import assess, input_generator, set_names as probe_sets
from .memory import Footprint, model_bytes, tensor_bytes
from .timing import TimingOutcome, combine_shapes

#: limits on an outputs file (written by untrusted code)
MAX_TENSORS = 64
MAX_BYTES = 1 << 31
DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool",
          "complex64")


_MODULES: dict[str, Any] = {}  # referee process: reference source -> its loaded module


def evidence_limit(outputs_bytes: int = 0) -> int:
    """The largest outputs file accepted for a task whose largest output set
    is ``outputs_bytes`` (memory.Footprint): both groups and a header, and
    never less than MAX_BYTES (a 4096 x 393216 fp32 output alone is 6 GiB)."""
    return max(MAX_BYTES, 2 * int(outputs_bytes) + (1 << 20))


#: an output tensor of more elements than this goes to the referee as a
#: sample (EVIDENCE_SAMPLE positions drawn from the trial's input seed, plus
#: EVIDENCE_EDGE elements at each end): a 4096 x 393216 fp32 output and its
#: reference were 12 GiB copied to the host, written, copied by the parent
#: and read back per input set, most of a KernelBench level-1 evaluation
EVIDENCE_FULL_ELEMENTS = 1 << 23
EVIDENCE_SAMPLE = 1 << 22
EVIDENCE_EDGE = 1 << 16


def evidence_positions(numel: int, input_seed: int) -> Optional[Any]:
    """The flat positions of an output of ``numel`` elements that the worker
    hands over and the referee checks, or None for all of them. The worker
    and the referee derive the same positions from the trial's input seed
    (which the worker drew its inputs from anyway): whoever could steer them
    already writes the whole file."""
    import torch

    if numel <= EVIDENCE_FULL_ELEMENTS:
        return None
    gen = torch.Generator().manual_seed((int(input_seed) * 0x9E3779B1 + 0x5EED) % (1 << 63))
    inner = torch.randint(EVIDENCE_EDGE, numel - EVIDENCE_EDGE, (EVIDENCE_SAMPLE,), generator=gen)
    return torch.cat([torch.arange(EVIDENCE_EDGE), inner, torch.arange(numel - EVIDENCE_EDGE, numel)])


def evidence_copy(tensors: list[Any], input_seed: int) -> list[Any]:
    """Worker side: the host copy of one trial's outputs for the referee,
    each tensor whole or, when large, as :func:`evidence_positions`' sample
    (gathered on its device first) paired with its full shape."""
    out = []
    for t in tensors:
        t = t.detach()
        pos = evidence_positions(t.numel(), input_seed)
        if pos is None:
            out.append(t.to("cpu", copy=True))
        else:
            out.append(Sampled(t.reshape(-1)[pos.to(t.device)].to("cpu"), list(t.shape)))
    return out


class Sampled:
    """A sample of an output (its elements at :func:`evidence_positions`)
    and the output's full shape, for the outputs file."""

    def __init__(self, values: Any, of: list[int]) -> None:
        self.values, self.of = values, of


def _raw_views(groups: dict[str, list[Any]]) -> tuple[bytes, list[Any]]:
    """The header line and each tensor's bytes as a view (no copy of a
    contiguous host tensor); a :class:`Sampled` entry also names the shape
    it was sampled from (``of``)."""
    import torch

    header: dict[str, list[dict[str, Any]]] = {}
    views = []
    for name, tensors in groups.items():
        header[name] = []
        for t in tensors:
            of = t.of if isinstance(t, Sampled) else None
            t = (t.values if isinstance(t, Sampled) else t).detach().to("cpu").contiguous()
            raw = t.reshape(-1).view(torch.uint8).numpy() if t.numel() else b""
            entry = {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape), "nbytes": len(raw)}
            if of is not None:
                entry["of"] = list(of)
            header[name].append(entry)
            views.append(raw)
    return (json.dumps(header) + "\n").encode(), views


def encode_outputs(groups: dict[str, list[Any]]) -> bytes:
    """The outputs file's bytes for the tensors of each group (``candidate``,
    ``reference``): a JSON header line, then each tensor's raw bytes."""
    head, views = _raw_views(groups)
    return b"".join([head, *(bytes(v) for v in views)])


def write_outputs(path: str, groups: dict[str, list[Any]]) -> None:
    """Worker side: :func:`encode_outputs` written to ``path`` a tensor at a
    time (a 6 GiB output is not copied into one more bytes object)."""
    head, views = _raw_views(groups)
    with open(path, "wb") as f:
        f.write(head)
        for view in views:
            f.write(view)


def read_outputs(path: str, limit: int = MAX_BYTES) -> dict[str, list[Any]]:
    """Referee side: the groups back, validated; ``limit`` is the largest
    file accepted (:func:`evidence_limit`). A sampled entry comes back as a
    :class:`Sampled` (its values, the full shape it names)."""
    import torch

    size = os.path.getsize(path)
    if size > limit:
        raise ValueError(f"outputs file of {size} bytes is over the limit")
    with open(path, "rb") as f:
        header = json.loads(f.readline(1 << 20) or b"{}")
        if not isinstance(header, dict) or sum(len(v) for v in header.values() if isinstance(v, list)) > MAX_TENSORS:
            raise ValueError("bad outputs header")
        out: dict[str, list[Any]] = {}
        for name in ("candidate", "reference"):
            out[name] = []
            for entry in header.get(name, []):
                dtype, shape, nbytes = entry["dtype"], [int(d) for d in entry["shape"]], int(entry["nbytes"])
                if dtype not in DTYPES or any(d < 0 for d in shape):
                    raise ValueError(f"bad tensor entry {entry}")
                tdtype = getattr(torch, dtype)
                numel = 1
                for d in shape:
                    numel *= d
                if numel * torch.empty(0, dtype=tdtype).element_size() != nbytes:
                    raise ValueError(f"tensor entry {entry}: size does not match its shape")
                raw = bytearray(nbytes)  # read into, not read and copy: one copy of a large output
                view, got = memoryview(raw), 0
                while got < nbytes:
                    n = f.readinto(view[got:got + (1 << 30)])
                    if not n:
                        raise ValueError("outputs file is truncated")
                    got += n
                flat = torch.frombuffer(raw, dtype=torch.uint8) if nbytes else torch.empty(0, dtype=torch.uint8)
                value = flat.view(tdtype).reshape(shape) if nbytes else torch.empty(shape, dtype=tdtype)
                of = entry.get("of")
                if of is not None:
                    if not isinstance(of, list) or len(of) > 16 or any(not isinstance(d, int) or d < 0 for d in of):
                        raise ValueError(f"bad tensor entry {entry}")
                    value = Sampled(value, of)
                out[name].append(value)
    return out


#: the last reference model built, by (reference source, init seed, dtype),
#: kept on the host: the referee holds no device memory between requests
_LAST_MODEL: dict = {}


def _release_device_memory() -> None:
    """Give the allocator's cached blocks back to the device after a request
    (a referee that kept them held 72.6 GiB of an 80 GB card)."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def _model_on_device(ref: Any, init_seed: int, key: tuple, device: str, dtype: Any) -> Any:
    """The reference model for ``init_seed`` on ``device``: built on the host
    once per seed (the trials the worker names share one), copied to the
    device per request and dropped with it. A model whose constructor put
    tensors on the device itself is not kept."""
    import copy

    import torch

    # lazy: cycle evaluator.referee -> evaluator.worker -> evaluator.protocol -> evaluator.referee
    from .worker import _init_inputs

    host = _LAST_MODEL.get(key)
    if host is None:
        init_inputs = _init_inputs(ref)
        torch.manual_seed(init_seed)
        host = ref.Model(*init_inputs)
        _LAST_MODEL.clear()
        if all(t.device.type == "cpu" for t in list(host.parameters()) + list(host.buffers())):
            _LAST_MODEL[key] = host
            host = copy.deepcopy(host)
    return host.to(device=device, dtype=dtype).eval()


def prime(req: dict[str, Any], backend: Any) -> dict[str, Any]:
    """Warm-up for one task before any candidate: load its reference, build
    the model and run it once on each input set, so the first candidates of
    a task do not pay the module load and the libraries' first use (a
    cuBLAS handle, cuDNN, lazily loaded kernels: 0.1-0.4 s per task on the
    H200) on their clock. The reference is the task's trusted code, which
    this process runs for every check anyway."""
    import torch

    # lazy: evaluator.correctness pulls in torch, numpy, which evaluator.referee does not load on its own
    from . import correctness as cmp
    # lazy: cycle evaluator.referee -> evaluator.checks -> evaluator.checks.referee_evidence -> evaluator.referee
    from .checks.trivial_output import trivial_outputs
    # lazy: cycle evaluator.referee -> evaluator.worker -> evaluator.protocol -> evaluator.referee
    from .worker import _init_inputs, draw_inputs

    task = Task.from_dict(req["task"])
    ref = _reference_module(task, req)
    device, dtype = backend.device(), getattr(torch, task.config.dtype)
    on_cuda = device == "cuda"
    cmp.set_comparison(getattr(task.config, "comparison", None))  # a task's accuracy contract (KernelBench-X)
    torch.manual_seed(0)
    model = ref.Model(*_init_inputs(ref)).to(device=device, dtype=dtype).eval()
    sets = ["get_inputs", *[str(s) for s in task.config.extra_inputs if hasattr(ref, str(s))]]
    degenerate: list[str] = []
    probes: dict[str, Any] = {}
    # the task's footprint (memory.Footprint), measured here once: what the
    # parent admits workers by and attributes out-of-memory faults with
    footprint = Footprint(params_bytes=model_bytes(model), measured="allocator" if on_cuda else "sizes")
    with torch.no_grad():
        for name in sets:
            torch.manual_seed(0)
            inputs = draw_inputs(getattr(ref, name), device, dtype)
            if on_cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                before = torch.cuda.memory_allocated()
            raw = cmp.flatten_outputs(model(*inputs))
            backend.synchronize()
            out_bytes = tensor_bytes(raw)
            peak = torch.cuda.max_memory_allocated() - before if on_cuda else out_bytes
            footprint.inputs_bytes = max(footprint.inputs_bytes, tensor_bytes(inputs))
            footprint.outputs_bytes = max(footprint.outputs_bytes, out_bytes)
            footprint.peak_bytes = max(footprint.peak_bytes, peak, out_bytes)
            outputs = cmp.snapshot(raw)
            del raw
            if name == "get_inputs":
                # the trivial outputs this task's tolerance cannot tell from
                # the reference's: decided here, by trusted code, once per
                # task, instead of in every candidate's worker (0.17 s each)
                atol, rtol = task.config.tolerances()
                degenerate = sorted(trivial_outputs(cmp, outputs, inputs, atol, rtol))
                if degenerate:  # which probe input sets judge it instead (probes.py)
                    probes = assess(model, degenerate, inputs, outputs, atol, rtol, backend.synchronize)
            del inputs, outputs
    backend.synchronize()
    return {"primed": sets, "degenerate": degenerate, "footprint": footprint.to_dict(),
            **({"probes": probes} if degenerate else {})}


def load(req: dict[str, Any]) -> dict[str, Any]:
    """Load a task's reference (its module: the imports, no forward), ahead
    of the first priming: ``task init`` asks it while the project's tests
    run, so a package's import (fla-core: 5-8 s) is paid beside them."""
    _reference_module(Task.from_dict(req["task"]), req)
    return {"loaded": True}


def prime_key(task: Any) -> str:
    """What a priming depends on: the reference, its input sets, the tolerance."""
    return json.dumps([task.reference_source, list(task.config.extra_inputs), list(task.config.tolerances()),
                       task.config.dtype])


def _reference_file(source: str) -> str:
    """A file holding ``source`` in the referee's working folder (the
    parent's, which it removes with the pool)."""
    import hashlib

    path = os.path.join(os.getcwd(), f"reference_{hashlib.sha256(source.encode()).hexdigest()[:16]}.py")
    if not os.path.exists(path):
        with open(path, "w", encoding="utf-8") as f:
            f.write(source)
    return path


def _reference_module(task: Any, req: dict[str, Any]) -> Any:
    """The task's trusted reference, loaded once per task."""
    key = task.reference_source
    ref = _MODULES.get(key)
    if ref is None:
        ref = types.ModuleType("ks_referee_reference")
        # from a file of its own, as the worker loads it: Triton's @jit reads
        # its functions' source from their file (a reference that launches
        # Triton kernels, as an in-place task's does, raised "@jit functions
        # should be defined in a Python file" here, and every result of such
        # a task went unchecked and unreliable)
        ref.__file__ = _reference_file(task.reference_source)
        sys.modules["ks_referee_reference"] = ref
        exec(compile(task.reference_source, ref.__file__, "exec", dont_inherit=True), ref.__dict__)  # noqa: S102
        if len(_MODULES) >= 64:
            _MODULES.clear()
        _MODULES[key] = ref
    return ref


def check(req: dict[str, Any], backend: Any) -> dict[str, Any]:
    """One request: rebuild the reference for the trial and compare."""
    import torch

    # lazy: evaluator.correctness pulls in torch, numpy, which evaluator.referee does not load on its own
    from . import correctness as cmp
    # lazy: cycle evaluator.referee -> evaluator.worker -> evaluator.protocol -> evaluator.referee
    from .worker import draw_inputs

    task = Task.from_dict(req["task"])
    cfg = task.config
    device, dtype = backend.device(), getattr(torch, cfg.dtype)
    atol, rtol = cfg.tolerances()
    cmp.set_comparison(getattr(cfg, "comparison", None))  # a task's accuracy contract (KernelBench-X)
    key = task.reference_source
    ref = _reference_module(task, req)
    # The trials the worker names (the last of each input set) share one
    # init seed: their model is built once, as the worker built it once.
    model = _model_on_device(ref, int(req["init_seed"]), (key, int(req["init_seed"]), cfg.dtype), device, dtype)
    gen = input_generator(ref, str(req.get("set", "get_inputs")))  # a probe set too (probes.py)
    if gen is None:
        raise ValueError(f"the task has no input set {str(req.get('set'))[:80]}")
    torch.manual_seed(int(req["input_seed"]))
    inputs = draw_inputs(gen, device, dtype)
    with torch.no_grad():
        expected = cmp.snapshot(cmp.flatten_outputs(model(*inputs)))
    backend.synchronize()
    del model, inputs  # only the expected outputs stay on the device for the comparison
    try:
        groups = read_outputs(req["file"], int(req.get("max_bytes") or MAX_BYTES))
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError, RuntimeError, MemoryError) as exc:
        # the file is the worker's evidence, written where candidate code
        # runs: one the referee cannot read is the program's doing
        return {"malformed": f"{type(exc).__name__}: {exc}"[:1000]}
    # a large output is checked at the positions the worker sampled (the
    # referee's choice, by its own output's size: evidence_positions)
    shapes_wanted, sampled_wanted, compared = [], [], []
    for e in expected:
        pos = evidence_positions(e.numel(), int(req["input_seed"]))
        shapes_wanted.append(list(e.shape))
        sampled_wanted.append(pos is not None)
        compared.append(e if pos is None else e.reshape(-1)[pos.to(e.device)])
    del expected
    answer: dict[str, Any] = {}
    for name in ("candidate", "reference"):
        host = groups.pop(name)
        shapes = [g.of if isinstance(g, Sampled) else list(g.shape) for g in host]
        sampled = [isinstance(g, Sampled) for g in host]
        if shapes != shapes_wanted or sampled != sampled_wanted:
            answer[name] = f"{len(host)} outputs of shapes {shapes} (sampled {sampled}), expected " \
                           f"{shapes_wanted} (sampled {sampled_wanted})"
            continue
        # one group on the device at a time, compared in chunks
        got = [(g.values if isinstance(g, Sampled) else g).to(device) for g in host]
        del host
        res = cmp.compare(got, compared, atol, rtol)
        del got
        answer[name] = "" if res["ok"] else res["message"] + (" (at the sampled positions)" if any(sampled) else "")
    return answer


def main() -> None:
    # lazy: cycle evaluator.referee -> evaluator.worker -> evaluator.protocol -> evaluator.referee
    from .worker import prepare

    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything printed by a task's reference goes to the log
    backend = prepare(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2] != "0" else None)
    autotune = bool(os.environ.get("KERNELSMITH_AUTOTUNE_NEW"))
    if autotune:
        # the reference's Triton autotune results, tuned here by trusted code
        # first (prime runs every input set), go to the pool's store
        # lazy: cycle evaluator.referee -> backends.triton -> backends.triton.backend -> evaluator -> evaluator.sandbox -> evaluator.checks -> evaluator.checks.referee_evidence -> evaluator.referee
        from ..backends.triton.autotune import install

        install()
    out.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        try:
            req = json.loads(line)
            answer = prime(req, backend) if req.get("prime") else load(req) if req.get("load") else \
                check(req, backend)
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which decides
            answer = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
        _release_device_memory()  # nothing of a request stays on the device
        if autotune:  # what the reference tuned, in the file before the answer
            # lazy: cycle evaluator.referee -> backends.triton -> backends.triton.backend -> evaluator -> evaluator.sandbox -> evaluator.checks -> evaluator.checks.referee_evidence -> evaluator.referee
            from ..backends.triton.autotune import flush

            flush()
        out.write(json.dumps(answer) + "\n")


class Referee:
    """Parent side: the referee process of one device pool."""

    def __init__(self, backend: Any, device: Optional[str], isolation: str, cpu_threads: Optional[int],
                 root: str, gate: Any) -> None:
        import threading

        workdir = os.path.join(root, "referee")
        os.makedirs(workdir, exist_ok=True)
        # the parent copies each outputs file into workdir: the referee
        # reads nothing of the children's
        self.workdir = workdir
        self.root = root
        self.autotune_path = os.path.join(workdir, "autotune.jsonl")  # its Triton autotune results
        self.log_path = os.path.join(root, "referee.log")
        self.gate = gate
        self._spec = (backend, device, isolation, cpu_threads)
        self._lock = threading.Lock()
        self._prime_lock = threading.Lock()
        self._primed: dict[str, dict[str, Any]] = {}
        self.restarts = 0
        self._spawn()

    def _spawn(self) -> None:
        import subprocess

        # lazy: cycle evaluator.referee -> evaluator.sandbox -> evaluator.checks -> evaluator.checks.referee_evidence -> evaluator.referee
        from .sandbox import sandbox_prefix, worker_environment

        backend, device, isolation, cpu_threads = self._spec
        env = worker_environment(backend, self.workdir, device, cpu_threads)
        if backend.autotunes:
            # lazy: cycle evaluator.referee -> backends.triton -> backends.triton.backend -> evaluator -> evaluator.sandbox -> evaluator.checks -> evaluator.checks.referee_evidence -> evaluator.referee
            from ..backends.triton.autotune import store_folder

            # its results go to the pool's store; it takes only trusted records (its own, kept)
            env["KERNELSMITH_AUTOTUNE_NEW"] = self.autotune_path
            env["KERNELSMITH_AUTOTUNE_KNOWN"] = os.path.join(store_folder(self.root), "trusted.json")
        prefix, _bwrap, _note = sandbox_prefix(isolation, self.workdir)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                prefix + [sys.executable, "-m", "kernelsmith.evaluator.referee", backend.name, str(cpu_threads or 0)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env, cwd=self.workdir,
                start_new_session=True)
        self._ready = False
        proc = self.proc
        # it computes on the device: it stands still while a worker times
        self.ticket = self.gate.join(lambda sig: os.killpg(proc.pid, sig), pids={proc.pid},
                                     timed_on_cpu=device is None)

    def _restart(self) -> None:
        """A request that got no answer in time leaves its answer in the pipe
        (the next request would read it): kill the process and start a new
        one, whose first request waits for its start. Called with the lock."""
        self.close()
        self.restarts += 1
        self._spawn()

    #: restarts of a referee found dead before a request, over its lifetime
    MAX_RESTARTS = 8

    def wait_ready(self, timeout_s: float = 300.0) -> bool:
        """Block until the referee has started (imports, device context), so
        that a warmed pool's first candidates do not wait for it."""
        with self._lock:
            return self._wait_ready_locked(timeout_s)

    def _wait_ready_locked(self, timeout_s: float) -> bool:
        import selectors

        if self._ready:
            return True
        if self.proc.poll() is not None:
            return False
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        try:
            if not sel.select(timeout=timeout_s):
                return False
            self._ready = bool(self.proc.stdout.readline())
            return self._ready
        finally:
            sel.close()

    def ask(self, request: dict[str, Any], timeout_s: float = 300.0) -> dict[str, Any]:
        """One request, answered as a dict; ``{"error": ...}`` when the
        referee could not answer (it is restarted where that helps: found
        dead, or silent past ``timeout_s``)."""
        import selectors

        with self._lock:
            if self.proc.poll() is not None and self._ready and self.restarts < self.MAX_RESTARTS:
                # it died since its last answer (killed, out of memory): a
                # new one, rather than every later result left unchecked
                self._restart()
            if not self._wait_ready_locked(timeout_s):
                if self.proc.poll() is None:  # still starting: the request would wait behind that
                    return {"error": f"the referee did not start in {timeout_s:.0f} s"}
                return {"error": "the referee did not start: " + self._log_tail()}
            sel = selectors.DefaultSelector()
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            try:
                self.proc.stdin.write((json.dumps(request) + "\n").encode())
                self.proc.stdin.flush()
                if not sel.select(timeout=timeout_s):
                    self._restart()
                    return {"error": f"the referee gave no answer in {timeout_s:.0f} s (restarted)"}
                line = self.proc.stdout.readline()
            except (BrokenPipeError, OSError) as exc:
                return {"error": f"the referee failed: {exc}"}
            finally:
                sel.close()
        if not line:
            try:  # its pipe closes before it is reaped: callers test proc.poll() next
                self.proc.wait(timeout=5)
            except Exception:  # noqa: BLE001 - still running: the next request finds out
                pass
            return {"error": "the referee exited: " + self._log_tail()}
        try:
            return json.loads(line)
        except ValueError:
            return {"error": "the referee answered garbage"}

    def prime(self, task: Any, timeout_s: float = 300.0) -> dict[str, Any]:
        """Load ``task``'s reference and run it once in the referee (see
        :func:`prime`), at most once per task and referee; an error is
        returned, not raised: the first real check pays the cost then."""
        key = prime_key(task)
        with self._prime_lock:  # the first candidates of a task arrive together
            if key in self._primed:
                return self._primed[key]
            answer = self.ask({"prime": True, "task": task.to_dict()}, timeout_s)
            if "out of memory" not in str(answer.get("error", "")).lower():
                # a reference that raises raises again; one that ran out of
                # memory next to others is measured again (alone) next time
                self._primed[key] = answer
            return answer

    def load(self, task: Any, timeout_s: float = 300.0) -> dict[str, Any]:
        """Load ``task``'s reference module here (no run: see :func:`load`)."""
        return self.ask({"load": True, "task": task.to_dict()}, timeout_s)

    def primed(self, task: Any) -> bool:
        """Whether ``task`` is primed here (its footprint measured)."""
        return prime_key(task) in self._primed

    def footprint(self, task: Any, timeout_s: float = 300.0) -> Any:
        """``task``'s footprint (memory.Footprint) as this referee measured
        it when it primed the task (priming it now if not yet); None when
        priming failed."""
        answer = self.prime(task, timeout_s)
        return Footprint.from_dict(answer.get("footprint")) if isinstance(answer, dict) else None

    def degenerate(self, task: Any, timeout_s: float = 300.0) -> Optional[list[str]]:
        """The trivial outputs (zeros, a constant, an input passed through)
        that ``task``'s tolerance cannot tell from its reference's output, as
        this trusted process found them (priming the task on first use);
        None when it could not say (the worker then checks for itself)."""
        answer = self.prime(task, timeout_s)
        forms = answer.get("degenerate") if isinstance(answer, dict) and "error" not in answer else None
        return list(forms) if isinstance(forms, list) else None

    def probes(self, task: Any, timeout_s: float = 300.0) -> Optional[dict[str, Any]]:
        """For a degenerate task, the probe input sets that judge it and the
        forms they tell apart (:func:`kernelsmith.evaluator.probes.assess`);
        ``{}`` for a task that is not degenerate; None when the referee could
        not say."""
        answer = self.prime(task, timeout_s)
        if not isinstance(answer, dict) or "error" in answer or not isinstance(answer.get("degenerate"), list):
            return None
        probes = answer.get("probes", {})
        return dict(probes) if isinstance(probes, dict) else None

    def job_facts(self, task: Any, timeout_s: float = 300.0) -> dict[str, Any]:
        """What a job of ``task`` carries from this trusted process (pool and
        fresh mode alike): ``degenerate`` (:meth:`degenerate`) and ``probes``
        (:meth:`probes`), each None where the referee could not say (the
        worker then decides for itself)."""
        return {"degenerate": self.degenerate(task, timeout_s), "probes": self.probes(task, timeout_s)}

    def primed_probe_sets(self, task: Any) -> list[str]:
        """The probe input sets this referee found to judge ``task`` when it
        primed it (before the task's jobs, pool and fresh mode alike); [] for
        a task it has not primed, could not prime, or that is not
        degenerate. Never primes: a check must not start the reference anew."""
        answer = self._primed.get(prime_key(task))  # no lock: prime() holds it while a task primes
        probes = answer.get("probes") if isinstance(answer, dict) else None
        sets = probes.get("sets") if isinstance(probes, dict) else None
        return [str(s) for s in sets] if isinstance(sets, list) else []

    @staticmethod
    def most_trials(task: Any) -> int:
        """How many trials a worker may hand over: one per input set the
        referee judges (:func:`_judge_trial`): the task's own
        (``TaskConfig.check_sets``; KernelBench-X harnesses have up to 18,
        ``kbx_case_<i>``) and the probes'."""
        return len(set(task.config.check_sets)) + len(probe_sets())

    def evidence_limit(self, task: Any) -> int:
        """The largest outputs file accepted for ``task``, from the footprint
        this referee measured (:func:`evidence_limit`)."""
        fp = self.footprint(task) if self.primed(task) else None
        return evidence_limit(fp.outputs_bytes if fp is not None else 0)

    def _log_tail(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")[-2000:]
        except OSError:
            return ""

    def close(self) -> None:
        self.gate.leave(self.ticket)
        kill_group(self.proc.pid)
        self.proc.wait()


def take_evidence(store: dict[str, Any], trials: Any) -> None:
    """Parent side, when the worker hands over its trial outputs (the
    ``evidence`` message, sent when the trials end and before any more of
    the program runs, the timing included): each named file is copied at
    once from the worker's folder (``store["src"]``) into a folder of the
    parent's (``store["dir"]``), and the entries name the copies. What the
    program does later (rewrite the files, or the bytes they were written
    from, while it is timed) no longer reaches the referee. Only the first
    hand-over counts; another is recorded as ``store["repeated"]``."""
    if "trials" in store:
        store["repeated"] = True
        return
    if not isinstance(trials, list) or len(trials) > int(store.get("max_trials") or 16) \
            or not all(isinstance(e, dict) for e in trials):
        store["trials"] = trials  # judge() says what is wrong with it
        return
    taken = []
    for entry in trials:
        entry = dict(entry)
        try:
            copy = _copy_regular(os.path.join(store["src"], os.path.basename(str(entry.get("file")))), store["dir"],
                                 int(store.get("max_bytes") or MAX_BYTES))
            entry["file"] = os.path.basename(copy)
        except (OSError, ValueError) as exc:
            entry["not_handed_over"] = f"{type(exc).__name__}: {exc}"[:300]
        taken.append(entry)
    store["trials"] = taken


def evidence_info(store: Optional[dict[str, Any]]) -> Any:
    """What judge() takes as the worker's word on its trial outputs: the
    handed-over entries, or None where nothing was handed over."""
    if not store or "trials" not in store:
        return None
    return {"trials": store["trials"], "repeated": bool(store.get("repeated"))}


def _copy_regular(path: str, into: str, limit: int = MAX_BYTES, link: bool = False) -> str:
    """Copy a child's outputs file (a regular file, not a link, within the
    size limit) into the referee's folder. ``link``: the file is already
    the parent's own copy, so a hard link to the very file opened will do
    (no second copy of a 12 GiB file on the disk), a copy where it cannot."""
    import secrets
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            raise ValueError("not a regular file within the size limit")
        dest = os.path.join(into, f"check-{secrets.token_hex(8)}.bin")
        if link:
            try:
                os.link(path, dest, follow_symlinks=False)
                linked = os.stat(dest, follow_symlinks=False)
                if (linked.st_dev, linked.st_ino) == (st.st_dev, st.st_ino):  # the very file checked above
                    return dest
                os.unlink(dest)
            except OSError:
                pass
        with os.fdopen(os.dup(fd), "rb") as src, open(dest, "wb") as dst:
            remaining = st.st_size
            while remaining > 0:
                chunk = src.read(min(remaining, 1 << 22))
                if not chunk:
                    break
                dst.write(chunk)
                remaining -= len(chunk)
        os.chmod(dest, 0o644)
        return dest
    finally:
        os.close(fd)


def judge(result: Any, info: Any, seeds: list[int], task: Any, workdir: str, referee: Referee) -> None:
    """Parent side: have the referee check a correct result (``info``: what
    the worker said about its trial outputs), and overrule the result when
    the referee disagrees."""
    census = result.census if isinstance(result.census, dict) else {}
    result.census = census
    if result.category != "ok":
        return
    if isinstance(info, dict) and info.get("repeated"):
        result.overrule_as_hacked("the worker handed over the trial outputs for the trusted referee twice: the verdict "
                                  "was not the program's to write", withdraw_speedup=False)
        return
    entries = info.get("trials") if isinstance(info, dict) and "trials" in info else [info]
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        # whether the checks are off is the parent's own setting (the worker
        # inherits it), never the worker's word: a forged result claimed
        # census.disabled to skip the referee (fixtures/pygpubench/fd_overwrite.py)
        if census.get("disabled") and checks_disabled():
            return
        result.overrule_as_hacked("the worker reported a correct result without the trial outputs the trusted referee "
                                  "checks: the verdict was not the program's to write", withdraw_speedup=False)
        return
    most = referee.most_trials(task)
    if len(entries) > most:
        result.overrule_as_hacked(f"the worker named {len(entries)} trials for the referee (at most {most}, one per "
                                  "input set): the verdict was not the program's to write", withdraw_speedup=False)
        return
    # a degenerate task's probe sets decide it: the worker must have run
    # each one the referee found to apply (probes.py)
    named = {str(e.get("set", "get_inputs")) for e in entries}
    missing = [s for s in referee.primed_probe_sets(task) if s not in named]
    if missing:
        result.overrule_as_hacked(f"the worker handed over no trial of the probe input set(s) {', '.join(missing)} "
                                  "that judge this degenerate task: the verdict was not the program's to write")
        return
    for entry in entries:
        _judge_trial(result, entry, seeds, task, workdir, referee, census)
        if result.category != "ok":
            return
    census["referee_trials"] = len(entries)


def _judge_trial(result: Any, info: dict, seeds: list[int], task: Any, workdir: str, referee: Referee,
                 census: dict) -> None:
    """One trial (the last of one input set) re-checked by the referee."""
    sets = task.config.check_sets + probe_sets()
    if str(info.get("set", "get_inputs")) not in sets:
        result.overrule_as_hacked(f"the worker named an input set the task does not have ({str(info.get('set'))[:80]}): "
                                  "the verdict was not the program's to write", withdraw_speedup=False)
        return
    try:
        if info.get("not_handed_over"):  # take_evidence could not copy it
            raise OSError(info["not_handed_over"])
        init_seed, input_seed = seeds[int(info["init_seed_index"])], seeds[int(info["input_seed_index"])]
        limit = referee.evidence_limit(task)
        # workdir holds the parent's copies (take_evidence): linked, not copied again
        copy = _copy_regular(os.path.join(workdir, os.path.basename(str(info["file"]))), referee.workdir, limit,
                             link=True)
    except (KeyError, ValueError, TypeError, IndexError, OSError) as exc:
        result.overrule_as_hacked(f"the worker named seeds or an outputs file the referee cannot use ({exc}): the "
                                  "verdict was not the program's to write", withdraw_speedup=False)
        return
    request = {"task": task.to_dict(), "init_seed": init_seed, "input_seed": input_seed,
               "set": str(info.get("set", "get_inputs")), "file": copy, "max_bytes": limit}
    try:
        answer = referee.ask(request)
        if "error" in answer and referee.proc.poll() is not None:
            # it died answering this one: the next request starts a new one.
            # (A timeout has restarted it already and would only wait again;
            # a reference that raises raises again.)
            answer = referee.ask(request)
    finally:
        try:
            os.unlink(copy)
        except OSError:
            pass
    if answer.get("malformed"):
        result.overrule_as_hacked(f"the outputs file the worker wrote for the trusted referee cannot be read "
                                  f"({answer['malformed'][:300]}): the verdict was not the program's to write")
        census["referee"] = "malformed outputs"
        return
    if "error" in answer:
        # the referee's own failure (its reference raised, it died twice):
        # the worker's verdict stands, but a result nobody trusted checked
        # is never a run's best nor paid above 1 as a reward
        census["referee"] = f"not checked: {answer['error'][:500]}"
        result.warnings = list(result.warnings) + [f"the trusted referee could not check this result: "
                                                   f"{answer['error'][:300]}"]
        result.timing_reliable = False
        result.unreliable_reasons = list(result.unreliable_reasons or []) + [
            "not checked by the trusted referee: " + answer["error"][:200]]
        return
    if answer.get("reference"):
        result.overrule_as_hacked("the reference computed next to the program differs from the one the trusted referee "
                                  f"computed from the same seeds ({answer['reference'][:400]}): the program tampered "
                                  "with the reference")
        census["referee"] = "reference differs"
        return
    if answer.get("candidate"):
        result.overrule_as_hacked(f"the trusted referee finds the program's outputs wrong ({answer['candidate'][:400]}) "
                                  "where the check next to the program passed them: the comparison was forged")
        census["referee"] = "candidate differs"
        return
    census["referee"] = "agreed"



def checks_disabled() -> bool:
    """The throughput benchmark's switch for the v2 checks (KS_BENCH_NO_CENSUS=1),
    read in the parent's own environment, which its workers inherit."""
    return os.environ.get("KS_BENCH_NO_CENSUS", "") == "1"


#: a timing report's fields and the result's fields they must equal
_REPORTED = (("speedup", "speedup"), ("ref_ms", "ref_runtime_ms"), ("cand_ms", "runtime_ms"),
             ("ci_low", "speedup_ci_low"), ("ci_high", "speedup_ci_high"))


def _reported_figures(timed: list, task: Any) -> tuple[Optional[dict], str]:
    """What the result's figures must be: the last report, or, for a task
    timed on several shapes (TaskConfig.timing_shapes), the parent's own
    combination (timing.combine_shapes, the task's weights) of each shape's
    last report; with the reason when a shape reported nothing."""
    config = getattr(task, "config", None)
    names = config.timed_shapes if config is not None else []
    if len(names) < 2:
        return timed[-1], ""

    lasts = {r.get("shape"): r for r in timed if r.get("comparison") is None}
    missing = [n for n in names if n not in lasts]
    if missing:
        return None, f"no timing reported figures for the timing shape(s) {', '.join(missing)}"
    try:
        outcomes = [TimingOutcome(runtime_ms=float(lasts[n]["cand_ms"]), ref_runtime_ms=float(lasts[n]["ref_ms"]),
                                  speedup=float(lasts[n]["speedup"]), speedup_ci_low=float(lasts[n]["ci_low"]),
                                  speedup_ci_high=float(lasts[n]["ci_high"]), verdict="") for n in names]
        c = combine_shapes(outcomes, names, config.shape_weights)
    except (KeyError, TypeError, ValueError) as exc:
        return None, f"the timing shapes' reports do not combine ({exc})"
    return {"speedup": c.speedup, "ref_ms": c.ref_runtime_ms, "cand_ms": c.runtime_ms, "ci_low": c.speedup_ci_low,
            "ci_high": c.speedup_ci_high}, ""


def check_timing_reports(result: Any, reports: list, task: Any = None) -> None:
    """Parent side: a result's timing figures must be the ones the worker's
    timing reported to the parent when it ended (the ``timing-done`` message,
    sent before any more of the program runs). Figures changed afterwards
    (the outcome object rewritten by the program's code in the calls after
    the timing, or the result line rewritten on its way) or a speedup no
    timing ever reported (a result line the program wrote itself) were not
    measured (fixtures/pygpubench: stack_sig_scan, event_array, heap_sig_scan,
    fd_overwrite; hacks_v3/channel_direct_forge.py)."""
    if result.category != "ok" or result.speedup is None:
        return
    timed = [r for r in reports if isinstance(r, dict) and not r.get("release_only")]
    last, why = _reported_figures(timed, task) if timed else (None, "no timing reported any figures to the parent")
    if last is not None:
        differ = [f"{field} {getattr(result, field)!r} against {last.get(key)!r}" for key, field in _REPORTED
                  if key in last and getattr(result, field) != last.get(key)]
        if not differ:
            return
        why = "they differ from what the timing reported when it ended: " + "; ".join(differ)
    result.overrule_as_hacked(f"the result's timing figures are not the ones measured ({why}): the verdict was not "
                              "the program's to write")


def trusted_checks(result: Any, evidence: Optional[dict[str, Any]], seeds: list[int], task: Any, workdir: str,
                   referee: Referee, slots: Optional[list] = None) -> None:
    """Parent side, after a worker's result (pool or fresh mode; ``evidence``:
    what converse() took from the worker, referee.take_evidence's store and
    the timing's reports): the referee's re-check of its trial outputs, the
    result's timing figures
    against what the timing reported when it ended, then the timing against
    the time it held the device's timing slot (``slots``, where it had one)."""
    judge(result, evidence_info(evidence), seeds, task, workdir, referee)
    check_timing_reports(result, list((evidence or {}).get("timing_reports") or []), task)
    if slots is not None:
        cross_check_timing(result, list(slots))
    if result.category == "hacked":  # whichever check said so: no figure of a hacked result is used
        result.speedup = result.speedup_ci_low = result.speedup_ci_high = None


def cross_check_timing(result: Any, slots: list, slack: float = 1.05, grace_s: float = 0.05) -> None:
    """Parent side: the timing the worker reports against the time the parent
    saw it hold the device's timing slot. Every pair timed at least the
    fastest sample of each side, ``launches_per_sample`` calls each; a report
    whose pairs add up to more than the slot lasted (a reference made to look
    slow, a candidate made to look fast against it) was not measured."""
    timing = result.timing if isinstance(result.timing, dict) else {}
    if result.category != "ok" or not slots or not timing.get("n_pairs"):
        return
    import time

    held = sum((end if end is not None else time.monotonic()) - start for start, end in slots)
    # several timing shapes (TaskConfig.timing_shapes): each timed in a slot
    # of its own, the claims added up (never less than the first shape's,
    # which the top level repeats)

    def claim(part: Any) -> float:
        per_pair_ms = float(part["reference"]["min"]) + float(part["candidate"]["min"])
        return int(part["n_pairs"]) * int(part.get("launches_per_sample") or 1) * per_pair_ms / 1e3

    try:
        claimed = claim(timing)
        shapes = timing.get("shapes")
        if isinstance(shapes, list) and shapes:
            claimed = max(claimed, sum(claim(part) for part in shapes))
    except (KeyError, TypeError, ValueError):
        return
    census = result.census if isinstance(result.census, dict) else {}
    result.census = census
    census["timing_cross_check"] = {"claimed_s": round(claimed, 4), "slot_s": round(held, 4)}
    if claimed > held * slack + grace_s:
        result.overrule_as_hacked(f"the reported timing adds up to {claimed:.3f} s of timed calls, but the timing slot "
                                  f"was held for {held:.3f} s: the statistics were not measured")


if __name__ == "__main__":
    main()
