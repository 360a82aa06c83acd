"""Row softmax over a 128 MiB fp32 matrix: a memory-bound kernel of about
0.1 ms on an H200, for the repeat-spread measurement of issue 13 (a kernel of
20 us or more). KS_BENCH_SMALL=1 shrinks it for the Triton interpreter."""

import os

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


SMALL = os.environ.get("KS_BENCH_SMALL", "") == "1"
rows, cols = (16, 256) if SMALL else (8192, 4096)


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
