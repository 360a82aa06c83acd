"""The referee's evidence: one trial's outputs, as a file that crosses the
trust boundary.

The worker (candidate code runs there) writes, per input set the referee
re-checks, the program's outputs and the in-worker reference's into one
file (:func:`write_outputs`; a large output as a sample at
:func:`evidence_positions`); the parent copies each named file out of the
worker's reach the moment it is handed over (:func:`take_evidence`) and
links that copy into the referee's folder (:func:`copy_regular`); the
referee process reads it back (:func:`read_outputs`).

The file is untrusted input: a JSON header line, then the raw bytes;
counts, dtypes and sizes are checked before anything is read. Used by all
three processes (worker, parent, referee); it imports nothing of the
package.
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional

#: limits on an outputs file (written by untrusted code)
MAX_TENSORS = 64
MAX_BYTES = 1 << 31
DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool", "complex64")


def evidence_limit(outputs_bytes: int = 0) -> int:
    """The largest outputs file accepted for a task whose largest output set
    is ``outputs_bytes`` (memory.Footprint): both groups and a header, and
    never less than MAX_BYTES (a 4096 x 393216 fp32 output alone is 6 GiB)."""
    return max(MAX_BYTES, 2 * int(outputs_bytes) + (1 << 20))


#: an output tensor of more elements than this goes to the referee as a
#: sample (EVIDENCE_SAMPLE positions drawn from the trial's input seed, plus
#: EVIDENCE_EDGE elements at each end): a 4096 x 393216 fp32 output and its
#: reference were 12 GiB copied to the host, written, copied by the parent
#: and read back per input set, most of a KernelBench level-1 evaluation
EVIDENCE_FULL_ELEMENTS = 1 << 23
EVIDENCE_SAMPLE = 1 << 22
EVIDENCE_EDGE = 1 << 16


def evidence_positions(numel: int, input_seed: int) -> Optional[Any]:
    """The flat positions of an output of ``numel`` elements that the worker
    hands over and the referee checks, or None for all of them. The worker
    and the referee derive the same positions from the trial's input seed
    (which the worker drew its inputs from anyway): whoever could steer them
    already writes the whole file. Since the worker knows them, the output is
    also checked at chunks the parent picks after the worker sent the whole
    output's hashes (protocol.answer_commit, checks/referee_evidence.py)."""
    import torch

    if numel <= EVIDENCE_FULL_ELEMENTS:
        return None
    gen = torch.Generator().manual_seed((int(input_seed) * 0x9E3779B1 + 0x5EED) % (1 << 63))
    inner = torch.randint(EVIDENCE_EDGE, numel - EVIDENCE_EDGE, (EVIDENCE_SAMPLE,), generator=gen)
    return torch.cat([torch.arange(EVIDENCE_EDGE), inner, torch.arange(numel - EVIDENCE_EDGE, numel)])


def evidence_copy(tensors: list[Any], input_seed: int) -> list[Any]:
    """Worker side: the host copy of one trial's outputs for the referee,
    each tensor whole or, when large, as :func:`evidence_positions`' sample
    (gathered on its device first) paired with its full shape."""
    out = []
    for t in tensors:
        t = t.detach()
        pos = evidence_positions(t.numel(), input_seed)
        if pos is None:
            out.append(t.to("cpu", copy=True))
        else:
            out.append(Sampled(t.reshape(-1)[pos.to(t.device)].to("cpu"), list(t.shape)))
    return out


class Sampled:
    """A sample of an output (its elements at :func:`evidence_positions`)
    and the output's full shape, for the outputs file."""

    def __init__(self, values: Any, of: list[int]) -> None:
        self.values, self.of = values, of


def _raw_views(groups: dict[str, list[Any]]) -> tuple[bytes, list[Any]]:
    """The header line and each tensor's bytes as a view (no copy of a
    contiguous host tensor); a :class:`Sampled` entry also names the shape
    it was sampled from (``of``)."""
    import torch

    header: dict[str, list[dict[str, Any]]] = {}
    views = []
    for name, tensors in groups.items():
        header[name] = []
        for t in tensors:
            of = t.of if isinstance(t, Sampled) else None
            t = (t.values if isinstance(t, Sampled) else t).detach().to("cpu").contiguous()
            raw = t.reshape(-1).view(torch.uint8).numpy() if t.numel() else b""
            entry = {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape), "nbytes": len(raw)}
            if of is not None:
                entry["of"] = list(of)
            header[name].append(entry)
            views.append(raw)
    return (json.dumps(header) + "\n").encode(), views


def encode_outputs(groups: dict[str, list[Any]]) -> bytes:
    """The outputs file's bytes for the tensors of each group (``candidate``,
    ``reference``): a JSON header line, then each tensor's raw bytes."""
    head, views = _raw_views(groups)
    return b"".join([head, *(bytes(v) for v in views)])


def write_outputs(path: str, groups: dict[str, list[Any]]) -> None:
    """Worker side: :func:`encode_outputs` written to ``path`` a tensor at a
    time (a 6 GiB output is not copied into one more bytes object)."""
    head, views = _raw_views(groups)
    with open(path, "wb") as f:
        f.write(head)
        for view in views:
            f.write(view)


