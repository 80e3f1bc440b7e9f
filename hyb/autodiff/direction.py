"""Which reverse loops may run forwards.

Reverse mode runs a loop's adjoint backwards, from its last iteration to its first.  Most
reverse loops need no order at all: each iteration reads and writes cells of its own, and what
the iterations share are adjoint sums (``d_s += ...``), which may be added in any order (a
kernel's sums are reassociated unless its ``schedule=`` says ``reassociate=False``).  Such a loop
is written forwards, as the user wrote it, so that it vectorises and runs on threads like any
other loop.

``runs_forwards(body, var, local)`` decides it from the statements of one reverse loop body:

* a scalar the body assigns must be local to an iteration (``local``: a name the body declares),
  unless the body only adds to it (``n += e``) and never reads it;
* a tensor the body stores to must be local too (allocated in the body), or only added to and
  never read in the body, or else accessed everywhere in the body at subscripts that tell the
  iterations apart (one position holding the same affine expression in all of them, with a
  nonzero coefficient on ``var`` and none on the loops inside the body).
"""
from __future__ import annotations

from ..dsl import ast as syntax
from ..dsl.unparse import expr as unparse_expr
from .affine import affine_form
from .tree import TENSOR_MAKERS, value_walk


class _Accesses:
    """What one loop body reads and writes, by name."""

    def __init__(self):
        self.scalar_sets: set = set()
        self.scalar_incs: set = set()
        self.reads: set = set()  # names read as values (scalars, loop bounds, subscripts)
        self.tensor_sets: dict = {}  # tensor -> [index tuple]
        self.tensor_incs: dict = {}
        self.tensor_reads: dict = {}
        self.allocated: set = set()
        self.loop_vars: set = set()

    def expr(self, e):
        for x in value_walk(e):
            if isinstance(x, syntax.Name):
                self.reads.add(x.id)
            elif isinstance(x, syntax.Subscript) and isinstance(x.value, syntax.Name):
                self.tensor_reads.setdefault(x.value.id, []).append(x.indices)
                for i in x.indices:
                    self.expr(i)

    def target(self, t, table: dict, scalars: set):
        if isinstance(t, syntax.Name):
            scalars.add(t.id)
        elif isinstance(t, syntax.Subscript) and isinstance(t.value, syntax.Name):
            table.setdefault(t.value.id, []).append(t.indices)
            for i in t.indices:
                self.expr(i)
        else:
            raise _Unknown

    def stmts(self, body):
        for s in body:
            if isinstance(s, syntax.Assign):
                self.expr(s.value)
                self.target(s.target, self.tensor_sets, self.scalar_sets)
                if isinstance(s.target, syntax.Name) and isinstance(s.value, syntax.Call) \
                        and isinstance(s.value.func, syntax.Name) and s.value.func.id in TENSOR_MAKERS:
                    self.allocated.add(s.target.id)
            elif isinstance(s, syntax.AugAssign):
                self.expr(s.value)
                if s.op != "+":
                    raise _Unknown
                self.target(s.target, self.tensor_incs, self.scalar_incs)
            elif isinstance(s, syntax.For):
                if not isinstance(s.target, syntax.Name):
                    raise _Unknown
                self.loop_vars.add(s.target.id)
                self.expr(s.iter)
                self.stmts(s.body)
            elif isinstance(s, syntax.If):
                self.expr(s.cond)
                self.stmts(s.body)
                self.stmts(s.orelse)
            elif type(s).__name__ in ("Comment", "Pass"):
                continue
            else:
                raise _Unknown


class _Unknown(Exception):
    """A statement the analysis does not read: the loop keeps its reverse order."""


def runs_forwards(body: list, var: str, local: set) -> bool:
    """Whether the reverse loop over ``var`` with statements ``body`` computes the same adjoints
    (up to the order of its sums) when its iterations run in increasing order.  ``local`` holds
    the names each iteration declares afresh before reading them."""
    acc = _Accesses()
    try:
        acc.stmts(body)
    except _Unknown:
        return False
    local = set(local) | acc.allocated | acc.loop_vars
    for n in acc.scalar_sets:
        if n not in local:
            return False
    for n in acc.scalar_incs - local:
        if n in acc.reads or n in acc.tensor_reads:
            return False
    assigned = acc.scalar_sets | acc.scalar_incs
    for t in set(acc.tensor_sets) | set(acc.tensor_incs):
        if t in local:
            continue
        if t not in acc.tensor_sets and t not in acc.tensor_reads and t not in acc.reads:
            continue  # only added to
        subs = acc.tensor_sets.get(t, []) + acc.tensor_incs.get(t, []) + acc.tensor_reads.get(t, [])
        if not _tells_apart(subs, var, acc.loop_vars, assigned):
            return False
    return True


def _tells_apart(subs: list, var: str, inner_vars: set, assigned: set) -> bool:
    """Whether two iterations of ``var`` always reach different cells through the subscripts
    ``subs``: one position holds the same expression in all of them, affine with a nonzero
    coefficient on ``var`` and none on the loops inside the body."""
    if len({len(sub) for sub in subs}) != 1:
        return False
    loop_vars = {var} | inner_vars
    for p in range(len(subs[0])):
        if len({unparse_expr(sub[p]) for sub in subs}) != 1:
            continue
        form = affine_form(subs[0][p], loop_vars, lambda n: n in assigned)
        if form is not None and form.get(var) and not any(form.get(v) for v in inner_vars):
            return True
    return False
