"""Optional LLM assistance: ask a model for get_inputs / get_init_inputs of
modules the heuristics could not run. Uses the loop's clients
(:func:`kernelsmith.llm.make_client`); the answer is accepted only if it is a
code block that defines exactly those two functions (plus imports), and it is
then checked by the same sandboxed execution filter as heuristic inputs."""

from __future__ import annotations

import ast
import asyncio
import re
from typing import Any, Optional
from .._astutil import parse as parse_source
from ..llm import make_client

SYSTEM = (
    "You write test inputs for PyTorch modules. Answer with one Python code block that defines exactly two "
    "functions, get_inputs() returning a list of CPU tensors (and plain values) for Model.forward, and "
    "get_init_inputs() returning a list of positional arguments for Model(...). Use small sizes "
    "(batch 2, at most a few thousand elements per tensor). `torch` is already imported."
)

_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)


def build_prompt(source: str, failure: str) -> list[dict[str, str]]:
    user = (
        f"Module:\n```python\n{source}\n```\n\nOur guessed inputs failed with: {failure}\n\n"
        "Write get_inputs() and get_init_inputs() for class Model."
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def parse_answer(text: str) -> Optional[str]:
    """The two functions as source, or None when the answer is not acceptable."""
    blocks = _BLOCK.findall(text or "")
    code = blocks[-1] if blocks else text
    try:
        tree = parse_source(code)
    except SyntaxError:
        return None
    names = set()
    for s in tree.body:
        if isinstance(s, ast.FunctionDef) and s.name in ("get_inputs", "get_init_inputs"):
            names.add(s.name)
        elif isinstance(s, (ast.Import, ast.ImportFrom)):
            continue
        else:
            return None  # module-level code other than the two functions is not accepted
    if names != {"get_inputs", "get_init_inputs"}:
        return None
    return ast.unparse(tree) + "\n"


async def _ask_all(client: Any, jobs: list[tuple[str, str, str]], concurrency: int) -> dict[str, Optional[str]]:
    sem = asyncio.Semaphore(max(1, concurrency))
    out: dict[str, Optional[str]] = {}

    async def one(key: str, source: str, failure: str) -> None:
        async with sem:
            try:
                comp = await client.complete(build_prompt(source, failure))
                out[key] = parse_answer(comp.text)
            except Exception:  # a failed request only means no LLM inputs for this module
                out[key] = None

    await asyncio.gather(*(one(*j) for j in jobs))
    return out


def ask_inputs(
    spec: str,
    jobs: list[tuple[str, str, str]],
    *,
    base_url: Optional[str] = None,
    api_key_env: Optional[str] = None,
    concurrency: int = 4,
) -> dict[str, Optional[str]]:
    """jobs: (id, module source, failure) -> id -> rendered functions or None."""
    client = make_client(spec, base_url=base_url, api_key_env=api_key_env, max_concurrency=concurrency)
    return asyncio.run(_ask_all(client, jobs, concurrency))
