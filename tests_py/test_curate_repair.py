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


@pytest.mark.parametrize(
    "layer,bad",
    [
        (nn.LayerNorm(96), "torch.randn({B}, 64, {P}, {P})"),  # normalized_shape: (B, S, 96)
        (nn.Linear(48, 8), "torch.randn({N}, 256)"),  # mat1 and mat2: in_features
        (nn.Conv2d(3, 8, 3), "torch.randn({B}, 64, {P}, {P})"),  # channels
        (nn.Conv1d(1, 8, 3), "torch.randn({B}, {S}, 256)"),  # channels of a 1-d convolution
        (nn.Conv2d(16, 8, 3), "torch.randn({N}, 256)"),  # rank of the convolution's input
    ],
)
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
    assert (
        repair_inputs(
            ["torch.randint(0, 10, ({B}, {S}))"],
            "RuntimeError: mat1 and mat2 shapes cannot be multiplied (32x64 and 256x8)",
        )
        == []
    )
    # a residual's width: the later operand changes alone
    fixes = repair_inputs(
        ["torch.randn({B}, {S}, 256)", "torch.randn({B}, {S}, 256)"],
        "RuntimeError: The size of tensor a (256) must match the size of tensor b (1024) at non-singleton dimension 2",
    )
    assert fixes[0] == ["torch.randn({B}, {S}, 256)", "torch.randn({B}, {S}, 1024)"]


