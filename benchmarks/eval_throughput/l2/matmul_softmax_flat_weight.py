# Runtime error: forward tries to hand the kernel W^T as a flat view, but the
# transpose is not contiguous, so .view() raises before any kernel runs.
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M = 64
BLOCK_N = 128
BLOCK_K = 32


@triton.jit
def linear_bias_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    y_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_wn,
    stride_ym,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + rk
        a = tl.load(
            x_ptr + rm[:, None] * stride_xm + ks[None, :], mask=(rm[:, None] < M) & (ks[None, :] < K), other=0.0
        )
        b = tl.load(
            w_ptr + rn[None, :] * stride_wn + ks[:, None], mask=(rn[None, :] < N) & (ks[:, None] < K), other=0.0
        )
        acc += tl.dot(a, b)
    bias = tl.load(b_ptr + rn, mask=rn < N, other=0.0)
    tl.store(
        y_ptr + rm[:, None] * stride_ym + rn[None, :], acc + bias[None, :], mask=(rm[:, None] < M) & (rn[None, :] < N)
    )


@triton.jit
def softmax_rows_kernel(h_ptr, y_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    h = tl.load(h_ptr + row * stride + cols, mask=cols < N, other=-float("inf"))
    e = tl.exp(h - tl.max(h, axis=0))
    tl.store(y_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=cols < N)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        M, K = x.shape
        w = self.linear.weight
        N = w.shape[0]
        w_t = w.t().view(-1)
        h = torch.empty((M, N), device=x.device, dtype=x.dtype)
        linear_bias_kernel[(triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))](
            x,
            w_t,
            self.linear.bias,
            h,
            M,
            N,
            K,
            x.stride(0),
            K,
            h.stride(0),
            BLOCK_M=BLOCK_M,
            BLOCK_N=BLOCK_N,
            BLOCK_K=BLOCK_K,
            num_warps=4,
            num_stages=3,
        )
        y = torch.empty_like(h)
        softmax_rows_kernel[(M,)](h, y, N, h.stride(0), BLOCK=triton.next_power_of_2(N), num_warps=8)
        return y
