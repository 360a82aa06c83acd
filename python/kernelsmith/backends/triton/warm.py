"""A tiny Triton kernel that a pool's spare worker compiles and launches
before it gets a candidate (see TritonBackend.prepare_worker): the first
compile in a process pays for Triton's compiler and driver set-up (MLIR
contexts, the backend's libraries, the launcher), which then stays off the
candidate's clock. Its constant ``SALT`` is the process id, so the compile
is a real one even where a cache holds an earlier worker's kernel."""

import triton
import triton.language as tl


@triton.jit
def _ks_warm_kernel(x_ptr, n, SALT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(x_ptr + offs, x + (SALT % 2), mask=mask)


def warm(torch) -> None:
    import os

    x = torch.zeros(64, device="cuda")
    _ks_warm_kernel[(1,)](x, 64, SALT=os.getpid(), BLOCK=64)
    torch.cuda.synchronize()
