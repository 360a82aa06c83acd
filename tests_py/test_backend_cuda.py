"""The CUDA C++ backend (backends/cuda/) on a machine without a GPU:
registration, static checks, the source transformations of its fast build,
nvcc's real compile errors mapped to the candidate's lines, cache keys,
launch accounting, prompt tips, the offline mutator on a CUDA program. The
GPU part (building, loading and judging candidates) is marked ``gpu``."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kernelsmith.backends import available_backends, get_backend
from kernelsmith.backends import cuda as C
from kernelsmith.backends.base import _Census

FIX = Path(__file__).parent / "fixtures" / "cuda_kb"
L1 = FIX / "l1_relu"
L2 = FIX / "l2_gemm_bias_relu"
CANDS = FIX / "candidates"
NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="needs nvcc (the CUDA toolkit); no GPU needed")


def _strings(path: Path) -> dict[str, str]:
    """The program's CUDA and C++ source strings (module-level assignments)."""
    tree = ast.parse(path.read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            out[node.targets[0].id] = node.value.value
    return out


# -- registration -------------------------------------------------------------


def test_registered_by_name():
    assert "cuda" in available_backends()
    backend = get_backend("cuda")
    assert isinstance(backend, C.CudaBackend) and backend.name == "cuda"
    assert backend.device() == "cuda" and backend.timing_device() == "cuda"
    env = backend.shared_cache_env("/shared", "/req")
    assert env == {C.SHARED_ENV: "/shared", C.REQUESTS_ENV: "/req"}
    assert backend.worker_env("/w")[C.LOCAL_ENV] == "/w/.ks_cuda"


def test_prepare_worker_without_gpu_says_why():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(RuntimeError, match="needs an NVIDIA GPU"):
        get_backend("cuda").prepare_worker()


# -- static checks ------------------------------------------------------------


@pytest.mark.parametrize("path", [L1 / "candidate.py", L2 / "candidate.py"])
def test_honest_programs_pass_static_checks(path):
    report = get_backend("cuda").static_check(path.read_text())
    assert report.errors == [] and report.hacks == [], (report.errors, report.hacks)


_HEAD = "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n"
_MODEL = "\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return ext.f(x)\n"


def _program(cuda: str, extra: str = "", cpp: str = "torch::Tensor f(torch::Tensor x);") -> str:
    return (
        _HEAD + f"cuda_src = {cuda!r}\ncpp_src = {cpp!r}\n"
        f"ext = load_inline(name='e', cpp_sources=cpp_src, cuda_sources=cuda_src, functions=['f']{extra})\n" + _MODEL
    )


_KERNEL = "__global__ void k(const float* x, float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = x[i]; }\n"


def test_static_check_refuses_programs_without_cuda_kernels():
    backend = get_backend("cuda")
    pure_torch = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
    assert any("does not build CUDA kernels" in h for h in backend.static_check(pure_torch).hacks)
    no_global = _program("torch::Tensor f(torch::Tensor x) { return x; }")
    assert any("no __global__ kernel" in h for h in backend.static_check(no_global).hacks)
    cpp_only = _HEAD + "ext = load_inline(name='e', cpp_sources='int f();', functions=['f'])\n" + _MODEL
    assert any("has no cuda_sources" in h for h in backend.static_check(cpp_only).hacks)
    via_load = _HEAD.replace("load_inline", "load") + "ext = load(name='e', sources=['k.cu'])\n" + _MODEL
    report = backend.static_check(via_load)
    assert any("load_inline" in e for e in report.errors)


@pytest.mark.parametrize(
    "snippet, words",
    [
        ("cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);", "extra CUDA streams"),
        ("auto s = at::cuda::getStreamFromPool();", "extra CUDA streams"),
        ("cublasSgemm(h, a, b);", "vendor library"),
        ("cudaLaunchKernel((void*)k, 1, 1, 0, 0, 0);", "launch kernels with <<<"),
        ("std::thread t([]{});", "threads and processes"),
        ("ks_internal_stream();", "launch accounting"),
        ("auto h = x.cpu();", "moves data to the host"),
        ("cudaMemcpy(buf, x.data_ptr<float>(), 4, cudaMemcpyDeviceToHost);", "moves data to the host"),
    ],
)
def test_static_check_finds_hacks_in_the_cuda_source(snippet, words):
    src = _program(_KERNEL + "torch::Tensor f(torch::Tensor x) {\n  " + snippet + "\n  return x;\n}\n")
    hacks = get_backend("cuda").static_check(src).hacks
    assert any(words in h for h in hacks), hacks


def test_static_check_finds_hacks_around_the_build():
    backend = get_backend("cuda")
    cuda = _KERNEL + "torch::Tensor f(torch::Tensor x) { return x; }\n"
    hacks = backend.static_check(_program(cuda, extra=", extra_ldflags=['-lcublas']")).hacks
    assert any("extra_ldflags" in h for h in hacks)
    assert any(
        "vendor library header" in h for h in backend.static_check(_program("#include <cublas_v2.h>\n" + cuda)).hacks
    )
    assert any("import of triton" in h for h in backend.static_check("import triton\n" + _program(cuda)).hacks)
    # a comment that names a forbidden call is not a call
    assert backend.static_check(_program("// no cudaStreamCreate here\n" + cuda)).hacks == []


def test_global_kernel_names():
    src = """
    // __global__ void commented_out(int x) {}
    template <typename T, int B>
    __global__ void __launch_bounds__(256, 2) tiled(const T* x) {}
    __global__ void plain(float* y, int n);
    extern "C" __global__ void c_linkage(float* y) {}
    """
    assert C.global_kernels(src) == ["tiled", "plain", "c_linkage"]


def test_launch_rewrite_routes_every_launch_through_the_counting_stream():
    src = "k<<<g, b>>>(x);\nk2<<<dim3(a, b), dim3(32, 4), smem>>>(y);\nk3<<<1, 2, 0, my_stream>>>(z);"
    out, n = C.rewrite_launches(src)
    assert n == 3 and out.count("\n") == src.count("\n")
    assert "k<<<g, b, 0, ks_internal_stream()>>>(x)" in out
    assert "<<<dim3(a, b), dim3(32, 4), smem, ks_internal_stream()>>>" in out
    assert "<<<1, 2, 0, ks_internal_stream(my_stream)>>>" in out


def test_split_keeps_torch_out_of_the_device_part():
    cuda = _strings(L1 / "candidate.py")["cuda_source"]
    device, host = C.split_sources(cuda)
    lines = cuda.count("\n")
    assert device.count("\n") == lines and host.count("\n") == lines  # the candidate's line numbers hold
    assert "torch" not in C._strip_comments(device).replace("#include <torch", "")
    assert "#include <torch/extension.h>" not in device
    assert "#include <torch/extension.h>" not in host  # the precompiled torch/types.h + torch/python.h serve it
    assert "__global__" not in host and "ks_launch(relu_vec4_kernel," in host
    assert "void relu_vec4_kernel(const float4* __restrict__ x" in host  # the kernel's host stub, declared
    # a template launched from torch code (AT_DISPATCH) is built as one unit
    templated = (
        "template <typename T> __global__ void k(T* y) {}\n"
        "torch::Tensor f(torch::Tensor x) { k<float><<<1, 1>>>(x.data_ptr<float>()); return x; }\n"
    )
    assert C.split_sources(templated) is None
    assert C.split_sources("__device__ float g(at::Half h) { return 0; }\n" + cuda) is None


# -- compile errors -----------------------------------------------------------

_GCC_LOG = """\
main.cpp: In function 'at::Tensor f(at::Tensor)':
cpp_sources:3:12: error: 'Tensr' in namespace 'torch' does not name a type; did you mean 'Tensor'?
    3 | torch::Tensr g(torch::Tensor x);
      |        ^~~~~
cuda_sources(7): error: identifier "undefined_thing" is undefined
      y[i] = undefined_thing;
             ^

1 error detected in the compilation of "cuda.cu".
ptxas error   : Entry function '_Z1kPf' uses too much shared data (0x20000 bytes, 0xc000 max)
"""


def test_parse_diagnostics_reads_both_formats():
    diags = C.parse_diagnostics(_GCC_LOG)
    got = [(d.file, d.line, d.column, d.kind) for d in diags]
    assert got[:2] == [("cpp_sources", 3, 12, "error"), ("cuda_sources", 7, None, "error")]
    assert "does not name a type" in diags[0].message and "undefined_thing" in diags[1].message
    assert any("too much shared data" in d.message for d in diags[2:])


def _broken_program(tmp_path: Path) -> tuple[str, str]:
    cuda = (
        "\n#include <torch/extension.h>\n\n__global__ void k(const float* x, float* y, int n) {\n"
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = fmaxf(x[i], undefined_thing);\n}\n\n"
        "torch::Tensor f(torch::Tensor x) {\n    auto y = torch::empty_like(x);\n"
        "    k<<<1, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());\n    return y;\n}\n"
    )
    program = (
        _HEAD
        + '\n\ncuda_src = """'
        + cuda
        + '"""\n'
        + "cpp_src = 'torch::Tensor f(torch::Tensor x);'\n"
        + "ext = load_inline(name='e', cpp_sources=cpp_src, cuda_sources=cuda_src, functions=['f'])\n"
        + _MODEL
    )
    return cuda, program


