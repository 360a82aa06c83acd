"""Type stub for kernelsmith._core, the pybind11 extension (C++ core):
errors, logging hooks, the evolution engine, code edits, timing statistics
and the OpenCL runtime.

Checked in and kept complete by tests_py/test_evaluator_timing.py
(test_core_stub_covers_every_public_name). The submodules
``kernelsmith._core.timing`` and ``kernelsmith._core.opencl`` are written as
class namespaces (functions as static methods): a single-file stub cannot
hold modules, and attribute access (``_core.timing.median(x)``, ``from
kernelsmith._core import timing``) type-checks the same way.
"""
from __future__ import annotations

import collections.abc
import typing

import typing_extensions
from numpy.typing import ArrayLike

__version__: str
class KernelsmithError(RuntimeError):
    pass
class CorruptStateError(KernelsmithError):
    pass
class OpenCLError(KernelsmithError):
    pass
class _Engine:
    @staticmethod
    def list_checkpoints(dir: str) -> list[str]:
        ...
    @staticmethod
    def load(path: str) -> _Engine:
        ...
    def __init__(self, config_json: str, seed: int = 0) -> None:
        ...
    def add_seed(self, arg0: typing.Any) -> list[int]:
        ...
    def archive_cells(self, arg0: int) -> list:
        ...
    def ask(self) -> typing.Any:
        ...
    def best(self) -> typing.Any:
        ...
    def cancel(self, request_id: int) -> None:
        ...
    def config_json(self) -> str:
        ...
    def elites(self, arg0: int, arg1: int) -> list:
        ...
    def mark_seen(self, source: str) -> None:
        ...
    def next_program_id(self) -> int:
        ...
    def pending_requests(self) -> list:
        ...
    def program(self, arg0: int) -> typing.Any:
        ...
    def programs(self) -> list:
        ...
    def save(self, dir: str) -> str:
        ...
    def seen(self, source: str) -> bool:
        ...
    def should_stop(self) -> str | None:
        ...
    def state_json(self) -> str:
        ...
    def stats(self) -> dict:
        ...
    def tell(self, program: typing.Any, request_id: int = -1) -> tuple[int, bool, bool, bool]:
        ...
    @property
    def seed(self) -> int:
        ...
class EvolveBlock:
    """
    An evolvable region; 1-based lines of its marker lines.
    """
    def __repr__(self) -> str:
        ...
    @property
    def end_line(self) -> int:
        ...
    @property
    def start_line(self) -> int:
        ...
class BlockParse:
    @property
    def blocks(self) -> list[EvolveBlock]:
        ...
    @property
    def error(self) -> str:
        ...
    @property
    def ok(self) -> bool:
        ...
class EnforceResult:
    @property
    def child_line(self) -> int:
        ...
    @property
    def error(self) -> str:
        ...
    @property
    def ok(self) -> bool:
        ...
    @property
    def parent_line(self) -> int:
        ...
class DiffBlock:
    def __init__(self, search: str, replace: str) -> None:
        ...
    @property
    def error(self) -> str:
        ...
    @property
    def replace(self) -> str:
        ...
    @property
    def response_line(self) -> int:
        ...
    @property
    def search(self) -> str:
        ...
    @property
    def well_formed(self) -> bool:
        ...
class BlockOutcome:
    @property
    def applied(self) -> bool:
        ...
    @property
    def end_line(self) -> int:
        ...
    @property
    def index(self) -> int:
        ...
    @property
    def match_level(self) -> str:
        ...
    @property
    def message(self) -> str:
        ...
    @property
    def nearest_end(self) -> int:
        ...
    @property
    def nearest_start(self) -> int:
        ...
    @property
    def response_line(self) -> int:
        ...
    @property
    def similarity(self) -> float:
        ...
    @property
    def start_line(self) -> int:
        ...
    @property
    def status(self) -> str:
        ...
class DiffResult:
    @property
    def applied(self) -> int:
        ...
    @property
    def blocks(self) -> list[BlockOutcome]:
        ...
    @property
    def failed(self) -> int:
        ...
    @property
    def source(self) -> str:
        ...
