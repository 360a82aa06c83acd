import torch
import torch.nn as nn


class Model(nn.Module):
    """Row-wise softmax."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


batch_size = 64
dim = 781


def get_inputs():
    return [torch.randn(batch_size, dim) * 4]


def get_init_inputs():
    return []


def get_inputs_wide():
    return [torch.randn(5, 2000) * 4]
