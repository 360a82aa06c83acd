"""The fused audit hash (evaluator/audit_fused.py) against the torch path it
must equal bit for bit (evaluator/audit.py): the worker sends the fused
digests, the referee recomputes chunks with the torch path.

The kernel runs here under TRITON_INTERPRET=1 on host tensors (or compiled,
on a CUDA device where there is one); the tests of the kernel are skipped
where neither is available, so that they never silently test the fallback
in its place. Under the interpreter a launch costs ~3.5 ms per chunk, so the
dtype-by-size table takes a few minutes."""

from __future__ import annotations

import pytest
import torch

from kernelsmith.evaluator import audit
from kernelsmith.evaluator import audit_fused as fused

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
KERNEL = pytest.mark.skipif(
    not (fused.triton_runs(torch.zeros(1, device=DEVICE))),
    reason="the Triton kernel needs a CUDA device or TRITON_INTERPRET=1 (set before import)",
)

DTYPES = [
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.uint8,
    torch.bool,
    torch.complex64,
]
SIZES = [1, 7, 1023, 1024, 1025, 5000, 70001]
#: protocol.py draws nonces of 62 bits; 0 and a negative one for the edges
NONCES = [0, 3, 2**62 - 1, 0x2545F4914F6CDD1D, -12345]


def _random(dtype: torch.dtype, numel: int, seed: int) -> torch.Tensor:
    """``numel`` elements of ``dtype`` with random bits (every bit pattern,
    so sign bits, NaNs and infinities included: the sign extension of the
    words is exercised), on DEVICE."""
    gen = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return (torch.rand(numel, generator=gen) > 0.5).to(DEVICE)
    if dtype == torch.complex64:
        return torch.view_as_complex(_random(torch.float32, 2 * numel, seed).view(numel, 2))
    size = torch.empty(0, dtype=dtype).element_size()
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[size]
    info = torch.iinfo(as_int)
    bits = torch.randint(info.min, info.max, (numel,), generator=gen, dtype=torch.int64).to(as_int)
    return bits.view(dtype).to(DEVICE)


def _fused(t: torch.Tensor, nonce: int, chunks: int = audit.CHUNKS) -> list[int]:
    out = fused.fused_digests(t, fused.keys_of(nonce, t.device), chunks)
    assert out.dtype == torch.int64 and out.device == t.device
    return fused.digests_list(out)


#: fewer, longer chunks than CHUNKS for the tests past the dtype-by-size
#: table: the interpreter's time goes by the number of chunks
FEW = 16


def test_layout_is_chunk_bounds() -> None:
    for numel in [0, 1, 2, 7, 1023, 1024, 1025, 2047, 2048, 2049, 5000, 70001, 1 << 20, (1 << 20) + 1]:
        for chunks in (1, 3, audit.CHUNKS):
            bounds = audit.chunk_bounds(numel, chunks)
            length, count = fused._layout(numel, chunks)
            assert count == len(bounds)
            if bounds:
                assert length == bounds[0][1] - bounds[0][0]
                # the kernel's chunk k covers [k * length, min((k+1) * length, numel))
                assert bounds == [(k * length, min((k + 1) * length, numel)) for k in range(count)]


def test_one_chunk_bound_is_its_entry_of_chunk_bounds() -> None:
    # the referee looks up a picked chunk's bounds without listing them all
    for numel in [0, 1, 2, 7, 1023, 1024, 1025, 2047, 2049, 5000, 70001, (1 << 20) + 1]:
        for chunks in (1, 3, audit.CHUNKS):
            bounds = audit.chunk_bounds(numel, chunks)
            for c in [-1, *range(len(bounds) + 2)]:
                assert audit.chunk_bound(numel, c, chunks) == (bounds[c] if 0 <= c < len(bounds) else None)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: the host's hash is compared with it")
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_torch_hash_of_a_chunk_is_the_same_on_the_device_and_the_host(dtype: torch.dtype) -> None:
    # the referee hashes handed-over chunks on its device (referee_process._audit_round);
    # the torch path's integer arithmetic wraps the same way on both
    for numel, nonce in [(1, 3), (4097, 2**62 - 1), (40961, -12345)]:
        t = _random(dtype, numel, seed=numel)
        words = audit.words(t)
        assert audit.digest_of_chunk(words, 4096 * 7, nonce) == audit.digest_of_chunk(words.cpu(), 4096 * 7, nonce)


def test_the_int_view_reads_bits_as_words_does() -> None:
    for dtype in DTYPES:
        t = _random(dtype, 64, 1)
        assert torch.equal(fused._int_view(t).to(torch.int64), audit.words(t)), dtype