def read_outputs(path: str, limit: int = MAX_BYTES) -> dict[str, list[Any]]:
    """Referee side: the groups back, validated; ``limit`` is the largest
    file accepted (:func:`evidence_limit`). A sampled entry comes back as a
    :class:`Sampled` (its values, the full shape it names)."""
    import torch

    size = os.path.getsize(path)
    if size > limit:
        raise ValueError(f"outputs file of {size} bytes is over the limit")
    with open(path, "rb") as f:
        header = json.loads(f.readline(1 << 20) or b"{}")
        if not isinstance(header, dict) or sum(len(v) for v in header.values() if isinstance(v, list)) > MAX_TENSORS:
            raise ValueError("bad outputs header")
        out: dict[str, list[Any]] = {}
        # "chunks": the picked chunks of the program's sampled outputs, whole
        # (protocol.answer_commit)
        for name in ("candidate", "reference", "chunks"):
            out[name] = []
            for entry in header.get(name, []):
                dtype, shape, nbytes = entry["dtype"], [int(d) for d in entry["shape"]], int(entry["nbytes"])
                if dtype not in DTYPES or any(d < 0 for d in shape):
                    raise ValueError(f"bad tensor entry {entry}")
                tdtype = getattr(torch, dtype)
                numel = 1
                for d in shape:
                    numel *= d
                if numel * torch.empty(0, dtype=tdtype).element_size() != nbytes:
                    raise ValueError(f"tensor entry {entry}: size does not match its shape")
                raw = bytearray(nbytes)  # read into, not read and copy: one copy of a large output
                view, got = memoryview(raw), 0
                while got < nbytes:
                    n = f.readinto(view[got : got + (1 << 30)])
                    if not n:
                        raise ValueError("outputs file is truncated")
                    got += n
                flat = torch.frombuffer(raw, dtype=torch.uint8) if nbytes else torch.empty(0, dtype=torch.uint8)
                value: Any = flat.view(tdtype).reshape(shape) if nbytes else torch.empty(shape, dtype=tdtype)
                of = entry.get("of")
                if of is not None:
                    if not isinstance(of, list) or len(of) > 16 or any(not isinstance(d, int) or d < 0 for d in of):
                        raise ValueError(f"bad tensor entry {entry}")
                    value = Sampled(value, of)
                out[name].append(value)
    return out


def take_evidence(store: dict[str, Any], trials: Any) -> None:
    """Parent side, when the worker hands over its trial outputs (the
    ``evidence`` message, sent when the trials end and before any more of
    the program runs, the timing included): each named file is copied at
    once from the worker's folder (``store["src"]``) into a folder of the
    parent's (``store["dir"]``), and the entries name the copies. What the
    program does later (rewrite the files, or the bytes they were written
    from, while it is timed) no longer reaches the referee. Only the first
    hand-over counts; another is recorded as ``store["repeated"]``."""
    if "trials" in store:
        store["repeated"] = True
        return
    if (
        not isinstance(trials, list)
        or len(trials) > int(store.get("max_trials") or 16)
        or not all(isinstance(e, dict) for e in trials)
    ):
        store["trials"] = trials  # the referee check says what is wrong with it
        return
    taken = []
    for entry in trials:
        entry = dict(entry)
        try:
            copy = copy_regular(
                os.path.join(store["src"], os.path.basename(str(entry.get("file")))),
                store["dir"],
                int(store.get("max_bytes") or MAX_BYTES),
            )
            entry["file"] = os.path.basename(copy)
        except (OSError, ValueError) as exc:
            entry["not_handed_over"] = f"{type(exc).__name__}: {exc}"[:300]
        taken.append(entry)
    store["trials"] = taken


def evidence_info(store: Optional[dict[str, Any]]) -> Any:
    """What the referee check (trusted/referee_check.py) takes as the
    worker's word on its trial outputs: the handed-over entries, or None
    where nothing was handed over."""
    if not store or "trials" not in store:
        return None
    return {
        "trials": store["trials"],
        "repeated": bool(store.get("repeated")),
        # the large outputs' commitments by set (protocol.answer_commit)
        "commits": store.get("commits") or {},
        "commit_repeated": bool(store.get("commit_repeated")),
    }


def copy_regular(path: str, into: str, limit: int = MAX_BYTES, link: bool = False) -> str:
    """Copy a child's outputs file (a regular file, not a link, within the
    size limit) into the referee's folder. ``link``: the file is already
    the parent's own copy, so a hard link to the very file opened will do
    (no second copy of a 12 GiB file on the disk), a copy where it cannot."""
    import secrets
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            raise ValueError("not a regular file within the size limit")
        dest = os.path.join(into, f"check-{secrets.token_hex(8)}.bin")
        if link:
            try:
                os.link(path, dest, follow_symlinks=False)
                linked = os.stat(dest, follow_symlinks=False)
                if (linked.st_dev, linked.st_ino) == (st.st_dev, st.st_ino):  # the very file checked above
                    return dest
                os.unlink(dest)
            except OSError:
                pass
        with os.fdopen(os.dup(fd), "rb") as src, open(dest, "wb") as dst:
            remaining = st.st_size
            while remaining > 0:
                chunk = src.read(min(remaining, 1 << 22))
                if not chunk:
                    break
                dst.write(chunk)
                remaining -= len(chunk)
        os.chmod(dest, 0o644)
        return dest
    finally:
        os.close(fd)
