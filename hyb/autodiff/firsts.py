"""Which adjoint cells are first touched by a known statement of the reverse part.

Adjoints start at zero (or, for an output, at its incoming gradient) and the reverse part adds to
them.  Where one statement is known to be the first to touch each cell, the emitter writes less:

* ``covering_last_store(o)``: the last store to output ``o`` writes every cell of it after every
  other access, so its reverse code is the first to read each cell of ``o``'s adjoint, which
  still holds the incoming gradient: it reads the incoming gradient itself, and the adjoint
  needs no copy of it;
* ``sole_reader(t)``: the one assignment reading tensor ``t`` (an input nothing writes, or a
  temporary written by one store before it) adds to each cell of ``t``'s adjoint once, first:
  it may assign instead of add, and the temporary's store need not clear the adjoint after.

``Firsts`` answers for one emitter (``emission._Emitter``), whose records it reads.
"""
from __future__ import annotations

from ..dsl import ast as syntax
from ..dsl.unparse import expr as unparse_expr
from . import rules
from .affine import unit_step
from .gathers import writes_each_cell_once
from .normalise import walk_stmts
from .tree import value_walk


class Firsts:
    """The questions above, for the kernel one emitter writes (answers kept per tensor)."""

    def __init__(self, em):
        self.em = em
        self._sole_readers = {}

    def covering_last_store(self, o):
        """The store to output ``o`` whose reverse code is the first to touch each cell of its
        adjoint, where it writes every cell of ``o``: a plain store after every other access to
        ``o`` (those sharing its loops reach other cells in other iterations of them), in loops
        from 0 over the whole of each dimension of ``o``, with no branch around it.  None
        otherwise."""
        stores = [w for w in self.em.nz.assigns if isinstance(w.target, syntax.Subscript) and w.target.value.id == o]
        if not stores:
            return None
        w = stores[-1]
        if id(w) not in self.em.plan.chains or self.em.plan.chains[id(w)][0] or not self.em.clears(w):
            return None
        if any(isinstance(c, syntax.If) for c in self.em.nz.enclosing(w)):
            return None
        if any(isinstance(x, syntax.Subscript) and isinstance(x.value, syntax.Name) and x.value.id == o
               and unparse_expr(x) != unparse_expr(w.target) for x in value_walk(w.value)):
            return None  # (it reads other cells of `o`: their adjoints grow before it reads them)
        for c in walk_stmts(self.em.nz.top.body):
            if isinstance(c, (syntax.For, syntax.If)) and o in self.em.nz.compound_reads(c):
                return None
        loops = self.em.nz.info[id(w)].block.loops
        t = self.em.nz.tensors[o]
        if len(w.target.indices) != len(loops) or t.block is not self.em.nz.top:
            return None
        for k, i in enumerate(w.target.indices):
            lp = next((lp for lp in loops if isinstance(i, syntax.Name) and i.id == lp.var), None)
            if lp is None or not (rules.is_num(lp.lo) and lp.lo.value == 0) or lp.step != 1:
                return None
            if isinstance(t.shape, syntax.Tuple):
                if len(t.shape.elts) != len(loops):
                    return None
                size = unparse_expr(t.shape.elts[k])
            else:
                size = f"{unparse_expr(t.shape)}[{k}]"
            if unparse_expr(lp.hi) != size:
                return None
        if len({i.id for i in w.target.indices}) != len(loops):
            return None
        for a in self.em.nz.assigns:
            if a is w:
                continue
            subs = [x for x in value_walk(a.value) if isinstance(x, syntax.Subscript)
                    and isinstance(x.value, syntax.Name) and x.value.id == o]
            if isinstance(a.target, syntax.Subscript):
                if any(o in self.em.nz.reads(i) for i in a.target.indices):
                    return None
                if a.target.value.id == o:
                    subs.append(a.target)
            if not subs:
                continue
            if self.em.nz.info[id(a)].first > self.em.nz.info[id(w)].first:
                return None
            for lp in self.em.nz.info[id(a)].block.loops:
                if lp in loops and not any(all(len(x.indices) > p and unparse_expr(x.indices[p]) == lp.var
                                               for x in subs) and unparse_expr(w.target.indices[p]) == lp.var
                                           for p in range(len(w.target.indices))):
                    return None
        return w

    def sole_reader(self, t):
        """The one assignment reading tensor ``t``, where its adjoint cells all start at zero and
        that assignment's reverse code is the first to add to each of them (once), so that it may
        assign them: ``t`` an input nothing writes or a temporary written by one store before it,
        outside the store's loops; the reader reads one cell of ``t`` per iteration of its loops.
        None otherwise."""
        if t not in self._sole_readers:
            self._sole_readers[t] = self._find_sole_reader(t)
        return self._sole_readers[t]

    def _find_sole_reader(self, t):
        decl = self.em.nz.tensors.get(t)
        if decl is None or t in self.em.nz.outputs or t not in self.em.act.active_t:
            return None
        readers, cells = [], set()
        for a in self.em.nz.assigns:
            subs = [x for x in value_walk(a.value) if isinstance(x, syntax.Subscript)
                    and isinstance(x.value, syntax.Name) and x.value.id == t]
            if any(t in self.em.nz.reads(i) for i in (a.target.indices if isinstance(a.target, syntax.Subscript) else [])):
                return None
            if subs:
                readers.append(a)
                cells |= {unparse_expr(x) for x in subs}
        for c in walk_stmts(self.em.nz.top.body):
            if isinstance(c, (syntax.For, syntax.If)) and t in self.em.nz.compound_reads(c):
                return None
        if len(readers) != 1 or len(cells) != 1:
            return None
        r = readers[0]
        stores = [w for w in self.em.nz.assigns if isinstance(w.target, syntax.Subscript) and w.target.value.id == t]
        if decl.kind == "param" and stores:
            return None
        depth = len(decl.block.loops)
        if decl.kind != "param" and (
                decl.kind != "temp" or len(stores) != 1 or stores[0] is r
                or not writes_each_cell_once(self.em, stores[0], self.em.nz.info[id(stores[0])].block.loops[depth:])
                or self.em.nz.info[id(stores[0])].last >= self.em.nz.info[id(r)].first
                or any(lp in self.em.nz.info[id(r)].block.loops for lp in self.em.nz.info[id(stores[0])].block.loops)):
            return None
        read = next(x for x in value_walk(r.value) if isinstance(x, syntax.Subscript)
                    and isinstance(x.value, syntax.Name) and x.value.id == t)
        for lp in self.em.nz.info[id(r)].block.loops[depth:]:
            if not any(unit_step(self.em.affine(i), lp.var) for i in read.indices):
                return None
        return r

    def sole_store(self, s) -> bool:
        """Whether ``s`` is the one store of a temporary whose adjoint a sole reader has given."""
        return isinstance(s.target, syntax.Subscript) and self.em.nz.tensors[s.target.value.id].kind == "temp" \
            and self.sole_reader(s.target.value.id) is not None
