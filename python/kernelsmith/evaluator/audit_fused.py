"""The audit rounds' chunk hashes (:mod:`.audit`) in one Triton kernel, keyed
from a device tensor.

:func:`.audit.chunk_digests` is ~25 torch elementwise operations over int64
temporaries of the output: many passes over memory and many launches on a
big output, and its keys are host ints baked into the operations, so the
work cannot be captured once in a CUDA graph and replayed with a new nonce.
:func:`fused_digests` computes the same digests, bit for bit, in one launch
that reads each element twice (once per round) in its own width and takes
its keys from a two-entry int64 device tensor (:func:`keys_of`,
:func:`set_keys`): fill that tensor with a new nonce's keys and replay.

Bit-equality with :func:`.audit._digests` is the contract, not a nicety: the
worker sends these digests before the parent's clock stops, and the trusted
referee later recomputes a few chunks with the torch path
(:func:`.audit.digest_of_chunk`); any difference reads as a forged output.
"""

from __future__ import annotations

from typing import Any

import torch

from . import audit

try:
    import triton
    import triton.language as tl
except ImportError:  # a host without Triton: the torch path only
    triton = None
    tl = None


def _int_view(t: Any) -> Any:
    """``t``'s flat elements (:func:`.audit.flat`) viewed as the integer type
    :func:`.audit.words` reads them as: unsigned for one byte (bool and
    uint8, zero-extended to int64), signed for 2, 4 and 8 bytes
    (sign-extended). No copy for a contiguous ``t``, no int64 temporary."""
    f = audit.flat(t)
    if f.dtype == torch.bool:
        f = f.view(torch.uint8)
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[f.element_size()]
    return f.view(as_int)


_layout = audit.chunk_layout  # (length of a chunk, number of chunks) of audit.chunk_bounds


#: the lanes of one program's loop and its warps: one compile per element
#: width. A chunk shorter than BLOCK leaves lanes masked (1024 chunks of 16
#: elements: a million masked lanes, microseconds on a GPU)
BLOCK = 1024
WARPS = 4


def keys_of(nonce: int, device: Any) -> Any:
    """The two keys of ``nonce`` (:func:`.audit._key` lanes 1 and 2) as an
    int64 tensor on ``device``: what :func:`fused_digests` reads."""
    return torch.tensor([audit._key(nonce, 1), audit._key(nonce, 2)], dtype=torch.int64, device=device)


def set_keys(keys: Any, nonce: int) -> None:
    """Fill ``keys`` in place with ``nonce``'s keys (the same storage, so a
    captured launch that reads it hashes with the new nonce on replay)."""
    keys.copy_(torch.tensor([audit._key(nonce, 1), audit._key(nonce, 2)], dtype=torch.int64))


def digests_list(digests: Any) -> list[int]:
    """The host list :func:`.audit.chunk_digests` returns, from
    :func:`fused_digests`' tensor (synchronises with its device)."""
    return [int(x) for x in digests.tolist()]


if triton is not None:
    _M1: Any = tl.constexpr(audit._M1)
    _M2: Any = tl.constexpr(audit._M2)
    _M3: Any = tl.constexpr(audit._M3)

    @triton.jit
    def _mix(v):
        """splitmix64's finaliser, as :func:`.audit._mix`: ``v`` is int64, so
        ``>>`` is arithmetic and the products wrap."""
        v ^= v >> 30
        v *= _M2
        v ^= v >> 27
        v *= _M3
        v ^= v >> 31
        return v

    # ``numel`` and ``length`` not specialised (Triton would compile one
    # kernel per "divisible by 16" and "equal to 1" of each): with one BLOCK
    # the kernel is compiled once per element width (uint8, int16, int32,
    # int64) in a process, whatever the sizes it hashes, rather than anew
    # for each size class a round's outputs fall in
    @triton.jit(do_not_specialize=["numel", "length"])
    def _digest_kernel(words_ptr, keys_ptr, out_ptr, numel, length, BLOCK: tl.constexpr):
        """One program per chunk: the chunk's two-round digest, equal bit for
        bit to :func:`.audit._digests` (the referee recomputes chunks with
        that torch path, so the two must never differ). Elements are widened
        to int64 here as :func:`.audit.words` does (``words_ptr`` is the
        output viewed as its same-size int type: uint8 zero-extends, int16,
        int32 sign-extend); all arithmetic is int64 with wrapping sums and
        products, so the order of the sums does not matter.

        round 1: s1 = sum over the chunk of mix(pos * M1 + w + key1)
        round 2: digest = sum of mix(pos * M3 + key2 + (w ^ s1))
        """
        # positions in int64 (``numel`` and ``length`` come as int32 when they
        # fit)
        chunk = tl.program_id(0).to(tl.int64)
        lo = chunk * length
        hi = tl.minimum(lo + length, numel)  # the last chunk is shorter
        key1 = tl.load(keys_ptr)
        key2 = tl.load(keys_ptr + 1)
        lanes = tl.arange(0, BLOCK).to(tl.int64)

        acc = tl.full([BLOCK], 0, tl.int64)
        for start in tl.range(0, length, BLOCK):
            pos = lo + start + lanes
            inside = pos < hi
            w = tl.load(words_ptr + pos, mask=inside, other=0).to(tl.int64)
            v = _mix(pos * _M1 + w + key1)
            acc += tl.where(inside, v, 0)
        s1 = tl.sum(acc, axis=0)

        acc = tl.full([BLOCK], 0, tl.int64)
        for start in tl.range(0, length, BLOCK):
            pos = lo + start + lanes
            inside = pos < hi
            w = tl.load(words_ptr + pos, mask=inside, other=0).to(tl.int64)
            v = _mix(pos * _M3 + key2 + (w ^ s1))
            acc += tl.where(inside, v, 0)
        tl.store(out_ptr + chunk, tl.sum(acc, axis=0))

    _EPS: Any = tl.constexpr(audit.EPS)

    @triton.jit(do_not_specialize=["numel", "key"])
    def _change_kernel(x_ptr, numel, key, BLOCK: tl.constexpr, WIDE: tl.constexpr):
        """:func:`fused_change`: each element of the flat ``x`` times
        1 - EPS * u, u in [0, 1) from 24 bits of splitmix64 over its
        position and ``key``; one read and one write of each element. The
        product is in float32 (float64 for a float64 ``x``: ``WIDE``),
        rounded once to ``x``'s type: the same bits on every run of the
        kernel, which is what the worker and the referee need."""
        pos = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
        inside = pos < numel
        v = _mix(pos * _M1 + key)
        # bits 39-62: the arithmetic shifts leave bit 63 of _mix's result 0
        u = ((v >> 39) & 0xFFFFFF).to(tl.float32) * (1.0 / 16777216.0)
        x = tl.load(x_ptr + pos, mask=inside, other=0)
        if WIDE:
            y = x * (1.0 - _EPS * u.to(tl.float64))
        else:
            y = (x.to(tl.float32) * (1.0 - _EPS * u)).to(x.dtype)
        tl.store(x_ptr + pos, y, mask=inside)

    # the interpreter (TRITON_INTERPRET=1, read when the kernel is decorated)
    # runs the kernel on host tensors too
    _INTERPRETED = type(_digest_kernel).__name__ == "InterpretedFunction"
