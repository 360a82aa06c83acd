"""Curation on a fixture tree of repositories (tests_py/fixtures_curate):
nested helpers, duplicates, near-duplicates, modules that cannot run."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kernelsmith import _core
from kernelsmith.cli import main
from kernelsmith.curate import (CurateConfig, GuessError, RunnerConfig, curate, difficulty, extract_file,
                                guess_inputs, normalized_ast_hash, read_index, write_index)

FIXTURE = Path(__file__).parent / "fixtures_curate"


@pytest.fixture(scope="module")
def curated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("curated")
    rc = main(["curate", str(FIXTURE), str(out), "--timeout", "3", "--seed", "0"])
    assert rc == 0
    return out


def _index(out: Path) -> dict[str, dict]:
    return {r["class_name"]: r for r in read_index(out)}


def _dropped(out: Path) -> dict[str, dict]:
    return {r["class_name"]: r for r in map(json.loads, (out / "dropped.jsonl").read_text().splitlines())}


def test_stage_counts_and_drop_reasons(curated: Path) -> None:
    report = json.loads((curated / "report.json").read_text())
    counts = report["counts"]
    # 11 readable .py files: the .venv and tests/ folders are skipped
    assert counts["files"] == 11
    assert counts["module_classes"] == 20  # the syntax-error file contributes none
    assert counts["self_contained"] == 19
    assert counts["exact_unique"] == 18
    assert counts["runnable"] == 14
    assert counts["near_unique"] == 13
    assert counts["structural_unique"] == 12
    assert counts["tasks"] == 12
    assert counts["clusters"] >= 1
    assert report["dropped"] == {
        "parse": {"syntax_error": 1},
        "self_contained": {"cross_file_import": 1},
        "exact_dedupe": {"exact_duplicate": 1},
        "execution": {"forward_error": 1, "input_independent": 1, "missing_import": 1, "timeout": 1},
        "near_dedupe": {"near_duplicate": 1},
        "structural_dedupe": {"structural_duplicate": 1},
    }
    assert [s["stage"] for s in report["stages"]][:3] == ["files", "module_classes", "self_contained"]


def test_nested_helpers_are_inlined_with_minimal_imports_and_the_task_runs(curated: Path) -> None:
    row = _index(curated)["ConvBlock"]
    assert row["inlined"] == ["_act", "swish"]
    text = (curated / row["task_path"]).read_text()
    assert "class Model(nn.Module)" in text and "super(Model, self)" in text
    assert "def swish" in text and "def _act" in text
    for unused in ("unused_helper", "UNUSED_CONSTANT", "import os", "import json", "not_installed_pkg_xyz", "utils"):
        assert unused not in text
    assert "def get_inputs" in text and "def get_init_inputs" in text
    # the file is a KernelBench problem: runs on its own in a fresh interpreter
    code = ("import runpy, torch; ns = runpy.run_path(%r); m = ns['Model'](*ns['get_init_inputs']());"
            "print(tuple(m(*ns['get_inputs']()).shape))" % str(curated / row["task_path"]))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "(2, 8, 16, 16)"
    # an intra-file base class is inlined before its subclass
    res = (curated / _index(curated)["ResidualMLP"]["task_path"]).read_text()
    assert res.index("class MLP(nn.Module)") < res.index("class Model(MLP)") and "HIDDEN_MULT = 2" in res


def test_duplicates_are_removed_with_provenance(curated: Path) -> None:
    idx, dropped = _index(curated), _dropped(curated)
    assert "ConvBlockCopy" not in idx and dropped["ConvBlockCopy"]["reason"] == "exact_duplicate"
    assert idx["ConvBlock"]["exact_duplicates"] == ["repo_b/copy_of_blocks.py:13 ConvBlockCopy"]
    assert "FeedForward" not in idx and dropped["FeedForward"]["reason"] == "near_duplicate"
    assert idx["MLP"]["near_duplicates"] == ["repo_b/near.py:8 FeedForward"]
    assert "RectifiedLinearUnit" not in idx and dropped["RectifiedLinearUnit"]["reason"] == "structural_duplicate"
    assert idx["ReluA"]["structural_duplicates"] == ["repo_c/other_acts.py:5 RectifiedLinearUnit"]


def test_modules_that_cannot_run_are_dropped_with_reasons(curated: Path) -> None:
    d = _dropped(curated)
    assert d["Broken"]["reason"] == "forward_error" and "always fails" in d["Broken"]["detail"]
    assert d["NeedsMissing"]["reason"] == "missing_import" and "not_installed_pkg_xyz" in d["NeedsMissing"]["detail"]
    assert d["UsesLocal"]["reason"] == "cross_file_import" and "helper" in d["UsesLocal"]["detail"]
    assert d["ConstantHead"]["reason"] == "input_independent"
    assert d["Spins"]["reason"] == "timeout"
    assert "Oops" not in d and "InVenv" not in d and "InTests" not in d
    idx = _index(curated)
    assert not {"InVenv", "InTests", "Oops"} & set(idx)


def test_index_content(curated: Path) -> None:
    idx = _index(curated)
    for row in idx.values():
        assert (curated / row["task_path"]).is_file()
        assert row["task_path"] == f"tasks/{row['family']}/{row['name']}.py"
        assert row["difficulty"] in ("level1", "level2", "level3")
        assert len(row["ast_hash"]) == 16 and row["op_graph_hash"] and row["trace"] == "dispatch"
        assert row["inputs_source"] == "heuristic" and row["line"] > 0
    assert idx["TinyNet"]["difficulty"] == "level3"
    assert idx["ReluA"]["difficulty"] == "level1"
    assert idx["MLP"]["difficulty"] == "level2"
    assert idx["TokenEncoder"]["inputs"] == ["torch.randint(0, 100, (2, 8))"]
    assert idx["SelfAttention"]["inputs"] == ["torch.randn(2, 8, 16)"]
    assert idx["ConvBlock"]["init_args"] == ["8", "8"]
    # one medoid per cluster; noise is the family "unclustered"
    clusters: dict[int, list[dict]] = {}
    for row in idx.values():
        clusters.setdefault(row["cluster"], []).append(row)
    for lab, rows in clusters.items():
        if lab == -1:
            assert all(r["family"] == "unclustered" and not r["is_medoid"] for r in rows)
        else:
            assert sum(r["is_medoid"] for r in rows) == 1
            assert len({r["family"] for r in rows}) == 1
    # the two convolution-only modules share a family apart from the linear ones
    assert idx["ConvStem"]["family"] == idx["DepthwiseSeparable"]["family"] != idx["GatedUnit"]["family"]


def test_parquet_index_roundtrip(curated: Path, tmp_path: Path) -> None:
    rows = read_index(curated)
    write_index(tmp_path, rows, "parquet")
    back = read_index(tmp_path)
    assert [r["name"] for r in back] == [r["name"] for r in rows]
    assert back[0]["ops"] == rows[0]["ops"] and back[0]["leaf_modules"] == rows[0]["leaf_modules"]


# ---- units ---------------------------------------------------------------

def test_extract_flags_cross_file_star_and_unresolved() -> None:
    src = ("import torch.nn as nn\nfrom models.utils import helper\nfrom somewhere import *\n\n"
           "class A(nn.Module):\n    def forward(self, x):\n        return helper(x)\n\n"
           "class B(nn.Module):\n    def forward(self, x):\n        return mystery(x)\n\n"
           "class C(nn.Module):\n    pass\n")
    res = {e.class_name: e for e in extract_file(src, "r", "f.py", frozenset({"models", "utils"}))[0]}
    assert res["A"].status == "cross_file_import"
    assert res["B"].status == "star_import" and "mystery" in res["B"].detail
    assert res["C"].status == "no_forward"
    assert extract_file("class (:\n", "r", "f.py")[1] is not None


def test_extract_renames_model_conflicts_and_inherits_torch_forward() -> None:
    src = ("import torch\nfrom torch import nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
           "        return x * 2\n\nclass Wrapper(Model):\n    def forward(self, x):\n"
           "        return super().forward(x) + 1\n\nclass Seq(nn.Sequential):\n    pass\n")
    res = {e.class_name: e for e in extract_file(src, "r", "f.py")[0]}
    w = res["Wrapper"]
    assert w.ok and "class Model_(nn.Module)" in w.source and "class Model(Model_)" in w.source
    assert res["Seq"].ok  # nn.Sequential's forward is inherited
    # formatting, comments and docstrings do not change the exact hash; code does
    a = "import torch\n\ndef f(x):\n    '''doc'''\n    return x + 1  # c\n"
    assert normalized_ast_hash(a) == normalized_ast_hash("import torch\ndef f( x ):\n    return x+1\n")
    assert normalized_ast_hash(a) != normalized_ast_hash("import torch\ndef f(x):\n    return x + 2\n")


def test_guess_inputs_from_layers_and_usage() -> None:
    conv1d = ("import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self, in_channels, hidden_dim):\n"
              "        super().__init__()\n        self.c = nn.Conv1d(in_channels, hidden_dim, 3)\n"
              "    def forward(self, x):\n        return self.c(x)\n")
    v = guess_inputs(conv1d)[0]
    assert v.init_args == ["8", "16"] and v.inputs == ["torch.randn(2, 8, 16)"]
    ln = ("import torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self, d_model: int, eps: float = 1e-6):\n"
          "        super().__init__()\n        self.n = nn.LayerNorm(d_model * 2)\n"
          "    def forward(self, x, mask=None):\n        b, t, c = x.shape\n        return self.n(x)\n")
    v = guess_inputs(ln)[0]
    assert v.init_args == ["16"] and v.inputs == ["torch.randn(2, 8, 32)"]
    with pytest.raises(GuessError, match="config"):
        guess_inputs("import torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self, config):\n"
                     "        super().__init__()\n    def forward(self, x):\n        return x\n")


def test_difficulty_rules() -> None:
    assert difficulty({"leaf_modules": {"Linear": 1}, "compute_ops": 2}) == "level1"
    assert difficulty({"leaf_modules": {"Linear": 2}, "compute_ops": 5}) == "level2"
    assert difficulty({"leaf_modules": {"Conv2d": 3}, "custom_submodules": 2, "compute_ops": 10}) == "level3"
    assert difficulty({"leaf_modules": {}, "compute_ops": 45}) == "level3"


def test_minhash_binding() -> None:
    base = "\n".join(f"y{i} = torch.relu(x{i}) * {i} + w{i}" for i in range(30))
    near = base.replace("y7 = ", "z7 = ")
    other = "\n".join(f"q{i} = conv(p{i}, k{i}) - {i * 3}" for i in range(30))
    lsh = _core.MinHashLSH(num_perm=128, bands=32, threshold=0.8)
    assert lsh.add_many([base, other, near]) == 0 and len(lsh) == 3
    assert lsh.near_duplicate_pairs() == [(0, 2)]
    assert lsh.groups() == [0, 1, 0]
    assert lsh.estimate(0, 1) < 0.2
    a, b = _core.minhash_shingles(base, 5), _core.minhash_shingles(near, 5)
    assert abs(_core.minhash_jaccard(a, b) - lsh.estimate(0, 2)) < 0.12
    with pytest.raises(ValueError, match="bands"):
        _core.MinHashLSH(num_perm=128, bands=30)


def test_llm_supplies_inputs_the_heuristics_cannot(tmp_path: Path, mock_llm, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "src" / "repo_x"
    repo.mkdir(parents=True)
    (repo / "cfg.py").write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass ConfigNet(nn.Module):\n    def __init__(self, config):\n"
        "        super().__init__()\n        self.fc = nn.Linear(config['width'], 4)\n\n"
        "    def forward(self, x):\n        return self.fc(x)\n")
    mock_llm.script("Here you go:\n```python\ndef get_inputs():\n    return [torch.randn(3, 6)]\n\n\n"
                    "def get_init_inputs():\n    return [{'width': 6}]\n```\n")
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    cfg = CurateConfig(model="openai:mock-model", llm_base_url=mock_llm.openai_base_url, seed=0,
                       runner=RunnerConfig(module_timeout_s=5))
    rep = curate(tmp_path / "src", tmp_path / "out", cfg)
    assert rep.count("runnable") == 1 and rep.count("llm_inputs_proposed") == 1
    (row,) = read_index(tmp_path / "out")
    assert row["inputs_source"] == "llm" and row["output_shapes"] == [[3, 4]]
    assert "{'width': 6}" in (tmp_path / "out" / row["task_path"]).read_text()
    assert len(mock_llm.requests) == 1
    assert "class Model" in json.dumps(mock_llm.requests[0].body)
