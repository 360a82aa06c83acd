import torch.nn as nn


class InTests(nn.Module):
    def forward(self, x):
        return x * 3
