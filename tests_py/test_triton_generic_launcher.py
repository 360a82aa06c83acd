"""The generic Triton launcher (backends/triton/launch.c, launch.py).

On any host: the module builds with Triton's cuda.h and converts arguments
as Triton 3.6's generated launcher would (same bits, same errors). On a GPU
with a Triton that builds launchers per signature: kernels of many argument
types give the same results through it as through Triton's own launchers,
run in two processes, and a pool worker creates no per-signature launcher.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")

import kernelsmith  # noqa: E402
from kernelsmith.backends.triton import launch as tl  # noqa: E402

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    include = Path(triton.__file__).parent / "backends" / "nvidia" / "include"
    if not (include / "cuda.h").is_file() or not (shutil.which("gcc") or shutil.which("cc") or os.environ.get("CC")):
        pytest.skip("needs Triton's cuda.h and a C compiler")
    old = os.environ.get("TRITON_CACHE_DIR")
    os.environ["TRITON_CACHE_DIR"] = str(tmp_path_factory.mktemp("triton-cache"))
    try:
        yield tl.build([str(include)])
    finally:
        if old is None:
            os.environ.pop("TRITON_CACHE_DIR", None)
        else:
            os.environ["TRITON_CACHE_DIR"] = old


@pytest.mark.parametrize(
    "signature,codes",
    [
        (["*fp32", "*fp32", "i32", "constexpr"], b"PPiC"),
        (["*bf16", "*kfp16", "i64", "fp32", "u1", "i1"], b"PPLfBb"),
        (["i8", "i16", "u8", "u16", "u32", "u64", "fp16", "bf16", "f32", "fp64"], b"bhBHIKeEfd"),
        ([("*fp32", "*fp32"), "i32", ("constexpr", ("i64", "fp32"))], b"(PP)i(C(Lf))"),
    ],
)
def test_codes_follow_the_signature(signature, codes):
    assert tl.launch_codes(signature) == codes


@pytest.mark.parametrize(
    "signature",
    [
        ["tensordesc<fp32[64, 64]>", "i32"],  # descriptors keep Triton's launcher
        ["*fp32", "nvTmaDesc"],
        ["*fp32", "q7"],
        ["*fp32"] * 257,
    ],
)
def test_signatures_it_cannot_express_keep_tritons_launcher(signature):
    assert tl.launch_codes(signature) is None


class _Ptr:
    def __init__(self, value):
        self.value = value

    def data_ptr(self):
        return self.value


def _slots(*parts):
    return b"".join(p.ljust(8, b"\0") for p in parts)


def test_pack_lays_out_parameters_as_the_kernel_reads_them(mod):
    got = mod.pack(b"PPiCLf", 0x7F00_0000_1000, _Ptr(0x7F00_0000_2000), -5, 1024, -(2**40), 1.5)
    assert got == _slots(
        struct.pack("<Q", 0x7F00_0000_1000),
        struct.pack("<Q", 0x7F00_0000_2000),
        struct.pack("<i", -5),
        struct.pack("<q", -(2**40)),
        struct.pack("<f", 1.5),
    )
    # a constexpr takes an argument and no slot; None is a null pointer
    assert mod.pack(b"CPC", "anything", None, 3) == _slots(b"")
    half = mod.pack(b"eEd", 0.1, 0.1, 0.1)
    bf16 = struct.unpack("<I", struct.pack("<f", 0.1))[0] >> 16
    assert half == _slots(struct.pack("<e", 0.1), struct.pack("<H", bf16), struct.pack("<d", 0.1))
    # unsigned formats wrap as PyArg_ParseTuple's do (no overflow check)
    assert mod.pack(b"BHIK", 257, -1, -1, 2**64 + 3) == _slots(b"\x01", b"\xff\xff", b"\xff" * 4, struct.pack("<Q", 3))
    # tuples are unpacked in place, nested too
    assert mod.pack(b"(PP)i(C(Lf))", (1, 2), 7, (None, [8, 2.0])) == _slots(
        struct.pack("<Q", 1), struct.pack("<Q", 2), struct.pack("<i", 7), struct.pack("<q", 8), struct.pack("<f", 2.0)
    )


@pytest.mark.parametrize(
    "codes,args,error,text",
    [
        (b"i", (2**31,), OverflowError, "signed integer is greater than maximum"),
        (b"i", (-(2**31) - 1,), OverflowError, "signed integer is less than minimum"),
        (b"b", (-1,), OverflowError, "unsigned byte integer is less than minimum"),  # i8 is PyArg's "b"
        (b"h", (40000,), OverflowError, "signed short integer is greater than maximum"),
        (b"L", (2**63,), OverflowError, "too (large|big)"),
        (b"i", (1.5,), TypeError, "cannot be interpreted as an integer"),
        (b"f", ("x",), TypeError, "must be real number"),
        (b"P", (object(),), TypeError, "Pointer argument must be either uint64 or have data_ptr method"),
        (b"P", (_Ptr(1.0),), TypeError, "data_ptr method of Pointer object must return 64-bit int"),
        (b"PP", (1,), TypeError, "arguments"),
        (b"P", (1, 2), TypeError, "arguments"),
        (b"(PP)", ((1, 2, 3),), TypeError, "must be sequence of length 2, not 3"),
        (b"(PP)", (5,), TypeError, "must be sequence"),
        (b"(P", ((1,),), ValueError, "unbalanced"),
        (b"Z", (1,), ValueError, "unknown argument code"),
    ],
)
def test_bad_arguments_raise_as_tritons_launcher_does(mod, codes, args, error, text):
    with pytest.raises(error, match=text):
        mod.pack(codes, *args)


def test_pointers_survive_a_data_ptr_that_changes_their_list(mod):
    box: list = []

    class Shrinking:
        def data_ptr(self):
            box.clear()
            return 16

    box.extend([Shrinking(), _Ptr(32)])
    assert mod.pack(b"(PP)", box) == _slots(struct.pack("<Q", 16), struct.pack("<Q", 32))


# Triton 3.6's make_launcher: the PyArg_ParseTuple format of each argument type
_TRITON_FORMAT = {
    "b": ("b", ctypes.c_uint8),
    "h": ("h", ctypes.c_int16),
    "i": ("i", ctypes.c_int32),
    "L": ("L", ctypes.c_int64),
    "B": ("B", ctypes.c_uint8),
    "H": ("H", ctypes.c_uint16),
    "I": ("I", ctypes.c_uint32),
    "K": ("K", ctypes.c_uint64),
    "d": ("d", ctypes.c_double),
}


class _Index:
    def __index__(self):
        return 77


def _pyarg(fmt, ctype, value):
    """CPython's own PyArg_ParseTuple on one argument: the stored value, or
    the (type, message) of the error it raises."""
    out = ctype()
    try:
        ctypes.pythonapi.PyArg_ParseTuple(ctypes.py_object((value,)), fmt.encode(), ctypes.byref(out))
    except Exception as exc:  # noqa: BLE001 - the error is what is compared
        return (type(exc), str(exc))
    return out.value


def _ours(mod, code, ctype, value):
    try:
        raw = mod.pack(code.encode(), value)
    except Exception as exc:  # noqa: BLE001
        return (type(exc), str(exc))
    return ctype.from_buffer_copy(raw[: ctypes.sizeof(ctype)]).value


@pytest.mark.parametrize("code", sorted(_TRITON_FORMAT))
@pytest.mark.parametrize(
    "value",
    [
        0,
        7,
        -1,
        127,
        128,
        255,
        256,
        -129,
        32767,
        32768,
        -32769,
        2**31 - 1,
        2**31,
        -(2**31) - 1,
        2**32 + 5,
        2**63 - 1,
        2**63,
        -(2**63) - 1,
        2**64 + 3,
        True,
        1.5,
        "3",
        None,
        _Index(),
    ],
)
def test_arguments_convert_as_cpythons_pyarg_parsetuple_does(mod, code, value):
    """Against the real thing: CPython's PyArg_ParseTuple with the format
    Triton's generated launcher uses for each type (called through ctypes)."""
    fmt, ctype = _TRITON_FORMAT[code]
    expected = _pyarg(fmt, ctype, value)
    got = _ours(mod, code, ctype, value)
    if isinstance(expected, tuple):  # the same error class; the same words where CPython's are fixed
        assert isinstance(got, tuple) and got[0] is expected[0], (got, expected)
        if expected[0] is OverflowError and code in "bhi":
            assert got[1] == expected[1]
    else:
        assert got == expected, (got, expected)


