"""Dataclass configs loaded from YAML or dicts, with unknown keys rejected.

Every config in kernelsmith is a dataclass whose defaults are documented next
to the field. :func:`from_dict` builds one from a mapping, recursing into
nested dataclasses, and fails on the first unknown key with the key's dotted
path and the keys that are allowed there.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from pathlib import Path
from typing import Any, Mapping, Type, TypeVar

import yaml

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration value or key is invalid; the message names the key."""


def _dataclass_type(tp: Any) -> Any:
    """The dataclass inside ``tp`` (``X``, ``Optional[X]``), or None."""
    if dataclasses.is_dataclass(tp):
        return tp
    if typing.get_origin(tp) is typing.Union:
        for arg in typing.get_args(tp):
            if dataclasses.is_dataclass(arg):
                return arg
    return None


_SCALARS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def _check_type(dotted: str, hint: Any, value: Any) -> Any:
    """A YAML value of the wrong kind for a scalar or mapping field: one
    ConfigError naming the key, instead of whatever the code using it raises
    later (a TypeError deep inside, or a value silently taken). Returns the
    value; YAML 1.1 reads ``1e-3`` as a string, so a number field takes a
    string that is a number of its kind ("1e-3", "8")."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 2 and type(None) in args:
        if value is None:
            return value
        hint = next(a for a in args if a is not type(None))
    if hint in (int, float) and isinstance(value, str):
        try:
            return hint(value)
        except ValueError:
            pass
    if hint in _SCALARS:
        ok = {
            int: isinstance(value, int) and not isinstance(value, bool),
            float: isinstance(value, (int, float)) and not isinstance(value, bool),
            bool: isinstance(value, bool),
            str: isinstance(value, (str, os.PathLike)),
        }[hint]
        what = _SCALARS[hint]
    elif (typing.get_origin(hint) or hint) is dict:
        ok, what = value is None or isinstance(value, Mapping), "a mapping of keys"
    else:
        return value
    if not ok:
        raise ConfigError(f"config key '{dotted}' must be {what}, got {value!r} ({type(value).__name__})")
    return value


def from_dict(cls: Type[T], data: Mapping[str, Any] | None, path: str = "") -> T:
    """Build dataclass ``cls`` from ``data``; unknown keys raise ConfigError."""
    if data is None:
        data = {}
    if isinstance(data, cls):
        return data
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path or cls.__name__}: expected a mapping, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{path}.{key}" if path else str(key)
        if key not in fields:
            allowed = ", ".join(sorted(fields))
            raise ConfigError(f"unknown config key '{dotted}'; allowed keys here: {allowed}")
        nested = _dataclass_type(hints.get(key))
        if nested is not None and isinstance(value, Mapping):
            value = from_dict(nested, value, dotted)
        elif nested is None:
            value = _check_type(dotted, hints.get(key), value)
        kwargs[key] = value
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{path or cls.__name__}: {exc}") from exc


def to_dict(config: Any) -> dict[str, Any]:
    """Plain-data form of a config dataclass (for snapshots and JSON)."""
    return dataclasses.asdict(config)


def load_yaml(cls: Type[T], path: str | Path, section: str | None = None) -> T:
    """Load ``cls`` from a YAML file (optionally from one top-level section)."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if section is not None:
        data = data.get(section, {}) if isinstance(data, Mapping) else {}
    return from_dict(cls, data, section or "")
