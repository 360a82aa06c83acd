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
from kernelsmith.curate import (
    CurateConfig,
    GuessError,
    RunnerConfig,
    curate,
    difficulty,
    extract_file,
    guess_inputs,
    normalized_ast_hash,
    read_index,
    write_index,
)

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
    # 13 readable .py files: the .venv and tests/ folders are skipped
    assert counts["files"] == 13
    assert counts["module_classes"] == 27  # the syntax-error file contributes none
    assert counts["self_contained"] == 26
    assert counts["exact_unique"] == 25
    assert counts["runnable"] == 17
    assert counts["near_unique"] == 16
    assert counts["structural_unique"] == 15
    assert counts["tasks"] == 15
    assert counts["clusters"] >= 1
    assert report["dropped"] == {
        "parse": {"syntax_error": 1},
        "self_contained": {"cross_file_import": 1},
        "exact_dedupe": {"exact_duplicate": 1},
        "execution": {
            "forward_error": 1,
            "identity": 2,
            "ignores_input": 1,
            "input_independent": 1,
            "missing_import": 1,
            "timeout": 1,
            "trivial_output": 1,
        },
        "near_dedupe": {"near_duplicate": 1},
        "structural_dedupe": {"structural_duplicate": 1},
    }
    assert [s["stage"] for s in report["stages"]][:3] == ["files", "module_classes", "self_contained"]
    # every drop is in dropped.jsonl, the unparsable file included
    rows = [json.loads(l) for l in (curated / "dropped.jsonl").read_text().splitlines()]
    assert len(rows) == sum(n for reasons in report["dropped"].values() for n in reasons.values())
    assert {"stage": "parse", "reason": "syntax_error", "path": "broken_syntax.py"}.items() <= next(
        r for r in rows if r["stage"] == "parse"
    ).items()


