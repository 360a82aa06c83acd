import torch
import torch.nn as nn
import torch.nn.functional as F


class ClassifierHead(nn.Module):
    def __init__(self, in_features, num_classes):
        super().__init__()
        self.hidden = nn.Linear(in_features, in_features)
        self.out = nn.Linear(in_features, num_classes)

    def forward(self, x):
        return self.out(torch.relu(self.hidden(x)))


class ProjectionHead(nn.Module):
    def __init__(self, embed_dim, proj_dim=32):
        super().__init__()
        self.l1 = nn.Linear(embed_dim, proj_dim)
        self.l2 = nn.Linear(proj_dim, proj_dim)

    def forward(self, features):
        z = self.l2(F.silu(self.l1(features)))
        return F.normalize(z, dim=-1)


class GatedUnit(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.gate = nn.Linear(d_model, d_model)
        self.value = nn.Linear(d_model, d_model)

    def forward(self, x):
        return torch.sigmoid(self.gate(x)) * self.value(x)


class DepthwiseSeparable(nn.Module):
    def __init__(self, channels, kernel_size=3):
        super().__init__()
        self.dw = nn.Conv2d(channels, channels, kernel_size, padding=kernel_size // 2, groups=channels)
        self.pw = nn.Conv2d(channels, channels * 2, 1)

    def forward(self, x):
        return self.pw(F.relu(self.dw(x)))


class ConvStem(nn.Module):
    def __init__(self, in_ch, out_ch):
        super().__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, 3, stride=2, padding=1)
        self.norm = nn.BatchNorm2d(out_ch)

    def forward(self, x):
        return F.relu(self.norm(self.conv(x)))
