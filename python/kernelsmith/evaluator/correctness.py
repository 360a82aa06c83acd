"""Output comparison for the correctness protocol (runs in workers)."""

from __future__ import annotations

import math
import zlib
from typing import Any, Optional

import torch


def flatten_outputs(out: Any) -> list[torch.Tensor]:
    """Tensors of a forward result (tensor, number, or nested tuple/list)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        flat: list[torch.Tensor] = []
        for item in out:
            flat += flatten_outputs(item)
        return flat
    if isinstance(out, (int, float, bool)):
        return [torch.tensor(out)]
    raise TypeError(f"forward returned {type(out).__name__}; expected a tensor or a tuple of tensors")


def snapshot(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    return [t.detach().clone() for t in tensors]


#: elements compared at once (float64 temporaries of 128 MiB each)
CHUNK = 1 << 24


#: elements per slice of the host-side fast path: two float64 slices and
#: their temporaries stay in a core's cache
_SLICE = 1 << 16


def _errors_if_within(
    g: torch.Tensor, e: torch.Tensor, atol: float, rtol: float, chunk: int
) -> Optional[tuple[float, float]]:
    """(max_abs_err, max_rel_err) of ``g`` against ``e`` when every element
    is within tolerance (then every difference is finite), else None: the
    full pass below then finds and names the mismatch. The same float64
    arithmetic as the full pass, in fewer passes and, on the host, slice by
    slice (on a device, in chunks: see CHUNK): the full pass over a 4M-element output took 0.7 s on a loaded
    2-core machine, most of a CPU evaluation's correctness phase."""
    gf, ef = g.detach().reshape(-1), e.detach().reshape(-1)
    step = chunk if gf.is_cuda else _SLICE
    oks, abs_max, rel_max = [], [], []
    for start in range(0, gf.numel(), step):
        gd = gf[start : start + step].to(torch.float64)
        ed = ef[start : start + step].to(torch.float64)
        diff = torch.sub(gd, ed).abs_()
        scale = ed.abs()
        oks.append((diff <= scale * rtol + atol).all())
        abs_max.append(diff.max())
        rel_max.append(diff.div_(scale.clamp_min_(1e-12)).masked_fill_(ed == 0, 0.0).max())
    # one device-to-host read (each read waits for the device)
    values = torch.stack(
        [torch.stack(oks).all().to(torch.float64), torch.stack(abs_max).max(), torch.stack(rel_max).max()]
    ).tolist()
    # an infinite expected value gives an infinite tolerance: the full pass
    # leaves such elements out of the error figures
    return (values[1], values[2]) if values[0] and math.isfinite(values[1]) else None


#: the task's accuracy contract for this process's evaluations
#: (TaskConfig.comparison, set by the worker and the referee before they
#: compare): {} = elementwise atol/rtol
_CONTRACT: dict[str, float] = {}


def set_comparison(contract: Optional[dict[str, Any]]) -> None:
    """Use ``contract`` (cosine_sim, l1_relative, rmse) in :func:`compare`
    from now on in this process; {} or None: atol/rtol."""
    _CONTRACT.clear()
    _CONTRACT.update({str(k): float(v) for k, v in (contract or {}).items()})


def precision_metrics(got: torch.Tensor, expected: torch.Tensor) -> dict[str, float]:
    """Cosine similarity, relative L1 (sum |got - expected| / sum |expected|)
    and RMSE of two tensors, in float64 (two all-zero tensors: cosine 1)."""
    g = got.detach().reshape(-1).to(torch.float64)
    e = expected.detach().reshape(-1).to(torch.float64)
    gn, en = float(torch.linalg.vector_norm(g)), float(torch.linalg.vector_norm(e))
    if gn < 1e-12 and en < 1e-12:
        cosine = 1.0
    elif gn < 1e-12 or en < 1e-12:
        cosine = 0.0
    else:
        cosine = float(torch.dot(g, e)) / (gn * en)
    diff = g - e
    l1 = float(diff.abs().sum()) / max(float(e.abs().sum()), 1e-12)
    rmse = float(torch.sqrt(torch.mean(diff * diff))) if diff.numel() else 0.0
    return {"cosine_sim": cosine, "l1_relative": l1, "rmse": rmse}


