"""The trusted referee's process: the comparison the candidate cannot reach.

``python -m kernelsmith.evaluator.referee_process BACKEND THREADS``, started
and spoken to by the parent's client (:class:`kernelsmith.evaluator.referee.Referee`).

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

The outputs file is untrusted input (its format and checks:
evidence.py). The parent's verdict on the answers is
trusted/referee_check.py's.

Protocol: JSON lines on stdin (requests) and stdout (answers).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import types
from typing import Any, Iterator, Optional

from ..task import Task
from .evidence import MAX_BYTES, Sampled, evidence_positions, read_outputs

_MODULES: dict[str, Any] = {}  # reference source -> its loaded module
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

    # lazy: the referee process loads torch and what pulls it in after main() has prepared the process (prepare)
    from .task_inputs import init_inputs

    host = _LAST_MODEL.get(key)
    if host is None:
        args = init_inputs(ref)
        torch.manual_seed(init_seed)
        host = ref.Model(*args)
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

    # lazy: the referee process loads torch and what pulls it in after main() has prepared the process (prepare)
    from . import correctness as cmp
    from .probes import assess  # lazy: as above
    from .checks.trivial_output import trivial_outputs  # lazy: as above
    from .task_inputs import draw_inputs, init_inputs  # lazy: as above
    from .memory import Footprint, model_bytes, tensor_bytes  # lazy: as above

    task = Task.from_dict(req["task"])
    ref = _reference_module(task, req)
    device, dtype = backend.device(), getattr(torch, task.config.dtype)
    on_cuda = device == "cuda"
    cmp.set_comparison(getattr(task.config, "comparison", None))  # a task's accuracy contract (KernelBench-X)
    torch.manual_seed(0)
    model = ref.Model(*init_inputs(ref)).to(device=device, dtype=dtype).eval()
    sets = ["get_inputs", *[str(s) for s in task.config.extra_inputs if hasattr(ref, str(s))]]
    degenerate: list[str] = []
    probes: dict[str, Any] = {}
    # the task's footprint (memory.Footprint), measured here once: what the
    # parent admits workers by and attributes out-of-memory faults with
    footprint = Footprint(params_bytes=model_bytes(model), measured="allocator" if on_cuda else "sizes")
    # the element types of the outputs and the inputs: the audit rounds'
    # kernels are compiled for them below
    out_dtypes: set[Any] = set()
    in_dtypes: set[Any] = set()
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
            out_dtypes.update(t.dtype for t in raw if isinstance(t, torch.Tensor))
            in_dtypes.update(t.dtype for t in inputs if isinstance(t, torch.Tensor))
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
    if on_cuda:
        _compile_audit_kernels(out_dtypes, in_dtypes)
    return {
        "primed": sets,
        "degenerate": degenerate,
        "footprint": footprint.to_dict(),
        **({"probes": probes} if degenerate else {}),
    }


def _compile_audit_kernels(out_dtypes: set[Any], in_dtypes: set[Any]) -> None:
    """The audit rounds' Triton kernels (audit.HASH_KERNELS: the outputs'
    hash, one per element width, and the inputs' change, one per float
    type) compiled for a task's types when it is primed, as the worker's
    audit set-up compiles them (worker_audit._Calls): the pool publishes
    them to its workers right after the priming (pool.DevicePool.run), so
    the first jobs of a pool do not each compile them (0.4-1.1 s of a
    job's audit on the H100, session 24) before the referee's first check
    of a job's rounds compiled and published them. A compile that fails
    leaves the workers compiling for themselves."""
    import torch

    from .audit import change_inputs, round_digests  # lazy: as prime() above

    try:
        for dtype in sorted(out_dtypes, key=str):
            round_digests(torch.empty(16, dtype=dtype, device="cuda"), 0)
        change_inputs([torch.zeros(1, dtype=dtype, device="cuda") for dtype in sorted(in_dtypes, key=str)], 0)
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - an optimisation only
        print(f"referee: the audit kernels were not compiled ahead ({type(exc).__name__}: {exc})", file=sys.stderr)


def load(req: dict[str, Any]) -> dict[str, Any]:
    """Load a task's reference (its module: the imports, no forward), ahead
    of the first priming: ``task init`` asks it while the project's tests
    run, so a package's import (fla-core: 5-8 s) is paid beside them."""

    _reference_module(Task.from_dict(req["task"]), req)
    return {"loaded": True}


def _reference_file(source: str) -> str:
    """A file holding ``source`` in the referee's working folder (the
    parent's, which it removes with the pool)."""
    import hashlib

    path = os.path.join(os.getcwd(), f"reference_{hashlib.sha256(source.encode()).hexdigest()[:16]}.py")
    if not os.path.exists(path):
        # written whole, then renamed: the referee's other processes share
        # the folder and read the file (Triton's @jit) the moment it exists
        partial = f"{path}.{os.getpid()}.tmp"
        with open(partial, "w", encoding="utf-8") as f:
            f.write(source)
        os.replace(partial, path)
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


def _rebuilt(req: dict[str, Any], backend: Any, cmp: Any) -> tuple[Any, Any, list, str]:
    """What a trial's re-check and the audit rounds both start from: the
    task (its accuracy contract set on ``cmp``), the reference model from the
    request's init seed and the input set drawn from its input seed, on this
    process's device."""
    import torch

    # lazy: the referee process loads torch and what pulls it in after main() has prepared the process (prepare)
    from .probes import input_generator
    from .task_inputs import draw_inputs  # lazy: as above

    task = Task.from_dict(req["task"])
    cfg = task.config
    device, dtype = backend.device(), getattr(torch, cfg.dtype)
    cmp.set_comparison(getattr(cfg, "comparison", None))  # a task's accuracy contract (KernelBench-X)
    ref = _reference_module(task, req)
    # The trials the worker names (the last of each input set) share one
    # init seed: their model is built once, as the worker built it once.
    model = _model_on_device(
        ref, int(req["init_seed"]), (task.reference_source, int(req["init_seed"]), cfg.dtype), device, dtype
    )
    gen = input_generator(ref, str(req.get("set", "get_inputs")))  # a probe set too (probes.py)
    if gen is None:
        raise ValueError(f"the task has no input set {str(req.get('set'))[:80]}")
    torch.manual_seed(int(req["input_seed"]))
    return task, model, draw_inputs(gen, device, dtype), device


def check(req: dict[str, Any], backend: Any) -> dict[str, Any]:
    """One request: rebuild the reference for the trial and compare."""
    import torch

    # lazy: the referee process loads torch and what pulls it in after main() has prepared the process (prepare)
    from . import correctness as cmp

    task, model, inputs, device = _rebuilt(req, backend, cmp)
    atol, rtol = task.config.tolerances()
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
    answer: dict[str, Any] = {}
    if any(sampled_wanted):
        answer["commit"] = _committed(
            req.get("commit"), groups.pop("chunks"), expected, sampled_wanted, cmp, atol, rtol
        )
    del expected
    for name in ("candidate", "reference"):
        host = groups.pop(name)
        shapes = [g.of if isinstance(g, Sampled) else list(g.shape) for g in host]
        sampled = [isinstance(g, Sampled) for g in host]
        if shapes != shapes_wanted or sampled != sampled_wanted:
            answer[name] = (
                f"{len(host)} outputs of shapes {shapes} (sampled {sampled}), expected "
                f"{shapes_wanted} (sampled {sampled_wanted})"
            )
            continue
        # one group on the device at a time, compared in chunks
        got = [(g.values if isinstance(g, Sampled) else g).to(device) for g in host]
        del host
        res = cmp.compare(got, compared, atol, rtol)
        del got
        answer[name] = "" if res["ok"] else res["message"] + (" (at the sampled positions)" if any(sampled) else "")
    return answer


def _judge_chunk(
    values: Any, want: Any, o: int, c: int, lo: int, sent: Any, nonce: int, cmp: Any, atol: float, rtol: float
) -> tuple[str, str]:
    """One chunk the parent picked after the worker sent its hash (an audit
    round's or a trial's commitment): (why its values are not the chunk's,
    or wrong; why they are not the ones hashed), "" where they are. ``want``:
    the referee's own values of that chunk, which starts at flat position
    ``lo`` of output ``o``."""
    # lazy: the referee process loads torch and what pulls it in after main() has prepared the process (prepare)
    from .audit import digest_of_chunk, words

    where = f"output {o} chunk {c} (elements {lo}-{lo + want.numel() - 1})"
    if values.dtype != want.dtype or values.numel() != want.numel():
        return f"output {o} chunk {c}: {values.numel()} {values.dtype} values, expected {want.numel()}", ""
    forged = "" if sent is not None and digest_of_chunk(words(values), lo, nonce) == int(sent) else where
    res = cmp.compare([values], [want], atol, rtol)
    return ("" if res["ok"] else f"{where}: {res['message']}"), forged


def _committed(
    commit: Any, chunks: list[Any], expected: list[Any], sampled: list[bool], cmp: Any, atol: float, rtol: float
) -> str:
    """Why the chunks of the program's large outputs that the parent picked
    after their hashes (protocol.answer_commit) are not what the worker
    committed to, or are wrong ("" when they are right)."""
    # lazy: the referee process loads torch and what pulls it in after main() has prepared the process (prepare)
    from .audit import chunk_bound, chunk_layout

    wanted = [i for i, s in enumerate(sampled) if s]
    if not isinstance(commit, dict) or commit.get("outputs") != wanted:
        return f"the worker committed to no hashes of the sampled output(s) {wanted} before the parent picked chunks"
    if commit.get("chunks") != [chunk_layout(expected[i].numel())[1] for i in wanted]:
        return f"the worker sent {commit.get('chunks')} chunk hashes for outputs {wanted}, not one per chunk"
    picks = commit.get("picks") or []
    if len(chunks) != len(picks) or not picks or any(isinstance(c, Sampled) for c in chunks):
        return f"{len(chunks)} chunks handed over for the {len(picks)} the parent picked"
    nonce = int(commit["nonce"])
    for (o, c), got, sent in zip(picks, chunks, commit.get("digests") or []):
        lo, hi = chunk_bound(expected[o].numel(), c) or (0, 0)
        wrong, forged = _judge_chunk(
            got.to(expected[o].device), expected[o].reshape(-1)[lo:hi], o, c, lo, sent, nonce, cmp, atol, rtol
        )
        if forged:
            return f"{forged} handed over is not the one whose hash the worker sent before the parent picked it"
        if wrong:
            return f"the values are wrong at {wrong}"
    return ""


def audit(req: dict[str, Any], backend: Any) -> dict[str, Any]:
    """The audit rounds on one input set checked (audit.py), in order: the
    set drawn once from its seed and copied for the round's calls as the
    worker copied it (:func:`audit.copies`), the copies changed by each
    round's nonce in turn, and each round's handed-over chunks compared with
    the reference's outputs on the copies they come from and with the hashes
    sent before the parent's clock stopped. Per round, with what its work
    other than the program's calls costs on this device (the change of the
    inputs, the outputs' stacking and the hashes: ``overhead_s``) and the
    reference's own call (``reference_s``); with the bytes of one call's
    inputs and outputs (``call_bytes``: the parent sizes the rounds by them).

    The reference also runs on the copies as they were before the first
    change, and each state's chunks at every later round's picks are kept: a
    round's chunks nearer an earlier state's than their own round's were
    computed before the nonce (:func:`_staleness`)."""
    import torch

    # lazy: the referee process loads torch and what pulls it in after main() has prepared the process (prepare)
    from . import correctness as cmp
    from .audit import MOST_CALLS, Parts, copies, flat, round_digests, round_layout, tensor_bytes  # lazy: as above

    spent = Parts(backend)
    task, model, inputs, device = _rebuilt(req, backend, cmp)
    calls = int(req.get("calls") or 1)
    if not 1 <= calls <= MOST_CALLS:
        raise ValueError(f"{calls} calls in a round, the harness makes 1 to {MOST_CALLS}")
    rounds = req["rounds"]
    with torch.no_grad():
        outputs = cmp.flatten_outputs(model(*inputs))
        sizes = [flat(t).numel() for t in outputs]
        call_bytes = tensor_bytes(inputs) + tensor_bytes(outputs)
        del outputs
        spent("rebuild")
        buffers, sets = copies(inputs, round_layout(calls)[0])
        state = _State(model, sets, sizes, cmp, calls)
        spent("copies")
        if device.startswith("cuda"):
            # the hashes' kernel compiled for these sizes before the rounds'
            # measures of the other work (audit.round_digests)
            for n, out in zip(sizes, state.call(0)):
                round_digests(torch.empty(n * calls, dtype=out.dtype, device=out.device), 0)
            state.changed()
        spent("compile")
        # per round: the earlier states' chunks at its picks (state 0: the
        # copies before any change; state r: after round r's change)
        earlier: list[list[list[Any]]] = [[] for _ in rounds]
        _keep(state, rounds, 0, earlier)
        spent("earlier_states")
        answers = []
        for number, round_ in enumerate(rounds):
            answers.append(
                _audit_round(round_, state, buffers, backend, task.config.tolerances(), device, earlier[number])
            )
            spent("rounds")
            _keep(state, rounds, number + 1, earlier)
            spent("earlier_states")
        timed = _timed_reference(req, task, state, backend)
        spent("timed_reference")
    # the parent keeps the measures and writes the least into each round
    # (referee.TimedReferences: which audits measure, the least of them)
    return {"rounds": answers, "call_bytes": call_bytes, "spent_s": spent.parts, "reference_timed_measured": timed}


#: each measure's sampling budget (the timing's own is seconds)
TIMED_BUDGET_S = 0.25


def _timed_reference(req: dict[str, Any], task: Any, state: "_State", backend: Any) -> list[float]:
    """The reference's seconds per call on the round's copies, timed by the
    harness the worker's timing uses on a device clock (kernelsmith.timing:
    on a GPU events, CUDA graphs and the L2 flush; the backend's external
    timer, OpenCL's events, where it has one), over as many distinct sets
    as the timing rotates over, when the request asks for a measure
    (``time_reference``: the parent's schedule, referee.TimedReferences,
    which keeps the least over the referee's processes). The parent compares
    the reported reference with it, not with calls back to back (which on
    a GPU carry each call's launch from Python: several times a microsecond
    kernel's timed call). [] on the host clock (there the worker's timed
    reference runs cold after the candidate's sample and a warm measure
    here is no bound on it: docs/evaluator.md, "The reference's side"),
    where the harness cannot time it (the bound back to back alone), and
    where no measure was asked."""
    if not req.get("time_reference"):
        return []
    try:
        with measuring():
            return _bench_reference(task.config.timing, state, backend)
    except Exception as exc:  # a reference the harness cannot time: the bound back to back alone
        print(f"referee: the reference could not be timed ({type(exc).__name__}: {exc})", file=sys.stderr)
        return []


@contextlib.contextmanager
def measuring() -> Iterator[None]:
    """One measure at a time across the referee's processes of a device
    (referee.Referee's lanes): what one lane measures (a round's other
    work, the reference back to back, its timed measure) is not lengthened
    by another lane's measure. A lane that is not measuring still runs
    beside it, as the workers' trials do. The lock is the file the parent
    names in ``KERNELSMITH_REFEREE_MEASURE_LOCK`` (in the lanes' shared
    working folder, where no worker reaches); none with one lane."""
    import fcntl

    path = os.environ.get("KERNELSMITH_REFEREE_MEASURE_LOCK", "")
    if not path:
        yield
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # the lock goes with the descriptor


def _bench_reference(cfg: Any, state: "_State", backend: Any) -> list[float]:
    """[seconds per call] on a device clock; [] on the host clock."""
    import torch

    from .. import timing as kt  # lazy: as audit() above
    from .timing import harness_options, rotating  # lazy: as audit() above

    def call(*args: Any) -> Any:
        # inside the backend's launch record, as the worker's timing calls
        # the reference (worker_timing._measure: its host time is in every
        # timed call of both sides)
        with backend.launch_counter():
            return state.model(*args)

    on_gpu = backend.timing_device() == "cuda"
    sets = state.sets[: max(1, cfg.gpu_input_sets if on_gpu else cfg.input_sets)]
    source = backend.sample_source(rotating(call, sets))
    if source is None and not on_gpu:
        return []
    opts = harness_options(cfg, host_clock=False)
    opts.update(
        time_budget_s=min(float(opts["time_budget_s"]), TIMED_BUDGET_S),
        check_hidden_work=False,
        record_gpu_state=False,
        target_rel_half_width=max(float(opts["target_rel_half_width"]), 0.01),
    )
    with torch.no_grad():
        if source is not None:
            return [float(kt.bench_samples(source, unit="s", **opts).median_s)]
        return [float(kt.bench(call, input_sets=[list(s) for s in sets], device="cuda", **opts).median_s)]


class _State:
    """The reference's outputs on the round's copies as they are now, call
    by call as a chunk needs them (a chunk of the stacked outputs spans one
    call's output or a few). A round's ``calls`` run on ``len(sets)``
    copies, replay after replay (audit.round_layout): call ``K`` is copy
    ``K % len(sets)`` in replay ``K // len(sets)``."""

    def __init__(self, model: Any, sets: list[list[Any]], sizes: list[int], cmp: Any, calls: int = 0) -> None:
        self.model, self.sets, self.sizes, self.cmp = model, sets, sizes, cmp
        self.calls = max(int(calls), len(sets))
        self.replays = self.calls // len(sets)
        self.outputs: dict[int, list[Any]] = {}

    def changed(self) -> None:
        self.outputs.clear()

    def call(self, k: int) -> list[Any]:
        from .audit import flat  # lazy: as audit() above

        if k not in self.outputs:
            self.outputs[k] = [flat(t) for t in self.cmp.flatten_outputs(self.model(*self.sets[k]))]
        return self.outputs[k]

    def bounds(self, o: int, c: int) -> Optional[tuple[int, int]]:
        """Chunk ``c`` of output ``o`` stacked over the calls, or None."""
        from .audit import chunk_bound  # lazy: as audit() above

        if not 0 <= o < len(self.sizes):
            return None
        return chunk_bound(self.sizes[o] * self.calls, c)

    def chunk(self, o: int, c: int, replay: Optional[int] = None) -> Optional[Any]:
        """The reference's values of chunk ``c`` of output ``o`` on the
        copies as they are now; with ``replay``, only the part of it that
        replay's calls made (None where they made none of it)."""
        import torch

        where = self.bounds(o, c)
        if where is None:
            return None
        lo, hi = where
        n, copies = self.sizes[o], len(self.sets)
        calls = range(lo // n, (hi - 1) // n + 1)
        pieces = [
            self.call(k % copies)[o][max(lo - k * n, 0) : min(hi - k * n, n)]
            for k in calls
            if replay is None or k // copies == replay
        ]
        if not pieces:
            return None
        return (pieces[0] if len(pieces) == 1 else torch.cat(pieces)).clone()

    def replays(self, o: int, c: int) -> list[int]:
        """The replays whose calls made chunk ``c`` of output ``o``."""
        where = self.bounds(o, c)
        if where is None:
            return []
        lo, hi = where
        n, copies = self.sizes[o], len(self.sets)
        return sorted({k // copies for k in range(lo // n, (hi - 1) // n + 1)})


def _keep(state: _State, rounds: list[dict[str, Any]], changes: int, earlier: list[list[list[Any]]]) -> None:
    """The reference's chunks with ``changes`` changes made, kept at the
    picks of every round after them."""
    for number in range(changes, len(rounds)):
        earlier[number].append([state.chunk(int(o), int(c)) for o, c in rounds[number]["picks"]])


#: a round's chunks are stale when their squared distance to an earlier
#: state's reference is under this part of their distance to their own
#: round's, and of the distance the change moved the reference's output (an
#: honest program's error is independent of the round's change: it is as
#: near its own round's reference as to an earlier one, or nearer)
STALE_PART = 0.25
#: ... judged only over this many elements or more: each element changes by
#: its own random part, which no honest error follows element by element;
#: a scalar output's one error can (a kernel's bias the size of the change)
STALE_MIN_ELEMENTS = 64


def _staleness(got: list[Any], wants: list[Any], states: list[list[Any]], replayed: Optional[list[Any]] = None) -> str:
    """Why a round's handed-over chunks look computed before its nonce: the
    squared distance of all of them together to an earlier state's
    reference chunks is under ``STALE_PART`` of their distance to the round's
    own reference (the change is past the tolerance for most programs, so
    the tolerance catches a stale output first; this catches it where the
    task's tolerance or its accuracy contract is wider than the change).
    ``replayed``: where the round replayed its copies' calls, the
    reference's chunks each on its copies' inputs as they were before its
    replay's change; judged chunk by chunk (a program that skips the work of
    some replays leaves each of them the replay before's outputs, and the
    chunks of the replays it did not skip are fresh). Empty when fresh,
    when the change did not move the outputs (nothing tells the states
    apart), or over fewer than ``STALE_MIN_ELEMENTS``."""
    whens = [
        "before the first round's change" if state == 0 else f"after round {state}'s change"
        for state in range(len(states))
    ]
    groups = [(when, got, wants, chunks) for when, chunks in zip(whens, states)]
    for i, chunk in enumerate(replayed or []):
        groups.append(
            (
                f"before its replay's change in the round (the round's picked chunk {i + 1})",
                got[i : i + 1],
                wants[i : i + 1],
                [chunk],
            )
        )
    for when, mine, theirs, chunks in groups:
        if sum(int(x.numel()) for x in mine if x is not None) < STALE_MIN_ELEMENTS:
            continue
        now, moved, then = _distance(mine, theirs), _distance(theirs, chunks), _distance(mine, chunks)
        if moved > 0 and then < STALE_PART * now and then < STALE_PART * moved:
            return (
                f"the chunks are nearer the reference's output on the inputs as they were {when} than on the "
                f"round's own inputs (squared distance {then:.3g} against {now:.3g}; the change moved the "
                f"reference's output by {moved:.3g})"
            )
    return ""


def _distance(a: list[Any], b: list[Any]) -> float:
    """The squared distance of two lists of chunks (NaN where a pair's sizes
    differ or one is missing; non-finite differences count as none)."""
    import torch

    total = 0.0
    for x, y in zip(a, b):
        if x is None or y is None or x.numel() != y.numel():
            return float("nan")
        # on the chunks' device (the referee's), one value to the host per pair
        d = x.detach().to(torch.float64) - y.detach().to(x.device, torch.float64)
        total += float(torch.where(torch.isfinite(d), d, 0.0).square().sum())
    return total


def _audit_round(
    round_: dict[str, Any],
    state: _State,
    buffers: list[Any],
    backend: Any,
    tol: Any,
    device: str,
    states: list[list[Any]],
) -> dict[str, Any]:
    """One audit round (:func:`audit`)."""
    import time

    import torch

    # lazy: as audit() above
    from .audit import round_digests

    nonce = int(round_["nonce"])
    picks = [(int(o), int(c)) for o, c in round_.get("picks") or []] if round_.get("file") is not None else []
    with measuring():
        changed, now, before = _replays(state, buffers, backend, nonce, picks)
        first = state.call(0)
        reference_s = _reference_call_s(state.model, state.sets[0], backend)
        # the round's other work on this device: the outputs stacked over the
        # copies' calls (a copy of them), kept replay after replay (another)
        # and hashed, on tensors of their size
        copies, replays = len(state.sets), state.replays
        alike = [torch.empty(n * state.calls, dtype=f.dtype, device=f.device) for n, f in zip(state.sizes, first)]
        backend.synchronize()
        started = time.perf_counter()
        for t in alike:
            for _ in range((copies > 1) + (replays > 1)):
                t = t.clone()
            round_digests(t, nonce)
        backend.synchronize()
        overhead_s = changed + time.perf_counter() - started
        del alike
    if round_.get("file") is None:  # a round the program's call failed in: the inputs changed all the same
        return {"overhead_s": overhead_s, "reference_s": reference_s}
    got = read_outputs(round_["file"], int(round_.get("max_bytes") or MAX_BYTES))["candidate"]
    digests = round_["digests"]
    if len(got) != len(picks) or any(isinstance(g, Sampled) for g in got):
        return {"malformed": f"{len(got)} chunks handed over for {len(picks)} asked"}
    # the handed-over values hashed, compared and judged for staleness on
    # this device: the torch path's 25 operations over int64 words of a
    # chunk took 46 ms per chunk on the H200's host (a chunk of 4096 relu
    # calls' outputs), the staleness distances 0.14 s per round
    # (benchmarks/gpu_verify.sh refprofile); integer arithmetic, so the hash
    # is the same on every device
    got = [values.to(device) for values in got]
    wrong, forged, wants = [], [], []
    for (o, c), values, sent, want in zip(picks, got, digests, now):
        where = state.bounds(o, c)
        if where is None or want is None:
            wrong.append(f"output {o} has no chunk {c}")
            continue
        wants.append(want)
        bad, late = _judge_chunk(values, want, o, c, where[0], sent, nonce, state.cmp, *tol)
        wrong += [bad] if bad else []
        forged += [late] if late else []
    stale = "" if wrong else _staleness(got, wants, states, before)
    answer = {"wrong": wrong, "forged": forged, "overhead_s": overhead_s, "reference_s": reference_s}
    if stale:
        answer["stale"] = stale
    return answer


def _replays(
    state: _State, buffers: list[Any], backend: Any, nonce: int, picks: list[tuple[int, int]]
) -> tuple[float, list[Any], Optional[list[Any]]]:
    """The round's changes of the copies' inputs, replay after replay
    (audit.round_layout, audit.replay_nonce; on a GPU each with the L2
    flush after it the worker makes, audit.replays_flush), and the reference's values of
    the picked chunks: (the changes' seconds on this device, each chunk on
    the inputs its calls had, and where the round has several replays each
    chunk on the inputs as they were before its replays' changes, else
    None)."""
    import time

    import torch

    # lazy: as audit() above
    from .audit import change_inputs, l2_flusher, replay_nonce, replays_flush

    replays = state.replays
    flusher = l2_flusher(buffers) if replays_flush(buffers, replays) else None
    changed = 0.0
    now: list[list[Any]] = [[] for _ in picks]
    before: list[list[Any]] = [[] for _ in picks]
    for replay in range(replays):
        if replays > 1:
            for pieces, (o, c) in zip(before, picks):
                pieces.append(state.chunk(o, c, replay))
        backend.synchronize()
        started = time.perf_counter()
        change_inputs(buffers, replay_nonce(nonce, replay))
        if flusher is not None:  # as the worker flushes its device's L2 after each replay's change
            flusher.flush()
        backend.synchronize()
        changed += time.perf_counter() - started
        state.changed()
        for pieces, (o, c) in zip(now, picks):
            pieces.append(state.chunk(o, c, replay if replays > 1 else None))

    def joined(parts: list[Any]) -> Optional[Any]:
        parts = [p for p in parts if p is not None]
        return None if not parts else parts[0] if len(parts) == 1 else torch.cat(parts)

    return changed, [joined(p) for p in now], [joined(p) for p in before] if replays > 1 else None


def _reference_call_s(model: Any, inputs: list, backend: Any, budget_s: float = 2e-3, most: int = 200) -> float:
    """The reference's own time per call on this device: calls back to back
    (after the one that gave the outputs) until ``budget_s`` has passed or
    ``most`` were made, the total over the count, so a microsecond kernel is
    not read through one call's launch and synchronisation."""
    import time

    backend.synchronize()
    started = time.perf_counter()
    calls = 0
    while calls < most:
        model(*inputs)
        calls += 1
        if calls in (1, 4, 16, 64) or calls == most:
            backend.synchronize()
            if time.perf_counter() - started >= budget_s:
                break
    backend.synchronize()
    return (time.perf_counter() - started) / calls


def _answer(req: dict[str, Any], backend: Any) -> dict[str, Any]:
    """The request's kind: a priming, a load, an audit round, a trial's re-check."""
    if req.get("prime"):
        return prime(req, backend)
    if req.get("load"):
        return load(req)
    if req.get("audit"):
        return audit(req, backend)
    return check(req, backend)


def main() -> None:
    # lazy: the worker's module (its checks, its timing) loads only once this process runs, not for an import
    from .worker import prepare

    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything printed by a task's reference goes to the log
    backend = prepare(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2] != "0" else None)
    autotune = bool(os.environ.get("KERNELSMITH_AUTOTUNE_NEW"))
    if autotune:
        # the reference's Triton autotune results, tuned here by trusted code
        # first (prime runs every input set), go to the pool's store
        from ..backends.triton.autotune import install  # lazy: only where the pool keeps autotune results

        install()
    # a diagnosis (benchmarks/gpu_verify.sh refprofile): where the referee's
    # time goes, its requests profiled and the figures written after each
    profile_path = os.environ.get("KERNELSMITH_REFEREE_PROFILE")
    profile = None
    if profile_path:
        import cProfile

        profile = cProfile.Profile()
    out.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        if profile is not None:
            profile.enable()
        try:
            req = json.loads(line)
            answer = _answer(req, backend)
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which decides
            answer = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
        _release_device_memory()  # nothing of a request stays on the device
        if profile is not None:
            profile.disable()
            try:
                profile.dump_stats(str(profile_path))
            except OSError:  # a path this sandbox cannot write: no figures, the answer all the same
                pass
        if autotune:  # what the reference tuned, in the file before the answer
            from ..backends.triton.autotune import flush  # lazy: as install above

            flush()
        out.write(json.dumps(answer) + "\n")


if __name__ == "__main__":
    main()
