import torch

def sum(input, dim, keepdim=False, dtype=None):
    """
    Returns the sum of each row of the input tensor in the given dimension dim.
    If dim is a list of dimensions, reduce over all of them.
    If keepdim is True, the output tensor is of the same size as input except in the dimension(s) dim where it is of size 1.
    Otherwise, dim is squeezed, resulting in the output tensor having 1 (or len(dim)) fewer dimension(s).
    
    Args:
        input (Tensor): The input tensor.
        dim (int or tuple of ints): The dimension or dimensions to reduce.
        keepdim (bool, optional): Whether to retain the reduced dimensions with size 1.
        dtype (torch.dtype, optional): The desired data type of returned tensor.

    Returns:
        Tensor: The resulting tensor after applying sum along the specified dimensions.
    """
    return torch.sum(input, dim, keepdim=keepdim, dtype=dtype)

##################################################################################################################################################


import torch
import sys
import os
sys.path.append(os.path.abspath("utils"))
sys.path.append(os.path.abspath(os.path.join(os.path.dirname(__file__), "../../../utils")))
from data_utils import rand_tensor

def test_sum():
    results = {}

    # Test case 1: Sum over a single dimension without keepdim
    input_tensor = torch.tensor([[1, 2, 3], [4, 5, 6]], device='cuda')
    results["test_case_1"] = sum(input_tensor, dim=0)

    # Test case 2: Sum over a single dimension with keepdim
    results["test_case_2"] = sum(input_tensor, dim=1, keepdim=True)

    # Test case 3: Sum over multiple dimensions
    input_tensor_3d = torch.tensor([[[1, 2], [3, 4]], [[5, 6], [7, 8]]], device='cuda')
    results["test_case_3"] = sum(input_tensor_3d, dim=(0, 2))

    # Test case 4: Sum with dtype specified
    input_tensor_float = torch.tensor([[1.0, 2.0], [3.0, 4.0]], device='cuda')
    results["test_case_4"] = sum(input_tensor_float, dim=1, dtype=torch.float64)

    for mode in ("standard", "outlier"):
        outs = []
        for _ in range(2):
            x = rand_tensor((32, 64, 128), dtype=torch.float32, mode=mode, outlier_prob=0.001, outlier_scale=10.0)
            outs.append(sum(x, dim=(1, 2)))
        results[f"test_random_{mode}"] = outs

    return results

test_results = test_sum()
