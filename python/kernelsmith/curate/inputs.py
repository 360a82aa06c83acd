"""Heuristic ``get_inputs`` / ``get_init_inputs`` for an extracted module.

Constructor arguments without defaults get values from their annotation and
name (``in_channels`` -> 8, ``dim`` -> 16, ``num_heads`` -> 2, ``dropout`` ->
0.0, ...). Forward arguments without defaults become tensors whose shape comes
from the first layer they are fed to (``self.conv(x)`` with
``self.conv = nn.Conv2d(in_channels, ...)`` -> ``(2, in_channels, 16, 16)``;
``nn.Linear(in_features, ...)`` -> last dimension ``in_features``;
``nn.Embedding(n, d)`` -> integer indices below ``n``) and from how they are
used (``b, c, h, w = x.shape`` -> 4 dimensions, ``x.shape[2]``,
``x.permute(0, 2, 1)``). The result is a short ordered list of variants; the
execution filter keeps the first that runs.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any, Optional
from .._astutil import parse as parse_source

# Size classes: the dimensions forward inputs are built from. ``N`` is the
# token count of rank-2 inputs (B * S); ``P``/``Q`` 2-D/3-D spatial sides;
# ``L`` a 1-D length. "medium" (the default get_inputs) moves 8-32 MB per
# input at the default widths: where a GPU kernel's time is memory or compute,
# not launch overhead. "small" is what the execution filter runs on the CPU.
SIZES: dict[str, dict[str, int]] = {
    "small": {"B": 2, "S": 16, "N": 32, "P": 16, "Q": 8, "L": 64},
    "medium": {"B": 8, "S": 1024, "N": 8192, "P": 64, "Q": 16, "L": 4096},
    "large": {"B": 16, "S": 4096, "N": 65536, "P": 128, "Q": 32, "L": 16384},
}
SIZE_CLASSES = tuple(SIZES)
DEFAULT_FEATURES = 256
CHANNELS = 64

# config fields a kernel engineer would size (regex on the field name, value);
# every other field keeps the config class's own default
CONFIG_SIZES: list[tuple[str, Any]] = [
    (
        r"^(hidden_size|d_model|n_embd|embed_dim|hidden_dim|model_dim|emb_dim|d_embed|embedding_size|"
        r"word_embed_proj_dim|projection_dim|text_embed_dim|vision_embed_dim|d_latents)$",
        256,
    ),
    (
        r"^(intermediate_size|d_ff|ffn_dim|encoder_ffn_dim|decoder_ffn_dim|n_inner|ff_dim|mlp_dim|inner_dim|"
        r"feed_forward_size|intermediate_dim|ffn_hidden_size|moe_intermediate_size|shared_expert_intermediate_size)$",
        1024,
    ),
    (
        r"^(num_attention_heads|n_head|n_heads|num_heads|encoder_attention_heads|decoder_attention_heads|"
        r"attention_heads|num_key_value_heads|n_kv_heads|num_kv_heads|n_kv_head)$",
        4,
    ),
    (
        r"^(num_hidden_layers|n_layer|n_layers|num_layers|encoder_layers|decoder_layers|num_encoder_layers|"
        r"num_decoder_layers|num_self_attends_per_block)$",
        2,
    ),
    (r"^(vocab_size|n_vocab)$", 1024),
    (r"^(max_position_embeddings|n_positions|n_ctx|max_seq_len|max_sequence_length|max_seq_length)$", 4096),
    (r"^head_dim$", 64),
    (r"^(num_experts|n_routed_experts|num_local_experts)$", 4),
    (r"^(num_experts_per_tok|top_k|moe_topk)$", 2),
]

# per-stage block counts of a vision config: one block per stage at the top
# level too (the stage widths stay: a group norm's groups must divide them)
STAGE_FIELDS = ("depths",)

SUB_CONFIG_SIZES = {
    "hidden_size": 256,
    "intermediate_size": 1024,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "head_dim": 64,
}

# (regex on the lower-cased argument name, value); first match wins
NAME_RULES: list[tuple[str, Any]] = [
    (r"(^|_)(p|prob|dropout|drop|drop_rate|dropout_rate|attn_drop|proj_drop|drop_path|drop_path_rate|pdrop)$", 0.0),
    (r"drop", 0.0),
    (r"eps|epsilon", 1e-5),
    (r"momentum", 0.1),
    (r"(^|_)(idx|index|id)$", 0),
    # adaptive pools: an output as large as the input would copy it
    (r"output_size|out_size|output_ratio", 4),
    (r"normalized_shape|^shape$", DEFAULT_FEATURES),
    (r"head", 4),
    (r"group", 1),
    (r"kernel|^k$|ksize", 3),
    # a patch embedding's kernel, a feature grid's side: small numbers (as
    # "size" they were 256: a 256x256 convolution kernel, a 65536-point grid
    # whose pairwise offsets took the whole module budget to build)
    (r"patch", 4),
    (r"resolution", 16),
    (r"stride", 1),
    (r"pad", 1),
    (r"dilation", 1),
    (r"scale_factor|upscale|factor", 2),
    (r"reduction|squeeze|ratio|expansion|expand", 2),
    (r"scale|alpha|beta|gamma|temperature|^tau$|weight|margin|slope", 0.5),
    (r"bias|affine|residual|^use_|bidirectional|batch_first|inplace", True),
    (r"class", 10),
    (r"vocab|num_embeddings|n_tokens|ntoken|n_vocab", 1024),
    (r"seq|len|length|block_size|context|window|n_positions|max_pos", 1024),
    (r"layer|depth|num_blocks|n_block|blocks|n_layer", 2),
    (r"channel|_ch$|^ch$|^c_?in$|^c_?out$|^c$|planes|filters|^in_c|^out_c|^nc$|^ngf$|^ndf$", CHANNELS),
    (
        r"dim|feature|hidden|embed|size|d_model|width|units|^n?f$|^ni$|^no$|^nh$|^d_|^d$|^n_?in$|^n_?out$|^in_|^out_",
        DEFAULT_FEATURES,
    ),
    (r"^num_|^n_|^n$|count", 2),
]

LAYERS_RANK = {
    "Conv1d": 3,
    "Conv2d": 4,
    "Conv3d": 5,
    "ConvTranspose1d": 3,
    "ConvTranspose2d": 4,
    "ConvTranspose3d": 5,
    "BatchNorm1d": 3,
    "BatchNorm2d": 4,
    "BatchNorm3d": 5,
    "InstanceNorm1d": 3,
    "InstanceNorm2d": 4,
    "InstanceNorm3d": 5,
    "GroupNorm": 4,
    "LazyConv2d": 4,
    "MaxPool1d": 3,
    "MaxPool2d": 4,
    "MaxPool3d": 5,
    "AvgPool1d": 3,
    "AvgPool2d": 4,
    "AvgPool3d": 5,
    "AdaptiveAvgPool1d": 3,
    "AdaptiveAvgPool2d": 4,
    "AdaptiveAvgPool3d": 5,
    "AdaptiveMaxPool2d": 4,
    "Upsample": 4,
    "PixelShuffle": 4,
    "Dropout2d": 4,
    "LayerNorm": 3,
    "MultiheadAttention": 3,
    "LSTM": 3,
    "GRU": 3,
    "RNN": 3,
    "Linear": 2,
    "TransformerEncoderLayer": 3,
    "TransformerDecoderLayer": 3,
    "Conv2dNormActivation": 4,
}
# layers whose first constructor argument is the input's channel dimension (1)
CHANNEL_FIRST = {
    "Conv1d",
    "Conv2d",
    "Conv3d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "ConvTranspose3d",
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "InstanceNorm1d",
    "InstanceNorm2d",
    "InstanceNorm3d",
}
# layers whose first argument is the last dimension
LAST_DIM = {
    "Linear",
    "LayerNorm",
    "MultiheadAttention",
    "LSTM",
    "GRU",
    "RNN",
    "TransformerEncoderLayer",
    "TransformerDecoderLayer",
    "RMSNorm",
}
# (loss targets stay floating point: most torch losses take targets shaped and typed like the input)
INT_INPUT_NAMES = re.compile(r"^(input_ids|ids|tokens?|token_ids|indices|idx|index|labels?|words?|src_tokens)$")
PRIMARY_INPUTS = ("input_ids", "pixel_values", "input_values", "input_features", "hidden_states", "x")
_ND = re.compile(
    r"(?:^|_)(?:conv|conv_transpose|max_pool|avg_pool|lp_pool|adaptive_avg_pool|adaptive_max_pool|"
    r"batch_norm|instance_norm|max_unpool|fractional_max_pool|dropout|pad|interpolate)?([123])d$"
)
KNOWN_BASE_INIT = {
    "Linear": ["256", "256"],
    "Conv1d": ["64", "64", "3"],
    "Conv2d": ["64", "64", "3"],
    "Conv3d": ["64", "64", "3"],
    "LayerNorm": ["256"],
    "Embedding": ["1024", "256"],
    "BatchNorm1d": ["64"],
    "BatchNorm2d": ["64"],
    "GroupNorm": ["8", "64"],
}


@dataclass
class InputVariant:
    """Constructor arguments (source expressions) and forward inputs as
    templates over the size-class dimensions (``torch.randn({N}, 256)``);
    ``pins`` fixes dimensions the module itself fixes (a learned positional
    table of 1024 rows pins ``S``)."""

    init_args: list[str]
    inputs: list[str]
    note: str = "heuristic"
    pins: dict[str, int] = field(default_factory=dict)
    # code between the program and get_inputs(): the initialisation of
    # parameters the constructor leaves as ``torch.empty`` (``init_prelude``)
    prelude: str = ""

    def inputs_for(self, size: str) -> list[str]:
        dims = {**SIZES[size], **self.pins}
        return [t.format(**dims) for t in self.inputs]

    def render(self, size: str = "medium") -> str:
        """get_inputs() (the ``size`` class), get_inputs_<other class>() for the
        others, get_init_inputs()."""
        init = ", ".join(self.init_args)
        out = [self.prelude.rstrip() + "\n"] if self.prelude else []
        out += [f"def get_inputs():\n    # size class {size!r}\n    return [{', '.join(self.inputs_for(size))}]\n"]
        for other in SIZE_CLASSES:
            if other != size:
                out.append(f"def get_inputs_{other}():\n    return [{', '.join(self.inputs_for(other))}]\n")
        out.append(f"def get_init_inputs():\n    return [{init}]\n")
        return "\n\n".join(out)

    def extra_input_functions(self, size: str = "medium") -> list[str]:
        return [f"get_inputs_{o}" for o in SIZE_CLASSES if o != size]

    def to_dict(self) -> dict[str, Any]:
        d = {"init_args": list(self.init_args), "inputs": list(self.inputs), "note": self.note, "pins": dict(self.pins)}
        if self.prelude:
            d["prelude"] = self.prelude
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "InputVariant":
        return cls(
            init_args=list(d["init_args"]),
            inputs=list(d["inputs"]),
            note=str(d.get("note", "heuristic")),
            pins=dict(d.get("pins") or {}),
            prelude=str(d.get("prelude") or ""),
        )


@dataclass
class ConfigSpec:
    """The constructor's config argument: the class (its name in the program)
    and its fields with their defaults (from the package's own source)."""

    class_name: str
    fields: dict[str, Any]
    # a composite config's sub-configs (``kernelsmith.curate.resolve.PackageIndex.sub_configs``)
    subs: dict[str, dict[str, Any]] = field(default_factory=dict)
    backbone: bool = False  # a vision backbone inside a composite model: its stage widths shrink too

    def overrides(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, default in self.fields.items():
            if (
                (name.endswith("_config") or name in self.subs)
                and default is None
                and name not in ("quantization_config",)
            ):
                # (T5Gemma's sub-configs are fields "encoder" / "decoder")
                # a composite model's towers: built from these instead of their full-size defaults
                out[name] = self._sub_config(name)
                continue
            # a vision model's stages are one block deep, as a backbone's (also
            # at the top level: ConvNext's 3-3-9-3 blocks at full width made
            # its probe forward outlast the module timeout); only a backbone's
            # widths shrink
            if (
                (self.backbone or name in STAGE_FIELDS)
                and isinstance(default, (list, tuple))
                and default
                and all(isinstance(x, int) and not isinstance(x, bool) for x in default)
            ):
                if name == "depths":  # one block per stage
                    out[name] = [1] * len(default)
                elif self.backbone and name in ("hidden_sizes", "embed_dims", "widths") and max(default) > 256:
                    f = 256 / max(default)
                    out[name] = [max(8, int(round(x * f / 8)) * 8) for x in default]
                continue
            if isinstance(default, bool) or not (default is None or isinstance(default, int)):
                continue
            for pattern, value in CONFIG_SIZES:
                if re.match(pattern, name):
                    out[name] = value
                    break
        # special token ids follow the vocabulary down: an id past the shrunk
        # vocabulary is an out-of-range padding_idx (or lookup); a classifier
        # of a batch needs a padding token
        vocab = out.get("vocab_size", self.fields.get("vocab_size"))
        if isinstance(vocab, int) and not isinstance(vocab, bool) and vocab > 8:
            k = 0
            for name in sorted(self.fields):
                if not _TOKEN_ID.match(name):
                    continue
                default = self.fields[name]
                ids = (
                    [default]
                    if isinstance(default, int) and not isinstance(default, bool)
                    else list(default)
                    if isinstance(default, (list, tuple))
                    else None
                )
                if ids is None:
                    if default is None and name == "pad_token_id":
                        out[name] = 0
                    continue
                if all(0 <= i < vocab for i in ids):
                    continue
                fixed = []
                for i in ids:
                    if 0 <= i < vocab:
                        fixed.append(i)
                    else:
                        k += 1
                        fixed.append(vocab - k)
                out[name] = fixed[0] if isinstance(default, int) else fixed
        return out

    def _sub_config(self, name: str) -> dict[str, Any]:
        sub = self.subs.get(name)
        if not sub or not sub.get("fields"):
            out = dict(SUB_CONFIG_SIZES)
            if sub and sub.get("auto") and sub.get("model_type"):
                out = {"model_type": sub["model_type"], **out}
            return out
        # the sub-config class's own fields, sized like a top-level config; the
        # spec's init_kwargs are its defaults (a dict given replaces them)
        fields = {**sub["fields"], **sub.get("init_kwargs", {})}
        spec = ConfigSpec(name, fields, backbone=name == "backbone_config")
        out = {
            k: v
            for k, v in sub.get("init_kwargs", {}).items()
            if name == "backbone_config" or not isinstance(v, int) or isinstance(v, bool)
        }
        out.update(spec.overrides())
        if sub.get("auto") or name == "backbone_config":
            out = {"model_type": sub.get("model_type"), **out}
        return out

    def values(self) -> dict[str, Any]:
        return {**self.fields, **self.overrides()}

    def expr(self) -> str:
        kw = ", ".join(f"{k}={v!r}" for k, v in sorted(self.overrides().items()))
        return f"{self.class_name}({kw})"


_TOKEN_ID = re.compile(r"^(pad|bos|eos|sep|cls|unk|mask|decoder_start|padding)_(token_)?(id|idx|index)$")


class GuessError(ValueError):
    pass


def _value_for(name: str, annotation: Optional[ast.AST], used_numeric: bool) -> Any:
    ann = ast.unparse(annotation) if annotation is not None else ""
    low = name.lower()
    if ann in ("bool",):
        return True
    if ann in ("str",) or ann.startswith(("Callable", "nn.Module", "Type[")):
        raise GuessError(f"cannot guess constructor argument {name!r} ({ann})")
    for pattern, value in NAME_RULES:
        if re.search(pattern, low):
            if ann == "float" and not isinstance(value, float):
                return float(value)
            if ann == "int" and isinstance(value, float):
                return max(1, int(value))
            return value
    if ann == "int":
        return DEFAULT_FEATURES
    if ann == "float":
        return 0.5
    if used_numeric:
        return DEFAULT_FEATURES
    raise GuessError(f"cannot guess constructor argument {name!r}")


class _Eval:
    """Static evaluation of constructor-time expressions over known values."""

    def __init__(self, env: dict[str, Any]) -> None:
        self.env = env

    def __call__(self, node: ast.AST) -> Any:
        try:
            return self._ev(node)
        except Exception:  # anything unknown is simply unknown
            return None

    def _ev(self, n: ast.AST) -> Any:
        if isinstance(n, ast.Constant):
            return n.value
        if isinstance(n, ast.Name):
            return self.env[n.id]
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name):
            return self.env[f"{n.value.id}.{n.attr}"]
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name)
            and n.func.id == "getattr"
            and len(n.args) >= 2
            and isinstance(n.args[0], ast.Name)
            and isinstance(n.args[1], ast.Constant)
        ):
            key = f"{n.args[0].id}.{n.args[1].value}"
            if self.env.get(key) is not None:
                return self.env[key]
            return self._ev(n.args[2]) if len(n.args) > 2 else self.env[key]
        if isinstance(n, (ast.Tuple, ast.List)):
            return tuple(self._ev(e) for e in n.elts)
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -self._ev(n.operand)
        if isinstance(n, ast.BinOp):
            a, b = self._ev(n.left), self._ev(n.right)
            ops = {
                ast.Add: lambda: a + b,
                ast.Sub: lambda: a - b,
                ast.Mult: lambda: a * b,
                ast.FloorDiv: lambda: a // b,
                ast.Div: lambda: a / b,
                ast.Mod: lambda: a % b,
                ast.Pow: lambda: a**b,
            }
            return ops[type(n.op)]()
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("int", "max", "min", "round"):
            fn = {"int": int, "max": max, "min": min, "round": round}[n.func.id]
            return fn(*[self._ev(a) for a in n.args])
        if isinstance(n, ast.IfExp):
            return self._ev(n.body) if self._ev(n.test) else self._ev(n.orelse)
        raise KeyError(ast.dump(n))