else:
    _INTERPRETED = False


def triton_runs(t: Any) -> bool:
    """Whether :func:`fused_digests` hashes ``t`` with the Triton kernel:
    Triton is installed and ``t`` is on a CUDA device, or the kernel was
    decorated under the interpreter."""
    return triton is not None and (t.is_cuda or _INTERPRETED)


#: the element types :func:`fused_change` changes in one pass (others: the
#: torch path of :func:`.audit.change_inputs`)
CHANGED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
#: elements per program of the change kernel
CHANGE_BLOCK = 1024


def changes_fused(t: Any) -> bool:
    """Whether :func:`.audit.change_inputs` changes ``t`` with
    :func:`fused_change`: a contiguous CUDA tensor of
    :data:`CHANGED_DTYPES` where Triton is installed (a host tensor keeps
    torch's generator, under the interpreter too). The worker's copies and
    the referee's rebuild of them are made alike (:func:`.audit.copies`),
    so both sides take the same path."""
    return (
        isinstance(t, torch.Tensor)
        and t.is_cuda
        and t.dtype in CHANGED_DTYPES
        and t.is_contiguous()
        and triton is not None
    )


def fused_change(t: Any, key: int) -> None:
    """Change every element of the contiguous ``t`` in place by a factor in
    (1 - EPS, 1] drawn from ``key`` and the element's position, in one
    pass: the torch path (``torch.rand`` into a temporary, two passes over
    it and one over ``t``) took 17.7 ms of a round for a 6.4 GiB input on
    the H100, where one read and one write take about 4."""
    numel = t.numel()
    if numel == 0:
        return
    grid = (-(-numel // CHANGE_BLOCK),)
    _change_kernel[grid](t, numel, key, BLOCK=CHANGE_BLOCK, WIDE=t.dtype == torch.float64, num_warps=WARPS)


def _torch_digests(t: Any, keys: Any, chunks: int) -> Any:
    """The torch path (:func:`.audit.digest_tensor`) with the keys read to
    the host."""
    key1, key2 = (int(k) for k in keys.tolist())
    return audit.digest_tensor(audit.words(t), key1, key2, chunks)


def fused_digests(t: Any, keys: Any, chunks: int = audit.CHUNKS) -> Any:
    """One digest per chunk of ``t`` (:func:`.audit.chunk_bounds` of its flat
    words) as an int64 tensor on ``t``'s device, equal to
    :func:`.audit.chunk_digests` with the nonce ``keys`` holds
    (:func:`keys_of`). No host synchronisation and no allocation that
    depends on ``keys``: a call can be captured in a CUDA graph (after one
    call outside it, which compiles the kernel) and replayed after
    :func:`set_keys`.

    Where Triton cannot run (not installed, or ``t`` not on a CUDA device
    and no TRITON_INTERPRET) this falls back to the torch path with the same
    result and form, so a caller needs one code path on every host; that
    path reads the keys to the host and makes int64 temporaries, so it is
    neither fast nor capturable."""
    # host-side checks only (no synchronisation): keys elsewhere than ``t``
    # would be read out of bounds by the kernel
    if keys.dtype != torch.int64 or keys.numel() != 2 or keys.device != t.device:
        raise ValueError(
            f"keys must be keys_of(nonce, {t.device}): 2 int64 on t's device, not {keys.dtype} {tuple(keys.shape)} on {keys.device}"
        )
    if not triton_runs(t):
        return _torch_digests(t, keys, chunks)
    words = _int_view(t)
    length, count = _layout(words.numel(), chunks)
    out = torch.empty(count, dtype=torch.int64, device=words.device)
    if count == 0:
        return out
    _digest_kernel[(count,)](words, keys, out, words.numel(), length, BLOCK=BLOCK, num_warps=WARPS)
    return out


__all__ = [
    "keys_of",
    "set_keys",
    "fused_digests",
    "digests_list",
    "triton_runs",
    "changes_fused",
    "fused_change",
    "CHANGED_DTYPES",
]