@needs_nvcc
def test_real_nvcc_errors_map_to_the_candidates_lines(tmp_path):
    cuda, program = _broken_program(tmp_path)
    device, _host = C.split_sources(cuda)
    (tmp_path / "k.cu").write_text(C._CU_PRELUDE + f'#line 1 "{C.CUDA_FILE}"\n' + device)
    proc = subprocess.run(
        [NVCC, "-c", "-gencode=arch=compute_90,code=sm_90", "k.cu", "-o", "k.o"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0
    diags = C.parse_diagnostics(proc.stdout + proc.stderr)
    errors = [d for d in diags if d.kind == "error"]
    assert errors and errors[0].file == C.CUDA_FILE and errors[0].line == 6, proc.stdout + proc.stderr
    assert "undefined_thing" in errors[0].message
    text = C.format_diagnostics(diags, {C.CUDA_FILE: cuda}, program)
    line_in_program = program.splitlines().index("    if (i < n) y[i] = fmaxf(x[i], undefined_thing);") + 1
    assert text.startswith(f"candidate.py:{line_in_program} (cuda_sources line 6)"), text
    assert "undefined_thing" in text.splitlines()[1]


@needs_nvcc
def test_build_reports_device_errors_without_torch_headers(tmp_path):
    """The whole build path on real compilers: the device part fails in nvcc
    (no torch headers, seconds), the host compile is stopped, and the error
    the evaluator gets names the candidate's line; its class makes it a
    compile failure for the evaluator."""
    cuda, program = _broken_program(tmp_path)
    spec = C.BuildSpec.from_load_inline(
        cpp_sources="torch::Tensor f(torch::Tensor x);", cuda_sources=cuda, functions=["f"]
    )
    tc = C.Toolchain.detect(arch="90")
    with pytest.raises(C.CompilationError) as info:
        C.compile_extension(spec, tc, str(tmp_path / "out"), candidate_source=program)
    message = str(info.value)
    assert "nvcc (cuda_sources)" in message and "(build split)" in message
    assert "undefined_thing" in message and "--- build log ---" in message
    line_in_program = program.splitlines().index("    if (i < n) y[i] = fmaxf(x[i], undefined_thing);") + 1
    assert f"candidate.py:{line_in_program} (cuda_sources line 6)" in message
    assert get_backend("cuda").classify_exception(info.value) == "compile"
    assert not any(p.name.endswith(".so") for p in (tmp_path / "out").rglob("*"))  # nothing half-built is cached


@needs_nvcc
def test_device_part_of_an_honest_program_compiles_without_torch(tmp_path):
    device, _ = C.split_sources(_strings(L2 / "candidate.py")["cuda_source"])
    (tmp_path / "k.cu").write_text(C._CU_PRELUDE + f'#line 1 "{C.CUDA_FILE}"\n' + device)
    proc = subprocess.run(
        [NVCC, "-c", "-gencode=arch=compute_90,code=sm_90", "k.cu", "-o", "k.o"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_flags_are_checked():
    ok = C.BuildSpec.from_load_inline(
        cpp_sources="",
        cuda_sources=_KERNEL,
        functions=["f"],
        extra_cflags=[""],
        extra_cuda_cflags=["-O3 --use_fast_math", "-DTILE=32"],
    )
    assert ok.extra_cuda_cflags == ["-O3", "--use_fast_math", "-DTILE=32"] and ok.extra_cflags == []
    arch = C.BuildSpec.from_load_inline(cuda_sources=_KERNEL, extra_cuda_cflags=["-arch=sm_80", "-O2"])
    assert arch.extra_cuda_cflags == ["-O2"]  # the build targets the device's own architecture
    with pytest.raises(C.CompilationError, match="not allowed"):
        C.BuildSpec.from_load_inline(cuda_sources=_KERNEL, extra_cuda_cflags=["-Xlinker=/etc/passwd"])
    with pytest.raises(C.CompilationError, match="extra_ldflags"):
        C.BuildSpec.from_load_inline(cuda_sources=_KERNEL, extra_ldflags=["-lcublas"])
    with pytest.raises(C.CompilationError, match="without cuda_sources"):
        C.BuildSpec.from_load_inline(cpp_sources="int f();")


# -- the cache ----------------------------------------------------------------


def _toolchain(arch: str = "90", torch_version: str = "2.11.0+cu130") -> C.Toolchain:
    return C.Toolchain(
        nvcc="nvcc",
        cxx="g++",
        arch=C.normalize_arch(arch),
        torch_version=torch_version,
        cuda_version="13.0",
        include_paths=[],
        python_include="",
        library_paths=[],
        abi_flags=[],
        nvcc_version="V13.0.88",
        cxx_version="g++ 12.2",
    )


def test_cache_key_covers_sources_flags_versions_and_device():
    spec = C.BuildSpec.from_load_inline(
        cpp_sources="torch::Tensor f(torch::Tensor x);", cuda_sources=_KERNEL, functions=["f"]
    )
    base = C.build_key(C.key_text(spec, _toolchain()))
    assert base == C.build_key(C.key_text(C.BuildSpec.from_json(spec.to_json()), _toolchain()))
    variants = [
        C.BuildSpec.from_load_inline(cpp_sources=spec.cpp_sources, cuda_sources=_KERNEL + " ", functions=["f"]),
        C.BuildSpec.from_load_inline(
            cpp_sources=spec.cpp_sources, cuda_sources=_KERNEL, functions=["f"], extra_cuda_cflags=["-O2"]
        ),
        C.BuildSpec.from_load_inline(cpp_sources=spec.cpp_sources, cuda_sources=_KERNEL, functions=["f", "g"]),
    ]
    keys = {C.build_key(C.key_text(v, _toolchain())) for v in variants}
    keys |= {
        C.build_key(C.key_text(spec, _toolchain(arch="8.0"))),
        C.build_key(C.key_text(spec, _toolchain(torch_version="2.12.0"))),
    }
    assert base not in keys and len(keys) == 5
    assert C.normalize_arch("sm_90a") == "90a" and C.normalize_arch("9.0") == "90"
    with pytest.raises(ValueError):
        C.normalize_arch("hopper")


def test_shared_cache_hit_needs_no_compiler(tmp_path, monkeypatch):
    """A build the pool's builder already wrote is used as it is: the
    toolchain here has no working compilers, so any compile would fail."""
    spec = C.BuildSpec.from_load_inline(cpp_sources="", cuda_sources=_KERNEL, functions=["f"])
    tc = _toolchain()
    key = C.build_key(C.key_text(spec, tc))
    entry = tmp_path / "shared" / "cuda" / key
    entry.mkdir(parents=True)
    (entry / f"ks_cuda_{key[:16]}.so").write_bytes(b"")
    monkeypatch.setenv(C.SHARED_ENV, str(tmp_path / "shared"))
    result = C.build_extension(spec, tc)
    assert result.cached == "shared" and result.path == str(entry / f"ks_cuda_{key[:16]}.so")
    # the builder ignores requests for another toolchain and ones that are not build keys
    backend = C.CudaBackend()
    monkeypatch.setitem(C._TOOLCHAIN, "tc", _toolchain(arch="80"))
    monkeypatch.setattr(C.backend, "build_pch", lambda *a, **k: ("", 0.0))  # where build_shared_cache looks it up
    assert backend.build_shared_cache([C.key_text(spec, tc), "not a key"], str(tmp_path / "shared2")) == 0


# -- launch accounting --------------------------------------------------------


def test_wrapped_functions_count_launches_and_feed_the_census():
    import torch

    counter = {"n": 0}

    def launches_two(x):  # stands in for an extension function: the counter is the C++ one's contract
        counter["n"] += 2
        return torch.empty_like(x)

    def launches_none(x):
        return x

    module = type(
        "M",
        (),
        {
            "g": staticmethod(launches_two),
            "h": staticmethod(launches_none),
            "_ks_launch_count": staticmethod(lambda: counter["n"]),
        },
    )
    saved = set(_Census.kernel_names)
    try:
        ext = C.Extension(module, ["k"], ["g", "h"])
        assert "k" in _Census.kernel_names  # the census learns the program's kernel names
    finally:
        _Census.kernel_names.clear()
        _Census.kernel_names.update(saved)
    backend = C.CudaBackend()
    x = torch.ones(4)
    with backend.launch_guard() as rec:
        ext.g(x)
        ext.h(x)
    assert rec.kernels == ["cuda.g"]  # h launched nothing: no kernel work
    _Census.launches, _Census.active = [], True
    try:
        y = ext.g(x)
    finally:
        _Census.active = False
    spans = [s for e in _Census.launches for s in e["spans"]]
    assert (y.untyped_storage().data_ptr(), y.untyped_storage().nbytes()) in spans  # the C++-allocated output


def test_census_tells_declared_kernels_from_a_librarys_inside_the_programs_call():
    """On a GPU the profiler links each device kernel to the host ranges it
    was launched from; inside the program's ``ks::kernel::`` range only the
    kernels its source declares are its own work. (The events are built by
    hand here: the CPU profiler records no device kernels.)"""
    from types import SimpleNamespace as NS

    from kernelsmith.evaluator.census import KERNEL_RANGE, CallCensus, Census

    rng = NS(name=KERNEL_RANGE + "relu_cuda", cpu_parent=None)
    fill = NS(name="aten::fill_", cpu_parent=rng)
    mm = NS(name="aten::mm", cpu_parent=rng)
    by_id = {1: rng, 2: fill, 3: mm}

    def kernel(name, link, us):
        return NS(
            name=name,
            linked_correlation_id=link,
            time_range=NS(start=0.0, end=us),
            device_resource_id=7,
            device_type="DeviceType.CUDA",
        )

    from kernelsmith.evaluator.guards import DEFAULT_ALLOWED_OPS

    census = Census(set(DEFAULT_ALLOWED_OPS), cuda=True, host_memory=False)
    saved = set(_Census.kernel_names)
    try:
        _Census.kernel_names.clear()
        _Census.kernel_names.update({"relu_vec4_kernel"})
        record = CallCensus(device_level=True)
        census._device_event(kernel("relu_vec4_kernel(float4 const*, float4*, long)", 1, 5.0), by_id, {}, record, {})
        census._device_event(
            kernel("void at::native::vectorized_elementwise_kernel<4, FillFunctor<float>>", 2, 1.0),
            by_id,
            {},
            record,
            {},
        )
        census._device_event(kernel("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n", 3, 9.0), by_id, {}, record, {})
        census._device_event(kernel("ampere_sgemm_128x64_nn", 1, 4.0), by_id, {}, record, {})  # cuBLAS called from C++
        census._device_event(kernel("_Z16relu_vec4_kernelPK6float4PS_l", 1, 2.0), by_id, {}, record, {})  # left mangled
        assert record.own == {"relu_cuda": 7.0}
        assert record.housekeeping == {"aten::fill_": 1.0}
        assert set(record.foreign) == {
            "kernel sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n (from aten::mm)",
            "kernel ampere_sgemm_128x64_nn (launched outside any torch op: a library or a JIT)",
        }
        # a backend that names no kernels: everything inside the range is the program's (Triton, OpenCL)
        _Census.kernel_names.clear()
        record = CallCensus(device_level=True)
        census._device_event(kernel("ampere_sgemm_128x64_nn", 1, 4.0), by_id, {}, record, {})
        assert record.own == {"relu_cuda": 4.0}
    finally:
        _Census.kernel_names.clear()
        _Census.kernel_names.update(saved)


# -- prompts and the offline mutator ------------------------------------------


def test_prompt_tips_generic_and_for_a_device():
    generic = get_backend("cuda").prompt_tips({})
    assert "load_inline" in generic and "<<<grid, block>>>" in generic
    from kernelsmith.hardware import HardwareInfo

    # what the evolve session passes: the HardwareInfo a worker recorded (the
    # dict form of an old record reads the same)
    hw = HardwareInfo(
        backend="cuda",
        name="NVIDIA H200",
        kind="gpu",
        compute_capability="9.0",
        arch="sm_90a",
        compute_units=132,
        properties={"shared_memory_per_block_optin_kb": 227, "l2_cache_mb": 60.0},
    )
    for given in (
        hw,
        HardwareInfo.from_dict(hw.to_dict()),
        {"device": "NVIDIA H200", "sm_count": 132, "shared_memory_per_block_optin_kb": 227},
    ):
        tips = get_backend("cuda").prompt_tips(given)
        assert "NVIDIA H200" in tips and "132 SMs" in tips and "227 KiB" in tips and "264" in tips, given


def test_mutator_tunes_annotated_launch_parameters():
    from kernelsmith.proposers.mutate import MutationProposer, parse_tunables

    source = (L1 / "candidate.py").read_text()
    tunables = parse_tunables(source)
    assert [(t.name, t.value) for t in tunables] == [("THREADS", 256)]
    seen = set()
    for it in range(6):
        proposal = MutationProposer(seed=1).propose_source(source, it)
        assert proposal.error is None, proposal.error
        child = proposal.text.split("```python\n", 1)[1].rsplit("```", 1)[0]
        value = parse_tunables(child)[0].value
        assert value in (128, 512, 1024)
        seen.add(value)
        assert get_backend("cuda").static_check(child).hacks == []
    assert len(seen) >= 2
    # the evolve seed's two launch parameters
    seed = (L1 / "seed.py").read_text()
    assert [t.name for t in parse_tunables(seed)] == ["THREADS", "MAX_BLOCKS"]
    assert get_backend("cuda").static_check(seed).hacks == []


# -- on a GPU -----------------------------------------------------------------


@pytest.mark.gpu
def test_honest_level1_program_is_accepted_on_a_gpu():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from kernelsmith.evaluator import Evaluator
    from kernelsmith.task import Task

    ev = Evaluator(backend="cuda", workers=1, timeout_s=300, timing=False)
    try:
        result = ev.evaluate(Task.load(L1), (L1 / "candidate.py").read_text())
    finally:
        ev.close()
    assert result.category == "ok", (result.category, result.error, result.hack_reasons)