def _find_method(
    classes: dict[str, ast.ClassDef], cls: ast.ClassDef, name: str, seen: Optional[set[str]] = None
) -> tuple[Optional[ast.FunctionDef], Optional[str]]:
    """(method, None) if defined in the file's hierarchy, else (None, torch base name or None)."""
    seen = seen or set()
    seen.add(cls.name)
    for s in cls.body:
        if isinstance(s, ast.FunctionDef) and s.name == name:
            return s, None
    torch_base = None
    for b in cls.bases:
        d = ast.unparse(b)
        if d in classes and d not in seen:
            m, tb = _find_method(classes, classes[d], name, seen)
            if m is not None:
                return m, None
            torch_base = torch_base or tb
        elif "." in d or d[:1].isupper():
            torch_base = torch_base or d.rpartition(".")[2]
    return None, torch_base


def _layer_of(call: ast.AST) -> Optional[tuple[str, ast.Call]]:
    if not isinstance(call, ast.Call):
        return None
    name = ast.unparse(call.func).rpartition(".")[2]
    if name == "Sequential" and call.args:
        return _layer_of(call.args[0])
    if name in LAYERS_RANK or name in LAST_DIM or name == "Embedding":
        return name, call
    return None


def _usage_rank(forward: ast.FunctionDef, param: str) -> int:
    """Smallest rank consistent with how ``param`` is indexed in forward (0: no hint)."""
    rank = 0
    for n in ast.walk(forward):
        if isinstance(n, ast.Assign) and isinstance(n.targets[0], (ast.Tuple, ast.List)):
            v = n.value
            src = ast.unparse(v)
            if src in (f"{param}.shape", f"{param}.size()", f"{param}.shape[:]"):
                rank = max(rank, len(n.targets[0].elts))
        elif (
            isinstance(n, ast.Subscript)
            and ast.unparse(n.value) == f"{param}.shape"
            and isinstance(n.slice, (ast.Constant, ast.UnaryOp))
        ):
            try:
                i = ast.literal_eval(n.slice)
                rank = max(rank, i + 1 if i >= 0 else -i)
            except (ValueError, TypeError):
                pass
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and ast.unparse(n.func.value) == param:
            consts = [a.value for a in n.args if isinstance(a, ast.Constant) and isinstance(a.value, int)]
            if n.func.attr == "permute" and n.args:
                rank = max(rank, len(n.args))
            elif (
                n.func.attr in ("size", "transpose", "flatten", "unsqueeze", "squeeze", "mean", "sum", "softmax")
                and consts
            ):
                rank = max(rank, max(c + 1 if c >= 0 else -c for c in consts))
    return rank


