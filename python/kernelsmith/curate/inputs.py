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
from dataclasses import dataclass
from typing import Any, Optional

BATCH = 2
SEQ = 8
SPATIAL = {1: 16, 2: 16, 3: 8}
DEFAULT_FEATURES = 16

# (regex on the lower-cased argument name, value); first match wins
NAME_RULES: list[tuple[str, Any]] = [
    (r"(^|_)(p|prob|dropout|drop|drop_rate|dropout_rate|attn_drop|proj_drop|drop_path|drop_path_rate|pdrop)$", 0.0),
    (r"drop", 0.0),
    (r"eps|epsilon", 1e-5),
    (r"momentum", 0.1),
    (r"head", 2),
    (r"group", 1),
    (r"kernel|^k$|ksize", 3),
    (r"stride", 1),
    (r"pad", 1),
    (r"dilation", 1),
    (r"scale_factor|upscale|factor", 2),
    (r"reduction|squeeze|ratio|expansion|expand", 2),
    (r"scale|alpha|beta|gamma|temperature|^tau$|weight|margin|slope", 0.5),
    (r"bias|affine|residual|^use_|bidirectional|batch_first|inplace", True),
    (r"class", 10),
    (r"vocab|num_embeddings|n_tokens|ntoken|n_vocab", 100),
    (r"seq|len|length|block_size|context|window|n_positions|max_pos", SEQ),
    (r"layer|depth|num_blocks|n_block|blocks|n_layer", 2),
    (r"channel|_ch$|^ch$|^c_?in$|^c_?out$|^c$|planes|filters|^in_c|^out_c|^nc$|^ngf$|^ndf$", 8),
    (r"dim|feature|hidden|embed|size|d_model|width|units|^n?f$|^ni$|^no$|^nh$|^d_|^d$|^n_?in$|^n_?out$|^in_|^out_", 16),
    (r"^num_|^n_|^n$|count", 2),
]

LAYERS_RANK = {"Conv1d": 3, "Conv2d": 4, "Conv3d": 5, "ConvTranspose1d": 3, "ConvTranspose2d": 4, "ConvTranspose3d": 5,
               "BatchNorm1d": 3, "BatchNorm2d": 4, "BatchNorm3d": 5, "InstanceNorm1d": 3, "InstanceNorm2d": 4,
               "InstanceNorm3d": 5, "GroupNorm": 4, "LazyConv2d": 4, "MaxPool1d": 3, "MaxPool2d": 4, "MaxPool3d": 5,
               "AvgPool1d": 3, "AvgPool2d": 4, "AvgPool3d": 5, "AdaptiveAvgPool1d": 3, "AdaptiveAvgPool2d": 4,
               "AdaptiveAvgPool3d": 5, "AdaptiveMaxPool2d": 4, "Upsample": 4, "PixelShuffle": 4, "Dropout2d": 4,
               "LayerNorm": 3, "MultiheadAttention": 3, "LSTM": 3, "GRU": 3, "RNN": 3, "Linear": 2,
               "TransformerEncoderLayer": 3, "TransformerDecoderLayer": 3, "Conv2dNormActivation": 4}
# layers whose first constructor argument is the input's channel dimension (1)
CHANNEL_FIRST = {"Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
                 "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"}
# layers whose first argument is the last dimension
LAST_DIM = {"Linear", "LayerNorm", "MultiheadAttention", "LSTM", "GRU", "RNN", "TransformerEncoderLayer",
            "TransformerDecoderLayer", "RMSNorm"}
INT_INPUT_NAMES = re.compile(r"^(input_ids|ids|tokens?|token_ids|indices|idx|index|labels?|targets?|words?|src_tokens)$")
KNOWN_BASE_INIT = {"Linear": ["16", "16"], "Conv1d": ["8", "8", "3"], "Conv2d": ["8", "8", "3"],
                   "Conv3d": ["8", "8", "3"], "LayerNorm": ["16"], "Embedding": ["100", "16"],
                   "BatchNorm1d": ["8"], "BatchNorm2d": ["8"], "GroupNorm": ["2", "8"]}


