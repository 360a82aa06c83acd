import torch
import torch.nn as nn


class Model(nn.Module):
    """LayerNorm over the last dimension, with learned weight and bias."""

    def __init__(self, normalized_shape: int, eps: float = 1e-5):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape, eps=eps)
        # non-trivial affine parameters so a kernel that ignores them fails
        with torch.no_grad():
            self.ln.weight.uniform_(0.5, 1.5)
            self.ln.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


batch_size = 32
features = 512


def get_inputs():
    return [torch.randn(batch_size, features) * 2 + 1]


def get_init_inputs():
    return [features]


def get_inputs_3d():
    return [torch.randn(3, 5, features)]
