"""Building blocks (fixture for the curation tests)."""
import os
import json
import math
import torch
import torch.nn as nn
import torch.nn.functional as F
import not_installed_pkg_xyz
from .utils import helper

HIDDEN_MULT = 2
UNUSED_CONSTANT = {"a": 1}


def swish(x):
    return x * torch.sigmoid(x)


def _act(x):
    # nested helper: _act -> swish
    return swish(x) + 0.1 * swish(-x)


def unused_helper(x):
    return os.path.join("a", "b")


class ConvBlock(nn.Module):
    """Conv -> BN -> swish, twice."""

    def __init__(self, in_channels, out_channels):
        super(ConvBlock, self).__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1)

    def forward(self, x):
        x = _act(self.bn1(self.conv1(x)))
        return _act(self.conv2(x))


class MLP(nn.Module):
    def __init__(self, dim, dropout=0.0):
        super().__init__()
        self.fc1 = nn.Linear(dim, dim * HIDDEN_MULT)
        self.fc2 = nn.Linear(dim * HIDDEN_MULT, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        h = F.gelu(self.fc1(x))
        h = self.drop(h)
        return self.fc2(h) * math.sqrt(0.5)


class ResidualMLP(MLP):
    """Inherits __init__ from an in-file base class."""

    def forward(self, x):
        return x + super().forward(x).tanh()


class ConstantHead(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, 4)

    def forward(self, x):
        # ignores its input: dropped by the input-dependence check
        return self.proj.weight.sum(0) * torch.ones(x.shape[0], 1)


class Broken(nn.Module):
    def forward(self, x):
        raise RuntimeError("this module always fails")


class NeedsMissing(nn.Module):
    def forward(self, x):
        return not_installed_pkg_xyz.magic(x)


class UsesLocal(nn.Module):
    def forward(self, x):
        return helper(x)


class Spins(nn.Module):
    def forward(self, x):
        while True:
            x = x + 1


class TinyNet(nn.Module):
    """Composite: custom blocks in a loop, then a pooled MLP head."""

    def __init__(self, in_channels, width, depth=2):
        super().__init__()
        self.stem = ConvBlock(in_channels, width)
        self.blocks = nn.ModuleList([ConvBlock(width, width) for _ in range(depth)])
        self.head = MLP(width)

    def forward(self, x):
        x = self.stem(x)
        for block in self.blocks:
            x = x + block(x)
        return self.head(x.mean(dim=(2, 3)))
