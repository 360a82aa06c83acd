"""Tests of fla-core's L2 normalization (fla/modules/norm/l2norm.py) written
against its public API (l2norm_fwd, l2norm, L2Norm), compared with PyTorch:
y = x / sqrt(sum(x^2) + eps) over the last dimension, rstd = 1 / sqrt(...).

The forward runs on the feature sizes and dtypes the in-place task compares
and times (scripts/run_inplace_fla.sh: 1x7, 3x100, 17x4097, 2x3x257, 8192x128,
16384x1024 in float32 and bfloat16; both kernels, the blocked one up to D 512
and the per-row one above), on few rows: fla autotunes per feature size and
dtype, and the autotune results these tests get on the unmodified tree
(task init's check) serve the comparison too (docs/in_place.md). A GPU only:
fla's autotuner benchmarks with Triton's GPU benchmarker, which the
interpreter (TRITON_INTERPRET=1) does not have."""
import pytest
import torch

from fla.modules.norm.l2norm import L2Norm, l2norm, l2norm_fwd

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
EPS = 1e-6


def expected(x, eps=EPS):
    x32 = x.float()
    rstd = 1.0 / torch.sqrt((x32 * x32).sum(-1) + eps)
    return x32 * rstd[..., None], rstd


@pytest.mark.parametrize("shape", [(1, 7), (3, 100), (5, 4097), (2, 3, 257), (4, 128), (2, 1024)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_forward_matches_torch(shape, dtype):
    torch.manual_seed(0)
    x = torch.randn(shape, device=DEVICE, dtype=dtype)
    y, rstd = l2norm_fwd(x, eps=EPS)
    y_ref, rstd_ref = expected(x)
    assert y.shape == x.shape and y.dtype == x.dtype and rstd.shape == x.shape[:-1]
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(y.float(), y_ref, atol=tol, rtol=tol)
    torch.testing.assert_close(rstd, rstd_ref, atol=1e-5, rtol=1e-4)


def test_output_dtype():
    torch.manual_seed(0)
    x = torch.randn(7, 128, device=DEVICE, dtype=torch.bfloat16)
    y32, _ = l2norm_fwd(x, eps=EPS, output_dtype=torch.float32)
    assert y32.dtype == torch.float32
    torch.testing.assert_close(y32, expected(x)[0], atol=1e-5, rtol=1e-5)


def test_rows_have_unit_norm_and_zero_rows_stay_zero():
    x = torch.randn(6, 128, device=DEVICE)
    x[2] = 0.0
    y, _ = l2norm_fwd(x, eps=EPS)
    norms = y.norm(dim=-1)
    torch.testing.assert_close(norms[[0, 1, 3, 4, 5]], torch.ones(5, device=DEVICE), atol=1e-5, rtol=1e-5)
    assert torch.count_nonzero(y[2]) == 0


def test_autograd_through_l2norm_matches_torch():
    torch.manual_seed(0)
    x = torch.randn(5, 128, device=DEVICE, requires_grad=True)
    g = torch.randn(5, 128, device=DEVICE)
    (l2norm(x, eps=EPS) * g).sum().backward()
    x2 = x.detach().clone().requires_grad_()
    (expected(x2)[0] * g).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, atol=1e-4, rtol=1e-4)


def test_module_is_the_function():
    x = torch.randn(5, 128, device=DEVICE)
    torch.testing.assert_close(L2Norm(eps=EPS)(x), l2norm_fwd(x, eps=EPS)[0])