def _compare_contract(
    got: list[torch.Tensor], expected: list[torch.Tensor], contract: dict[str, float]
) -> dict[str, Any]:
    res: dict[str, Any] = {
        "ok": True,
        "max_abs_err": 0.0,
        "max_rel_err": 0.0,
        "message": "",
        "first_mismatch": None,
        "contract": dict(contract),
        "metrics": [],
    }
    for k, (g, e) in enumerate(zip(got, expected)):
        m = precision_metrics(g, e) if g.numel() else {"cosine_sim": 1.0, "l1_relative": 0.0, "rmse": 0.0}
        res["metrics"].append(m)
        if g.numel():
            d = (g.detach().to(torch.float64) - e.detach().to(torch.float64)).abs()
            finite = torch.isfinite(d)
            res["max_abs_err"] = max(res["max_abs_err"], float(torch.where(finite, d, 0.0).max()))
        res["max_rel_err"] = max(res["max_rel_err"], m["l1_relative"])
        failed = [
            f"cosine similarity {m['cosine_sim']:.6g} < {contract['cosine_sim']}"
            for _ in [0]
            if "cosine_sim" in contract and not m["cosine_sim"] >= contract["cosine_sim"]
        ]
        failed += [
            f"{name} {m[key]:.6g} > {contract[key]}"
            for key, name in (("l1_relative", "relative L1"), ("rmse", "RMSE"))
            if key in contract and not m[key] <= contract[key]
        ]
        if failed:
            res.update(
                ok=False,
                message=f"output {k} misses the task's accuracy contract: {', '.join(failed)}",
                first_mismatch={
                    "output": k,
                    "index": [],
                    "got": None,
                    "expected": None,
                    "count": g.numel(),
                    "metrics": m,
                },
            )
            return res
    return res


def _unravel(flat: int, shape: tuple) -> list[int]:
    """The index of flat position ``flat`` in a C-contiguous ``shape``
    (torch.unravel_index's first call costs 0.67 s on the 2-core host: an
    import, on a wrong program's feedback path in every fresh worker)."""
    idx = []
    for dim in reversed(shape):
        flat, r = divmod(flat, dim) if dim else (flat, 0)
        idx.append(int(r))
    return idx[::-1]


def within(got: list[torch.Tensor], expected: list[torch.Tensor], atol: float, rtol: float, chunk: int = CHUNK) -> bool:
    """Whether :func:`compare` would pass ``got``, without the full pass
    that counts and locates the mismatches (the trivial-output check asks
    this of zeros, a constant and each input: the full pass over a 4M-element
    output, three times, was most of the referee's priming on the host)."""
    if len(got) != len(expected):
        return False
    for g, e in zip(got, expected):
        if not isinstance(g, torch.Tensor) or tuple(g.shape) != tuple(e.shape) or g.dtype != e.dtype:
            return False
        if g.numel() and _errors_if_within(g, e, atol, rtol, chunk) is None:
            # the same NaN or Inf on both sides matches: only the full pass
            # says (rare: most trivial outputs fail on finite values)
            if bool(torch.isfinite(g).all()) and bool(torch.isfinite(e).all()):
                return False
            if not compare([g], [e], atol, rtol, chunk)["ok"]:
                return False
    return True


def _out_of_tolerance(
    g: torch.Tensor, e: torch.Tensor, atol: float, rtol: float, chunk: int, res: dict[str, Any]
) -> tuple[int, Optional[tuple[int, float, float]], bool, bool]:
    """How many elements of ``g`` are out of tolerance against ``e``, the
    first of them (flat index, got, expected), and whether ``g`` has NaN or
    Inf the reference lacks; ``res``'s largest errors updated."""
    # in chunks of the flattened outputs: the float64 temporaries of a
    # whole 6 GiB output (five of them, twice its size each) did not fit
    # next to the worker's copies on an 80 GB card
    gf, ef = g.detach().reshape(-1), e.detach().reshape(-1)
    n_bad, first, has_nan, has_inf = 0, None, False, False
    for lo in range(0, gf.numel(), chunk):
        gd = gf[lo : lo + chunk].to(torch.float64)
        ed = ef[lo : lo + chunk].to(torch.float64)
        diff = (gd - ed).abs()
        same_special = (gd == ed) | (torch.isnan(gd) & torch.isnan(ed))
        bad = ~((diff <= atol + rtol * ed.abs()) | same_special)
        finite = torch.isfinite(diff)
        fdiff = torch.where(finite, diff, torch.zeros_like(diff))
        rel = fdiff / ed.abs().clamp_min(1e-12)
        rel = torch.where(finite & (ed != 0), rel, torch.zeros_like(rel))
        # one device-to-host read per chunk (each read waits for the
        # device): the errors (0 where nothing is finite), how many
        # elements are out of tolerance, NaN/Inf the reference lacks
        max_abs, max_rel, bad_count, nan_here, inf_here = torch.stack(
            [
                fdiff.max(),
                rel.max(),
                bad.sum().to(fdiff.dtype),
                (torch.isnan(gd) & ~torch.isnan(ed)).any().to(fdiff.dtype),
                (torch.isinf(gd) & ~torch.isinf(ed)).any().to(fdiff.dtype),
            ]
        ).tolist()
        res["max_abs_err"] = max(res["max_abs_err"], max_abs)
        res["max_rel_err"] = max(res["max_rel_err"], max_rel)
        if bad_count:
            n_bad += int(bad_count)
            has_nan, has_inf = has_nan or bool(nan_here), has_inf or bool(inf_here)
            if first is None:
                at = lo + int(bad.nonzero()[0, 0])
                first = (at, float(gd[at - lo]), float(ed[at - lo]))
    return n_bad, first, has_nan, has_inf


