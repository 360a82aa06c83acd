"""Shared pytest fixtures (keep generic: other test modules add theirs here)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

# Helper modules that live next to the tests (mock servers, fixtures data).
sys.path.insert(0, str(Path(__file__).parent))

from mock_llm_server import MockLLMServer  # noqa: E402


@pytest.fixture
def mock_llm() -> Iterator[MockLLMServer]:
    """A scripted OpenAI/Anthropic-compatible server on 127.0.0.1, a free port."""
    server = MockLLMServer().start()
    try:
        yield server
    finally:
        server.stop()
