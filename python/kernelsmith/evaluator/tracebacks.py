"""Trim tracebacks to what concerns the candidate's code.

The harness's own frames (worker, correctness loop, torch internals) mean
nothing to an LLM and waste prompt tokens; the candidate's frames and the
final error message are what it can act on.
"""
from __future__ import annotations

import traceback
from typing import Optional

MAX_MESSAGE = 2500
# A build log is the compile feedback: keep more of it (its first error is what matters)
MAX_BUILD_LOG_MESSAGE = 6000

#: OpenCL statuses of a failed program build: CL_BUILD_PROGRAM_FAILURE (-11),
#: CL_COMPILE_PROGRAM_FAILURE (-15), CL_LINK_PROGRAM_FAILURE (-17),
#: CL_INVALID_BUILD_OPTIONS (-43)
OPENCL_BUILD_ERROR_CODES = (-11, -15, -17, -43)


def trim_exception(exc: BaseException, candidate_file: str, tail_frames: int = 1) -> str:
    """Trimmed text of ``exc`` and of the exceptions it was raised from
    (Triton wraps kernel errors; the wrapped one points into the kernel)."""
    parts = []
    seen = set()
    cur: Optional[BaseException] = exc
    while cur is not None and id(cur) not in seen and len(parts) < 3:
        seen.add(id(cur))
        parts.append(_trim_one(cur, candidate_file, tail_frames if cur is exc else 0))
        cur = cur.__cause__ or (None if cur.__suppress_context__ else cur.__context__)
    if len(parts) == 1:
        return parts[0]
    # innermost cause first, like Python prints it
    return "\n\nwhich caused:\n".join(p for p in reversed(parts) if p)


def _trim_one(exc: BaseException, candidate_file: str, tail_frames: int = 1) -> str:
    """Candidate frames of ``exc``'s traceback plus the error message.

    If no frame is the candidate's (the error came from inside a library
    called by it), the last ``tail_frames`` library frames are kept so the
    message has a location.
    """
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if f.filename == candidate_file]
    if mine:
        # keep library frames only if they are below the last candidate frame
        # and the exception came from a Triton compile (its message already
        # has the kernel source position), otherwise drop them.
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


def classify_exception(exc: BaseException) -> str:
    """Error category for an exception raised by candidate code."""
    text = f"{type(exc).__name__}: {exc}".lower()
    module = type(exc).__module__ or ""
    if isinstance(exc, MemoryError) or "out of memory" in text or "can't allocate memory" in text:
        return "oom"
    if "illegal memory access" in text or "misaligned address" in text or "device-side assert" in text:
        return "crash"
    # Triton compile errors: CompilationError on a GPU; under the interpreter
    # the same kernel bugs (undefined names, type errors) surface as
    # InterpreterError
    name = type(exc).__name__
    # OpenCL program builds (kernelsmith.OpenCLError, or any runtime's error
    # carrying the CL status): the message holds the compiler's build log
    if name == "OpenCLError" and (getattr(exc, "code", None) in OPENCL_BUILD_ERROR_CODES
                                  or "CL_BUILD_PROGRAM_FAILURE" in str(exc)):
        return "compile"
    if (isinstance(exc, SyntaxError) or module.startswith("triton.compiler")
            or name in ("CompilationError", "InterpreterError")):
        return "compile"
    return "runtime"


def first_candidate_line(exc: BaseException, candidate_file: str) -> Optional[int]:
    for f in reversed(traceback.extract_tb(exc.__traceback__)):
        if f.filename == candidate_file:
            return f.lineno
    return None
