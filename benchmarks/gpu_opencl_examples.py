"""Run the OpenCL examples' seeds (every `# tune:` variant) on an OpenCL device
and compare them with the PyTorch CPU reference: correctness and timing.

On the GPU machine (NVIDIA's OpenCL driver has no .icd file installed there):

    python benchmarks/gpu_opencl_examples.py --nvidia-icd --device NVIDIA

Locally on PoCL:

    python benchmarks/gpu_opencl_examples.py --device pocl

With --nvidia-icd the script writes an ICD file naming libnvidia-opencl.so.1
(plus copies of the system's .icd files, so PoCL stays visible) into a temp
folder and points OCL_ICD_VENDORS at it BEFORE the OpenCL runtime is loaded.

Columns: ref_cpu_ms = host time of the PyTorch reference on the CPU (median);
kernel_ms = profiled device time of the seed's kernels (median, OpenCL events);
+xfer_ms = kernels plus host<->device copies; wall_ms = host time of one
forward call (median); speedup = ref_cpu_ms / kernel_ms. Figures, not
pass/fail: the seeds are naive on purpose.
"""

from __future__ import annotations

import argparse
import importlib.util
import glob
import itertools
import os
import re
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "opencl"
NAMES = ["softmax", "layernorm", "matmul"]
TUNE = re.compile(r"^(?P<name>[A-Z_][A-Z0-9_]*)\s*=\s*(?P<value>\S+)\s*#\s*tune:\s*\[(?P<values>[^\]]*)\]", re.M)


def setup_nvidia_icd() -> str:
    """Make NVIDIA's OpenCL driver visible to the ICD loader; returns the folder."""
    folder = tempfile.mkdtemp(prefix="ks-icd-")
    Path(folder, "nvidia.icd").write_text("libnvidia-opencl.so.1\n")
    for existing in glob.glob("/etc/OpenCL/vendors/*.icd"):
        name = os.path.basename(existing)
        if name != "nvidia.icd":
            Path(folder, name).write_text(Path(existing).read_text())
    os.environ["OCL_ICD_VENDORS"] = folder
    return folder


def module_from(source: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)  # our own examples: trusted
    return module


def variants(seed: str) -> list[tuple[str, str]]:
    tunables = [(m.group("name"), [v.strip() for v in m.group("values").split(",")]) for m in TUNE.finditer(seed)]
    out = []
    for combo in itertools.product(*[values for _, values in tunables]):
        source = seed
        for (name, _), value in zip(tunables, combo):
            source = re.sub(rf"^{name}\s*=\s*\S+", f"{name} = {value}", source, count=1, flags=re.M)
        out.append((",".join(f"{n}={v}" for (n, _), v in zip(tunables, combo)), source))
    return out


def host_ms(fn, warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nvidia-icd", action="store_true", help="register libnvidia-opencl.so.1 via OCL_ICD_VENDORS")
    parser.add_argument("--device", default="", help="device selector (name substring, 'P:D' or index)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--examples", nargs="*", default=NAMES)
    args = parser.parse_args()

    if args.nvidia_icd:
        print(f"OCL_ICD_VENDORS={setup_nvidia_icd()}")
    if args.device:
        os.environ["KERNELSMITH_OPENCL_DEVICE"] = args.device

    if importlib.util.find_spec("kernelsmith") is None:  # not installed: the source tree (with a built _core)
        sys.path.insert(0, str(ROOT / "python"))
    import torch
    import yaml

    from kernelsmith import opencl as ocl

    print("\nOpenCL devices:")
    for d in ocl.devices():
        print(
            f"  {d['platform_index']}:{d['device_index']}  {d['platform_name']} / {d['name']}  ({d['type']}, "
            f"{d['version']}, driver {d['driver_version']}, {d['max_compute_units']} CU, "
            f"max WG {d['max_work_group_size']}, local {d['local_mem_size'] // 1024} KiB)"
        )
    ctx = ocl.context()
    dev = ctx.device
    print(f"\nselected: {dev['name']} ({dev['platform_name']}); zero-copy host memory: {ctx.host_zero_copy}")
    print(f"torch {torch.__version__}, CPU threads {torch.get_num_threads()}\n")

    header = (
        f"{'example':<10} {'variant':<16} {'ok':<3} {'max_abs_err':>11} {'ref_cpu_ms':>10} "
        f"{'kernel_ms':>10} {'+xfer_ms':>9} {'wall_ms':>9} {'speedup':>8}"
    )
    print(header)
    print("-" * len(header))
    failures = 0
    for name in args.examples:
        folder = EXAMPLES / name
        config = yaml.safe_load((folder / "task.yaml").read_text())
        atol, rtol = float(config.get("atol", 1e-4)), float(config.get("rtol", 1e-4))
        reference = module_from((folder / "reference.py").read_text(), f"{name}_reference")
        torch.manual_seed(0)
        model = reference.Model(*reference.get_init_inputs())
        torch.manual_seed(1)
        inputs = reference.get_inputs()
        with torch.no_grad():
            expected = model(*inputs)
            ref_ms = host_ms(lambda: model(*inputs), args.warmup, args.repeats)
        for label, source in variants((folder / "seed.py").read_text()):
            seed = module_from(source, f"{name}_seed")
            torch.manual_seed(0)
            model_new = seed.ModelNew(*reference.get_init_inputs())
            with torch.no_grad():
                got = model_new(*inputs)
                err = (got - expected).abs().max().item()
                ok = torch.allclose(got, expected, atol=atol, rtol=rtol)
                failures += not ok
                kernel = statistics.median(ocl.profile(lambda: model_new(*inputs), args.warmup, args.repeats))
                total = statistics.median(
                    ocl.profile(lambda: model_new(*inputs), 0, args.repeats, include_transfers=True)
                )
                wall = host_ms(lambda: model_new(*inputs), 0, args.repeats)
            print(
                f"{name:<10} {label:<16} {'yes' if ok else 'NO':<3} {err:>11.2e} {ref_ms:>10.3f} "
                f"{kernel * 1e3:>10.4f} {total * 1e3:>9.4f} {wall:>9.3f} {ref_ms / (kernel * 1e3):>8.2f}"
            )
    print(f"\n{failures} incorrect variant(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
