import torch
import torch.nn as nn


class Model(nn.Module):
    """ReLU over a 2-D tensor."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


batch_size = 16
dim = 1024


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []


def get_inputs_odd():
    # a size that is not a multiple of any power-of-two block
    return [torch.randn(7, 999)]
