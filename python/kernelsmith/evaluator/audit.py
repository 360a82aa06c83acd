"""Audit rounds: the program's call timed by the parent's clock, on inputs
it could not know before that clock started, its output verified by the
trusted referee (docs/evaluator.md "Audit rounds").

Every figure the worker's timing reports is measured in the process the
program runs in, so a program that reproduces the protocol can report what
it likes (hacks_v3/channel_forge_report.py). What the parent can see for
itself only bounds the program's time from above, while a forged report
claims a time below the true one. So after the timing the worker runs a few
rounds in which the *parent* holds the clock:

1. the parent sends a nonce and notes the time (``audit?`` -> ``nonce``);
2. the worker changes every floating-point element of a fresh input set
   from the nonce (:func:`change_inputs`), calls the program once,
   synchronises and sends hashes of its outputs per chunk
   (:func:`chunk_digests`, ``audited``): the parent's clock stops when it
   reads that message (a unix stream socket carries no arrival time, so a
   busy parent's own latency counts in the round: the check's slack);
3. the parent picks a few chunks at random; the worker hands their values
   over (``audit-evidence``); the referee rebuilds the changed inputs from
   the set's seed and the nonces, runs the reference and checks the values
   (the task's tolerance) and that they hash to what was sent before the
   clock stopped (:func:`digest_of_chunk`).

The hash of a chunk is two rounds of a 64-bit mix of each element's bits
and position, the second keyed by the first round's sum, so a change of an
output within the tolerance cannot be steered onto a hash sent earlier (a
plain weighted sum of the bits can, by a small lattice problem). Integer
arithmetic only (wrapping int64): the worker's device and the referee's
give the same values.

Used by the worker (its rounds: worker_audit.py), the referee process (its
verification) and the parent (trusted/audit_check.py); loads torch only
when called.
"""

from __future__ import annotations

from typing import Any, Optional

#: rounds per audited timing, chunks an output is hashed in, chunks the
#: parent asks to see per round
ROUNDS = 3
CHUNKS = 1024
PICKS = 4
#: the most an input element shrinks by (a power of two: the factors
#: 1 - EPS * u are exact in every float format's range). Each element shrinks
#: by its own part of up to 6.25 %, 3 % on average: a change past every
#: default tolerance (1e-4 in float32, 1e-2 in half precision), so an output
#: computed before the nonce on the unchanged inputs fails the referee's
#: comparison; and a change in one direction, so a sum or a mean over many
#: elements moves too (independent changes of both signs would cancel out in
#: it), values in [0, 1) stay there and no sign flips
EPS = 2.0**-4
#: elements hashed at once (int64 temporaries of this many elements: 128 MiB)
_SLAB = 1 << 24
#: a round calls the program on this many copies of the set at least as long
#: as the reported time says these calls take (:func:`calls_per_round`): a
#: forged time below the true one is then seen above the check's slack of a
#: few milliseconds, where one call of a microsecond kernel is not (a forgery
#: by a factor F shows F times this). 5 ms: at 10 ms the H100 pool's median
#: evaluation spent 0.77 s in the worker's audit (copies, the graph's capture
#: of up to 4096 calls) and 1.07 s in the referee's check
TARGET_S = 5e-3
#: ... at most this many calls (each one of the program's Python runs once
#: when the round's calls are captured in a CUDA graph)
MOST_CALLS = 4096
#: ... of which a CUDA graph captures at most this many, on as many copies
#: of the set, and replays them as often as the round needs
#: (:func:`round_layout`): the capture runs each call's Python once (on the
#: H100 0.18-0.5 ms a call, 0.33-0.71 s of a microsecond kernel's audit
#: for 2313 calls, session 24), the replays only the graph. Between
#: replays every input changes again (the next key of the round's nonce,
#: :func:`replay_nonce`) and every replay's outputs are kept and hashed, so
#: a program that skips the work when its inputs look the same, or does it
#: on one replay only, hands over values of inputs the chunk was not
#: computed on. A power of two dividing MOST_CALLS: a round's calls, rounded
#: to whole replays, stay within MOST_CALLS. 512: at most 8 replays, so the
#: inputs change at most 24 times in the 3 rounds (each change shrinks an
#: element by 3 % on average)
CAPTURED_CALLS = 512
#: ... and at most this many bytes of input copies and outputs
COPIES_BYTES = 512 << 20
#: ... on the host clock (CPU backends) this many: there the hashes run the
#: torch path, about 100 ns an element on the 2-core machine (a round of
#: 4096 relu calls, 67M elements, took the referee 7 s), where a GPU hashes
#: 64M elements in 0.3 ms (audit_fused.py)
HOST_COPIES_BYTES = 8 << 20
#: each copy of a tensor past the first starts this many elements after the
#: last (a fresh tensor's alignment for every dtype)
ALIGN = 64


