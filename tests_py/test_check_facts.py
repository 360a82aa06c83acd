"""Strict facts (issue 28): each protocol point declares the facts it
provides (``checks.base.FACTS``), the worker's own state on the checks'
context is declared (``checks.base.STATE``), and what a check stores for
itself is its ``keeps``. Reading a name that is none of these raises an
AttributeError naming it and the point, where it used to read as None (a
misspelled fact silently never fired).

Static: every registered check reads only its points' facts, the state and
its own keeps, and stores only its keeps; every call of ``enforce`` /
``findings`` in the evaluator passes exactly its point's facts; the
worker sets only declared state. Runtime: the error itself.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path

import pytest

from kernelsmith.evaluator import checks
from kernelsmith.evaluator.checks import base
from kernelsmith.evaluator.checks.base import FACTS, STATE, Check, Context

EVALUATOR = Path(checks.__file__).resolve().parents[1]
CHECKS_DIR = EVALUATOR / "checks"
#: Context's own members a check may use
MEMBERS = {"update", "point"}


def _ctx_names(fn: ast.AST) -> set[str]:
    """The names a function's context parameter goes by (``ctx``)."""
    args = fn.args  # type: ignore[attr-defined]
    return {a.arg for a in args.args + args.kwonlyargs if a.arg == "ctx"}


def _uses(node: ast.AST) -> tuple[set[str], set[str], set[str]]:
    """(read, stored, functions the context is passed to) in ``node``."""
    reads, stores, passed = set(), set(), set()
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "ctx":
            (stores if isinstance(n.ctx, ast.Store) else reads).add(n.attr)
        if isinstance(n, ast.Call) and any(isinstance(a, ast.Name) and a.id == "ctx" for a in n.args):
            passed.add(ast.unparse(n.func))
    return reads, stores, passed


def _module_functions() -> dict[str, tuple[set[str], set[str], set[str]]]:
    """Every module-level function of checks/ that takes the context: what it reads, stores, passes it to."""
    found = {}
    for path in CHECKS_DIR.glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and _ctx_names(node):
                found[node.name] = _uses(node)
    return found


def check_uses(check: Check) -> tuple[set[str], set[str]]:
    """What ``check`` reads and stores on the context, through the helpers
    of checks/ it hands the context to."""
    cls = type(check)
    tree = ast.parse(Path(inspect.getsourcefile(cls)).read_text())
    (node,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls.__name__]
    reads, stores, passed = _uses(node)
    helpers = _module_functions()
    seen: set[str] = set()
    while passed - seen:
        name = sorted(passed - seen)[0]
        seen.add(name)
        if name in ("self.fields",):
            continue
        assert name in helpers, f"{cls.__name__} hands the context to {name}, which this test cannot read"
        r, s, p = helpers[name]
        reads, stores, passed = reads | r, stores | s, passed | p
    return reads, stores


@pytest.mark.parametrize("check", checks.CHECKS, ids=lambda c: type(c).__name__)
def test_each_check_reads_only_its_points_facts_the_state_and_its_keeps(check):
    assert check.points and all(p in FACTS for p in check.points), (check.name, check.points)
    reads, stores = check_uses(check)
    facts = set().union(*(FACTS[p] for p in check.points))
    unknown = reads - facts - STATE - set(check.keeps) - MEMBERS
    assert not unknown, (
        f"{type(check).__name__} reads {sorted(unknown)}: not a fact of its points "
        f"{check.points}, nor the evaluation's state, nor its keeps"
    )
    assert stores <= set(check.keeps), f"{type(check).__name__} stores {sorted(stores - set(check.keeps))}"
    # a check's keeps are its own: no fact or state of that name
    assert not set(check.keeps) & (STATE | set().union(*FACTS.values()))


def test_the_scan_sees_a_misspelled_fact():
    class Misspelled(Check):
        name, points = "misspelled", (base.TRIAL_DONE,)

        def reasons(self, at, ctx):
            return [] if ctx.gott == ctx.expected else ["differs"]

    reads, _, _ = _uses(ast.parse(textwrap.dedent(inspect.getsource(Misspelled))))
    assert "gott" in reads and "gott" not in FACTS[base.TRIAL_DONE] | STATE


