import torch
import torch.nn as nn


class Model(nn.Module):
    """Layer normalization over the last dimension, with affine weight and bias."""

    def __init__(self, features: int):
        super().__init__()
        self.ln = nn.LayerNorm(features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


batch_size = 64
features = 1024


def get_inputs():
    return [torch.randn(batch_size, features) * 2 + 0.5]


def get_init_inputs():
    return [features]


def get_inputs_3d():
    return [torch.randn(3, 5, features) * 3 - 1]
