import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A @ B for A (M, K) and B (K, N)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


M = 256
K = 320
N = 192


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []


def get_inputs_ragged():
    # Sizes that are not multiples of any tile.
    return [torch.randn(67, 101), torch.randn(101, 45)]
