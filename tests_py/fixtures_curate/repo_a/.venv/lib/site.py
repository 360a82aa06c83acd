import torch.nn as nn


class InVenv(nn.Module):
    def forward(self, x):
        return x * 4