class FencedCode:
    @property
    def closed(self) -> bool:
        ...
    @property
    def code(self) -> str:
        ...
    @property
    def count(self) -> int:
        ...
    @property
    def found(self) -> bool:
        ...
    @property
    def index(self) -> int:
        ...
    @property
    def language(self) -> str:
        ...
    @property
    def start_line(self) -> int:
        ...
class EditResultCore:
    @property
    def blocks(self) -> list[BlockOutcome]:
        ...
    @property
    def error(self) -> str:
        ...
    @property
    def evolve_blocks(self) -> list[EvolveBlock]:
        ...
    @property
    def fence(self) -> FencedCode:
        ...
    @property
    def mode(self) -> str:
        ...
    @property
    def ok(self) -> bool:
        ...
    @property
    def source(self) -> str:
        ...
class MinHashLSH:
    """MinHash signatures with LSH banding over token shingles of source code."""
    def __init__(self, num_perm: int = 128, bands: int = 32, shingle: int = 5, seed: int = 1, threshold: float = 0.8) -> None: ...
    @property
    def num_perm(self) -> int: ...
    @property
    def bands(self) -> int: ...
    @property
    def shingle(self) -> int: ...
    @property
    def threshold(self) -> float: ...
    def __len__(self) -> int: ...
    def add(self, source: str) -> int: ...
    def add_many(self, sources: collections.abc.Sequence[str], threads: int = 0) -> int: ...
    def signature(self, id: int) -> list[int]: ...
    def estimate(self, i: int, j: int) -> float: ...
    def candidates(self, id: int) -> list[int]: ...
    def query(self, source: str) -> list[int]: ...
    def near_duplicate_pairs(self) -> list[tuple[int, int]]: ...
    def groups(self) -> list[int]: ...

def minhash_tokenize(source: str) -> list[str]: ...
def minhash_shingles(source: str, k: int = 5) -> list[int]: ...
def minhash_jaccard(a: collections.abc.Sequence[int], b: collections.abc.Sequence[int]) -> float: ...
def minhash_signature(shingles: collections.abc.Sequence[int], num_perm: int = 128, seed: int = 1) -> list[int]: ...
def minhash_estimate(a: collections.abc.Sequence[int], b: collections.abc.Sequence[int]) -> float: ...

def _log(level: int, message: str) -> None:
    """
    Emit a record through the C++ logger (for tests).
    """
def _register_engine_records(arg0: typing.Any, arg1: typing.Any) -> None:
    """
    Called by kernelsmith.engine with its Program and Request dataclasses.
    """
def _set_log_callback(callback: typing.Any) -> None:
    """
    Route C++ log records to callback(level, message); None restores silence.
    """
def _set_log_level(spdlog_level: int) -> None:
    """
    Lowest spdlog level (0 trace .. 6 off) that reaches the callback.
    """
def apply_diff(source: str, blocks: collections.abc.Sequence[DiffBlock]) -> DiffResult:
    """
    Apply SEARCH/REPLACE blocks in order with whitespace-tolerant matching.
    """
def apply_edit(parent: str, response: str, mode: str = 'auto', allow_partial: bool = False) -> EditResultCore:
    """
    Apply a model response (diff or full rewrite) to parent and enforce its EVOLVE blocks.
    """
def check_evolve_blocks(parent: str, child: str) -> EnforceResult:
    """
    Check that child differs from parent only inside the parent's EVOLVE blocks.
    """
def code_stats(source: str) -> dict:
    """
    Token counts behind complexity().
    """
def complexity(source: str) -> float:
    """
    Structural complexity of Python-like source.
    """
def extract_fenced_code(response: str) -> FencedCode:
    """
    Pick the fenced code block that holds the program.
    """
def line_similarity(a: collections.abc.Sequence[str], b: collections.abc.Sequence[str]) -> float:
    """
    Mean Levenshtein ratio of aligned stripped lines, in [0, 1].
    """
def normalize_source(source: str) -> str:
    """
    Source with comments, blank lines and spacing runs removed (indentation and strings kept).
    """
def normalized_hash(source: str) -> int:
    """
    64-bit FNV-1a hash of normalize_source(source).
    """
def parse_diff_blocks(response: str) -> list[DiffBlock]:
    """
    Parse SEARCH/REPLACE blocks from a response.
    """
