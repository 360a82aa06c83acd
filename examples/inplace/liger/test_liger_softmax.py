"""Tests of liger-kernel's softmax (liger_kernel.ops.softmax) written against
its public API, LigerSoftmaxFunction (forward and backward), compared with
torch.softmax. Run on a GPU, or on the CPU with TRITON_INTERPRET=1."""
import pytest
import torch

from liger_kernel.ops.softmax import LigerSoftmaxFunction

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("shape", [(2, 8), (3, 100), (2, 3, 257)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_forward_matches_torch(shape, dtype):
    torch.manual_seed(0)
    x = torch.randn(shape, device=DEVICE, dtype=dtype) * 3
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    expected = torch.softmax(x.float(), dim=-1).to(dtype)
    torch.testing.assert_close(LigerSoftmaxFunction.apply(x), expected, atol=tol, rtol=tol)


def test_backward_matches_torch():
    torch.manual_seed(0)
    x = torch.randn(4, 96, device=DEVICE, requires_grad=True)
    g = torch.randn(4, 96, device=DEVICE)
    (LigerSoftmaxFunction.apply(x) * g).sum().backward()
    x2 = x.detach().clone().requires_grad_()
    (torch.softmax(x2, dim=-1) * g).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, atol=1e-5, rtol=1e-5)


def test_non_contiguous_input():
    x = torch.randn(64, 6, device=DEVICE).t()  # (6, 64), not contiguous
    torch.testing.assert_close(LigerSoftmaxFunction.apply(x), torch.softmax(x, dim=-1), atol=1e-5, rtol=1e-5)
