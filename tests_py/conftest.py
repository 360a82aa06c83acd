"""Shared pytest fixtures (keep generic: other test modules add theirs here)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterator

import pytest

# `kernelsmith eval` (and kernelsmith.daemon.evaluate) would start a per-user
# evaluation daemon that outlives the test for 10 minutes, holding a pool:
# the suite evaluates in-process unless a test asks for the daemon
# (test_daemon.py does, in private folders, and stops what it starts).
os.environ.setdefault("KERNELSMITH_DAEMON", "0")

# Helper modules that live next to the tests (mock servers, fixtures data).
sys.path.insert(0, str(Path(__file__).parent))

from mock_llm_server import MockLLMServer, MockResponse  # noqa: E402

# The fixture folders hold programs and whole packages under test (an
# in-place task's package has its own tests/): data, not this suite's tests.
collect_ignore_glob = ["fixtures*"]


@pytest.fixture
def mock_llm() -> Iterator[MockLLMServer]:
    """A scripted OpenAI/Anthropic-compatible server on 127.0.0.1, a free port."""
    server = MockLLMServer().start()
    try:
        yield server
    finally:
        server.stop()


def _fenced_program(source: str) -> MockResponse:
    # The reference-as-seed is one EVOLVE block; a full rewrite keeps its markers.
    program = f"# EVOLVE-BLOCK-START\n{source}# EVOLVE-BLOCK-END\n"
    return MockResponse(
        text=f"Here it is:\n```python\n{program}```\n", reasoning="one work-item per row", think_tags=True
    )


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Real run directories to export from (shared by the export and trainer
    tests): an offline (mutate) evolution of the OpenCL softmax example
    (optimization steps), and the same task started from the reference with
    a scripted LLM that translates it (translation steps)."""
    import shutil

    from kernelsmith.evolve import EvolveConfig, evolve_sync
    from mock_llm_server import MockResponse

    softmax = Path(__file__).resolve().parent.parent / "examples" / "opencl" / "softmax"
    seed = (softmax / "seed.py").read_text()
    root = tmp_path_factory.mktemp("export_runs")
    evolve_sync(softmax, EvolveConfig(iterations=8, seed=0, model="mutate"), root / "opt")
    task = root / "softmax_noseed"
    task.mkdir()
    for name in ("reference.py", "task.yaml"):
        shutil.copy(softmax / name, task / name)
    (task / "task.yaml").write_text(
        (task / "task.yaml")
        .read_text()
        .replace("name: opencl_softmax", "name: softmax_from_ref")
        .replace("trials: 5", "trials: 3")
    )  # another task id (the name is not part of it)
    with MockLLMServer() as server, pytest.MonkeyPatch.context() as mp:
        server.script(
            _fenced_program(seed),  # correct translation
            MockResponse(text="I cannot write this kernel."),  # no code: edit failure
            _fenced_program(seed.replace("WORK_GROUP = 64", "WORK_GROUP = 32")),  # another correct program
        )
        mp.setenv("OPENAI_BASE_URL", server.openai_base_url)
        mp.setenv("OPENAI_API_KEY", "sk-test")
        evolve_sync(task, EvolveConfig(iterations=3, seed=0, model="openai:m", proposal_concurrency=1), root / "tr")
    return {"opt": root / "opt", "tr": root / "tr", "root": root}