class _StandInLauncher:
    """Triton 3.6's CudaLauncher as far as install() touches it."""

    def __init__(self, src, metadata):
        self.launch = "triton's own"


def test_install_binds_the_code_string_or_leaves_tritons_launcher(mod, monkeypatch):
    """install() with Triton 3.6's driver module stood in (its launchers need
    a GPU): a plain signature launches through the generic module with its
    code string, a tensor descriptor keeps Triton's launcher, and the
    environment switch leaves the class alone."""
    import functools
    import types

    driver = types.SimpleNamespace(CudaLauncher=_StandInLauncher, include_dirs=[])
    original = _StandInLauncher.__init__
    monkeypatch.setattr(tl, "_driver", lambda: driver)
    monkeypatch.setattr(_StandInLauncher, "__init__", original)
    monkeypatch.setenv(tl.ENV, "0")
    assert tl.install() is False and _StandInLauncher.__init__ is original
    monkeypatch.delenv(tl.ENV)
    assert tl.install() is True and tl.install() is True  # once
    meta = types.SimpleNamespace(
        num_ctas=2,
        global_scratch_size=0,
        global_scratch_align=1,
        profile_scratch_size=0,
        profile_scratch_align=1,
        launch_cooperative_grid=False,
        launch_pdl=True,
        tensordesc_meta=None,
    )
    plain = _StandInLauncher(types.SimpleNamespace(signature={"x": "*fp32", "n": "i32", "B": "constexpr"}), meta)
    assert isinstance(plain.launch, functools.partial)
    assert plain.launch.func is mod.launch and plain.launch.args == (b"PiC",)
    assert plain.num_ctas == 2 and plain.launch_pdl is True and plain.global_scratch_size == 0
    desc = _StandInLauncher(types.SimpleNamespace(signature={"d": "tensordesc<fp32[64, 64]>", "n": "i32"}), meta)
    assert desc.launch == "triton's own"