def compare(
    got: list[torch.Tensor], expected: list[torch.Tensor], atol: float, rtol: float, chunk: int = CHUNK
) -> dict[str, Any]:
    """Compare candidate outputs with the reference.

    Returns {"ok", "max_abs_err", "max_rel_err", "message", "first_mismatch"}.
    An element matches when |got - expected| <= atol + rtol * |expected|, or
    both are the same NaN/Inf. Under a task's accuracy contract
    (:func:`set_comparison`) each output instead must reach its cosine
    similarity and stay within its relative L1 and RMSE (max_rel_err is
    then the relative L1).
    """
    res: dict[str, Any] = {"ok": True, "max_abs_err": 0.0, "max_rel_err": 0.0, "message": "", "first_mismatch": None}
    if len(got) != len(expected):
        res.update(ok=False, message=f"forward returned {len(got)} tensor(s), expected {len(expected)}")
        return res
    if _CONTRACT:
        for k, (g, e) in enumerate(zip(got, expected)):
            if not isinstance(g, torch.Tensor) or tuple(g.shape) != tuple(e.shape) or g.dtype != e.dtype:
                break  # the checks below name it
        else:
            return _compare_contract(got, expected, dict(_CONTRACT))
    for k, (g, e) in enumerate(zip(got, expected)):
        if not isinstance(g, torch.Tensor):
            res.update(ok=False, message=f"output {k} is {type(g).__name__}, expected a tensor")
            return res
        if tuple(g.shape) != tuple(e.shape):
            res.update(ok=False, message=f"output {k} has shape {tuple(g.shape)}, expected {tuple(e.shape)}")
            return res
        if g.dtype != e.dtype:
            res.update(ok=False, message=f"output {k} has dtype {g.dtype}, expected {e.dtype}")
            return res
        if g.numel() == 0:
            continue
        fast = _errors_if_within(g, e, atol, rtol, chunk)
        if fast is not None:
            res["max_abs_err"] = max(res["max_abs_err"], fast[0])
            res["max_rel_err"] = max(res["max_rel_err"], fast[1])
            continue
        n_bad, first, has_nan, has_inf = _out_of_tolerance(g, e, atol, rtol, chunk, res)
        if first is not None:
            at, got_v, exp_v = first
            idx = _unravel(at, tuple(g.shape))
            nan_note = " (output contains NaN)" if has_nan else " (output contains Inf)" if has_inf else ""
            res.update(
                ok=False,
                message=(
                    f"output {k}: {n_bad} of {g.numel()} elements differ{nan_note}; first at index {idx}: "
                    f"got {got_v:.6g}, expected {exp_v:.6g}"
                ),
                first_mismatch={"output": k, "index": idx, "got": got_v, "expected": exp_v, "count": n_bad},
            )
            return res
    return res