def _run_standalone(task_dir: Path, fn: str = "get_inputs") -> str:
    code = (
        "import runpy, torch; ns = runpy.run_path(%r, run_name='reference'); m = ns['Model'](*ns['get_init_inputs']());"
        "m.eval(); print(tuple(m(*ns[%r]()).shape))" % (str(task_dir / "reference.py"), fn)
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_nested_helpers_are_inlined_with_minimal_imports_and_the_task_runs(curated: Path) -> None:
    row = _index(curated)["ConvBlock"]
    assert row["inlined"] == ["_act", "swish"]
    task = curated / row["task_path"]
    text = (task / "reference.py").read_text()
    assert "class Model(nn.Module)" in text and "super(Model, self)" in text
    assert "def swish" in text and "def _act" in text
    for unused in ("unused_helper", "UNUSED_CONSTANT", "import os", "import json", "not_installed_pkg_xyz", "utils"):
        assert unused not in text
    for fn in ("def get_inputs():", "def get_inputs_small():", "def get_inputs_large():", "def get_init_inputs():"):
        assert fn in text
    # a task directory the evaluator loads: the other size classes are its extra input sets
    from kernelsmith.task import Task

    t = Task.load(task)
    assert t.config.extra_inputs == ["get_inputs_small", "get_inputs_large"]
    assert t.config.difficulty == row["difficulty"]
    # the file is a KernelBench problem: runs on its own in a fresh interpreter, at every size
    assert _run_standalone(task, "get_inputs_small") == "(2, 64, 16, 16)"
    assert _run_standalone(task) == "(8, 64, 64, 64)"
    # an intra-file base class is inlined before its subclass
    res = (curated / _index(curated)["ResidualMLP"]["task_path"] / "reference.py").read_text()
    assert res.index("class MLP(nn.Module)") < res.index("class Model(MLP)") and "HIDDEN_MULT = 2" in res


def test_duplicates_are_removed_with_provenance(curated: Path) -> None:
    idx, dropped = _index(curated), _dropped(curated)
    assert "ConvBlockCopy" not in idx and dropped["ConvBlockCopy"]["reason"] == "exact_duplicate"
    assert idx["ConvBlock"]["exact_duplicates"] == ["repo_b/copy_of_blocks.py:13 ConvBlockCopy"]
    # text-similar and the same operator graph (only a float constant differs): a near-duplicate
    assert "FeedForward" not in idx and dropped["FeedForward"]["reason"] == "near_duplicate"
    assert idx["MLP"]["near_duplicates"] == ["repo_b/near.py:8 FeedForward"]
    assert "RectifiedLinearUnit" not in idx and dropped["RectifiedLinearUnit"]["reason"] == "structural_duplicate"
    assert idx["ReluA"]["structural_duplicates"] == ["repo_c/other_acts.py:5 RectifiedLinearUnit"]


def test_text_similar_but_distinct_operators_are_all_kept(curated: Path) -> None:
    from kernelsmith import _core
    from kernelsmith.curate import normalized_text

    srcs = [(FIXTURE / "repo_d" / "acts.py").read_text().split("class ")[i] for i in (1, 2, 3)]
    lsh = _core.MinHashLSH(num_perm=128, bands=32, threshold=0.5)
    lsh.add_many([normalized_text("class " + s) for s in srcs])
    assert lsh.groups() == [0, 0, 0]  # text similarity alone would merge them
    idx = _index(curated)
    assert {"SiLUAct", "MishAct", "SELUAct", "ReluA"} <= set(idx)
    assert len({idx[n]["fingerprint"] for n in ("SiLUAct", "MishAct", "SELUAct", "ReluA")}) == 4
    assert all(idx[n]["difficulty"] == "level1" for n in ("SiLUAct", "MishAct", "SELUAct", "ReluA"))


def test_degenerate_modules_are_dropped(curated: Path) -> None:
    d = _dropped(curated)
    assert d["ViewOnly"]["reason"] == "identity"
    assert d["UnitAffine"]["reason"] == "identity"  # scale 1, bias 0
    assert d["OneKeyAttention"]["reason"] == "ignores_input" and "input 0" in d["OneKeyAttention"]["detail"]
    assert d["Whisper"]["reason"] == "trivial_output"
    assert d["ConstantHead"]["reason"] == "input_independent"


def test_modules_that_cannot_run_are_dropped_with_reasons(curated: Path) -> None:
    d = _dropped(curated)
    assert d["Broken"]["reason"] == "forward_error" and "always fails" in d["Broken"]["detail"]
    assert d["NeedsMissing"]["reason"] == "missing_import" and "not_installed_pkg_xyz" in d["NeedsMissing"]["detail"]
    assert d["UsesLocal"]["reason"] == "cross_file_import" and "helper" in d["UsesLocal"]["detail"]
    assert d["Spins"]["reason"] == "timeout"
    assert "Oops" not in d and "InVenv" not in d and "InTests" not in d
    idx = _index(curated)
    assert not {"InVenv", "InTests", "Oops"} & set(idx)


def test_index_content(curated: Path) -> None:
    idx = _index(curated)
    for row in idx.values():
        assert (curated / row["task_path"] / "reference.py").is_file()
        assert (curated / row["task_path"] / "task.yaml").is_file()
        assert row["task_path"] == f"tasks/{row['family']}/{row['name']}"
        assert row["difficulty"] in ("level1", "level2", "level3")
        assert len(row["ast_hash"]) == 16 and row["op_graph_hash"] and row["trace"] == "dispatch"
        assert row["inputs_source"] == "heuristic" and row["line"] > 0
        assert row["size"] == "medium" and row["size_checked"]["small"] is True
    assert idx["TinyNet"]["difficulty"] == "level3"
    assert idx["ReluA"]["difficulty"] == "level1"
    assert idx["MLP"]["difficulty"] == "level2"
    # shapes a kernel engineer would time: the default (medium) set moves megabytes
    assert idx["TokenEncoder"]["inputs"] == ["torch.randint(0, 1024, (8, 1024))"]
    assert idx["SelfAttention"]["inputs"] == ["torch.randn(8, 1024, 256)"]
    assert idx["ConvBlock"]["init_args"] == ["64", "64"]
    assert idx["ReluA"]["size_class"] == "medium" and idx["ReluA"]["bytes_moved"]["default"] == 2 * 8 * 1024 * 256 * 4
    assert idx["ReluA"]["bytes_moved"]["large"] == 2 * 16 * 4096 * 256 * 4
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
    src = (
        "import torch.nn as nn\nfrom models.utils import helper\nfrom somewhere import *\n\n"
        "class A(nn.Module):\n    def forward(self, x):\n        return helper(x)\n\n"
        "class B(nn.Module):\n    def forward(self, x):\n        return mystery(x)\n\n"
        "class C(nn.Module):\n    pass\n"
    )
    res = {e.class_name: e for e in extract_file(src, "r", "f.py", frozenset({"models", "utils"}))[0]}
    assert res["A"].status == "cross_file_import"
    assert res["B"].status == "star_import" and "mystery" in res["B"].detail
    assert res["C"].status == "no_forward"
    assert extract_file("class (:\n", "r", "f.py")[1] is not None


def test_extract_renames_model_conflicts_and_inherits_torch_forward() -> None:
    src = (
        "import torch\nfrom torch import nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
        "        return x * 2\n\nclass Wrapper(Model):\n    def forward(self, x):\n"
        "        return super().forward(x) + 1\n\nclass Seq(nn.Sequential):\n    pass\n"
    )
    res = {e.class_name: e for e in extract_file(src, "r", "f.py")[0]}
    w = res["Wrapper"]
    assert w.ok and "class Model_(nn.Module)" in w.source and "class Model(Model_)" in w.source
    assert res["Seq"].ok  # nn.Sequential's forward is inherited
    # formatting, comments and docstrings do not change the exact hash; code does
    a = "import torch\n\ndef f(x):\n    '''doc'''\n    return x + 1  # c\n"
    assert normalized_ast_hash(a) == normalized_ast_hash("import torch\ndef f( x ):\n    return x+1\n")
    assert normalized_ast_hash(a) != normalized_ast_hash("import torch\ndef f(x):\n    return x + 2\n")


def test_guess_inputs_from_layers_and_usage() -> None:
    conv1d = (
        "import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self, in_channels, hidden_dim):\n"
        "        super().__init__()\n        self.c = nn.Conv1d(in_channels, hidden_dim, 3)\n"
        "    def forward(self, x):\n        return self.c(x)\n"
    )
    v = guess_inputs(conv1d)[0]
    assert v.init_args == ["64", "256"] and v.inputs_for("medium") == ["torch.randn(8, 64, 4096)"]
    assert v.inputs_for("small") == ["torch.randn(2, 64, 64)"]
    ln = (
        "import torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self, d_model: int, eps: float = 1e-6):\n"
        "        super().__init__()\n        self.n = nn.LayerNorm(d_model * 2)\n"
        "    def forward(self, x, mask=None):\n        b, t, c = x.shape\n        return self.n(x)\n"
    )
    v = guess_inputs(ln)[0]
    assert v.init_args == ["256"] and v.inputs_for("medium") == ["torch.randn(8, 1024, 512)"]
    # a learned positional table pins the sequence length in every size class
    pos = (
        "import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self, seq_len, dim):\n"
        "        super().__init__()\n        self.pos = nn.Parameter(torch.zeros(1, seq_len, dim))\n"
        "        self.fc = nn.Linear(dim, dim)\n    def forward(self, x):\n        return self.fc(x + self.pos)\n"
    )
    v = guess_inputs(pos)[0]
    assert v.pins == {"S": 1024} and v.inputs_for("small") == ["torch.randn(2, 1024, 256)"]
    with pytest.raises(GuessError, match="config"):
        guess_inputs(
            "import torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self, config):\n"
            "        super().__init__()\n    def forward(self, x):\n        return x\n"
        )


def test_config_argument_built_from_the_config_class_fields() -> None:
    from kernelsmith.curate.inputs import ConfigSpec

    src = (
        "import torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self, config, layer_idx):\n"
        "        super().__init__()\n        self.q = nn.Linear(config.hidden_size, config.num_attention_heads * 64)\n"
        "    def forward(self, hidden_states, position_embeddings=None, attention_mask=None):\n"
        "        cos, sin = position_embeddings\n        return self.q(hidden_states) * cos.mean()\n"
    )
    spec = ConfigSpec(
        "LlamaConfig",
        {
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "rms_norm_eps": 1e-6,
            "hidden_act": "silu",
            "vision_config": None,
        },
    )
    v = guess_inputs(src, config=spec)[0]
    assert v.init_args[0].startswith("LlamaConfig(hidden_size=256, num_attention_heads=4, vision_config={")
    assert v.init_args[1] == "0"  # layer_idx
    assert v.inputs_for("medium") == [
        "torch.randn(8, 1024, 256)",
        "(torch.randn(8, 1024, 64), torch.randn(8, 1024, 64))",
    ]


def test_difficulty_rules() -> None:
    assert difficulty({"ops": {"addmm": 1, "view": 2}, "leaf_modules": {"Linear": 1}, "compute_ops": 1}) == "level1"
    assert difficulty({"ops": {"silu": 1}, "compute_ops": 1}) == "level1"
    assert difficulty({"ops": {"addmm": 2, "gelu": 1}, "leaf_modules": {"Linear": 2}, "compute_ops": 3}) == "level2"
    assert (
        difficulty(
            {"ops": {"convolution": 3}, "leaf_modules": {"Conv2d": 3}, "custom_submodules": 2, "compute_ops": 10}
        )
        == "level3"
    )
    assert difficulty({"ops": {"mul": 45}, "leaf_modules": {}, "compute_ops": 45}) == "level3"


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
        "    def forward(self, x):\n        return self.fc(x)\n"
    )
    mock_llm.script(
        "Here you go:\n```python\ndef get_inputs():\n    return [torch.randn(3, 6)]\n\n\n"
        "def get_init_inputs():\n    return [{'width': 6}]\n```\n"
    )
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    cfg = CurateConfig(
        model="openai:mock-model",
        llm_base_url=mock_llm.openai_base_url,
        seed=0,
        runner=RunnerConfig(module_timeout_s=5),
    )
    rep = curate(tmp_path / "src", tmp_path / "out", cfg)
    assert rep.count("runnable") == 1 and rep.count("llm_inputs_proposed") == 1
    (row,) = read_index(tmp_path / "out")
    assert row["inputs_source"] == "llm" and row["output_shapes"] == [[3, 4]]
    assert "{'width': 6}" in (tmp_path / "out" / row["task_path"] / "reference.py").read_text()
    assert len(mock_llm.requests) == 1
    assert "class Model" in json.dumps(mock_llm.requests[0].body)