@dataclass
class InputVariant:
    init_args: list[str]
    inputs: list[str]
    note: str = "heuristic"

    def render(self) -> str:
        ins = ", ".join(self.inputs)
        init = ", ".join(self.init_args)
        return (f"def get_inputs():\n    return [{ins}]\n\n\n"
                f"def get_init_inputs():\n    return [{init}]\n")

    def to_dict(self) -> dict[str, Any]:
        return {"init_args": list(self.init_args), "inputs": list(self.inputs), "note": self.note}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "InputVariant":
        return cls(init_args=list(d["init_args"]), inputs=list(d["inputs"]), note=str(d.get("note", "heuristic")))


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
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self":
            return self.env["self." + n.attr]
        if isinstance(n, (ast.Tuple, ast.List)):
            return tuple(self._ev(e) for e in n.elts)
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -self._ev(n.operand)
        if isinstance(n, ast.BinOp):
            a, b = self._ev(n.left), self._ev(n.right)
            ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
                   ast.FloorDiv: lambda: a // b, ast.Div: lambda: a / b, ast.Mod: lambda: a % b,
                   ast.Pow: lambda: a ** b}
            return ops[type(n.op)]()
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("int", "max", "min", "round"):
            fn = {"int": int, "max": max, "min": min, "round": round}[n.func.id]
            return fn(*[self._ev(a) for a in n.args])
        if isinstance(n, ast.IfExp):
            return self._ev(n.body) if self._ev(n.test) else self._ev(n.orelse)
        raise KeyError(ast.dump(n))