def identical(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    """Bitwise equal tensor lists (replayed-output detection), compared where
    they are: on a GPU, copying two 6 GiB outputs to the host for this cost
    seconds per trial (most of a KernelBench level-1 correctness phase)."""
    if len(a) != len(b):
        return False
    return all(
        x.shape == y.shape
        and x.dtype == y.dtype
        and (torch.equal(x, y) if x.device == y.device else torch.equal(x.cpu(), y.cpu()))
        for x, y in zip(a, b)
    )


def fingerprint(tensors: list[torch.Tensor], chunk: int = CHUNK) -> list[tuple]:
    """A small stand-in for bitwise identity (the replay check's history):
    per tensor its shape, dtype and two sums over its raw bytes as 32-bit
    words, one of them weighted by position, computed in chunks on the
    tensor's device. Identical tensors always have equal fingerprints; the
    history keeps these instead of four trials' full outputs. On the host the
    two sums are CRC-32 and Adler-32 of the bytes (zlib, one pass each without
    a copy: 13x faster than the sums through torch on a 16 MB output, which
    made this the CPU step's largest cost after the program itself)."""
    prints: list[tuple] = []
    for t in tensors:
        raw = t.detach().contiguous().reshape(-1).view(torch.uint8)
        if raw.device.type == "cpu":
            data = raw.numpy().data if raw.numel() else b""
            prints.append((tuple(t.shape), str(t.dtype), zlib.crc32(data), zlib.adler32(data), "host"))
            continue
        words = raw[: raw.numel() // 4 * 4].view(torch.int32)
        tail = tuple(raw[words.numel() * 4 :].tolist())
        plain = torch.zeros((), dtype=torch.int64, device=t.device)
        weighted = torch.zeros((), dtype=torch.int64, device=t.device)
        for lo in range(0, words.numel(), chunk):
            part = words[lo : lo + chunk].to(torch.int64)
            plain += part.sum()
            weighted += (part * torch.arange(lo + 1, lo + 1 + part.numel(), device=t.device, dtype=torch.int64)).sum()
        prints.append((tuple(t.shape), str(t.dtype), int(plain), int(weighted), tail))
    return prints


def inputs_equal(a: list[Any], b: list[Any]) -> Optional[int]:
    """Index of the first input that differs (tensors compared bitwise), else None."""
    for k, (x, y) in enumerate(zip(a, b)):
        if isinstance(x, torch.Tensor):
            if (
                x.shape != y.shape
                or not torch.equal(x, y)
                and not (torch.isnan(x).any() and torch.equal(torch.nan_to_num(x), torch.nan_to_num(y)))
            ):
                return k
    return None


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:g} {unit}" if unit == "B" else f"{n:.4g} {unit}"
        n /= 1024
    return f"{n} B"


def layout(values: list[Any]) -> list[Optional[tuple]]:
    """What a caller sees of each tensor argument besides its values: class,
    shape, strides, storage offset, dtype, device, data pointer, storage
    size, requires_grad (None for non-tensors). Taken on tensors the harness
    made (plain ``torch.Tensor``), so reading them runs no program code."""
    rec: list[Optional[tuple]] = []
    for v in values:
        if not isinstance(v, torch.Tensor):
            rec.append(None)
            continue
        rec.append(
            (
                type(v),
                tuple(v.shape),
                tuple(v.stride()),
                v.storage_offset(),
                v.dtype,
                v.device,
                v.data_ptr(),
                v.untyped_storage().nbytes(),
                v.requires_grad,
            )
        )
    return rec


def layout_change(before: list[Optional[tuple]], values: list[Any]) -> Optional[tuple[int, str]]:
    """(index, what changed) of the first tensor argument whose class or
    memory layout is no longer what :func:`layout` recorded, else None. The
    class is compared first, with ``type()`` (which no ``__class__``
    property can fake): a changed class is reported without touching the
    tensor, whose ``__torch_function__`` may be the program's."""
    for k, (rec, v) in enumerate(zip(before, values)):
        if rec is None:
            continue
        cls = rec[0]
        if type(v) is not cls:
            name = lambda c: f"{c.__module__}.{c.__qualname__}"  # noqa: E731
            return k, f"its class was changed from {name(cls)} to {name(type(v))}"
        now = layout([v])[0]
        if now == rec:
            continue
        what = []
        names = (
            "class",
            "shape",
            "strides",
            "storage offset",
            "dtype",
            "device",
            "data pointer",
            "storage size",
            "requires_grad",
        )
        for i, label in enumerate(names):
            if i == 0 or rec[i] == now[i]:
                continue
            if label == "data pointer":
                what.append("its memory moved (data pointer)")
            elif label == "storage size":
                what.append(f"storage size {_fmt_bytes(rec[i])} -> {_fmt_bytes(now[i])}")
            else:
                what.append(f"{label} {rec[i]} -> {now[i]}")
        return k, ", ".join(what)
    return None