def parse_evolve_blocks(source: str) -> BlockParse:
    """
    Find EVOLVE-BLOCK markers; malformed markers give ok=False and an error.
    """
def validate_engine_config(config_json: str) -> str:
    """
    Validated engine config with every default filled in (JSON text).
    """
__version__: str = '0.1.0'

class timing:
    """Timing statistics, adaptive sampler and paired comparator (C++ core) (the submodule kernelsmith._core.timing)."""
    class Interval:
        """
        A point estimate with a two-sided confidence interval.
        """
        @typing.overload
        def __init__(self) -> None:
            ...
        @typing.overload
        def __init__(self, estimate: float, lower: float, upper: float, confidence: float = 0.95) -> None:
            ...
        def __repr__(self) -> str:
            ...
        def contains(self, value: float) -> bool:
            ...
        def to_dict(self) -> dict:
            ...
        @property
        def confidence(self) -> float:
            ...
        @confidence.setter
        def confidence(self, arg0: float) -> None:
            ...
        @property
        def estimate(self) -> float:
            ...
        @estimate.setter
        def estimate(self, arg0: float) -> None:
            ...
        @property
        def lower(self) -> float:
            ...
        @lower.setter
        def lower(self, arg0: float) -> None:
            ...
        @property
        def relative_half_width(self) -> float:
            ...
        @property
        def upper(self) -> float:
            ...
        @upper.setter
        def upper(self, arg0: float) -> None:
            ...
    class SamplerOptions:
        ci_method: str
        reject_outliers: bool
        def __init__(self) -> None:
            ...
        def validate(self) -> None:
            ...
        @property
        def bootstrap_resamples(self) -> int:
            ...
        @bootstrap_resamples.setter
        def bootstrap_resamples(self, arg0: int) -> None:
            ...
        @property
        def confidence(self) -> float:
            ...
        @confidence.setter
        def confidence(self, arg0: float) -> None:
            ...
        @property
        def max_batch(self) -> int:
            ...
        @max_batch.setter
        def max_batch(self, arg0: int) -> None:
            ...
        @property
        def max_samples(self) -> int:
            ...
        @max_samples.setter
        def max_samples(self, arg0: int) -> None:
            ...
        @property
        def min_samples(self) -> int:
            ...
        @min_samples.setter
        def min_samples(self, arg0: int) -> None:
            ...
        @property
        def seed(self) -> int:
            ...
        @seed.setter
        def seed(self, arg0: int) -> None:
            ...
        @property
        def target_rel_half_width(self) -> float:
            ...
        @target_rel_half_width.setter
        def target_rel_half_width(self, arg0: float) -> None:
            ...
        @property
        def time_budget_s(self) -> float:
            ...
        @time_budget_s.setter
        def time_budget_s(self, arg0: float) -> None:
            ...
        @property
        def tukey_k(self) -> float:
            ...
        @tukey_k.setter
        def tukey_k(self, arg0: float) -> None:
            ...
    class AdaptiveSampler:
        """
        Decides how many samples to take; the caller measures them.
        """
        def __init__(self, options: timing.SamplerOptions = ...) -> None:
            ...
        def add(self, samples: ArrayLike) -> None:
            ...
        def add_one(self, sample: float) -> None:
            ...
        def need_more(self) -> bool:
            ...
        def result(self) -> dict:
            ...
        def suggested_batch(self) -> int:
            ...
        @property
        def elapsed_s(self) -> float:
            ...
        @property
        def n(self) -> int:
            ...
        @property
        def samples(self) -> typing.Any:
            ...
        @property
        def stop_reason(self) -> str:
            ...
    class CompareOptions:
        method: str
        reject_outliers: bool
        stop_when_decided: bool
        def __init__(self) -> None:
            ...
        def validate(self) -> None:
            ...
        @property
        def bootstrap_resamples(self) -> int:
            ...
        @bootstrap_resamples.setter
        def bootstrap_resamples(self, arg0: int) -> None:
            ...
        @property
        def confidence(self) -> float:
            ...
        @confidence.setter
        def confidence(self, arg0: float) -> None:
            ...
        @property
        def max_batch(self) -> int:
            ...
        @max_batch.setter
        def max_batch(self, arg0: int) -> None:
            ...
        @property
        def max_pairs(self) -> int:
            ...
        @max_pairs.setter
        def max_pairs(self, arg0: int) -> None:
            ...
        @property
        def min_pairs(self) -> int:
            ...
        @min_pairs.setter
        def min_pairs(self, arg0: int) -> None:
            ...
        @property
        def seed(self) -> int:
            ...
        @seed.setter
        def seed(self, arg0: int) -> None:
            ...
        @property
        def target_rel_half_width(self) -> float:
            ...
        @target_rel_half_width.setter
        def target_rel_half_width(self, arg0: float) -> None:
            ...
        @property
        def time_budget_s(self) -> float:
            ...
        @time_budget_s.setter
        def time_budget_s(self, arg0: float) -> None:
            ...
        @property
        def tukey_k(self) -> float:
            ...
        @tukey_k.setter
        def tukey_k(self, arg0: float) -> None:
            ...
    class PairedComparator:
        """
        Decides how many (reference, candidate) pairs to take.
        """
        @staticmethod
        def reference_first(pair_index: int) -> bool:
            ...
        def __init__(self, options: timing.CompareOptions = ...) -> None:
            ...
        def add(self, reference: ArrayLike, candidate: ArrayLike) -> None:
            ...
        def add_pair(self, reference: float, candidate: float) -> None:
            ...
        def need_more(self) -> bool:
            ...
        def result(self) -> dict:
            ...
        def suggested_batch(self) -> int:
            ...
        @property
        def candidate_samples(self) -> typing.Any:
            ...
        @property
        def elapsed_s(self) -> float:
            ...
        @property
        def n(self) -> int:
            ...
        @property
        def reference_samples(self) -> typing.Any:
            ...
        @property
        def stop_reason(self) -> str:
            ...
    @staticmethod
    def bootstrap_median_ci(samples: ArrayLike, confidence: float = 0.95, resamples: int = 2000, seed: int = 0) -> timing.Interval:
        ...
    @staticmethod
    def bootstrap_ratio_of_medians_ci(numerator: ArrayLike, denominator: ArrayLike, confidence: float = 0.95, resamples: int = 2000, seed: int = 0, paired: bool = True) -> timing.Interval:
        ...
    @staticmethod
    def compare_pairs(reference: ArrayLike, candidate: ArrayLike, options: timing.CompareOptions = ...) -> dict:
        """
        Speedup (reference / candidate) with CI and verdict from already measured pairs.
        """
    @staticmethod
    def cv(samples: ArrayLike) -> float:
        """
        Coefficient of variation: stddev / mean.
        """
    @staticmethod
    def mad(samples: ArrayLike) -> float:
        """
        Median absolute deviation (unscaled).
        """
    @staticmethod
    def mean(samples: ArrayLike) -> float:
        ...
    @staticmethod
    def median(samples: ArrayLike) -> float:
        ...
    @staticmethod
    def median_ci_order_statistics(samples: ArrayLike, confidence: float = 0.95) -> timing.Interval:
        ...
    @staticmethod
    def quantile(samples: ArrayLike, q: float) -> float:
        """
        Quantile with linear interpolation (numpy default).
        """
    @staticmethod
    def reject_outliers_tukey(samples: ArrayLike, k: float = 1.5) -> dict:
        """
        Tukey's fences: returns {kept, rejected (indices), lower_fence, upper_fence}.
        """
    @staticmethod
    def statistic(name: str, samples: ArrayLike) -> float:
        """
        A statistic from the named registry.
        """
    @staticmethod
    def statistic_names() -> list[str]:
        ...
    @staticmethod
    def stddev(samples: ArrayLike) -> float:
        """
        Sample standard deviation (n - 1).
        """
    @staticmethod
    def summarize(samples: ArrayLike, options: timing.SamplerOptions = ...) -> dict:
        """
        Median with CI, mean, stddev, cv, mad, min, max after outlier rejection, as a dict.
        """
    @staticmethod
    def trimmed_mean(samples: ArrayLike, trim: float = 0.1) -> float:
        ...

