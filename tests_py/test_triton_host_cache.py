"""The zygote's Triton host modules (CUDA driver helpers, the generic
launcher) are kept between pools in a folder of the user's cache
(backends/triton/backend.py: host_module_folder): only a folder that is the user's
own and not writable by others, only where the pool's children run under
uids of their own (root) unless the user names one, and never with
KERNELSMITH_HOST_CACHE=off. The build itself needs an NVIDIA driver; its
effect on a cold eval is measured on the GPU (benchmarks/gpu_verify.sh latency)."""

from __future__ import annotations

import os

from kernelsmith.backends.triton import backend as tb


def test_a_named_folder_is_made_private_and_used(tmp_path, monkeypatch):
    folder = tmp_path / "host"
    monkeypatch.setenv(tb.HOST_CACHE_ENV, str(folder))
    assert tb.host_module_folder() == str(folder)
    assert (folder.stat().st_mode & 0o777) == 0o700
    monkeypatch.setenv("TRITON_CACHE_DIR", "/pool/zygote/.triton")
    with tb._host_module_cache():
        assert os.environ["TRITON_CACHE_DIR"] == str(folder)
    assert os.environ["TRITON_CACHE_DIR"] == "/pool/zygote/.triton"  # the pool's own again after the build


def test_a_folder_others_can_write_is_never_used(tmp_path, monkeypatch):
    folder = tmp_path / "open"
    folder.mkdir()
    folder.chmod(0o777)
    monkeypatch.setenv(tb.HOST_CACHE_ENV, str(folder))
    assert tb.host_module_folder() is None
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    with tb._host_module_cache():
        assert "TRITON_CACHE_DIR" not in os.environ


def test_off_and_the_default_for_a_plain_user(tmp_path, monkeypatch):
    monkeypatch.setenv(tb.HOST_CACHE_ENV, "off")
    assert tb.host_module_folder() is None
    monkeypatch.delenv(tb.HOST_CACHE_ENV)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert tb.host_module_folder() is None  # a child of this user could write it
    # as root: below the account's home whatever $HOME says (a zygote's HOME
    # is its pool's folder, gone with the pool)
    import pwd

    home = tmp_path / "home"
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: type("pw", (), {"pw_dir": str(home)})())
    monkeypatch.setenv("HOME", str(tmp_path / "pool" / "zygote"))
    assert tb.host_module_folder() == str(home / ".cache" / "kernelsmith" / "triton-host")
