import torch

from scalepkg import scale_add


def test_scale_add():
    x, y = torch.randn(128), torch.randn(128)
    torch.testing.assert_close(scale_add(x, y, 2.0), x * 2.0 + y)