Dim = Any  # an int, or a size-class dimension "{B}", "{S}", "{N}", "{P}", "{Q}", "{L}"


def _shape(rank: int, first: Optional[int], last: Optional[int], features: int) -> list[Dim]:
    if rank <= 1:
        return [last or first or features]
    if rank == 2:
        return ["{N}", last or first or features]
    if rank == 3 and last is not None:
        return ["{B}", "{S}", last]
    if rank == 3:
        return ["{B}", first or features, "{L}"]
    side = "{P}" if rank == 4 else "{Q}"
    shape: list[Dim] = ["{B}", first or CHANNELS] + [side] * (rank - 2)
    if last is not None:
        shape[-1] = last
    return shape


def _randn(shape: list[Dim]) -> str:
    return f"torch.randn({', '.join(str(s) for s in shape)})"


def _optional(ann: str) -> bool:
    return "None" in ann or ann.startswith("Optional")


def guess_inputs(
    source: str,
    max_variants: int = 6,
    config: Optional[ConfigSpec] = None,
    ext_init: Optional[ast.FunctionDef] = None,
    ext_forward: Optional[ast.FunctionDef] = None,
    classes: Optional[dict[str, ast.ClassDef]] = None,
) -> list[InputVariant]:
    """Ordered input variants for class ``Model`` of ``source``; raises GuessError.

    ``config``: the constructor's config class (its argument is built from the
    class's defaults with sized fields); ``ext_init`` / ``ext_forward``: the
    constructor / forward inherited from a class of another file."""
    if classes is None:  # from source; extraction passes the classes of the file it parsed
        tree = parse_source(source)
        classes = {s.name: s for s in tree.body if isinstance(s, ast.ClassDef)}
    if "Model" not in classes:
        raise GuessError("no class Model")
    model = classes["Model"]
    init, torch_base = _find_method(classes, model, "__init__")
    init = init or ext_init
    env: dict[str, Any] = {}
    init_args: list[str] = []
    pins: dict[str, int] = {}
    features = DEFAULT_FEATURES
    layers: dict[str, tuple[str, ast.Call]] = {}
    cfg_values = config.values() if config is not None else {}
    if init is None:
        if torch_base in KNOWN_BASE_INIT:
            init_args = list(KNOWN_BASE_INIT[torch_base])
    else:
        a = init.args
        if a.kwonlyargs and any(d is None for d in a.kw_defaults):
            raise GuessError("required keyword-only constructor arguments")
        params = (a.posonlyargs + a.args)[1:]
        defaults = [None] * (len(params) - len(a.defaults)) + list(a.defaults)
        numeric = _numeric_uses(init)
        for p, d in zip(params, defaults):
            if d is None:
                ann = ast.unparse(p.annotation) if p.annotation is not None else ""
                is_config = (
                    p.arg.lower() in ("config", "cfg", "configuration")
                    or p.arg.lower().endswith("_config")
                    or ann.split("|")[0].strip().strip("\"'").endswith("Config")
                )
                if is_config:
                    if config is None:
                        raise GuessError(f"cannot build constructor argument {p.arg!r}: no config class found")
                    init_args.append(config.expr())
                    for k, v in cfg_values.items():
                        env[f"{p.arg}.{k}"] = v
                    continue
                v = _value_for(p.arg, p.annotation, p.arg in numeric)
                init_args.append(repr(v))
                env[p.arg] = v
            else:
                try:
                    env[p.arg] = ast.literal_eval(d)
                except (ValueError, SyntaxError, TypeError):
                    pass
        feature_like = [
            env[p.arg]
            for p in params
            if isinstance(env.get(p.arg), int)
            and not isinstance(env.get(p.arg), bool)
            and re.search(r"dim|feature|hidden|embed|channel|size|d_model|planes|shape", p.arg.lower())
            and not re.search(r"output_size|out_size|kernel", p.arg.lower())
        ]
        if feature_like:
            features = int(feature_like[0])
        elif isinstance(cfg_values.get("hidden_size"), int):
            features = int(cfg_values["hidden_size"])
        ev = _Eval(env)
        for st in init.body:
            for n in ast.walk(st):
                if isinstance(n, ast.Assign) and len(n.targets) == 1:
                    t = n.targets[0]
                    key = ast.unparse(t)
                    lay = _layer_of(n.value)
                    if lay and key.startswith("self."):
                        layers[key] = lay
                    v = ev(n.value)
                    if v is not None and isinstance(t, (ast.Name, ast.Attribute)):
                        env[key] = v
        # a constructor argument that sizes a sequence (max_len, seq_len) pins S
        for p in params:
            if (
                re.search(r"seq|len|length|block_size|context|n_positions|max_pos", p.arg.lower())
                and isinstance(env.get(p.arg), int)
                and env[p.arg] > 0
                and p.arg in numeric
            ):
                pins["S"] = int(env[p.arg])
    forward, fbase = _find_method(classes, model, "forward")
    forward = forward or ext_forward
    if forward is None:
        if fbase in LAYERS_RANK or fbase in LAST_DIM:
            r = LAYERS_RANK.get(fbase, 2)
            return [
                InputVariant(
                    init_args,
                    [
                        _randn(
                            _shape(
                                r,
                                CHANNELS if fbase in CHANNEL_FIRST else None,
                                DEFAULT_FEATURES if fbase in LAST_DIM else None,
                                DEFAULT_FEATURES,
                            )
                        )
                    ],
                )
            ]
        raise GuessError("no forward found")
    fa = forward.args
    if fa.kwonlyargs and any(d is None for d in fa.kw_defaults):
        raise GuessError("required keyword-only forward arguments")
    fparams = (fa.posonlyargs + fa.args)[1:]
    n_required = len(fparams) - len(fa.defaults)
    names = [p.arg for p in fparams]
    # rotary attention takes (cos, sin) through an optional argument it cannot do without
    upto = n_required
    if "position_embeddings" in names[n_required:]:
        upto = names.index("position_embeddings") + 1
    # whole models take every input as optional: pass the primary one (and the
    # decoder's), the rest stay None
    primary: set[str] = set()
    if n_required == 0:
        first = next((n for n in PRIMARY_INPUTS if n in names), None)
        if first is not None:
            primary = {first} | ({"decoder_input_ids"} & set(names) if first == "input_ids" else set())
            upto = max(upto, max(names.index(n) for n in primary) + 1)
    passed = fparams[:upto]
    ev = _Eval(env)
    head_dim = cfg_values.get("head_dim") or (
        cfg_values["hidden_size"] // cfg_values["num_attention_heads"]
        if isinstance(cfg_values.get("hidden_size"), int)
        and isinstance(cfg_values.get("num_attention_heads"), int)
        and cfg_values["num_attention_heads"]
        else 64
    )
    vocab = cfg_values.get("vocab_size") if isinstance(cfg_values.get("vocab_size"), int) else None
    # layers anywhere in the program (also inside custom submodules the input
    # goes through) hint at the input's rank: Conv2d -> 4 dimensions
    layer_names = set().union(*(_call_names(c) for c in classes.values()))
    src_rank = max((LAYERS_RANK[n] for n in layer_names if n in LAYERS_RANK and LAYERS_RANK[n] >= 3), default=0)
    calls = sorted((n for n in ast.walk(forward) if isinstance(n, ast.Call)), key=lambda c: (c.lineno, c.col_offset))
    class_rank = _class_rank(model, classes)
    embeds = _embedding_args(model, classes)
    per_param: list[list[str]] = []
    shared: Optional[list[list[Dim]]] = None
    for k_param, p in enumerate(passed):
        ann = ast.unparse(p.annotation) if p.annotation is not None else ""
        if p.arg == "position_embeddings":
            per_param.append([f"({_randn(['{B}', '{S}', head_dim])}, {_randn(['{B}', '{S}', head_dim])})"])
            continue
        if p.arg in primary and p.arg.endswith("input_ids"):
            # a multiple-choice head reads its choices from dimension 1
            # (``num_choices = input_ids.shape[1]``): (batch, choices, sequence)
            choices = any(isinstance(n, ast.Name) and n.id == "num_choices" for n in ast.walk(forward))
            per_param.append(
                [
                    f"torch.randint(0, {vocab or 10}, ({{B}}, 4, {{S}}))"
                    if choices
                    else f"torch.randint(0, {vocab or 10}, ({{B}}, {{S}}))"
                ]
            )
            continue
        if (
            k_param >= n_required
            and p.arg not in primary
            or (_optional(ann) and re.search(r"mask|cache|past|state|ids|position", p.arg.lower()) and k_param > 0)
        ):
            per_param.append(["None"])
            continue
        if ann == "int":
            per_param.append(["2"])
            continue
        if ann == "float":
            per_param.append(["0.5"])
            continue
        if ann == "bool":
            per_param.append(["False"])
            continue
        layer = None
        for c in calls:
            if c.args and isinstance(c.args[0], ast.Name) and c.args[0].id == p.arg:
                key = ast.unparse(c.func)
                if key in layers:
                    layer = layers[key]
                    break
        hint = _usage_rank(forward, p.arg)
        hint = max(hint, 2) if hint else 0  # x.shape[0] alone says little; batched inputs are likelier
        if k_param == 0 and class_rank:
            hint = max(hint, class_rank)
        if k_param == 0 and embeds and layer is None:
            num = env.get(f"self.{embeds}") if isinstance(env.get(f"self.{embeds}"), int) else (vocab or 1024)
            per_param.append([f"torch.randint(0, {num}, ({{B}}, {{S}}))"])
            continue
        if layer is not None and layer[0] == "Embedding":
            num = ev(layer[1].args[0]) if layer[1].args else None
            num = num if isinstance(num, int) and num > 0 else (vocab or 10)
            per_param.append([f"torch.randint(0, {num}, ({{B}}, {{S}}))"])
            continue
        if INT_INPUT_NAMES.match(p.arg):
            per_param.append([f"torch.randint(0, {vocab or 10}, ({{B}}, {{S}}))"])
            continue
        if p.arg == "pixel_values" and config is not None:
            ch = cfg_values.get("num_channels") if isinstance(cfg_values.get("num_channels"), int) else 3
            side = cfg_values.get("image_size") if isinstance(cfg_values.get("image_size"), int) else 224
            per_param.append([_randn(["{B}", ch, side, side])])
            continue
        shapes: list[list[Dim]] = []
        if layer is not None:
            kind, call = layer
            arg0 = ev(call.args[0]) if call.args else None
            if kind == "GroupNorm" and len(call.args) > 1:
                arg0 = ev(call.args[1])
            rank = max(LAYERS_RANK.get(kind, 2), hint)
            if kind in CHANNEL_FIRST or kind == "GroupNorm":
                if isinstance(arg0, int):
                    shapes.append(_shape(rank, arg0, None, features))
            elif kind in LAST_DIM:
                if isinstance(arg0, (tuple, list)) and arg0 and all(isinstance(x, int) for x in arg0):
                    shapes.append(["{B}"] + ["{S}"] * max(0, rank - 1 - len(arg0)) + list(arg0))
                elif isinstance(arg0, int):
                    if rank == 2:
                        shapes.append(_shape(3, None, arg0, features))
                    shapes.append(_shape(rank, None, arg0, features))
            else:
                shapes.append(_shape(rank, None, None, features))
        if shared is not None and not shapes and not hint:
            # a second tensor the module gives no hint about (a loss's target,
            # a gate): shaped like the first one
            per_param.append(_tensor_options(p.arg, shared, k_param))
            continue
        if shared is not None and not shapes:
            shapes = list(shared)
        ranks = [hint] if hint else []
        if config is not None and 3 not in ranks:
            ranks.insert(0, 3)  # hidden_states (batch, sequence, hidden) in a config-built model
        if src_rank and src_rank >= hint and src_rank not in ranks:
            ranks.append(src_rank)
        ranks += [r for r in (3, 2, 4) if r not in ranks and r >= hint]
        for r in ranks:
            for f in (features, CHANNELS, DEFAULT_FEATURES):
                # rank 3 is (batch, sequence, features) or (batch, channels, length)
                for sh in [_shape(3, f, f, f), _shape(3, f, None, f)] if r == 3 else [_shape(r, f, None, f)]:
                    if sh not in shapes:
                        shapes.append(sh)
        if shared is None:
            shared = shapes
        per_param.append(_tensor_options(p.arg, shapes, k_param))
    variants: list[InputVariant] = []
    # a required mask after the first argument is None first (a transformers
    # layer takes ``attention_mask`` without a default and accepts None: the
    # unmasked kernel; a random boolean mask shaped like the hidden states is
    # no attention mask at all), then the variants with masks
    masks = [i for i, p in enumerate(passed) if i > 0 and re.search("mask", p.arg.lower()) and per_param[i] != ["None"]]
    combos = [[opts[min(k, len(opts) - 1)] for opts in per_param] for k in range(max_variants)]
    if masks and combos:
        combos.insert(0, ["None" if i in masks else x for i, x in enumerate(combos[0])])
    # a mixture-of-experts bank called with the router's choice: hidden states
    # as rows of tokens, each token's top-k expert indices and weights
    # (random floats as indices fail one_hot; the bank is the kernel)
    experts = _experts_inputs([p.arg for p in passed], cfg_values)
    if experts:
        combos.insert(0, experts)
    for ins in combos[:max_variants]:
        v = InputVariant(list(init_args), ins, pins=dict(pins))
        if all(v.inputs != w.inputs for w in variants):
            variants.append(v)
    return variants