@KERNEL
@pytest.mark.slow  # ~3 minutes under the interpreter: 4,600 chunks per dtype
@pytest.mark.parametrize("numel", SIZES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_kernel_equals_chunk_digests(dtype: torch.dtype, numel: int) -> None:
    # one nonce per case, cycling, so that every nonce meets several dtypes and sizes
    nonce = NONCES[(DTYPES.index(dtype) + SIZES.index(numel)) % len(NONCES)]
    t = _random(dtype, numel, seed=numel)
    expected = audit.chunk_digests(t, nonce)
    assert len(expected) == len(audit.chunk_bounds(audit.flat(t).numel()))
    assert _fused(t, nonce) == expected


@KERNEL
def test_kernel_equals_chunk_digests_for_every_nonce() -> None:
    t = _random(torch.float32, 1025, seed=7)  # chunks of 65, the last one of 50
    seen = set()
    for nonce in NONCES:
        digests = _fused(t, nonce, FEW)
        assert digests == audit.chunk_digests(t, nonce, FEW), nonce
        seen.add(tuple(digests))
    assert len(seen) == len(NONCES)


@KERNEL
def test_the_last_shorter_chunk_is_digest_of_chunk() -> None:
    t = _random(torch.float32, 4097, seed=3)  # chunks of 5, the last one of 2
    w = audit.words(t)
    first, last = audit.chunk_bounds(w.numel())[-1]
    assert last - first < audit.chunk_bounds(w.numel())[0][1]
    assert _fused(t, 11)[-1] == audit.digest_of_chunk(w[first:last], first, 11)


@KERNEL
def test_set_keys_is_a_new_nonce() -> None:
    t = _random(torch.float16, 5000, seed=5)
    keys = fused.keys_of(1, DEVICE)
    storage = keys.data_ptr()
    before = fused.digests_list(fused.fused_digests(t, keys, FEW))
    fused.set_keys(keys, 2)
    assert keys.data_ptr() == storage  # filled in place: a captured launch reads the new keys
    assert torch.equal(keys, fused.keys_of(2, DEVICE))
    after = fused.digests_list(fused.fused_digests(t, keys, FEW))
    assert after == audit.chunk_digests(t, 2, FEW)
    assert before == audit.chunk_digests(t, 1, FEW)
    assert all(a != b for a, b in zip(before, after))


@KERNEL
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.uint8, torch.int16, torch.bool, torch.complex64], ids=str
)
def test_one_flipped_bit_changes_only_its_chunk(dtype: torch.dtype) -> None:
    numel = 4097  # chunks of 257, the last one of 242 (more words for complex)
    t = _random(dtype, numel, seed=9)
    base = _fused(t, 4, FEW)
    bounds = audit.chunk_bounds(audit.flat(t).numel(), FEW)
    assert bounds[-1][1] - bounds[-1][0] < bounds[0][1] - bounds[0][0]
    words = audit.flat(t).numel()
    # the first word, one inside, the last word (in the shorter chunk)
    for index in (0, words // 2 + 1, words - 1):
        for bit in (0, 8 * audit.flat(t).element_size() - 1):  # the lowest bit and the sign bit
            if dtype == torch.bool and bit:
                continue
            changed = audit.flat(t).clone()
            as_int = fused._int_view(changed)
            as_int[index] ^= torch.tensor(1 << bit if bit < 63 else -(1 << 63)).to(as_int.dtype)
            if dtype == torch.complex64:
                changed = torch.view_as_complex(changed.view(-1, 2))
            digests = _fused(changed, 4, FEW)
            assert digests == audit.chunk_digests(changed, 4, FEW)
            differ = [k for k, (a, b) in enumerate(zip(base, digests)) if a != b]
            target = next(k for k, (lo, hi) in enumerate(bounds) if lo <= index < hi)
            assert differ == [target], (index, bit)


@KERNEL
def test_a_non_contiguous_input_hashes_in_its_logical_order() -> None:
    base = _random(torch.float32, 64 * 80, seed=12).view(64, 80)
    for view in (base.t(), base[:, ::3], base.t()[5:40]):
        assert not view.is_contiguous()
        digests = _fused(view, 8, FEW)
        assert digests == _fused(view.contiguous(), 8, FEW)
        assert digests == audit.chunk_digests(view, 8, FEW)
    z = _random(torch.complex64, 30 * 40, seed=13).view(30, 40).t()
    assert _fused(z, 8, FEW) == audit.chunk_digests(z, 8, FEW)
    # the order matters: the same values in the stored order hash differently
    assert _fused(base.t(), 8, FEW) != _fused(base, 8, FEW)


def test_keys_of_another_kind_are_refused() -> None:
    t = torch.zeros(8, device=DEVICE)
    for keys in (
        fused.keys_of(1, DEVICE).to(torch.int32),
        fused.keys_of(1, DEVICE)[:1],
        torch.zeros(3, dtype=torch.int64),
    ):
        with pytest.raises(ValueError, match="keys must be"):
            fused.fused_digests(t, keys)
    if DEVICE == "cpu":
        with pytest.raises(ValueError, match="keys must be"):
            fused.fused_digests(t, fused.keys_of(1, "meta"))


def test_an_empty_tensor_has_no_digests() -> None:
    t = torch.zeros(0, 5, device=DEVICE)
    out = fused.fused_digests(t, fused.keys_of(1, DEVICE))
    assert out.dtype == torch.int64 and out.numel() == 0
    assert fused.digests_list(out) == audit.chunk_digests(t, 1) == []


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_fallback_equals_chunk_digests(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fused, "triton_runs", lambda t: False)
    monkeypatch.setattr(fused, "_digest_kernel", None)  # a launch would fail
    monkeypatch.setattr(audit, "_SLAB", 4096)  # several slabs and a tail, as on a big output
    for numel in SIZES:
        nonce = NONCES[numel % len(NONCES)]
        t = _random(dtype, numel, seed=numel + 1)
        out = fused.fused_digests(t, fused.keys_of(nonce, DEVICE))
        assert out.dtype == torch.int64 and out.device == t.device
        assert fused.digests_list(out) == audit.chunk_digests(t, nonce), numel


CHANGED = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


@KERNEL
@pytest.mark.parametrize("dtype", CHANGED, ids=str)
def test_the_fused_change_shrinks_every_element_by_its_own_factor(dtype: torch.dtype) -> None:
    """One pass of the change kernel: each element times a factor in
    (1 - EPS, 1] (in [0, 1) values stay there, no sign flips), the factors
    spread over that range (a mean near 1 - EPS / 2), drawn from the key and
    the position alone: the same key gives the same bits, another key
    other factors."""
    numel = 70001
    base = (torch.rand(numel, generator=torch.Generator().manual_seed(4), dtype=torch.float64) + 0.5).to(dtype)
    x = base.to(DEVICE, copy=True)
    fused.fused_change(x, audit._key(99, 16))
    ratio = x.double().cpu() / base.double()
    # the product is rounded once to the element type: half a unit of it past the factor's range
    ulp = {torch.float16: 2**-10, torch.bfloat16: 2**-7}.get(dtype, 2**-23)
    assert bool((ratio <= 1 + ulp).all()) and bool((ratio > 1 - audit.EPS - ulp).all())
    assert abs(float(ratio.mean()) - (1 - audit.EPS / 2)) < 2e-3 + ulp
    if dtype in (torch.float32, torch.float64):
        assert float((ratio == 1).double().mean()) < 1e-3  # every element moved
    again = base.to(DEVICE, copy=True)
    fused.fused_change(again, audit._key(99, 16))
    assert torch.equal(again, x)
    other = base.to(DEVICE, copy=True)
    fused.fused_change(other, audit._key(100, 16))
    assert float((other != x).double().mean()) > 0.9
    signs = torch.tensor([-1.5, -0.25, 0.0, 0.25, 0.999], dtype=dtype, device=DEVICE)
    kept = signs.clone()
    fused.fused_change(signs, audit._key(5, 16))
    assert bool(((signs >= 0) == (kept >= 0)).all()) and float(signs[-1]) < 1 and float(signs[2]) == 0


@KERNEL
def test_the_change_of_a_cuda_input_is_the_fused_one_and_the_rest_the_torch_one() -> None:
    """audit.change_inputs takes the fused pass for a contiguous CUDA tensor
    of the four float types and torch's generator for the rest (a host
    tensor, a strided view, an int tensor untouched): both sides of a round
    call it on copies made alike, so they take the same path."""
    inputs = [
        torch.rand(3000, device=DEVICE),
        torch.rand(40, 30, device=DEVICE).t(),
        torch.arange(10, device=DEVICE),
    ]
    before = [t.clone() for t in inputs]
    audit.change_inputs(inputs, 1234)
    assert torch.equal(inputs[2], before[2])
    assert not torch.equal(inputs[1], before[1]) and not inputs[1].is_contiguous()
    expected = before[0].clone()
    if DEVICE == "cuda":
        fused.fused_change(expected, audit._key(1234, 16))
    else:  # a host tensor keeps torch's generator, under the interpreter too
        gen = torch.Generator().manual_seed((1234 * 1000003) % (1 << 63))
        expected.mul_(torch.rand(expected.shape, generator=gen).mul_(-audit.EPS).add_(1))
    assert torch.equal(inputs[0], expected)
    assert fused.changes_fused(inputs[0]) == (DEVICE == "cuda")