# -- on a GPU: the same results as Triton's own launchers ------------------

_PROBE = textwrap.dedent(r"""
    import json, os, sys
    import torch, triton, triton.language as tl
    from kernelsmith.backends.triton import launch as gl
    generic = gl.install() if sys.argv[1] == "generic" else False

    @triton.jit
    def scalars(out_i, out_f, out_h, a, b, c, d, e, f, g, flag, BLOCK: tl.constexpr):
        # integers of every width Triton specialises to, stored as int64
        tl.store(out_i + 0, a.to(tl.int64))
        tl.store(out_i + 1, b.to(tl.int64))
        tl.store(out_i + 2, c.to(tl.int64))
        tl.store(out_i + 3, (d >> 32).to(tl.int64))
        tl.store(out_i + 4, flag.to(tl.int64))
        tl.store(out_i + 5, BLOCK)
        tl.store(out_f + 0, e)
        tl.store(out_f + 1, f)
        tl.store(out_h + 0, g.to(tl.float16))

    @triton.jit
    def axpy(x, y, out, n, alpha, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out + offs, alpha * tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)

    @triton.jit
    def pair(ptrs, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        m = offs < n
        tl.store(ptrs[1] + offs, tl.load(ptrs[0] + offs, mask=m) * 2, mask=m)

    res = {}
    oi = torch.zeros(6, dtype=torch.int64, device="cuda")
    of = torch.zeros(2, dtype=torch.float32, device="cuda")
    oh = torch.zeros(1, dtype=torch.float16, device="cuda")
    # a: i32, b: i64 (too big for i32), c: a negative i32, d: u64 (2**63 or more), e, f, g: fp32, flag: i1
    scalars[(1,)](oi, of, oh, 7, 2**40 + 3, -9, 2**63 + 2**33, 1.25, -3.5, 0.1, True, BLOCK=16)
    torch.cuda.synchronize()
    res["scalars"] = [oi.tolist(), of.tolist(), oh.float().tolist()]
    torch.manual_seed(0)
    x = torch.randn(10007, device="cuda"); y = torch.randn(10007, device="cuda"); out = torch.empty_like(x)
    axpy[(triton.cdiv(10007, 256),)](x, y, out, 10007, 0.5, BLOCK=256)
    torch.cuda.synchronize()
    res["axpy"] = out.double().sum().item()
    a = torch.arange(100, dtype=torch.float32, device="cuda"); b = torch.zeros_like(a)
    pair[(1,)]((a, b), 100, BLOCK=128)
    torch.cuda.synchronize()
    res["pair"] = b.sum().item()
    for name, call in (("cpu_tensor", lambda: axpy[(1,)](x.cpu(), y, out, 16, 1.0, BLOCK=16)),):
        try:
            call(); torch.cuda.synchronize(); res[name] = "ok"
        except Exception as exc:
            res[name] = f"{type(exc).__name__}: {exc}"[:200]
    launchers = set()
    for k in (scalars, axpy, pair):
        for cache in k.device_caches.values():
            for compiled in cache[0].values():
                launchers.add(type(compiled.run.launch).__name__)
    res["launch_types"] = sorted(launchers)
    res["generic"] = generic
    print("RESULT " + json.dumps(res))
""")


