import torch


def helper(x):
    return torch.tanh(x)