def _evaluator_calls() -> list[tuple[str, str, set[str]]]:
    """(where, point, facts) of every enforce/findings call outside checks/."""
    calls = []
    for path in EVALUATOR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("enforce", "findings")
                and node.args
            ):
                point = getattr(base, ast.unparse(node.args[0]), None)
                calls.append((f"{path.name}:{node.lineno}", point, {k.arg for k in node.keywords if k.arg}))
    return calls


def test_every_point_is_called_with_exactly_its_facts():
    calls = _evaluator_calls()
    assert calls
    for where, point, facts in calls:
        assert point in FACTS, (where, point)
        assert facts == FACTS[point], (
            f"{where}: {point!r} is declared with {sorted(FACTS[point])}, passed {sorted(facts)}"
        )
    called = {point for _, point, _ in calls}
    assert called == set(FACTS), f"declared but never provided: {sorted(set(FACTS) - called)}"


def test_the_worker_sets_only_declared_state():
    """What the evaluator's modules set on the context (``Context(...)``,
    ``ctx.update(...)``, ``ctx.name = ...``) is STATE, and all of STATE is set somewhere."""
    set_names: dict[str, str] = {}
    for path in EVALUATOR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{path.name}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Call) and ast.unparse(node.func) in ("Context", "ctx.update"):
                set_names.update({k.arg: where for k in node.keywords if k.arg})
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id == "ctx"
            ):
                set_names[node.attr] = where
    undeclared = {k: w for k, w in set_names.items() if k not in STATE}
    assert not undeclared, f"declare these in checks.base.STATE: {undeclared}"
    assert STATE <= set(set_names), f"declared but never set: {sorted(STATE - set(set_names))}"


def test_reading_an_undeclared_fact_raises_naming_it_and_the_point():
    seen = []

    class Misspelled(Check):
        name, points = "misspelled", (base.TRIAL_DONE,)

        def reasons(self, at, ctx):
            seen.append((ctx.point, ctx.got))
            return [] if ctx.gott == ctx.expected else ["differs"]

    facts = dict(got=[1], expected=[1], set_name="get_inputs", step=0, input_seed_index=0)
    saved = list(checks.CHECKS)
    try:
        checks.CHECKS[:] = [Misspelled()]
        ctx = Context(out={})
        with pytest.raises(
            AttributeError,
            match=r"'gott' is not a fact of point 'trial done' \(its facts: expected, "
            r"got, input_seed_index, set_name, step\)",
        ):
            checks.findings(base.TRIAL_DONE, ctx, **facts)
        assert seen == [(base.TRIAL_DONE, [1])]
        # the facts are gone after the point, and reading one then says so
        assert "got" not in vars(ctx) and ctx.point == ""
        with pytest.raises(AttributeError, match="no 'got' .no point is running"):
            _ = ctx.got
        # the state a point's check reads is its own (not a fact): there
        assert ctx.out == {}
        # a point is called with exactly its facts
        with pytest.raises(TypeError, match="provides the facts"):
            checks.findings(base.TRIAL_DONE, ctx, got=[1], expected=[1])
        with pytest.raises(ValueError, match="not a point"):
            checks.findings("no such point", ctx)
    finally:
        checks.CHECKS[:] = saved


def test_points_nest_and_the_innermost_is_named():
    """A check that calls the program again (refill, timer) runs CALL's
    checks inside its own point: the innermost point is the one named, and
    the outer point's facts are still there."""
    inner = []

    class Outer(Check):
        name, points = "outer", (base.AFTER_TRIALS,)

        def reasons(self, at, ctx):
            checks.findings(base.CALL_OUTPUT, ctx, flat=[], launches=None)
            return []

    class Inner(Check):
        name, points = "inner", (base.CALL_OUTPUT,)

        def reasons(self, at, ctx):
            inner.append((ctx.point, ctx.held))
            with pytest.raises(AttributeError, match="point 'call output'"):
                _ = ctx.guard
            return []

    saved = list(checks.CHECKS)
    try:
        checks.CHECKS[:] = [Outer(), Inner()]
        checks.findings(base.AFTER_TRIALS, Context(), gen=None, held=[2])
        assert inner == [(base.CALL_OUTPUT, [2])]
    finally:
        checks.CHECKS[:] = saved