def _gpu_triton_with_per_signature_launchers():
    torch = pytest.importorskip("torch")
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0") or not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    if tl._driver() is None:
        pytest.skip("this Triton launches through one generic launcher of its own")


def _probe(mode: str, tmp_path: Path) -> dict:
    env = dict(
        os.environ,
        TRITON_CACHE_DIR=str(tmp_path / mode),
        PYTHONPATH=str(Path(kernelsmith.__file__).resolve().parent.parent),
    )
    script = tmp_path / "probe.py"  # @triton.jit needs its source in a file
    script.write_text(_PROBE)
    proc = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True, env=env, timeout=300)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT ") :])


@pytest.mark.gpu
def test_generic_launcher_matches_tritons_own(tmp_path):
    _gpu_triton_with_per_signature_launchers()
    stock, generic = _probe("stock", tmp_path), _probe("generic", tmp_path)
    assert generic["generic"] is True and stock["generic"] is False
    assert generic["launch_types"] == ["partial"], generic
    assert "partial" not in stock["launch_types"], stock
    for key in ("scalars", "axpy", "pair", "cpu_tensor"):
        assert generic[key] == stock[key], (key, generic[key], stock[key])
    assert "cannot be accessed from Triton (cpu tensor?)" in generic["cpu_tensor"]
    assert generic["scalars"][0] == [7, 2**40 + 3, -9, (2**63 + 2**33) >> 32, 1, 16]


@pytest.mark.gpu
def test_pool_workers_build_no_launcher(tmp_path):
    """A pool child launches through the zygote's generic launcher: its
    private Triton cache holds no per-signature launcher afterwards."""
    _gpu_triton_with_per_signature_launchers()
    from kernelsmith.evaluator import Evaluator
    from kernelsmith.task import Task

    task = Task.load(HERE.parent / "examples" / "triton" / "relu", trials=1)
    with Evaluator(backend="triton", workers=1, spares=0, timing=False) as ev:
        result = ev.evaluate(task, task.seed_source)
        pool = next(iter(ev._device_pools.values()))
        launchers = list(Path(pool.root).rglob("__triton_launcher*"))
        requests = list(Path(pool.root).rglob("cache-requests/*.key"))
    assert result.category == "ok", result.error
    assert not launchers and not requests, (launchers, requests)