# ---- packages, operability ------------------------------------------------

PKG = Path(__file__).parent / "fixtures_curate_pkg"


def test_package_relative_imports_bases_and_config_classes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # minipkg plays an installed package: importable, and mined from its models/ folder
    monkeypatch.syspath_prepend(str(PKG))
    monkeypatch.setenv("PYTHONPATH", str(PKG))
    src = PKG / "minipkg" / "models"
    # without permission to import the package, its own imports drop the class, with a hint
    rep = curate(src, tmp_path / "no", CurateConfig(runner=RunnerConfig(module_timeout_s=20)))
    assert rep.count("tasks") == 0
    (row,) = [json.loads(l) for l in (tmp_path / "no" / "dropped.jsonl").read_text().splitlines()]
    assert row["reason"] == "cross_file_import" and "--allow-import minipkg" in row["detail"]
    # allowed: relative imports become imports of the installed package, the
    # imported base class makes it a module, the config comes from TinyConfig's fields
    rep = curate(
        src, tmp_path / "yes", CurateConfig(allow_import=["minipkg"], runner=RunnerConfig(module_timeout_s=20))
    )
    assert rep.count("tasks") == 1, (tmp_path / "yes" / "dropped.jsonl").read_text()
    (row,) = read_index(tmp_path / "yes")
    assert row["class_name"] == "TinyMLP" and row["config_class"] == "TinyConfig"
    text = (tmp_path / "yes" / row["task_path"] / "reference.py").read_text()
    assert "from minipkg.activations import gelu_new" in text and "from minipkg.base import Block" in text
    assert "from minipkg.configuration_tiny import TinyConfig" in text
    assert text.index("from __future__ import annotations") < text.index("import torch")
    assert "TinyConfig(hidden_size=256, intermediate_size=1024, num_attention_heads=4)" in text
    assert row["inputs"] == ["torch.randn(8, 1024, 256)"]
    # the @dataclass of the module works only when the file is a real module: it runs standalone
    assert _run_standalone(tmp_path / "yes" / row["task_path"], "get_inputs_small") == "(2, 16, 256)"