def _signed(x: int) -> int:
    """A 64-bit constant as the int64 torch computes with."""
    return x - (1 << 64) if x >= 1 << 63 else x


_M1 = _signed(0x9E3779B97F4A7C15)
_M2 = _signed(0xBF58476D1CE4E5B9)
_M3 = _signed(0x94D049BB133111EB)


def _key(nonce: int, lane: int) -> int:
    """A 64-bit key from the nonce (host arithmetic, the same everywhere)."""
    x = (int(nonce) * 0x9E3779B97F4A7C15 + lane * 0xD1B54A32D192ED03 + 0x632BE59BD9B4E019) % (1 << 64)
    x ^= x >> 29
    x = (x * 0xBF58476D1CE4E5B9) % (1 << 64)
    return _signed(x ^ (x >> 32))


def _mix(v: Any) -> Any:
    """splitmix64's finaliser on an int64 tensor (in place; arithmetic
    shifts, wrapping products)."""
    v ^= v >> 30
    v *= _M2
    v ^= v >> 27
    v *= _M3
    v ^= v >> 31
    return v


def flat(t: Any) -> Any:
    """``t``'s elements in its logical order as one flat tensor, a complex
    element as two: what chunk positions count."""
    import torch

    t = t.detach()
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.contiguous().reshape(-1)


def words(t: Any) -> Any:
    """The bits of ``t``'s elements as a flat int64 tensor (one word per
    element of :func:`flat`)."""
    import torch

    t = flat(t)
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    size = t.element_size()
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[size]
    return t.view(as_int).to(torch.int64)