# a package shaped like transformers: a composite config whose towers are
# other config classes, blocks that read the tower's fields, a BERT-style
# output block whose first input is the intermediate activation, a layer
# that takes a required attention mask it accepts as None
FILES = {
    "reppkg/__init__.py": "",
    "reppkg/models/__init__.py": "",
    "reppkg/models/duo/__init__.py": "",
    "reppkg/models/duo/configuration_duo.py": """
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
        """,
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
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _write_pkg(tmp_path / "site")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("PYTHONPATH", str(root))
    out = tmp_path / "out"
    rep = curate(
        root / "reppkg" / "models",
        out,
        CurateConfig(allow_import=["reppkg"], seed=0, layout="flat", runner=RunnerConfig(module_timeout_s=30, jobs=1)),
    )
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


def test_sub_configs_named_without_the_config_suffix_are_sized_too() -> None:
    # T5Gemma's composite config has sub-config fields "encoder" / "decoder"
    # (listed in sub_configs_defaults): left at their full-size defaults, its
    # models took over 59 s to construct (every one a timeout)
    from kernelsmith.curate.inputs import ConfigSpec

    sub = {"fields": {"hidden_size": 2304, "num_hidden_layers": 26, "vocab_size": 256000}, "init_kwargs": {}}
    spec = ConfigSpec(
        "T5GemmaConfig",
        {"encoder": None, "decoder": None, "vocab_size": 256000, "other": None},
        subs={"encoder": sub, "decoder": sub},
    )
    over = spec.overrides()
    for name in ("encoder", "decoder"):
        assert over[name]["hidden_size"] == 256 and over[name]["num_hidden_layers"] == 2, over
        assert over[name]["vocab_size"] == 1024
    assert "other" not in over  # a None field that is no sub-config stays the class's default


def test_patch_and_grid_sizes_are_small_numbers_not_feature_widths() -> None:
    # as a "size" a patch size was 256 (a 256x256 convolution kernel: 7 s to
    # build) and a feature grid's resolution 256 (65536 points, pairwise)
    from kernelsmith.curate.inputs import _value_for

    assert _value_for("patch_size", None, True) == 4
    assert _value_for("resolution", None, True) == 16
    assert _value_for("hidden_size", None, True) == 256  # widths unchanged


@pytest.mark.parametrize(
    "args,error,want",
    [
        # an attention class looked up by config._attn_implementation, which only
        # a model's constructor resolves (Bark, Data2VecVision blocks)
        (
            ["BarkFineConfig(hidden_size=256)", "0"],
            "KeyError: None",
            ["BarkFineConfig(attn_implementation='eager', hidden_size=256)", "0"],
        ),
        # a backbone's out_indices past the stages its narrowed depth has
        (
            [
                "CHMv2Config(backbone_config={'model_type': 'dinov3_vit', 'num_hidden_layers': 2, 'out_indices': [6, 12, 18, 24]})"
            ],
            "ValueError: out_indices must be valid indices for stage_names ['stem', 'stage1', 'stage2'], got [6, 12, 18, 24]",
            [
                "CHMv2Config(backbone_config={'model_type': 'dinov3_vit', 'num_hidden_layers': 4, 'out_indices': [1, 2, 3, 4]})"
            ],
        ),
        # transformers' strict config validation naming the value it expected,
        # for a field given, one left at its default beside the field it must
        # equal, and one of a sub-config the message names
        (
            ["AConfig(audio_config={'model_type': 'wav', 'hidden_size': 256}, text_config={'hidden_size': 128})"],
            "StrictDataclassClassValidationError: Class validation error for validator 'validate_architecture':\n"
            "    ValueError: WavTokenizer uses no projections, so `codebook_dim` (512) must equal `hidden_size` (256).",
            [
                "AConfig(audio_config={'model_type': 'wav', 'hidden_size': 256, 'codebook_dim': 256}, "
                "text_config={'hidden_size': 128})"
            ],
        ),
        (
            ["BConfig(vision_config={'hidden_size': 256}, text_config={'hidden_size': 256})"],
            "ValueError: `vision_config.text_hidden_size` (3584) must match `text_config.hidden_size` (256).",
            ["BConfig(vision_config={'hidden_size': 256, 'text_hidden_size': 256}, text_config={'hidden_size': 256})"],
        ),
        (
            ["CConfig(head_dim=64, hidden_size=256)"],
            "ValueError: `rope_parameters.mrope_section` must contain three sections whose sum equals half of `head_dim`, "
            "got [24, 20, 20] for head_dim=64.",
            ["CConfig(head_dim=128, hidden_size=256)"],
        ),
        (
            ["DConfig(num_hidden_layers=2)"],
            "ValueError: `num_hidden_layers` (2) must be equal to the number of `layer_types` (6)",
            ["DConfig(num_hidden_layers=6)"],
        ),
        (
            ["DConfig(num_hidden_layers=2)"],
            "ValueError: `num_hidden_layers` (2) must be equal to the number of `layer_types` (48)",
            None,
        ),  # not 48 layers: too slow to be a task
        # a hybrid model narrowed to two linear-attention layers: no cache to measure
        (
            ["BambaConfig(hidden_size=256)"],
            "ValueError: `get_seq_length` can only be called on Attention layers, and "
            "the current Cache seem to only contain LinearAttention layers.",
            ["BambaConfig(hidden_size=256, use_cache=False)"],
        ),
        (["torch.randn(4)"], "KeyError: None", None),  # no config call: nothing to repair
        (["EConfig(hidden_size=256)"], "KeyError: 'full_attention'", None),
    ],
)
def test_init_errors_that_name_the_expected_config_value_repair_the_constructor_arguments(
    args: list[str], error: str, want: object
) -> None:
    from kernelsmith.curate.inputs import repair_init

    assert repair_init(args, error) == want


def test_init_repairs_and_expert_banks_curate_into_standalone_tasks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a block whose config must be repaired from its own validation error
    # (the worker rebuilds it from the repaired arguments and writes those),
    # and an expert bank called with the router's indices and weights
    files = {
        "moepkg/__init__.py": "",
        "moepkg/models/__init__.py": "",
        "moepkg/models/moe/__init__.py": "",
        "moepkg/models/moe/configuration_moe.py": """
            class MoeConfig:
                def __init__(self, hidden_size=4096, intermediate_size=16384, num_local_experts=8,
                             num_experts_per_tok=2, proj_size=None, **kwargs):
                    self.hidden_size = hidden_size
                    self.intermediate_size = intermediate_size
                    self.num_local_experts = num_local_experts
                    self.num_experts_per_tok = num_experts_per_tok
                    self.proj_size = proj_size if proj_size is not None else 64
                    if self.proj_size != self.hidden_size:
                        raise ValueError(f"`proj_size` ({self.proj_size}) must equal `hidden_size` "
                                         f"({self.hidden_size}).")
            """,
        "moepkg/models/moe/modeling_moe.py": """
            import torch
            from torch import nn

            from .configuration_moe import MoeConfig


            class MoeProjection(nn.Module):
                def __init__(self, config: MoeConfig):
                    super().__init__()
                    self.proj = nn.Linear(config.hidden_size, config.proj_size)

                def forward(self, hidden_states):
                    return torch.tanh(self.proj(hidden_states))


            class MoeExperts(nn.Module):
                def __init__(self, config: MoeConfig):
                    super().__init__()
                    self.num_experts = config.num_local_experts
                    self.gate_up_proj = nn.Parameter(torch.empty(self.num_experts, 2 * config.intermediate_size,
                                                                 config.hidden_size))
                    self.down_proj = nn.Parameter(torch.empty(self.num_experts, config.hidden_size,
                                                              config.intermediate_size))

                def forward(self, hidden_states, top_k_index, top_k_weights):
                    out = torch.zeros_like(hidden_states)
                    mask = torch.nn.functional.one_hot(top_k_index, num_classes=self.num_experts).permute(2, 1, 0)
                    for e in range(self.num_experts):
                        pos, tok = torch.where(mask[e])
                        gate, up = nn.functional.linear(hidden_states[tok], self.gate_up_proj[e]).chunk(2, dim=-1)
                        h = nn.functional.linear(nn.functional.silu(gate) * up, self.down_proj[e])
                        out.index_add_(0, tok, h * top_k_weights[tok, pos, None])
                    return out
            """,
    }
    root = tmp_path / "site"
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip())
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("PYTHONPATH", str(root))
    out = tmp_path / "out"
    rep = curate(
        root / "moepkg" / "models",
        out,
        CurateConfig(allow_import=["moepkg"], seed=0, layout="flat", runner=RunnerConfig(module_timeout_s=30, jobs=1)),
    )
    idx = {r["class_name"]: r for r in read_index(out)}
    assert {"MoeProjection", "MoeExperts"} <= set(idx), (rep.table(), (out / "dropped.jsonl").read_text())
    proj = idx["MoeProjection"]
    assert proj["inputs_source"] == "repaired" and "proj_size=256" in proj["init_args"][0], proj["init_args"]
    experts = idx["MoeExperts"]
    assert experts["inputs"][1] == "torch.randint(0, 4, (8192, 2))", experts["inputs"]
    assert experts["initialised"] == ["gate_up_proj", "down_proj"]
    for name in ("MoeProjection", "MoeExperts"):
        path = out / idx[name]["task_path"] / "reference.py"
        spec = importlib.util.spec_from_file_location(f"t_{name}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)  # type: ignore[union-attr]
        torch.manual_seed(0)
        model = mod.Model(*mod.get_init_inputs()).eval()
        with torch.no_grad():
            y = model(*mod.get_inputs_small())
        assert torch.isfinite(y).all() and float(y.abs().max()) > 1e-3


def test_a_cos_sin_pair_where_the_module_adds_a_tensor_becomes_a_tensor() -> None:
    # DETR-style attention adds position_embeddings to the hidden states;
    # the name had made them the rotary (cos, sin) pair
    def attn(hidden_states, attention_mask, position_embeddings):  # type: ignore[no-untyped-def]
        return torch.tanh(hidden_states + position_embeddings)

    ins = ["torch.randn({B}, {S}, 256)", "None", "(torch.randn({B}, {S}, 64), torch.randn({B}, {S}, 64))"]
    build = lambda t: None if t == "None" else eval(t.format(**SIZES["small"]), {"torch": torch})  # noqa: E731
    err = _error(lambda: attn(*[build(t) for t in ins]))
    fixed = repair_inputs(ins, err)
    assert fixed == [["torch.randn({B}, {S}, 256)", "None", "torch.randn({B}, {S}, 256)"]]
    assert attn(*[build(t) for t in fixed[0]]).shape == (2, 16, 256)
    # a tuple operand with no tuple input to blame: nothing
    assert repair_inputs(["torch.randn({B}, {S}, 256)"], err) == []


def test_a_multiple_choice_head_gets_batch_choices_sequence_ids() -> None:
    # BertForMultipleChoice & co. read num_choices from input_ids.shape[1]:
    # (B, S) ids made every such model a forward_error (view(-1, num_choices))
    from kernelsmith.curate.inputs import guess_inputs

    src = textwrap.dedent("""
        import torch
        from torch import nn


        class Model(nn.Module):
            def __init__(self, vocab_size=1024):
                super().__init__()
                self.emb = nn.Embedding(vocab_size, 32)
                self.score = nn.Linear(32, 1)

            def forward(self, input_ids=None, labels=None):
                num_choices = input_ids.shape[1]
                flat = input_ids.view(-1, input_ids.size(-1))
                logits = self.score(self.emb(flat).mean(1))
                return logits.view(-1, num_choices)
        """)
    v = guess_inputs(src)[0]
    assert v.inputs[0].endswith("({B}, 4, {S}))"), v.inputs
    plain = src.replace("num_choices = input_ids.shape[1]", "k = 4").replace("num_choices)", "k)")
    assert guess_inputs(plain)[0].inputs[0].endswith("({B}, {S}))")


def test_perceiver_latents_and_their_self_attention_depth_are_sized() -> None:
    # Perceiver's defaults (d_latents 1280, 26 self-attention layers per block)
    # made its probe forward take 10 s: four timeouts
    from kernelsmith.curate.inputs import ConfigSpec

    over = ConfigSpec(
        "PerceiverConfig", {"num_latents": 256, "d_latents": 1280, "d_model": 768, "num_self_attends_per_block": 26}
    ).overrides()
    assert over == {"d_latents": 256, "d_model": 256, "num_self_attends_per_block": 2}