def test_transformers_llama_file_curates_into_runnable_tasks(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    src = Path(transformers.__file__).parent / "models" / "llama"
    rep = curate(
        src,
        tmp_path / "out",
        CurateConfig(allow_import=["transformers"], runner=RunnerConfig(module_timeout_s=30, jobs=2)),
    )
    idx = {r["class_name"]: r for r in read_index(tmp_path / "out")}
    # the building blocks are distinct tasks; the rotary embedding ignores its input
    # tensor (only its dtype is used) and is dropped as such
    assert {"LlamaRMSNorm", "LlamaMLP", "LlamaAttention", "LlamaDecoderLayer"} <= set(idx), rep.table()
    assert _dropped(tmp_path / "out")["LlamaRotaryEmbedding"]["reason"] == "ignores_input"
    attn = idx["LlamaAttention"]
    assert attn["config_class"] == "LlamaConfig" and attn["init_args"][0].startswith("LlamaConfig(")
    assert "hidden_size=256" in attn["init_args"][0] and attn["init_args"][1] == "0"
    assert idx["LlamaRMSNorm"]["difficulty"] == "level2" and idx["LlamaDecoderLayer"]["difficulty"] == "level3"
    text = (tmp_path / "out" / attn["task_path"] / "reference.py").read_text()
    assert "from transformers.models.llama.configuration_llama import LlamaConfig" in text
    assert "from ..." not in text
    assert _run_standalone(tmp_path / "out" / idx["LlamaMLP"]["task_path"], "get_inputs_small") == "(2, 16, 256)"


def test_time_limit_then_resume_reuses_verdicts(tmp_path: Path) -> None:
    src = tmp_path / "src" / "r"
    src.mkdir(parents=True)
    for i, op in enumerate(["relu", "sigmoid", "tanh", "exp"]):
        (src / f"m{i}.py").write_text(
            f"import torch\nimport torch.nn as nn\n\n\nclass Op{i}(nn.Module):\n"
            f"    def forward(self, x):\n        return torch.{op}(x) * 2\n"
        )
    cfg = CurateConfig(time_limit_s=0.001, runner=RunnerConfig(jobs=1))
    rep = curate(tmp_path / "src", tmp_path / "out", cfg)
    assert rep.dropped["execution"]["time_limit"] >= 3  # the limit stops new checks, nothing is lost
    logs: list[str] = []
    rep = curate(tmp_path / "src", tmp_path / "out", CurateConfig(runner=RunnerConfig(jobs=1)), log=logs.append)
    assert rep.count("tasks") == 4
    reused = int(next(l for l in logs if "verdicts reused" in l).split("(")[1].split()[0])
    lines = (tmp_path / "out" / "work" / "verdicts.jsonl").read_text().splitlines()
    assert len(lines) == 4 and reused == 4 - int(next(l for l in logs if l.startswith("checking")).split()[1])


def test_symlinked_folders_followed_once_or_refused(tmp_path: Path) -> None:
    real = tmp_path / "real" / "r"
    real.mkdir(parents=True)
    (real / "m.py").write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Sq(nn.Module):\n"
        "    def forward(self, x):\n        return x * x + 1\n"
    )
    src = tmp_path / "src"
    src.mkdir()
    (src / "linked").symlink_to(real, target_is_directory=True)
    (real / "loop").symlink_to(real, target_is_directory=True)  # a cycle
    from kernelsmith.curate.walk import WalkStats, walk

    st = WalkStats()
    assert [f.path for f in walk(src, stats=st)] == ["m.py"]
    assert [s["reason"] for s in st.skipped] == ["symlink_loop"]
    st = WalkStats()
    assert list(walk(src, stats=st, follow_symlinks=False)) == []
    assert st.skipped[0]["reason"] == "symlink" and "--no-follow-symlinks" in st.skipped[0]["detail"]


def test_help_shows_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["curate", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for text in (
        "--timeout",
        "(default: 10.0)",
        "--jobs",
        "(default: 2)",
        "--size",
        "(default: medium)",
        "--allow-import",
        "--time-limit",
        "--max-files",
        "--max-modules",
    ):
        assert text in out