def chunk_bounds(numel: int, chunks: int = CHUNKS) -> list[tuple[int, int]]:
    """The chunks a flat output of ``numel`` elements is hashed in: equal
    lengths ``ceil(numel / chunks)``, the last one shorter."""
    if numel <= 0:
        return []
    length = -(-numel // max(1, min(chunks, numel)))
    return [(lo, min(lo + length, numel)) for lo in range(0, numel, length)]


def chunk_layout(numel: int, chunks: int = CHUNKS) -> tuple[int, int]:
    """(length of a chunk, number of chunks) of :func:`chunk_bounds`
    without building its list."""
    if numel <= 0:
        return 0, 0
    length = -(-numel // max(1, min(chunks, numel)))
    return length, -(-numel // length)


def chunk_bound(numel: int, c: int, chunks: int = CHUNKS) -> Optional[tuple[int, int]]:
    """Chunk ``c`` of :func:`chunk_bounds` (``numel``, ``chunks``) without
    the list of all of them; None past the last."""
    length, count = chunk_layout(numel, chunks)
    if not 0 <= c < count:
        return None
    return c * length, min((c + 1) * length, numel)


def _digests(w: Any, first: int, length: int, nonce: int) -> Any:
    """Two-round hashes of ``w`` (int64 words of whole chunks of ``length``
    elements starting at flat position ``first``), one per chunk."""
    return _keyed(w, first, length, _key(nonce, 1), _key(nonce, 2))


def _keyed(w: Any, first: int, length: int, key1: int, key2: int) -> Any:
    """:func:`_digests` with the nonce's two keys given (audit_fused.py's
    kernel holds keys, not the nonce)."""
    import torch

    rows = w.numel() // length
    pos = torch.arange(first, first + rows * length, device=w.device, dtype=torch.int64)
    v = pos * _M1
    v += w
    v += key1
    s1 = _mix(v).reshape(rows, length).sum(dim=1)
    v = pos * _M3
    v += key2
    v += (w.reshape(rows, length) ^ s1[:, None]).reshape(-1)
    return _mix(v).reshape(rows, length).sum(dim=1)


def digest_tensor(w: Any, key1: int, key2: int, chunks: int = CHUNKS) -> Any:
    """One hash per chunk of the words ``w`` (:func:`words`) as an int64
    tensor on their device, a slab at a time, the last shorter chunk on its
    own: the torch path of :func:`chunk_digests` and of audit_fused.py's
    fallback."""
    import torch

    bounds = chunk_bounds(w.numel(), chunks)
    if not bounds:
        return torch.zeros(0, dtype=torch.int64, device=w.device)
    length = bounds[0][1] - bounds[0][0]
    full = w.numel() // length * length
    per = max(1, _SLAB // length) * length
    parts = [_keyed(w[lo : min(lo + per, full)], lo, length, key1, key2) for lo in range(0, full, per)]
    if full < w.numel():
        parts.append(_keyed(w[full:], full, w.numel() - full, key1, key2))
    return torch.cat(parts)


def chunk_digests(t: Any, nonce: int, chunks: int = CHUNKS) -> list[int]:
    """The worker's side: one hash per chunk of ``t`` (:func:`chunk_bounds`),
    computed on ``t``'s device a slab at a time."""
    return [int(x) for x in digest_tensor(words(t), _key(nonce, 1), _key(nonce, 2), chunks).tolist()]


def round_digests(t: Any, nonce: int) -> list[int]:
    """The hashes of one of a round's outputs as the worker sends them
    (:func:`chunk_digests`' values): on a CUDA device from one Triton kernel
    (audit_fused.py: one read per round of the hash, where the torch path's
    25 operations over int64 temporaries took 12 ms of a 20 ms round of 4096
    relu calls on the H100), elsewhere the torch path."""
    if getattr(t, "is_cuda", False):
        # lazy: Triton, and only where a CUDA device hashes
        from .audit_fused import digests_list, fused_digests, keys_of

        return digests_list(fused_digests(t, keys_of(nonce, t.device)))
    return chunk_digests(t, nonce)


def digest_of_chunk(chunk_words: Any, first: int, nonce: int) -> int:
    """The referee's side: the hash of one chunk from its words
    (:func:`words` of the values handed over) and its first position; equal
    to :func:`chunk_digests`' entry for that chunk."""
    if chunk_words.numel() == 0:
        return 0
    return int(_digests(chunk_words, first, chunk_words.numel(), nonce)[0])


def calls_per_round(cand_s: float, call_bytes: int, host: bool = False) -> int:
    """The program's calls in one audit round: enough that at the reported
    time per call (``cand_s``) they take ``TARGET_S``, within ``MOST_CALLS``
    and ``COPIES_BYTES`` (``HOST_COPIES_BYTES`` on the host clock;
    ``call_bytes``: one call's inputs and outputs).
    The worker sizes its rounds by it, and the parent checks that they
    were, from the report it holds and the referee's own byte count."""
    if not cand_s > 0:
        return 1
    # rounded first: 5 ms over 2 us is 2500, not 2500.0000000000005
    wanted = -(-round(TARGET_S / cand_s, 6) // 1)
    budget = HOST_COPIES_BYTES if host else COPIES_BYTES
    calls = max(1, int(min(wanted, MOST_CALLS, budget // max(1, int(call_bytes)))))
    # rounded up to whole replays of the captured calls (:func:`round_layout`:
    # at most one call a replay past the caps)
    copies, replays = round_layout(calls)
    return copies * replays


def round_layout(calls: int) -> tuple[int, int]:
    """(copies, replays) of a round of ``calls`` calls: the calls run on
    ``copies`` copies of the set (a CUDA graph captures them once), the
    copies' inputs changed and the calls run again ``replays`` times in
    the round; ``copies * replays`` is at least ``calls``, and for a count
    :func:`calls_per_round` gives, exactly it (the worker and the referee
    derive the same layout from the parent's count)."""
    calls = max(1, int(calls))
    replays = -(-calls // CAPTURED_CALLS)
    return -(-calls // replays), replays


def replays_flush(buffers: list[Any], replays: int) -> bool:
    """Whether a round of ``replays`` replays over the copies ``buffers``
    flushes the device's L2 cache after each replay's change: where it
    replays, on a CUDA device. Without the flush a replay's copies, just
    written by the change, sit in L2 where one round over all the copies
    read them from device memory, and the calls ran faster than they are
    timed (on the H100 a report of relu's seed forged 20 times smaller was
    bounded at 2.76 ms for 4096 calls in 8 replays, against 4.5-6.3 ms for
    4096 copies in one: hacked before, not after). The worker and the
    referee decide it alike."""
    import torch

    return replays > 1 and any(isinstance(b, torch.Tensor) and b.is_cuda for b in buffers)


def l2_flusher(buffers: list[Any]) -> Any:
    """A flusher of the L2 cache of the device of ``buffers``' first CUDA
    tensor (kernelsmith.timing's own ``L2Flusher``, as the timing flushes
    before every sample: a write of twice the L2's size), for one round's
    replays. Made per round, not kept in a module: the worker captures its
    flush in the round's CUDA graph (worker_audit._Calls), where nothing the
    program does to Python objects afterwards removes it."""
    import torch

    from ..timing.cuda import L2Flusher  # lazy: CUDA only

    return L2Flusher(next(b.device for b in buffers if isinstance(b, torch.Tensor) and b.is_cuda), nbytes=None)


def replay_nonce(nonce: int, replay: int) -> int:
    """The key a round's ``replay``-th change of the inputs is drawn from:
    the round's nonce itself for the first, a 62-bit mix of it and the
    replay's number for the others (the referee makes the same changes)."""
    if replay == 0:
        return int(nonce)
    return (_key(nonce, 1024 + int(replay)) & ((1 << 62) - 1)) or 1


def reported_times(
    reports: Any, shape: Optional[str] = None, comparison: Optional[str] = None
) -> Optional[tuple[float, float]]:
    """The (candidate, reference) ms per call of the last timing report of
    the audited shape (``shape``, else the first one reported) among the
    worker's reports of ``comparison`` (None: a step's own timing; a
    finalists' re-timing names each of its comparisons, ``"finalist 3"``),
    or None: the figures the rounds are sized by and checked against."""
    usable = [r for r in reports or [] if isinstance(r, dict) and not r.get("release_only")]
    usable = [r for r in usable if r.get("comparison") == comparison]
    named = [r.get("shape") for r in usable if r.get("shape") is not None]
    if named:
        first = shape if shape is not None else named[0]
        usable = [r for r in usable if r.get("shape") == first]
    try:
        last = usable[-1]
        return float(last["cand_ms"]), float(last["ref_ms"])
    except (IndexError, KeyError, TypeError, ValueError):
        return None


def tensor_bytes(values: Any) -> int:
    """The bytes of the tensors in ``values`` (a list or tuple of them,
    other values counted as none)."""
    import torch

    return sum(int(v.numel()) * v.element_size() for v in values if isinstance(v, torch.Tensor))


def copies(inputs: list[Any], calls: int) -> tuple[list[Any], list[list[Any]]]:
    """The round's ``calls`` input sets: every floating-point tensor of
    ``inputs`` copied ``calls`` times into one buffer (rows of a
    ``(calls, padded)`` tensor, each row's data aligned as a fresh
    tensor's), other values shared. Returns (the list :func:`change_inputs`
    draws over, in ``inputs``' positions: a buffer for each copied tensor,
    the value itself otherwise; the calls' sets). With one call the set is
    ``inputs`` itself. The worker and the referee build the same buffers,
    so the same nonce changes them alike."""
    import torch

    if calls <= 1:
        return list(inputs), [list(inputs)]
    buffers: list[Any] = []
    sets: list[list[Any]] = [[] for _ in range(calls)]
    for t in inputs:
        if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.numel() == 0:
            buffers.append(t)
            for s in sets:
                s.append(t)
            continue
        n = t.numel()
        padded = -(-n // ALIGN) * ALIGN
        big = torch.zeros((calls, padded), dtype=t.dtype, device=t.device)
        big[:, :n] = t.detach().reshape(1, n)
        buffers.append(big)
        for k, s in enumerate(sets):
            s.append(big[k, :n].view(t.shape))
    return buffers, sets


def stacked(outputs: list[list[Any]]) -> list[Any]:
    """Per output position, the calls' outputs one after another as one flat
    tensor (:func:`flat` of each): what a round's hashes and chunks are
    taken over."""
    import torch

    if len(outputs) == 1:
        return [flat(o) for o in outputs[0]]
    return [torch.stack([flat(call[i]) for call in outputs]).reshape(-1) for i in range(len(outputs[0]))]


def change_inputs(inputs: list[Any], nonce: int) -> None:
    """Change every element of every floating-point tensor of ``inputs`` in
    place by a factor in (1 - EPS, 1] drawn from ``nonce`` on the tensor's
    own device (the referee, on the same kind of device, draws the same
    factors). Other values are left alone. On a CUDA device a contiguous
    tensor is changed in one pass (audit_fused.fused_change: its factor
    from splitmix64 over the element's position), elsewhere by torch's
    generator; the worker's copies and the referee's are made alike, so
    both take the same path."""
    import torch

    for index, t in enumerate(inputs):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.numel() == 0:
            continue
        if t.is_cuda:
            # lazy: Triton, and only where a CUDA device changes
            from .audit_fused import changes_fused, fused_change

            if changes_fused(t):
                fused_change(t, _key(nonce, 16 + index))
                continue
        gen = torch.Generator(device=t.device)
        gen.manual_seed((int(nonce) * 1000003 + index) % (1 << 63))
        factor = torch.rand(t.shape, generator=gen, device=t.device, dtype=t.dtype)
        factor.mul_(-EPS).add_(1)
        with torch.no_grad():
            t.mul_(factor)


#: the Triton kernels that hash a round's outputs on a CUDA device
#: (audit_fused.py): the pool shares the referee's compiles of them with its
#: workers (Backend.publish_kernels), each of which compiled them on every job
HASH_KERNELS = ("_digest_kernel", "_change_kernel")


class Parts:
    """Each call adds the time since the previous one (the backend's device
    synchronised first) to ``parts[name]``: where a side's audit set-up and
    check spend their time, kept as a record (``census["audit"]``'s
    ``worker_says_ms`` and ``referee_split_ms``), never judged."""

    def __init__(self, backend: Any, parts: Optional[dict[str, float]] = None) -> None:
        import time

        self.backend = backend
        self.parts: dict[str, float] = {} if parts is None else parts
        self.last = time.perf_counter()

    def __call__(self, name: str) -> None:
        import time

        try:
            self.backend.synchronize()
        except Exception:  # noqa: BLE001 - a failed call's device error: the rounds report it
            pass
        now = time.perf_counter()
        self.parts[name] = self.parts.get(name, 0.0) + now - self.last
        self.last = now


__all__ = [
    "HASH_KERNELS",
    "Parts",
    "TARGET_S",
    "MOST_CALLS",
    "CAPTURED_CALLS",
    "COPIES_BYTES",
    "round_layout",
    "replay_nonce",
    "replays_flush",
    "l2_flusher",
    "calls_per_round",
    "reported_times",
    "tensor_bytes",
    "copies",
    "stacked",
    "ROUNDS",
    "CHUNKS",
    "PICKS",
    "EPS",
    "flat",
    "words",
    "chunk_bound",
    "chunk_layout",
    "chunk_bounds",
    "chunk_digests",
    "digest_tensor",
    "round_digests",
    "digest_of_chunk",
    "change_inputs",
]
