import sys
import os
import json

sys.path.append(os.path.abspath(os.path.join(os.path.dirname(__file__), '..')))

repo_root = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
sys.path.append(os.path.join(repo_root, 'data'))

from kernelbenchx.Loss.mse_loss import mse_loss
from performance_utils import Performance_Metrics, do_bench_config

import torch
import triton
import triton.language as tl

class performance_metrics(Performance_Metrics):
    def __init__(self, dtype=None, is_backward=False, **kwargs):
        super().__init__('mse_loss', dtype=dtype, is_backward=is_backward, **kwargs)

    def get_input_tensors(self):
        self.input_tensors = []
        for i in range(12, 24):
            size = 2 ** i
            input_tensor = torch.randn(size, dtype=self.dtype)
            target_tensor = torch.randn(size, dtype=self.dtype)
            self.input_tensors.append((input_tensor, target_tensor))

    def to_cuda(self, input_tuple):
        return (input_tuple[0].cuda(), input_tuple[1].cuda())
    
    def call_op(self, input_tuple):
        return mse_loss(input_tuple[0], input_tuple[1])
    
    def get_gbps(self, input_tuple, runtime):
        input_tensor, target_tensor = input_tuple
        num_elements = input_tensor.numel() * 2
        element_size = input_tensor.element_size()
        total_bytes = num_elements * element_size
        GBPS = total_bytes / (runtime / 1000) / 1e9
        return GBPS
    
    def get_tflops(self, input_tuple, runtime):
        input_tensor, target_tensor = input_tuple
        num_elements = input_tensor.numel()
        flops = num_elements * 2  # subtract + square
        TFLOPS = flops / (runtime / 1000) / 1e12
        return TFLOPS


if __name__ == '__main__':
    op_perf = performance_metrics()
    op_perf.get_input_tensors()
    op_perf.get_do_bench_config(warmup=100, rep=1000)
    op_perf.run_benchmark()
