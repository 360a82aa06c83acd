"""A splice's kernels and time on a GPU, before and after its batching
(evaluator/timed_rotation.py ``_splice``): a stand-alone copy of both forms'
operations (``old``: a clone and a copy per block, set and side, as at commit
bda3324; ``new``: one ``cat`` of every block and one ``torch._foreach_copy_``
back, as now), 8 sets (``gpu_input_sets``) of 16x1024 float32 on each of two
sides, one block of 64 elements. It checks that both leave the same values
and that the version counters are kept, then counts one splice's kernels
(torch.profiler) and times 5 x 1000 splices (synchronised). A copy and not
the package's code: the device machine's working tree is the lead's, so this
file was run there on its own.

    python3 benchmarks/gpu_splice_launches.py
"""

import torch, time

P = torch.profiler
V = torch.autograd._unsafe_preserve_version_counter
n = 8
L = 64
N = 16 * 1024


def mk():
    g = torch.Generator().manual_seed(0)
    return [[torch.randn(N, generator=g).cuda() for _ in range(n)] for _ in range(2)]


def old(S, s):
    for sets in S:
        b = [t.view(-1)[s : s + L].clone() for t in sets]
        for k in range(n):
            with V(sets[k]):
                sets[k].view(-1)[s : s + L].copy_(b[(k + 1) % n])


def new(S, s):
    d = []
    src = []
    o = []
    for sets in S:
        b = [t.as_strided((L,), (1,), t.storage_offset() + s) for t in sets]
        for k in range(n):
            d.append(b[k])
            src.append(b[(k + 1) % n])
            o.append(sets[k])
    with V(tuple(o)):
        st = torch.cat(src).split([L] * len(src))
        torch._foreach_copy_(d, list(st))


A, B = mk(), mk()
for i in range(50):
    s = (i * 997) % (N - L)
    old(A, s)
    new(B, s)
assert all(torch.equal(a, b) for x, y in zip(A, B) for a, b in zip(x, y))
assert all(t._version == 0 for x in B for t in x), [t._version for x in B for t in x]
print("equal, versions kept")
for f in (old, new):
    with P.profile(activities=[P.ProfilerActivity.CUDA]) as p:
        f(B, 5)
        torch.cuda.synchronize()
    k = sum(1 for e in p.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    r = []
    for _ in range(5):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for i in range(1000):
            f(B, (i * 31) % (N - L))
        torch.cuda.synchronize()
        r.append((time.perf_counter() - t) / 1000 * 1e3)
    r.sort()
    print(f.__name__, k, "kernels per splice", f"{r[2]:.4f} ms median ({r[0]:.4f}-{r[4]:.4f})")