def _find_method(classes: dict[str, ast.ClassDef], cls: ast.ClassDef, name: str, seen: Optional[set[str]] = None
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
        elif isinstance(n, ast.Subscript) and ast.unparse(n.value) == f"{param}.shape" \
                and isinstance(n.slice, (ast.Constant, ast.UnaryOp)):
            try:
                i = ast.literal_eval(n.slice)
                rank = max(rank, i + 1 if i >= 0 else -i)
            except (ValueError, TypeError):
                pass
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and ast.unparse(n.func.value) == param:
            consts = [a.value for a in n.args if isinstance(a, ast.Constant) and isinstance(a.value, int)]
            if n.func.attr == "permute" and n.args:
                rank = max(rank, len(n.args))
            elif n.func.attr in ("size", "transpose", "flatten", "unsqueeze", "squeeze", "mean", "sum", "softmax") and consts:
                rank = max(rank, max(c + 1 if c >= 0 else -c for c in consts))
    return rank


def _shape(rank: int, first: Optional[int], last: Optional[int], features: int) -> list[int]:
    if rank <= 1:
        return [last or first or features]
    if rank == 2:
        return [BATCH, last or first or features]
    if rank == 3 and last is not None:
        return [BATCH, SEQ, last]
    shape = [BATCH, first or features] + [SPATIAL.get(rank - 2, 8)] * (rank - 2)
    if last is not None:
        shape[-1] = last
    return shape


def _randn(shape: list[int]) -> str:
    return f"torch.randn({', '.join(str(s) for s in shape)})"


def guess_inputs(source: str, max_variants: int = 6) -> list[InputVariant]:
    """Ordered input variants for class ``Model`` of ``source``; raises GuessError."""
    tree = ast.parse(source)
    classes = {s.name: s for s in tree.body if isinstance(s, ast.ClassDef)}
    if "Model" not in classes:
        raise GuessError("no class Model")
    model = classes["Model"]
    init, torch_base = _find_method(classes, model, "__init__")
    env: dict[str, Any] = {}
    init_args: list[str] = []
    features = DEFAULT_FEATURES
    layers: dict[str, tuple[str, ast.Call]] = {}
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
                v = _value_for(p.arg, p.annotation, p.arg in numeric)
                init_args.append(repr(v))
                env[p.arg] = v
            else:
                try:
                    env[p.arg] = ast.literal_eval(d)
                except (ValueError, SyntaxError, TypeError):
                    pass
        feature_like = [env[p.arg] for p in params if isinstance(env.get(p.arg), int) and not isinstance(env.get(p.arg), bool)
                        and re.search(r"dim|feature|hidden|embed|channel|size|d_model|planes", p.arg.lower())]
        if feature_like:
            features = int(feature_like[0])
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
    forward, fbase = _find_method(classes, model, "forward")
    if forward is None:
        if fbase in LAYERS_RANK or fbase in LAST_DIM:
            r = LAYERS_RANK.get(fbase, 2)
            v = [InputVariant(init_args, [_randn(_shape(r, 8 if fbase in CHANNEL_FIRST else None,
                                                          16 if fbase in LAST_DIM else None, 16))])]
            return v
        raise GuessError("no forward found")
    fa = forward.args
    if fa.kwonlyargs and any(d is None for d in fa.kw_defaults):
        raise GuessError("required keyword-only forward arguments")
    fparams = (fa.posonlyargs + fa.args)[1:]
    required = fparams[: len(fparams) - len(fa.defaults)]
    ev = _Eval(env)
    # layers anywhere in the program (also inside custom submodules the input
    # goes through) hint at the input's rank: Conv2d -> 4 dimensions
    layer_names = {ast.unparse(n.func).rpartition(".")[2] for n in ast.walk(tree) if isinstance(n, ast.Call)}
    src_rank = max((LAYERS_RANK[n] for n in layer_names if n in LAYERS_RANK and LAYERS_RANK[n] >= 3), default=0)
    calls = sorted((n for n in ast.walk(forward) if isinstance(n, ast.Call)), key=lambda c: (c.lineno, c.col_offset))
    per_param: list[list[str]] = []
    shared: Optional[list[list[int]]] = None
    for p in required:
        ann = ast.unparse(p.annotation) if p.annotation is not None else ""
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
        if layer is not None and layer[0] == "Embedding":
            num = ev(layer[1].args[0]) if layer[1].args else None
            num = num if isinstance(num, int) and num > 0 else 10
            per_param.append([f"torch.randint(0, {num}, ({BATCH}, {SEQ}))"])
            continue
        if INT_INPUT_NAMES.match(p.arg):
            per_param.append([f"torch.randint(0, 10, ({BATCH}, {SEQ}))"])
            continue
        shapes: list[list[int]] = []
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
                    shapes.append([BATCH] + [SEQ] * max(0, rank - 1 - len(arg0)) + list(arg0))
                elif isinstance(arg0, int):
                    shapes.append(_shape(rank, None, arg0, features))
                    if rank == 2:
                        shapes.append(_shape(3, None, arg0, features))
            else:
                shapes.append(_shape(rank, None, None, features))
        if shared is not None and not shapes:
            shapes = list(shared)
        ranks = [hint] if hint else []
        if src_rank and src_rank >= hint and src_rank not in ranks:
            ranks.append(src_rank)
        ranks += [r for r in (2, 3, 4) if r not in ranks and r >= hint]
        for r in ranks:
            for f in (features, 3, DEFAULT_FEATURES):
                s = _shape(r, f, None, f)
                if s not in shapes:
                    shapes.append(s)
        if shared is None:
            shared = shapes
        per_param.append([_randn(s) if not re.search("mask", p.arg.lower()) else f"({_randn(s)} > 0)" for s in shapes])
    variants: list[InputVariant] = []
    for k in range(max_variants):
        ins = [opts[min(k, len(opts) - 1)] for opts in per_param]
        v = InputVariant(list(init_args), ins)
        if all(v.inputs != w.inputs for w in variants):
            variants.append(v)
    return variants


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
