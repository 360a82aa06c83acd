"""An in-place run end to end with an LLM (a scripted OpenAI-compatible
server on 127.0.0.1): the prompt shows the target in its project (the file,
a caller, the test file), the answer is evaluated in a copy of the tree,
the run writes best.patch (applies with git, the project's tests pass) and
summary.md, and the export tools turn the run into SFT and RL data."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path


from kernelsmith.cli import main
from kernelsmith.evolve import EvolveConfig, evolve_sync
from kernelsmith.inplace import load_inplace, save_config
from kernelsmith.inplace.config import InplaceConfig
from kernelsmith.config import from_dict
from mock_llm_server import MockResponse

FIXTURE = Path(__file__).resolve().parent / "fixtures_inplace"


def test_llm_run_writes_a_patch_that_applies_and_exports(tmp_path, mock_llm, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    shutil.copytree(FIXTURE / "scalepkg", tmp_path / "scalepkg")
    shutil.copy(FIXTURE / "inputs.py", tmp_path / "inputs.py")
    config = from_dict(
        InplaceConfig,
        {
            "tree": "scalepkg",
            "target": {
                "file": "scalepkg/ops.py",
                "function": "scale_add",
                "region": ["_scale_add_kernel", "scale_add"],
            },  # GRID_DIV: from the context module
            "tests": "python -m pytest -q -p no:cacheprovider tests/test_ops.py",
            "inputs": "inputs.py:make_inputs",
            "compare": {"shapes": [[100]], "trials": 1},
            "benchmark": {"shapes": [[512]]},
        },
    )
    task_file = save_config(config, tmp_path / "inplace.yaml")
    seed = load_inplace(task_file).seed_source
    answer = seed.replace("block = block_for(n)", "block = 256")
    mock_llm.script(MockResponse(text=f"Fewer, larger blocks.\n```python\n{answer}```\n"))
    monkeypatch.setenv("OPENAI_BASE_URL", mock_llm.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    run = tmp_path / "run"
    summary = evolve_sync(task_file, EvolveConfig(iterations=1, seed=0, model="openai:m", proposal_concurrency=1), run)
    assert summary.status_counts.get("correct", 0) >= 2, summary.status_counts  # the seed and the answer

    # the prompt: the in-place templates, the target file, its caller, the project's test file
    prompt = mock_llm.requests[0].prompt_text
    assert "inside a real code base" in prompt
    assert "scalepkg/model.py" in prompt and "def residual" in prompt  # a caller
    assert "tests/test_ops.py" in prompt and "def test_scale_add" in prompt
    assert "EVOLVE-BLOCK-START" in prompt

    # best.patch: git format, applies to the original tree, the tests pass there
    patch = (run / "best.patch").read_text()
    summary_md = (run / "summary.md").read_text()
    # the finalists' re-timing picks the best: 256-element blocks run 4x fewer
    # program instances than 64 in Triton's interpreter, a clear win
    assert summary.best_program_id != 0, summary.best_confirmation
    assert patch.startswith("diff --git a/scalepkg/ops.py b/scalepkg/ops.py")
    assert "-    block = block_for(n)\n+    block = 256\n" in patch
    assert "EVOLVE-BLOCK" not in patch
    clean = tmp_path / "clean"
    shutil.copytree(FIXTURE / "scalepkg", clean)
    subprocess.run(["git", "apply", str(run / "best.patch")], cwd=clean, check=True)
    assert "block = 256" in (clean / "scalepkg" / "ops.py").read_text()
    assert "## Speedup per benchmark shape" in summary_md and "| [512] | float32 |" in summary_md
    assert "applied with `git apply` to a fresh copy of the original tree: the project's tests passed" in summary_md
    info = json.loads((run / "inplace_summary.json").read_text())
    assert info["target"] == "scalepkg/ops.py:scale_add"
    # the run's own copy of the task (what --resume loads) is the same task
    again = load_inplace(run / "task" / "inplace.yaml")
    assert again.id == load_inplace(task_file).id and again.seed_source == seed

    # the export tools read the run like any other
    assert main(["export", "sft", str(run), "-o", str(tmp_path / "sft"), "--min-speedup", "0", "--json"]) == 0
    assert main(["export", "rl", str(run), "-o", str(tmp_path / "rl"), "--json"]) == 0
    sft_rows = [json.loads(line) for line in (tmp_path / "sft" / "kernelsmith_sft.jsonl").read_text().splitlines()]
    assert sft_rows
    text = json.dumps(sft_rows[0])
    assert "scale_add" in text and "inside a real code base" in text
    assert list((tmp_path / "rl").glob("*.parquet"))
