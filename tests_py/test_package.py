import logging

import pytest

import kernelsmith
from kernelsmith import _core
from kernelsmith._logging import sync_core_log_level
from kernelsmith.config import ConfigError, from_dict


def test_version_is_exposed():
    assert kernelsmith.__version__ == _core.__version__
    assert kernelsmith.__version__.count(".") == 2


def test_error_hierarchy():
    assert issubclass(kernelsmith.CorruptStateError, kernelsmith.KernelsmithError)
    assert issubclass(kernelsmith.KernelsmithError, RuntimeError)


def test_cpp_log_records_reach_python_logging(caplog):
    caplog.set_level(logging.INFO, logger="kernelsmith.core")
    sync_core_log_level()
    _core._log(2, "hello from C++")  # spdlog info
    _core._log(1, "debug is filtered")  # below INFO: never formatted
    messages = [r.getMessage() for r in caplog.records if r.name == "kernelsmith.core"]
    assert messages == ["hello from C++"]


def test_config_rejects_unknown_keys_by_name():
    from dataclasses import dataclass, field

    @dataclass
    class Inner:
        size: int = 1

    @dataclass
    class Outer:
        name: str = "x"
        inner: Inner = field(default_factory=Inner)

    cfg = from_dict(Outer, {"name": "y", "inner": {"size": 3}})
    assert cfg.inner.size == 3 and cfg.name == "y"
    with pytest.raises(ConfigError, match=r"inner\.sise.*allowed keys here: size"):
        from_dict(Outer, {"inner": {"sise": 3}})
