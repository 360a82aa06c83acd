import pytest
import torch

from tinyops import RMSNorm, rms_norm


def reference(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


@pytest.mark.parametrize("shape", [(4, 64), (3, 100), (2, 5, 33)])
def test_matches_torch(shape):
    torch.manual_seed(0)
    x = torch.randn(shape)
    w = torch.randn(shape[-1])
    torch.testing.assert_close(rms_norm(x, w, 1e-6), reference(x, w, 1e-6), atol=1e-4, rtol=1e-4)


def test_layer_uses_kernel():
    layer = RMSNorm(48)
    x = torch.randn(6, 48)
    torch.testing.assert_close(layer(x), reference(x, layer.weight.detach(), layer.eps), atol=1e-4, rtol=1e-4)


def test_bad_weight():
    with pytest.raises(ValueError):
        rms_norm(torch.randn(2, 8), torch.randn(7))
