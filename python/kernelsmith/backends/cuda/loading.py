"""The CUDA backend's extension loading and launch accounting: the stand-in
for ``torch.utils.cpp_extension.load_inline`` builds through
:func:`~.toolchain.build_extension`, imports the extension and wraps its
functions so that each call runs inside ``census_launch`` and reports how
many kernels it launched."""

from __future__ import annotations

from typing import Any, Callable, Optional

from ..base import LaunchRecord, _Census, _spans, census_launch
from .diagnostics import CompilationError
from .sources import BuildSpec, global_kernels
from .toolchain import BuildResult, build_extension


class _Records:
    records: list[LaunchRecord] = []


class Extension:
    """What the candidate's ``load_inline`` returns: the extension's
    functions, each call run inside ``census_launch`` and counted."""

    def __init__(self, module: Any, kernels: list[str], names: list[str]) -> None:
        counter = getattr(module, "_ks_launch_count", None)
        self.__ks_kernels__ = list(kernels)
        # the census tells the program's own kernels from a library's by name
        _Census.kernel_names.update(kernels)
        for name in names:
            fn = getattr(module, name, None)
            if callable(fn):
                setattr(self, name, _wrap_function(name, fn, counter))

    def __repr__(self) -> str:
        return f"<CUDA extension: {', '.join(k for k in vars(self) if not k.startswith('__'))}>"


def _wrap_function(name: str, fn: Callable, counter: Optional[Callable[[], int]]) -> Callable:
    def call(*args: Any, **kwargs: Any) -> Any:
        before = counter() if counter is not None else 0
        with census_launch(name, [*args, *kwargs.values()]) as entry:
            result = fn(*args, **kwargs)
            launched = (counter() - before) if counter is not None else 1
            # the census links the kernels of this call to the program by
            # their declared names, up to this many (CUPTI does not link a
            # <<<>>> launch from an extension to the range around it)
            entry["device_kernels"] = launched
        if launched > 0:
            for record in list(_Records.records):
                record.kernels.append(f"cuda.{name}")
        if _Census.active and launched > 0:
            # outputs the C++ allocated are the kernels' memory too
            outs = result if isinstance(result, (tuple, list)) else [result]
            spans = [s for s in (_spans(o) for o in outs) if s is not None]
            if spans:
                _Census.launches.append({"kernel": name, "spans": [(a, n) for a, n, _ in spans], "crcs": None})
        return result

    call.__name__ = name
    call.__qualname__ = name
    return call


def _import_extension(result: BuildResult) -> Any:
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.ExtensionFileLoader(result.module_name, result.path)
    spec = importlib.util.spec_from_file_location(result.module_name, result.path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


class _LoadInline:
    """State of the stand-in for ``torch.utils.cpp_extension.load_inline``."""

    candidate_source: Optional[str] = None
    builds: list[BuildResult] = []


def _load_inline(
    name: str = "", cpp_sources: Any = None, cuda_sources: Any = None, functions: Any = None, **kwargs: Any
) -> Extension:
    if kwargs.pop("is_python_module", True) is False:
        raise CompilationError("load_inline(is_python_module=False) is not supported: return the module")
    spec = BuildSpec.from_load_inline(cpp_sources=cpp_sources, cuda_sources=cuda_sources, functions=functions, **kwargs)
    result = build_extension(spec, candidate_source=_LoadInline.candidate_source)
    _LoadInline.builds.append(result)
    module = _import_extension(result)
    names = [n for n, _ in spec.functions] or [n for n in dir(module) if not n.startswith("_")]
    return Extension(module, global_kernels(spec.cuda_sources), names)


def install_load_inline() -> None:
    """Route ``torch.utils.cpp_extension.load_inline`` to this backend's
    build (once per process, before the integrity snapshot)."""
    from torch.utils import cpp_extension

    if getattr(cpp_extension.load_inline, "_kernelsmith_cuda", False):
        return

    def load_inline(*args: Any, **kwargs: Any) -> Extension:
        return _load_inline(*args, **kwargs)

    load_inline._kernelsmith_cuda = True  # type: ignore[attr-defined]
    cpp_extension.load_inline = load_inline
