"""Trim tracebacks to what concerns the candidate's code.

The harness's own frames (worker, correctness loop, torch internals) mean
nothing to an LLM and waste prompt tokens; the candidate's frames and the
final error message are what it can act on.

Only the language-independent part lives here: which frames are the
candidate's and which exceptions are its compiler's are the backend's to say
(``Backend.candidate_frames``, ``Backend.is_compile_error``); the worker asks
through ``Backend.trim_traceback`` and ``Backend.classify_exception``.
"""

from __future__ import annotations

import traceback
from typing import Callable, Optional

MAX_MESSAGE = 2500
# A build log is the compile feedback: keep more of it (its first error is what matters)
MAX_BUILD_LOG_MESSAGE = 6000

#: frames -> the candidate's own (a backend's ``candidate_frames``)
FrameFilter = Callable[[list, str], list]


def in_candidate_file(frames: list, candidate_file: str) -> list:
    """The frames whose code is in the candidate's file."""
    return [f for f in frames if f.filename == candidate_file]


#: how many exceptions of a chain the feedback shows and the category looks at
MAX_CHAIN = 3


def exception_chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from or while handling, as
    Python prints them (its ``__cause__``, else its unsuppressed
    ``__context__``), outermost first, at most :data:`MAX_CHAIN`: what the
    feedback shows (:func:`trim_exception`) and what the category is read
    from (:func:`classify_exception`)."""
    chain: list[BaseException] = []
    cur: Optional[BaseException] = exc
    while cur is not None and all(cur is not seen for seen in chain) and len(chain) < MAX_CHAIN:
        chain.append(cur)
        cur = cur.__cause__ or (None if cur.__suppress_context__ else cur.__context__)
    return chain


def trim_exception(
    exc: BaseException, candidate_file: str, tail_frames: int = 1, candidate_frames: Optional[FrameFilter] = None
) -> str:
    """Trimmed text of ``exc`` and of the exceptions it was raised from
    (a kernel compiler may wrap the error that points into the kernel)."""
    parts = [
        _trim_one(cur, candidate_file, tail_frames if cur is exc else 0, candidate_frames or in_candidate_file)
        for cur in exception_chain(exc)
    ]
    if len(parts) == 1:
        return parts[0]
    # innermost cause first, like Python prints it
    return "\n\nwhich caused:\n".join(p for p in reversed(parts) if p)


def _trim_one(exc: BaseException, candidate_file: str, tail_frames: int, candidate_frames: FrameFilter) -> str:
    """Candidate frames of ``exc``'s traceback plus the error message.

    If no frame is the candidate's (the error came from inside a library
    called by it), the last ``tail_frames`` library frames are kept so the
    message has a location.
    """
    frames = traceback.extract_tb(exc.__traceback__)
    mine = candidate_frames(list(frames), candidate_file)
    if mine:
        # library frames are dropped: a kernel compiler's message already
        # has the kernel source position
        keep = mine
    else:
        keep = frames[-tail_frames:] if tail_frames else []
    lines = ["Traceback (candidate code only):"] if keep else []
    for f in keep:
        name = "candidate.py" if f.filename == candidate_file else f.filename.rsplit("/site-packages/", 1)[-1]
        lines.append(f'  File "{name}", line {f.lineno}, in {f.name}')
        if f.line:
            lines.append(f"    {f.line.strip()}")
    message = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    message = message.replace(candidate_file, "candidate.py")
    limit = MAX_BUILD_LOG_MESSAGE if "--- build log ---" in message else MAX_MESSAGE
    if len(message) > limit:
        message = message[:limit] + f"\n... ({len(message) - limit} more characters)"
    lines.append(message)
    return "\n".join(lines)


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is an allocation failure. Besides the plain messages:
    PyTorch's CUDA caching allocator formats its out-of-memory error with
    NVML, and where NVML cannot start (a sandboxed worker: "Can't initialize
    NVML") the failed allocation surfaces as an INTERNAL ASSERT on
    ``nvmlInit`` in CUDACachingAllocator.cpp instead (an honest argmax
    cloning its 8.6 GB input on a shared H100)."""
    text = f"{type(exc).__name__}: {exc}".lower()
    return (
        isinstance(exc, MemoryError)
        or "out of memory" in text
        or "can't allocate memory" in text
        or ("cudacachingallocator" in text and "nvmlinit" in text)
    )


def classify_exception(exc: BaseException, is_compile_error: Optional[Callable[[BaseException], bool]] = None) -> str:
    """Error category for an exception raised by candidate code, decided
    here where it happens (no consumer of a result re-reads its text).
    ``is_compile_error``: the backend's test for its compiler's errors
    (``Backend.is_compile_error``). A compiler's error anywhere in the
    chain the feedback shows (:func:`exception_chain`: a wrapper raised from
    it, or an error raised while handling it) makes the category "compile":
    a JIT that builds kernels at the first call reports its build failure
    there, and the feedback then holds the compiler's words."""
    text = f"{type(exc).__name__}: {exc}".lower()
    if is_out_of_memory(exc):
        return "oom"
    if "illegal memory access" in text or "misaligned address" in text or "device-side assert" in text:
        return "crash"
    for cur in exception_chain(exc):
        if isinstance(cur, SyntaxError) or (is_compile_error is not None and is_compile_error(cur)):
            return "compile"
    return "runtime"


def first_candidate_line(exc: BaseException, candidate_file: str) -> Optional[int]:
    for f in reversed(traceback.extract_tb(exc.__traceback__)):
        if f.filename == candidate_file:
            return f.lineno
    return None