class opencl:
    """OpenCL runtime (C++); see kernelsmith.opencl (the submodule kernelsmith._core.opencl)."""
    class Event:
        def seconds(self) -> float:
            """
            Device-side duration (profiling END - START) in seconds; waits for the command.
            """
        def timestamps_ns(self) -> tuple[int, int, int, int]:
            ...
        def wait(self) -> None:
            ...
        @property
        def kind(self) -> str:
            ...
        @property
        def name(self) -> str:
            ...
    class Buffer:
        def read(self, destination: typing_extensions.Buffer, offset: int = 0) -> None:
            """
            Blocking copy into a writable host array.
            """
        def sync_host(self) -> None:
            ...
        def write(self, source: typing_extensions.Buffer, offset: int = 0) -> None:
            """
            Blocking copy from a host array.
            """
        @property
        def size(self) -> int:
            ...
        @property
        def wraps_host(self) -> bool:
            ...
    class KernelArg:
        @staticmethod
        def buffer(buffer: opencl.Buffer) -> opencl.KernelArg:
            ...
        @staticmethod
        def local(nbytes: int) -> opencl.KernelArg:
            ...
        @staticmethod
        def scalar(data: bytes) -> opencl.KernelArg:
            """
            A by-value argument from its raw bytes (e.g. numpy.int32(3).tobytes()).
            """
    class Kernel:
        @property
        def max_work_group_size(self) -> int:
            ...
        @property
        def name(self) -> str:
            ...
        @property
        def num_args(self) -> int:
            ...
        @property
        def preferred_work_group_multiple(self) -> int:
            ...
    class Program:
        def kernel(self, name: str) -> opencl.Kernel:
            ...
        def kernel_names(self) -> list[str]:
            ...
        @property
        def build_log(self) -> str:
            ...
        @property
        def build_seconds(self) -> float:
            ...
        @property
        def options(self) -> str:
            ...
    class Context:
        def __init__(self, selector: str = '') -> None:
            ...
        def allocate(self, nbytes: int) -> opencl.Buffer:
            ...
        def begin_recording(self) -> int:
            ...
        def build(self, source: str, options: str = '') -> opencl.Program:
            """
            Build (or fetch from the cache) a program; raises OpenCLError with the build log.
            """
        def cache_key_text(self, source: str, options: str = ...) -> str:
            ...
        def cache_stats(self) -> dict:
            ...
        def clear_cache(self) -> None:
            ...
        def end_recording(self, mark: int) -> list[opencl.Event]:
            ...
        def finish(self) -> None:
            ...
        def launch(self, kernel: opencl.Kernel, args: collections.abc.Sequence[opencl.KernelArg], global_size: collections.abc.Sequence[int], local_size: collections.abc.Sequence[int] = ..., offset: collections.abc.Sequence[int] = ...) -> opencl.Event:
            ...
        def store_binary(self, source: str, options: str, dir: str) -> str:
            """
            Build from source and write the binary cache entry into dir (the trusted builder).
            """
        def wrap_host(self, host: typing_extensions.Buffer) -> opencl.Buffer:
            """
            A zero-copy buffer over a writable, C-contiguous host array (CPU devices only); the array is kept alive as long as the buffer.
            """
        @property
        def device(self) -> dict:
            ...
        @property
        def host_zero_copy(self) -> bool:
            ...
    @staticmethod
    def error_name(code: int) -> str:
        """
        Name of an OpenCL status code, e.g. -54 -> 'CL_INVALID_WORK_GROUP_SIZE'.
        """
    @staticmethod
    def launch_count() -> int:
        """
        Process-wide number of kernels enqueued successfully.
        """
    @staticmethod
    def launched_since(mark: int) -> list[str]:
        """
        Names of kernels launched after launch number `mark`.
        """
    @staticmethod
    def list_devices() -> list:
        """
        Every device of every platform, as dicts of their reported properties.
        """
    @staticmethod
    def select_device(selector: str = '') -> dict:
        """
        The device a selector picks ('' -> $KERNELSMITH_OPENCL_DEVICE, then first GPU, then first device; 'P:D'; 'N'; or a name substring).
        """
    DEVICE_ENV_VAR: str = 'KERNELSMITH_OPENCL_DEVICE'
