# Where a forked pool child spends its first Triton compile (issue 13), run on the GPU host:
#   PYTHONPATH=python python3 benchmarks/prof_triton_child_compile.py      (WARM=0: without the zygote warm-up)
# A warm parent (torch, Triton, the driver helpers) forks children A-E with fresh or shared Triton caches;
# each prints its CUDA context time, first call (compile + launch) and, for A, the cProfile top.
import os, sys, time, tempfile, cProfile, pstats, io, importlib.util

os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
import torch, triton
from triton.runtime import driver

t = time.time()
driver.active.utils
print("zygote: driver utils", round(time.time() - t, 3), flush=True)
if os.environ.get("WARM", "1") == "1":
    sys.path.insert(0, "python")
    from kernelsmith.backends.triton.backend import warm_compiler, _nvml_arch

    t = time.time()
    print("zygote: warm_compiler", warm_compiler(_nvml_arch()), round(time.time() - t, 3), flush=True)
print("triton", triton.__version__, "torch", torch.__version__, flush=True)
SRC = """
import torch, triton, triton.language as tl
@triton.jit
def {name}(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(y_ptr + offs, tl.maximum(x, {c}), mask=m)
def run(x):
    y = torch.empty_like(x)
    n = x.numel()
    {name}[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
    return y
"""


def child(cache, name, c, label, top=0):
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)
        return
    try:
        os.environ["TRITON_CACHE_DIR"] = cache
        t0 = time.time()
        torch.cuda.init()
        torch.empty(1, device="cuda")
        t1 = time.time()
        d = tempfile.mkdtemp()
        p = os.path.join(d, f"m_{name}.py")
        open(p, "w").write(SRC.format(name=name, c=c))
        spec = importlib.util.spec_from_file_location(f"m_{name}", p)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        x = torch.randn(1 << 20, device="cuda")
        pr = cProfile.Profile()
        pr.enable()
        t2 = time.time()
        mod.run(x)
        torch.cuda.synchronize()
        t3 = time.time()
        pr.disable()
        mod.run(x)
        torch.cuda.synchronize()
        t4 = time.time()
        print(
            f"{label}: cuda ctx {t1 - t0:.3f}s  first call (compile+launch) {t3 - t2:.3f}s  second {t4 - t3:.4f}s",
            flush=True,
        )
        print("  cache files:", sorted(os.listdir(cache))[:20] if os.path.isdir(cache) else None, flush=True)
        if top:
            s = io.StringIO()
            pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(top)
            print(s.getvalue()[:6000], flush=True)
    finally:
        sys.stdout.flush()
        os._exit(0)


shared = tempfile.mkdtemp()
child(tempfile.mkdtemp(), "k_a", 0.0, "A fresh cache", top=30)
child(shared, "k_b", 0.0, "B fresh shared")
child(shared, "k_c", 1.0, "C shared, other kernel same signature")
child(shared, "k_b", 0.0, "D shared, same kernel")
child(tempfile.mkdtemp(), "k_d", 2.0, "E fresh cache again")
# which launcher artefacts are in the shared cache
for root, dirs, files in os.walk(shared):
    for f in files:
        print("  ", os.path.relpath(os.path.join(root, f), shared), os.path.getsize(os.path.join(root, f)))
