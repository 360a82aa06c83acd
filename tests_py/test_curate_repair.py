"""Curation: input shapes repaired from the forward's own error message, the
config class chosen by the attributes a class reads, and required attention
masks tried as None (issue 17: the largest honest drop buckets of the
transformers run were shape guesses that did not fit)."""
from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from kernelsmith.curate import CurateConfig, RunnerConfig, curate, read_index
from kernelsmith.curate.inputs import SIZES, repair_inputs


def _error(fn) -> str:  # type: ignore[no-untyped-def]
    try:
        fn()
    except Exception as exc:  # the message torch itself gives
        return f"{type(exc).__name__}: {exc}"
    raise AssertionError("expected the call to fail")


def _build(template: str) -> torch.Tensor:
    return eval(template.format(**SIZES["small"]), {"torch": torch})


@pytest.mark.parametrize("layer,bad", [
    (nn.LayerNorm(96), "torch.randn({B}, 64, {P}, {P})"),        # normalized_shape: (B, S, 96)
    (nn.Linear(48, 8), "torch.randn({N}, 256)"),                  # mat1 and mat2: in_features
    (nn.Conv2d(3, 8, 3), "torch.randn({B}, 64, {P}, {P})"),      # channels
    (nn.Conv1d(1, 8, 3), "torch.randn({B}, {S}, 256)"),           # channels of a 1-d convolution
    (nn.Conv2d(16, 8, 3), "torch.randn({N}, 256)"),               # rank of the convolution's input
])
def test_a_layers_error_message_repairs_the_input_it_rejected(layer: nn.Module, bad: str) -> None:
    # as the worker does: each failed repair's own error may repair it further
    ok, tried, todo = [], [], [bad]
    while todo and len(tried) < 4:
        t = todo.pop(0)
        tried.append(t)
        try:
            layer(_build(t))
            ok.append(t)
            break
        except Exception as exc:
            todo = [f[0] for f in repair_inputs([t], f"{type(exc).__name__}: {exc}")] + todo
    assert ok and ok[0] != bad, tried
    # the batch and the sequence / spatial sides stay size-class dimensions
    assert any(d in ok[0] for d in ("{S}", "{N}", "{L}", "{P}", "{Q}")), ok[0]
    # still templates over the size classes: every class follows the repair
    assert all("{" in t for t in ok)


def test_unparseable_or_unrelated_errors_repair_nothing() -> None:
    assert repair_inputs(["torch.randn({B}, {S}, 256)"], "KeyError: 'model_type'") == []
    assert repair_inputs(["torch.randint(0, 10, ({B}, {S}))"],
                         "RuntimeError: mat1 and mat2 shapes cannot be multiplied (32x64 and 256x8)") == []
    # a residual's width: the later operand changes alone
    fixes = repair_inputs(["torch.randn({B}, {S}, 256)", "torch.randn({B}, {S}, 256)"],
                          "RuntimeError: The size of tensor a (256) must match the size of tensor b (1024) at "
                          "non-singleton dimension 2")
    assert fixes[0] == ["torch.randn({B}, {S}, 256)", "torch.randn({B}, {S}, 1024)"]


