"""Modules that run but are not kernel tasks: each must be dropped."""
import torch
import torch.nn as nn


class ViewOnly(nn.Module):
    """A reshape: the output is the input."""

    def forward(self, x):
        return x.reshape(x.shape[0], -1)


class UnitAffine(nn.Module):
    """Scale 1, bias 0: an identity at initialisation."""

    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))
        self.shift = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return x * self.scale + self.shift


class OneKeyAttention(nn.Module):
    """A softmax over a single key is 1: the output ignores queries and keys."""

    def forward(self, q, k, v):
        w = torch.softmax((q * k).sum(-1, keepdim=True), dim=-1)
        return 2.0 * w * v


class Whisper(nn.Module):
    """Outputs so small that zeros pass the correctness tolerance."""

    def forward(self, x):
        return torch.sigmoid(x) * 1e-7
