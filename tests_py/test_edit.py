from __future__ import annotations

import pytest

from kernelsmith import edit
from kernelsmith.edit import EditResult, apply_response

PARENT = """import torch
# EVOLVE-BLOCK-START
class ModelNew(torch.nn.Module):
    def forward(self, x):
        y = x + 1
        return y
# EVOLVE-BLOCK-END

def get_inputs():
    return [torch.randn(4)]
"""


def diff(search: str, replace: str) -> str:
    return f"<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n"


def test_diff_applies_and_round_trips():
    result = apply_response(PARENT, "Change:\n" + diff("        y = x + 1\n", "        y = x * 2\n"))
    assert result.ok, result.error
    assert result.mode == "diff"
    assert "y = x * 2" in result.source and "x + 1" not in result.source
    assert result.blocks[0].applied and result.blocks[0].match_level == "exact"
    assert result.evolve_blocks == [(2, 7)]
    again = EditResult.from_dict(result.to_dict())
    assert again == result


def test_failed_block_carries_nearest_match_to_the_model():
    result = apply_response(PARENT, diff("        y = x + 2\n        return y\n", "        return x\n"), mode="diff")
    assert not result.ok
    assert result.error_kind == "diff"
    block = result.blocks[0]
    assert block.status == "no_match"
    assert (block.nearest_start, block.nearest_end) == (5, 6)
    assert 0.8 < block.similarity < 1.0
    assert "lines 5-6" in result.error


def test_full_rewrite_with_syntax_error_reports_line_and_column():
    broken = PARENT.replace("        y = x + 1", "        y = (x + 1")
    result = apply_response(PARENT, f"```python\n{broken}```", mode="full")
    assert not result.ok
    assert result.error_kind == "syntax"
    assert result.syntax_error is not None
    assert result.syntax_error.line >= 5
    assert "SyntaxError at line" in result.error


def test_truncated_reply_is_explained():
    cut = PARENT[: PARENT.index("        return y")] + "        return (y"
    result = apply_response(PARENT, f"```python\n{cut}")
    assert not result.ok
    assert not result.fence_closed
    assert "cut off" in result.error


def test_change_outside_blocks_is_rejected_with_location():
    child = PARENT.replace("randn(4)", "randn(5)")
    result = apply_response(PARENT, f"```python\n{child}```")
    assert not result.ok
    assert result.error_kind == "evolve_blocks"
    assert "line 10" in result.error and "randn(4)" in result.error


def test_no_code_and_bad_mode():
    result = apply_response(PARENT, "I would use shared memory.", mode="full")
    assert not result.ok and result.error_kind == "no_code"
    with pytest.raises(ValueError, match="mode"):
        apply_response(PARENT, "x", mode="patch")


def test_partial_diff_when_allowed():
    response = diff("        y = x + 1\n", "        y = x + 3\n") + diff("not there\n", "x\n")
    assert not apply_response(PARENT, response).ok
    partial = apply_response(PARENT, response, allow_partial=True)
    assert partial.ok
    assert partial.applied_blocks == 1
    assert "1 of 2" in partial.error


def test_helpers():
    assert edit.evolve_blocks(PARENT) == [(2, 7)]
    with pytest.raises(ValueError, match="line 1"):
        edit.evolve_blocks("# EVOLVE-BLOCK-END\n")
    assert edit.check_evolve_blocks(PARENT, PARENT) is None
    assert "import torch" in edit.check_evolve_blocks(PARENT, PARENT.replace("import torch", "import os"))
    assert edit.extract_code("a\n```py\nx = 1\n```\n") == "x = 1\n"
    assert edit.extract_code("none") is None
    assert edit.syntax_check("def f(:\n") is not None
    assert edit.syntax_check("x = 1\n") is None
