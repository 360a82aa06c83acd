"""KernelBench level-2 style: Linear followed by the exact (erf) GELU.

The full shapes are for a GPU (H200). KS_BENCH_SMALL=1 in the environment
shrinks them so the Triton interpreter can check the candidates' verdicts on
a CPU in minutes (bench_eval_throughput.py --small sets it).
"""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.linear(x))


SMALL = os.environ.get("KS_BENCH_SMALL", "") == "1"
batch_size, in_features, out_features = (32, 80, 96) if SMALL else (512, 1024, 4096)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]


def get_inputs_ragged():
    return [torch.randn(37 if SMALL else 333, in_features)]