def _tensor_options(arg: str, shapes: list[list[Dim]], k_param: int) -> list[str]:
    """A tensor argument's options (a mask: boolean, shaped like the first input)."""
    if not re.search("mask", arg.lower()):
        return [_randn(sh) for sh in shapes]
    return [f"({_randn(sh)} > 0)" for sh in shapes]


def _call_names(cls: ast.ClassDef) -> frozenset[str]:
    """Last components of the callables a class calls; cached on the node
    (every class of a file asks about every other one)."""
    got = getattr(cls, "_ks_call_names", None)
    if got is None:
        got = frozenset(ast.unparse(n.func).rpartition(".")[2] for n in ast.walk(cls) if isinstance(n, ast.Call))
        cls._ks_call_names = got  # type: ignore[attr-defined]
    return got


def _class_rank(model: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> int:
    """Input rank the class itself states: ``F.conv3d`` / ``max_pool1d`` calls
    (N + 2 dimensions) or ``input.dim() != 5`` checks, in any of its methods
    or its in-file bases."""
    ranks: list[int] = []
    todo, seen = [model], set()
    while todo:
        c = todo.pop()
        if c.name in seen:
            continue
        seen.add(c.name)
        for n in ast.walk(c):
            if isinstance(n, ast.Call):
                fname = ast.unparse(n.func).rpartition(".")[2].lower()
                m = _ND.search(fname)
                if m and fname != "pad" and not fname.endswith("_2d_pad"):
                    ranks.append(int(m.group(1)) + 2)
            elif (
                isinstance(n, ast.Compare)
                and len(n.comparators) == 1
                and isinstance(n.comparators[0], ast.Constant)
                and isinstance(n.comparators[0].value, int)
                and not isinstance(n.comparators[0].value, bool)
            ):
                left = ast.unparse(n.left)
                if (
                    left.endswith((".dim()", ".ndim", ".ndimension()"))
                    and isinstance(n.ops[0], (ast.Eq, ast.NotEq))
                    and 3 <= n.comparators[0].value <= 5
                ):
                    ranks.append(n.comparators[0].value)
        todo += [classes[d] for d in (ast.unparse(b) for b in c.bases) if d in classes]
    return max(ranks) if ranks and len(set(ranks)) == 1 else 0


def _embedding_args(model: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> Optional[str]:
    """The attribute holding the table size when forward looks indices up
    (``F.embedding(input, self.weight)``): its input is integer indices."""
    for n in ast.walk(model):
        if isinstance(n, ast.Call) and ast.unparse(n.func).rpartition(".")[2] in ("embedding", "embedding_bag"):
            return "num_embeddings"
    return None


def _numeric_uses(fn: ast.FunctionDef) -> set[str]:
    """Arguments used like numbers: arithmetic, range(), or arguments of a call
    to a torch layer or tensor factory."""
    names: set[str] = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.BinOp):
            for side in (n.left, n.right):
                if isinstance(side, ast.Name):
                    names.add(side.id)
        elif isinstance(n, ast.Call):
            f = ast.unparse(n.func)
            if f == "range" or f.startswith(("nn.", "torch.", "torch.nn.")) or f.rpartition(".")[2][:1].isupper():
                for a in list(n.args) + [k.value for k in n.keywords]:
                    if isinstance(a, ast.Name):
                        names.add(a.id)
    return names


# -- repairs from the module's own error message -------------------------------
# A forward that rejects a guessed input says what it expected: a LayerNorm its
# normalized shape, a Linear its in_features, a convolution its channels and
# rank. ``repair_inputs`` turns such a message into new input templates (still
# over the size-class dimensions, so every size class follows); the execution
# filter tries them on the model it already built, and a repaired variant is
# kept only if it passes every check, exactly as written.
_RANDN = re.compile(r"^(\(?)torch\.randn\((.*?)\)( > 0\))?$")
_SIZE_DIMS = ("{B}", "{S}", "{N}", "{P}", "{Q}", "{L}")
_RE_NORM = re.compile(
    r"normalized_shape=\[([\d, ]+)\], expected input with shape \[\*, [\d, ]+\], but got input of "
    r"size\s?\[([\d, ]+)\]"
)
_RE_MM = re.compile(r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)")
_RE_CONV = re.compile(r"weight of size \[([\d, ]+)\], expected input\[([\d, ]+)\] to have (\d+) channels")
_RE_CONV_RANK = re.compile(r"Expected (\d)D \(unbatched\) or (\d)D \(batched\) input to conv")
_RE_UNPACK = re.compile(r"(too many|not enough) values to unpack \(expected (\d+)(?:, got (\d+))?\)")
_RE_MATCH = re.compile(r"The size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)")


def _parse_randn(t: str) -> Optional[tuple[list[str], bool]]:
    """(shape tokens, is a mask) of a ``torch.randn(...)`` input template."""
    m = _RANDN.match(t.strip())
    if not m or bool(m.group(1)) != bool(m.group(3)):
        return None
    dims = [d.strip() for d in m.group(2).split(",") if d.strip()]
    if not dims or not all(d in _SIZE_DIMS or d.isdigit() for d in dims):
        return None
    return dims, bool(m.group(3))


def _randn_t(dims: list[str], mask: bool) -> str:
    t = f"torch.randn({', '.join(dims)})"
    return f"({t} > 0)" if mask else t


def _rank_shape(rank: int, width: Optional[str], channels: Optional[str] = None) -> list[str]:
    if rank <= 1:
        return [width or str(DEFAULT_FEATURES)]
    if rank == 2:
        return ["{N}", width or str(DEFAULT_FEATURES)]
    if rank == 3:
        return ["{B}", "{S}", width or str(DEFAULT_FEATURES)] if channels is None else ["{B}", channels, "{L}"]
    side = "{P}" if rank == 4 else "{Q}"
    return ["{B}", channels or str(CHANNELS)] + [side] * (rank - 2)


_RE_TUPLE_OPERAND = re.compile(r"unsupported operand type\(s\) for [-+*/]: '(?:Tensor' and 'tuple|tuple' and 'Tensor)'")


def repair_inputs(inputs: list[str], error: str) -> list[list[str]]:
    """New input templates that the forward's error message asks for, best
    first (empty when the message says nothing usable about the inputs). Only
    the tensor inputs built with ``torch.randn`` change; inputs shaped like
    the changed one (masks, a second operand) follow it."""
    parsed = [_parse_randn(t) for t in inputs]
    tensor_ix = [i for i, p in enumerate(parsed) if p is not None and not p[1]]
    if not tensor_ix:
        return []
    out: list[list[str]] = []
    if _RE_TUPLE_OPERAND.search(error):
        # a (cos, sin) pair given where the module adds a tensor (DETR's
        # position_embeddings are added to the hidden states): shaped like them
        new = [
            inputs[tensor_ix[0]] if t.startswith("(torch.randn(") and t.endswith(")") and "), torch.randn(" in t else t
            for t in inputs
        ]
        return [new] if new != inputs else []

    def change(i: int, dims: list[str], follow: bool = True) -> None:
        old = parsed[i]
        assert old is not None
        if dims == old[0]:
            return
        new = list(inputs)
        for j, p in enumerate(parsed):
            if p is not None and (j == i or follow and p[0] == old[0]):
                new[j] = _randn_t(dims, p[1])
        if new not in out and new != inputs:
            out.append(new)

    first = tensor_ix[0]
    dims0 = parsed[first][0]  # type: ignore[index]
    m = _RE_NORM.search(error)
    if m:
        want = [d.strip() for d in m.group(1).split(",") if d.strip()]
        got = [d.strip() for d in m.group(2).split(",") if d.strip()]
        for i in tensor_ix:
            dims = parsed[i][0]  # type: ignore[index]
            if len(dims) == len(got):
                change(i, ["{B}", "{S}"] + want if len(want) == 1 else ["{B}"] + want)
                if len(dims) >= 3 and len(want) == 1:
                    # channels last (B, H, W, C): keep the spatial sides
                    change(i, dims[:-1] + want)
                break
    m = _RE_MM.search(error)
    if m:
        k, k2 = m.group(2), m.group(3)
        for i in tensor_ix:
            dims = parsed[i][0]  # type: ignore[index]
            if dims[-1] == k:
                change(i, dims[:-1] + [k2])
        if not out:
            change(first, dims0[:-1] + [k2])
    m = _RE_CONV.search(error)
    if m:
        weight = [d.strip() for d in m.group(1).split(",")]
        got = [d.strip() for d in m.group(2).split(",")]
        ch = m.group(3)
        rank = len(weight)
        for i in tensor_ix:
            dims = parsed[i][0]  # type: ignore[index]
            if len(dims) == len(got) and len(dims) >= 2:
                # the spatial or length dimensions are size-class dimensions
                # (a (B, S, 256) guess becomes (B, C, L), not (B, C, 256))
                change(i, _rank_shape(rank, None, ch))
                if len(dims) == rank:
                    change(i, [dims[0], ch] + dims[2:])
                break
    m = _RE_CONV_RANK.search(error)
    if m:
        rank = int(m.group(2))
        ch = dims0[1] if len(dims0) >= 3 and dims0[1].isdigit() else None
        change(first, _rank_shape(rank, None, ch))
    m = _RE_UNPACK.search(error)
    if m and "tuple" not in error:
        want = int(m.group(2))
        if 2 <= want <= 5 and len(dims0) != want:
            width = dims0[-1] if dims0[-1].isdigit() else None
            change(
                first,
                _rank_shape(want, width, dims0[1] if want >= 4 and len(dims0) >= 3 and dims0[1].isdigit() else None),
            )
    m = _RE_MATCH.search(error)
    if m:
        a, b = m.group(1), m.group(2)
        # a literal width of one input that another tensor of the module has
        # the other size of: the later inputs first (a residual, a gate)
        for i in reversed(tensor_ix):
            dims = parsed[i][0]  # type: ignore[index]
            for x, y in ((a, b), (b, a)):
                if x in dims and x not in _SIZE_DIMS and not (len(dims) > 1 and dims.index(x) == 0):
                    change(i, [y if d == x else d for d in dims], follow=False)
    return out


PRELUDE_MARK = "# curated: parameters the constructor leaves uninitialised"


def init_prelude(params: list[tuple[str, float]]) -> str:
    """Task code that initialises parameters ``Model``'s constructor leaves as
    ``torch.empty`` (a mixture-of-experts bank whose weights the package's
    ``_init_weights`` would fill): after the constructor, each ``(name, std)``
    is drawn from ``normal(0, std)`` (``std`` 0: zeros) under the seed the
    model was built with, so the task is deterministic and every expert holds
    real weights. ``functools.wraps`` keeps the constructor's signature (the
    evaluator compares ``ModelNew``'s with it)."""
    body = "".join(f"        _curated_fill(self.get_parameter({n!r}), {float(s)!r})\n" for n, s in params)
    return (
        f"{PRELUDE_MARK} (torch.empty):\n"
        "# drawn after construction, scaled like the module's other weights\n"
        "import functools as _curated_functools\n"
        "import torch as _curated_torch\n\n"
        "_curated_model_init = Model.__init__\n\n\n"
        "def _curated_fill(p, std):\n"
        "    if std > 0:\n"
        "        _curated_torch.nn.init.normal_(p, 0.0, std)\n"
        "    else:\n"
        "        _curated_torch.nn.init.zeros_(p)\n\n\n"
        "@_curated_functools.wraps(_curated_model_init)\n"
        "def _curated_init(self, *args, **kwargs):\n"
        "    _curated_model_init(self, *args, **kwargs)\n"
        "    with _curated_torch.no_grad():\n"
        f"{body}\n\n"
        "Model.__init__ = _curated_init\n"
    )


# init errors that name the config value they expected (transformers' config
# validation, attention classes looked up by a config that no model resolved)
_MUST_EQUAL = re.compile(
    r"`?([A-Za-z_][\w.]*)`? \((-?\d+)\) must (?:equal|match|be equal to) (?:the )?(?:backbone )?"
    r"`?([A-Za-z_][\w.]*)`?(?: // \d+)? \((-?\d+)\)"
)
_LAYER_TYPES = re.compile(r"`num_hidden_layers` \((\d+)\) must be equal to the number of `layer_types` \((\d+)\)")
_OUT_INDICES = re.compile(r"out_indices must be valid indices for stage_names \[([^\]]*)\], got \[([\d, ]+)\]")
_MROPE = re.compile(
    r"mrope_section` must contain three sections whose sum equals half of `head_dim`, got \[([\d, ]+)\]"
)


def _config_call(arg: str) -> Optional[ast.Call]:
    try:
        node = parse_source(arg, mode="eval").body
    except SyntaxError:
        return None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id.endswith("Config"):
        return node
    return None


def _fields_of(call: ast.Call) -> list[tuple[str, ast.AST, Any]]:
    """(name, node, setter) of every field given in the config call and in its
    nested dicts (sub-configs), outermost first."""
    out: list[tuple[str, ast.AST, Any]] = []

    def visit_dict(d: ast.Dict) -> None:
        for i, (k, v) in enumerate(zip(d.keys, d.values)):
            if isinstance(k, ast.Constant) and isinstance(k.value, str):
                out.append((k.value, v, (d, i)))
                if isinstance(v, ast.Dict):
                    visit_dict(v)

    for kw in call.keywords:
        if kw.arg:
            out.append((kw.arg, kw.value, (kw, None)))
            if isinstance(kw.value, ast.Dict):
                visit_dict(kw.value)
    return out


def _set(setter: Any, value: Any) -> None:
    obj, i = setter
    node = (
        ast.Constant(value) if not isinstance(value, list) else ast.List([ast.Constant(x) for x in value], ast.Load())
    )
    if i is None:
        obj.value = node
    else:
        obj.values[i] = node


def repair_init(init_args: list[str], error: str) -> Optional[list[str]]:
    """New constructor arguments from an init error that says which config
    value it expected, or None: ``KeyError: None`` (an attention class looked
    up by ``config._attn_implementation``, which only a model's constructor
    resolves) -> ``attn_implementation='eager'``; ``` `A` (x) must equal `B`
    (y)``` -> ``A = y``; ``num_hidden_layers`` to the number of ``layer_types``
    (at most 8); a backbone's ``out_indices`` past its stages -> the first
    ``k`` stages, ``k`` deep; an M-RoPE section sum -> ``head_dim`` twice it."""
    for pos, arg in enumerate(init_args):
        call = _config_call(arg)
        if call is None:
            continue
        fields = _fields_of(call)
        changed = False
        if "can only be called on Attention layers" in error:
            # a hybrid model whose narrowed depth has no attention layer: its
            # cache has nothing to measure; the forward without a cache
            if any(kw.arg == "use_cache" for kw in call.keywords):
                return None
            call.keywords.append(ast.keyword("use_cache", ast.Constant(False)))
            changed = True
        elif error.strip() == "KeyError: None":
            if any(kw.arg == "attn_implementation" for kw in call.keywords):
                return None
            call.keywords.insert(0, ast.keyword("attn_implementation", ast.Constant("eager")))
            changed = True
        elif m := _OUT_INDICES.search(error):
            want = [int(x) for x in m.group(2).split(",") if x.strip()]
            for name, node, setter in fields:
                if name == "out_indices":
                    k = len(want)
                    _set(setter, list(range(1, k + 1)))
                    # its sibling depth: as many layers as indices
                    for n2, node2, setter2 in fields:
                        if n2 == "num_hidden_layers" and setter2[0] is setter[0]:
                            _set(setter2, k)
                    changed = True
        elif m := _LAYER_TYPES.search(error):
            n = int(m.group(2))
            if 0 < n <= 8:
                for name, node, setter in fields:
                    if name == "num_hidden_layers" and isinstance(node, ast.Constant) and node.value == int(m.group(1)):
                        _set(setter, n)
                        changed = True
        elif m := _MROPE.search(error):
            half = sum(int(x) for x in m.group(1).split(",") if x.strip())
            for name, node, setter in fields:
                if name == "head_dim" and isinstance(node, ast.Constant):
                    _set(setter, 2 * half)
                    changed = True
        elif m := _MUST_EQUAL.search(error):
            target, have, want = m.group(1).rsplit(".", 1)[-1], int(m.group(2)), int(m.group(4))
            for name, node, setter in fields:
                if name == target and isinstance(node, ast.Constant) and node.value == have:
                    _set(setter, want)
                    changed = True
            if not changed:
                # a field left at its class's default: given where it belongs
                # (the sub-config the message names, else beside the field it
                # must equal when that is in one place, else the top level)
                prefix = m.group(1).split(".")[0] if "." in m.group(1) else None
                where = [node for name, node, _ in fields if name == prefix and isinstance(node, ast.Dict)]
                if not where and prefix is None:
                    other = m.group(3).rsplit(".", 1)[-1]
                    beside = [
                        setter[0]
                        for name, node, setter in fields
                        if name == other and isinstance(node, ast.Constant) and node.value == want
                    ]
                    where = beside if len(beside) == 1 else []
                    if not where and not any(kw.arg == target for kw in call.keywords):
                        call.keywords.append(ast.keyword(target, ast.Constant(want)))
                        changed = True
                if where and isinstance(where[0], ast.Dict):
                    d = where[0]
                    if not any(isinstance(k, ast.Constant) and k.value == target for k in d.keys):
                        d.keys.append(ast.Constant(target))
                        d.values.append(ast.Constant(want))
                        changed = True
                elif where and isinstance(where[0], ast.keyword) and not any(kw.arg == target for kw in call.keywords):
                    call.keywords.append(ast.keyword(target, ast.Constant(want)))
                    changed = True
        if changed:
            new = list(init_args)
            new[pos] = ast.unparse(call)
            return new
        return None
    return None


_EXPERT_INDEX = re.compile(
    r"^(top_k_index|top_k_indices|router_indices|selected_experts|expert_indices|topk_idx|"
    r"topk_ids|expert_ids)$"
)
_EXPERT_WEIGHTS = re.compile(
    r"^(top_k_weights|routing_weights|router_weights|topk_weight|topk_weights|"
    r"expert_weights|router_scores)$"
)


def _experts_inputs(names: list[str], cfg: dict[str, Any]) -> Optional[list[str]]:
    """(hidden_states, top-k indices, top-k weights) of an expert bank, or None."""
    if len(names) != 3 or not _EXPERT_INDEX.match(names[1]) or not _EXPERT_WEIGHTS.match(names[2]):
        return None

    def num(*keys: str, default: int) -> int:
        for k in keys:
            v = cfg.get(k)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
        return default

    hidden = num("hidden_size", "d_model", default=DEFAULT_FEATURES)
    n_exp = num("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts", default=4)
    top_k = min(n_exp, num("num_experts_per_tok", "top_k", "moe_topk", "moe_k", default=2))
    return [
        _randn(["{N}", hidden]),
        f"torch.randint(0, {n_exp}, ({{N}}, {top_k}))",
        f"torch.softmax(torch.randn({{N}}, {top_k}), dim=-1)",
    ]