# a package shaped like transformers: a composite config whose towers are
# other config classes, blocks that read the tower's fields, a BERT-style
# output block whose first input is the intermediate activation, a layer
# that takes a required attention mask it accepts as None
FILES = {
    "reppkg/__init__.py": "",
    "reppkg/models/__init__.py": "",
    "reppkg/models/duo/__init__.py": "",
    "reppkg/models/duo/configuration_duo.py": '''
        class DuoTextConfig:
            def __init__(self, hidden_size=4096, intermediate_size=16384, num_hidden_layers=24,
                         layer_norm_eps=1e-12, **kwargs):
                self.hidden_size = hidden_size
                self.intermediate_size = intermediate_size
                self.num_hidden_layers = num_hidden_layers
                self.layer_norm_eps = layer_norm_eps


        class DuoConfig:
            def __init__(self, text_config=None, projection_dim=512, **kwargs):
                self.text_config = DuoTextConfig(**(text_config or {}))
                self.projection_dim = projection_dim
        ''',
    "reppkg/models/duo/modeling_duo.py": '''
        import torch
        from torch import nn

        from .configuration_duo import DuoConfig, DuoTextConfig


        class DuoOutput(nn.Module):
            """BERT's output block: the intermediate activation in, the residual at the hidden width."""

            def __init__(self, config: DuoTextConfig):
                super().__init__()
                self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
                self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

            def forward(self, hidden_states, input_tensor):
                return self.norm(self.dense(hidden_states) + input_tensor)


        class DuoStack(nn.Module):
            """Annotated with the composite config, reads the tower's fields."""

            def __init__(self, config: DuoConfig):
                super().__init__()
                self.layers = nn.ModuleList([nn.Linear(config.hidden_size, config.hidden_size)
                                             for _ in range(config.num_hidden_layers)])

            def forward(self, hidden_states):
                for layer in self.layers:
                    hidden_states = torch.tanh(layer(hidden_states))
                return hidden_states


        class DuoMaskedLayer(nn.Module):
            """attention_mask has no default; None is the unmasked kernel."""

            def __init__(self, config: DuoTextConfig):
                super().__init__()
                self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
                self.out = nn.Linear(config.hidden_size, config.hidden_size)

            def forward(self, hidden_states, attention_mask):
                q, k, v = self.qkv(hidden_states).chunk(3, dim=-1)
                scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
                if attention_mask is not None:
                    scores = scores + attention_mask
                return self.out(scores.softmax(-1) @ v)
        ''',
}


def _write_pkg(root: Path) -> Path:
    for rel, text in FILES.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip())
    return root


def test_repaired_inputs_config_by_reads_and_none_masks_curate_into_standalone_tasks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _write_pkg(tmp_path / "site")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("PYTHONPATH", str(root))
    out = tmp_path / "out"
    rep = curate(root / "reppkg" / "models", out,
                 CurateConfig(allow_import=["reppkg"], seed=0, layout="flat",
                              runner=RunnerConfig(module_timeout_s=30, jobs=1)))
    dropped = (out / "dropped.jsonl").read_text()
    idx = {r["class_name"]: r for r in read_index(out)}
    assert {"DuoOutput", "DuoStack", "DuoMaskedLayer"} <= set(idx), (rep.table(), dropped)
    # DuoOutput: no static guess fits (the first input is intermediate-sized);
    # the Linear's own error says 1024 in-features, the residual's says 256
    out_row = idx["DuoOutput"]
    assert out_row["inputs_source"] == "repaired"
    assert out_row["inputs"] == ["torch.randn(8, 1024, 1024)", "torch.randn(8, 1024, 256)"]
    # DuoStack: the tower's config (it has num_hidden_layers), not the annotated composite
    assert out_row["config_class"] == "DuoTextConfig" and idx["DuoStack"]["config_class"] == "DuoTextConfig"
    assert idx["DuoMaskedLayer"]["inputs"][1] == "None"
    # every written task runs standalone, as written, on its small set
    for name in ("DuoOutput", "DuoStack", "DuoMaskedLayer"):
        path = out / idx[name]["task_path"] / "reference.py"
        spec = importlib.util.spec_from_file_location(f"t_{name}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)  # type: ignore[union-attr]
        model = mod.Model(*mod.get_init_inputs()).eval()
        with torch.no_grad():
            y = model(*mod.get_inputs_small())
        assert torch.isfinite(y).all()
    assert rep.count("tasks") == len(idx)


def test_vision_stages_are_one_block_deep_at_the_top_level_and_widths_shrink_only_in_backbones() -> None:
    from kernelsmith.curate.inputs import ConfigSpec

    fields = {"num_channels": 3, "hidden_sizes": [96, 192, 384, 768], "depths": [3, 3, 9, 3], "num_groups": 32}
    top = ConfigSpec("ConvNextConfig", fields).overrides()
    assert top["depths"] == [1, 1, 1, 1] and "hidden_sizes" not in top  # a group norm's groups still divide them
    back = ConfigSpec("backbone_config", fields, backbone=True).overrides()
    assert back["depths"] == [1, 1, 1, 1] and back["hidden_sizes"] == [32, 64, 128, 256]
