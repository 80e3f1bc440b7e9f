"""Pass 3 of reverse mode, the save plan: which forward values the reverse part reads, and which
of those must be saved because the kernel overwrites them.

``plan_saves(normalised, activity)`` returns a ``SavePlan``:

* **Recomputation** (``recompute``): where a read of an overwritten cell can be computed again
  from inputs nobody changes (the single store that wrote it, in the same loop variables), the
  coefficient uses that expression instead and no tape is needed.
* **Needed values** (``chains``, ``need_at``, ``needed``): a value is *needed* when a derivative
  coefficient, a condition, a subscript or a loop bound of the reverse part reads it, or when a
  needed value is computed from it.  Only the statements computing needed values are kept in
  the forward part.
* **Saves**: the reverse part reads forward values where they live, so each must hold, when
  read, the value the forward statement saw.  Values nobody overwrites afterwards need nothing.
  Where a cell of a tensor is overwritten after a needed read, each store to that tensor first
  saves the old value on a tape (``taped``: indexed by the loops around the store, up to the
  block that declares the tensor) and the reverse part writes it back after the store's
  adjoint.  A scalar assigned again is copied into another scalar just before the assignment
  and restored after its adjoint (``snap``); a scalar assigned inside a loop (or branch) but
  declared outside it is saved on entry to each iteration in a tape indexed by that loop
  (before a branch: in a scalar; ``entry``).  A branch condition that the branch itself may
  change is saved too (``cond_snap``, ``cond_tape``), and a value a replay could not recompute
  is recorded when first computed (``value_tape``).

Whether a store may overwrite a read value is asked of ``dependence.py``.  ``chain`` (the chain
rule of one assignment) is shared with emission.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from ..dsl import ast as syntax
from ..dsl.unparse import expr as unparse_expr
from . import rules
from .activity import Activity
from .affine import unit_step
from .dependence import affine, cells_may_meet, may_follow
from .idioms import extrema
from .normalise import Normalised, walk_stmts
from .rules import name
from .tree import Names, accumulation, replace_expr, replace_reads, subst_expr, target_name, unsupported, value_walk, walk


@dataclass(frozen=True, eq=False)
class SavePlan:
    """Pass 3's record.  Statements are keyed by ``id()`` (of the ``Normalised`` record's nodes)."""
    recompute: MappingProxyType  # id(stmt) -> {unparsed read: expression recomputing it}
    chains: MappingProxyType  # id(active assignment) -> (accumulation?, ((read, coefficient), ...))
    need_at: MappingProxyType  # id(stmt) -> names its reverse code reads
    needed: frozenset  # every value the reverse part needs, and what computing them reads
    taped: frozenset  # id(store) whose old value goes to a tape
    restore: frozenset  # tensors some taped store writes
    snap: MappingProxyType  # id(scalar assignment) -> the scalar copying the old value
    entry: MappingProxyType  # id(For / If) -> {scalar: its tape (For) or copy (If) on entry}
    cond_snap: MappingProxyType  # id(If) -> the bool scalar (or tape) holding its condition
    cond_tape: MappingProxyType  # id(If) -> loops indexing its condition's tape (If inside a loop or branch)
    value_tape: MappingProxyType  # id(assignment) -> tape of the values it computes
    used: frozenset  # the names taken so far (the kernel's and those made up here)
    extrema: MappingProxyType  # id(update) -> idioms.Extremum: adjoints in closed form, no saves
    first: MappingProxyType  # id(update) -> the scalar holding its maximum's value before its loops


def plan_saves(nz: Normalised, act: Activity) -> SavePlan:
    """Pass 3: recomputation, needed values and saves of the normalised kernel ``nz``."""
    return _Planner(nz, act).run()


def chain(nz: Normalised, act: Activity, recompute, s: syntax.Assign, g, extrema=MappingProxyType({})):
    """(accumulation?, [(read, coefficient)]) for the assignment ``s`` with result adjoint ``g``;
    reads of overwritten cells in the coefficients replaced as ``recompute`` says.  For the update
    of a running maximum or minimum (``extrema``) ``g`` is the share of one position: the pairs
    are those of the value compared."""
    acc = accumulation(s)
    c = rules.Chain(act.is_active)
    if id(s) in extrema:
        c.run(extrema[id(s)].operand, g)
    elif acc is not None:
        sign, f = acc
        c.run(f, g if sign > 0 else rules.neg(g))
    else:
        c.run(s.value, g)
    out = c.out
    subs = recompute.get(id(s))
    if subs:
        out = [(r, replace_reads(coef, subs)) for r, coef in out]
    if isinstance(s.target, syntax.Name) and acc is None and isinstance(s.value, syntax.Call) \
            and s is nz.scalars[s.target.id].decl:
        # exp(u), sigmoid(u), ... reappear in their own derivative: use the value computed.
        out = [(r, replace_expr(coef, unparse_expr(s.value), s.target)) for r, coef in out]
    return acc is not None, out


class _Planner:
    """Builds one ``SavePlan``; used once, by ``plan_saves``."""

    def __init__(self, nz: Normalised, act: Activity):
        self.nz = nz
        self.act = act
        self.names = Names(nz.used)

    def run(self) -> SavePlan:
        self.extrema = extrema(self.nz, self.act)
        self.first = {k: self.names.fresh(f"{x.name}_first") for k, x in self.extrema.items()}
        self.recompute = {}
        self.plan_recompute()
        self.analyse()
        self.plan_saves()
        entry = MappingProxyType({k: MappingProxyType(v) for k, v in self.entry.items()})
        return SavePlan(MappingProxyType(self.recompute), MappingProxyType(self.chains),
                        MappingProxyType({k: frozenset(v) for k, v in self.need_at.items()}), frozenset(self.needed),
                        frozenset(self.taped), frozenset(self.restore), MappingProxyType(self.snap), entry,
                        MappingProxyType(self.cond_snap), MappingProxyType(self.cond_tape),
                        MappingProxyType(self.value_tape), frozenset(self.names.used),
                        MappingProxyType(self.extrema), MappingProxyType(self.first))

    def chain(self, s: syntax.Assign, g):
        return chain(self.nz, self.act, self.recompute, s, g, self.extrema)

    def compared(self, s):
        """The value a running maximum's update compares, as its reverse code reads it."""
        subs = self.recompute.get(id(s))
        e = self.extrema[id(s)].operand
        return replace_reads(e, subs) if subs else e

    # ------------------------------------------------------------ recomputation instead of tapes
    def plan_recompute(self):
        """Reads of overwritten cells whose value the statement that wrote it can recompute from
        intact inputs: the coefficients use that expression instead (no tape, no forward part)."""
        stores = {}
        for w in self.nz.assigns:
            if isinstance(w.target, syntax.Subscript):
                stores.setdefault(w.target.value.id, []).append(w)
        for p in self.nz.assigns:
            if not self.act.is_active(p.value):
                continue
            for r in value_walk(p.value):
                if not (isinstance(r, syntax.Subscript) and isinstance(r.value, syntax.Name) and r.value.id in stores):
                    continue
                ws = stores[r.value.id]
                if not any(may_follow(self.nz, self.act, w, p, r, r.value.id) for w in ws):
                    continue  # intact: read where it lives
                expr = self.reaching_value(p, r, ws)
                if expr is not None:
                    self.recompute.setdefault(id(p), {})[unparse_expr(r)] = expr

    def reaching_value(self, p, r, ws):
        """The expression that computed cell ``r`` read by ``p``, in ``p``'s loop variables, or None."""
        before = [w for w in ws if w is not p and self.nz.info[id(w)].first < self.nz.info[id(p)].first]
        others = [w for w in ws if w is not p and w not in before]
        if len(before) != 1 or others:
            return None
        if any(w is p for w in ws):
            if unparse_expr(p.target) != unparse_expr(r):
                return None
            # p reads the cell it then writes: the value is w0's only if p writes each cell once
            # (otherwise an earlier iteration of p wrote it: `y[()] *= x[i]`)
            depth = len(self.nz.tensors[r.value.id].block.loops)
            for lp in self.nz.info[id(p)].block.loops[depth:]:
                if not any(unit_step(affine(self.nz, self.act, i), lp.var) for i in p.target.indices):
                    return None
        w0 = before[0]
        b = self.nz.info[id(w0)].block
        while not self.nz.info[id(p)].block.inside(b):
            if isinstance(b.owner, syntax.If):
                return None  # w0 may not run: another store (or none) may have written the cell
            b = b.parent
        lw, lp_ = self.nz.info[id(w0)].block.loops, self.nz.info[id(p)].block.loops
        depth = 0
        while depth < min(len(lw), len(lp_)) and lw[depth] is lp_[depth]:
            depth += 1
        own = {lp.var: lp for lp in lw[depth:]}
        by_p = {lp.var: lp for lp in lp_}
        mapping = {}
        for wi, ri in zip(w0.target.indices, r.indices):
            a = affine(self.nz, self.act, wi)
            if a is None:
                return None
            vs = [k for k in a if isinstance(k, str) and k in own]
            if not vs:
                if affine(self.nz, self.act, ri) != a:
                    return None
                continue
            if len(vs) != 1 or a[vs[0]] != 1 or not isinstance(ri, syntax.Name) or ri.id not in by_p:
                return None
            v = vs[0]
            if set(k for k in a if k is not None) != {v} or a.get(None, 0) != 0:
                return None
            q = by_p[ri.id]
            if unparse_expr(own[v].lo) != unparse_expr(q.lo) or unparse_expr(own[v].hi) != unparse_expr(q.hi) \
                    or own[v].step != q.step:
                return None
            mapping[v] = name(q.var)
        if set(mapping) != set(own):
            return None
        value = self.inline_locals(w0.value, w0, set(own))
        if value is None:
            return None
        return subst_expr(value, mapping)

    def inline_locals(self, e, w0, own_vars, depth=0):
        """``e`` (read at ``w0``) with scalars local to ``w0``'s own loops replaced by their single
        definition; None if it reads something that may have changed after ``w0``."""
        if depth > 8:
            return None
        subs = {}
        for x in value_walk(e):
            if isinstance(x, syntax.Subscript) and isinstance(x.value, syntax.Name):
                if any(isinstance(a.target, syntax.Subscript) and a.target.value.id == x.value.id for a in self.nz.assigns):
                    return None  # only tensors nobody writes
            elif isinstance(x, syntax.Name) and x.id in self.nz.scalars:
                sc = self.nz.scalars[x.id]
                assigns = [a for a in self.nz.assigns if isinstance(a.target, syntax.Name) and a.target.id == x.id]
                local = sc.block.loops and sc.block.loops[-1].var in own_vars
                if local:
                    if len(assigns) != 1 or self.nz.info[id(assigns[0])].first > self.nz.info[id(w0)].first:
                        return None
                    inner = self.inline_locals(assigns[0].value, w0, own_vars, depth + 1)
                    if inner is None:
                        return None
                    subs[x.id] = inner
                else:
                    for a in assigns:
                        shared = [lp for lp in self.nz.info[id(a)].block.loops[len(sc.block.loops):]
                                  if lp in self.nz.info[id(w0)].block.loops]
                        if self.nz.info[id(a)].first > self.nz.info[id(w0)].first or shared:
                            return None
        return subst_expr(e, subs) if subs else e

    # ------------------------------------------------------------ needed values
    def analyse(self):
        """The chain rule of each active assignment (``chains``), the names the reverse code of
        each statement reads (``need_at``) and every value needed at all (``needed``)."""
        self.need_at: dict = {}  # id(stmt) -> names read at reverse time
        g = name("__g")
        self.chains = {}
        for s in self.nz.assigns:
            n = target_name(s.target)
            active = (n in self.act.active_t) if isinstance(s.target, syntax.Subscript) else (n in self.act.active_s)
            if not active:
                continue
            acc, pairs = self.chain(s, g) if self.act.is_active(s.value) else (False, [])
            if self.act.is_active(s.value):
                self.chains[id(s)] = (acc, tuple(pairs))
            need = self.nz.index_reads(s.target) if isinstance(s.target, syntax.Subscript) else set()
            for read, coef in pairs:
                need |= self.nz.reads(coef) | self.nz.index_reads(read)
                if isinstance(read, syntax.Subscript):
                    need |= self.nz.index_reads(syntax.Tuple(None, [read]))
            if id(s) in self.extrema:  # the ties: the value compared, and the maximum itself
                need |= {n} | self.nz.reads(self.compared(s)) | self.nz.index_reads(self.compared(s))
            need.discard("__g")
            self.need_at[id(s)] = need
            for c in self.nz.enclosing(s):
                if id(s) in self.extrema and c is self.extrema[id(s)].branch:
                    continue  # (its adjoint does not take the branch again)
                self.need_at.setdefault(id(c), set()).update(self.nz.compound_reads(c))
        self.needed = set()
        for v in self.need_at.values():
            self.needed |= v
        for n in self.act.active_s:
            # The adjoint of an active scalar takes its dtype from the scalar's first value.
            self.needed |= self.nz.reads(self.nz.scalars[n].decl.value)
        # Close over the statements computing needed values.
        work = list(self.needed)
        while work:
            n = work.pop()
            for s in self.nz.assigns:
                if target_name(s.target) != n:
                    continue
                more = self.nz.reads(s.value) | (self.nz.index_reads(s.target) if isinstance(s.target, syntax.Subscript) else set())
                for c in self.nz.enclosing(s):
                    more |= self.nz.compound_reads(c)
                for m in more - self.needed:
                    self.needed.add(m)
                    work.append(m)

    # ------------------------------------------------------------ pass 4: saves
    def plan_saves(self):
        """Which stores save the old value on a tape, which scalars are copied before an assignment
        or on entry to a loop or branch, which conditions and values are recorded, and which
        assignments are replayed in the reverse part."""
        # Where the reverse part reads forward values: (statement, name, subscript).
        positions = []
        self.replay_scalar_reads = []
        self.value_tape = {}  # id(store) -> tape of the values it computed
        g = name("__g")

        def add_reads(stmt, e):
            for x in value_walk(e):
                if isinstance(x, syntax.Subscript) and isinstance(x.value, syntax.Name) and x.value.id in self.nz.tensors:
                    positions.append((stmt, x.value.id, x))
                elif isinstance(x, syntax.Name) and x.id in self.nz.scalars:
                    positions.append((stmt, x.id, None))

        for s in self.nz.assigns:
            if id(s) in self.chains:
                _, pairs = self.chain(s, g)
                for read, coef in pairs:
                    add_reads(s, coef)
                    if isinstance(read, syntax.Subscript):
                        for i in read.indices:
                            add_reads(s, i)
                if isinstance(s.target, syntax.Subscript):
                    for i in s.target.indices:
                        add_reads(s, i)
                if id(s) in self.extrema:
                    # (the maximum it reads in reverse is the final one: no later store changes it)
                    add_reads(s, self.compared(s))
            n = target_name(s.target)
            if n in self.needed and self.nz.decl_block(n).parent is not None:
                # Replayed at the start of reversed iterations: what it reads from outside must be
                # as it was at the start of the iteration.
                conflict = [x for x in value_walk(s.value) if isinstance(x, syntax.Subscript)
                            and isinstance(x.value, syntax.Name) and self.replay_conflict(s, x)]
                if conflict:
                    t = self.nz.tensors.get(n)
                    if t is not None and any(isinstance(x, syntax.Name) and x.id in self.nz.scalars for x in walk(t.dtype)):
                        raise unsupported(f"a value computed from `{conflict[0].value.id}` before the same loop body "
                                          f"overwrites `{conflict[0].value.id}`", s,
                                          "compute the value into a temporary tensor first")
                    # Recomputing it would read overwritten cells: save it when first computed.
                    self.value_tape[id(s)] = self.names.fresh(f"{n}_saved")
                else:
                    self.replay_scalar_reads.append((s, self.nz.reads(s.value) | (
                        self.nz.index_reads(s.target) if isinstance(s.target, syntax.Subscript) else set())))
                    # Stores of later iterations that overwrite what it reads are undone (taped
                    # and restored) before the replay runs.
                    for x in value_walk(s.value):
                        if isinstance(x, syntax.Subscript) and isinstance(x.value, syntax.Name) and x.value.id in self.nz.tensors:
                            positions.append((s, x.value.id, x))
        for c in walk_stmts(self.nz.top.body):
            if isinstance(c, syntax.If) and id(c) in self.need_at:
                add_reads(c, c.cond)
        writers = {}
        for s in self.nz.assigns:
            writers.setdefault(target_name(s.target), []).append(s)
        # Stores whose old value a later-reversed read needs: saved on a tape, restored.
        self.snap = {}  # id(assign) -> snapshot scalar name
        taped, snapped = set(), set()
        for p, n, sub in positions:
            for w in writers.get(n, []):
                if id(w) in taped or id(w) in snapped:
                    continue
                if may_follow(self.nz, self.act, w, p, sub, n):
                    if isinstance(w.target, syntax.Subscript):
                        taped.add(id(w))
                    elif w is not self.nz.scalars[n].decl:
                        snapped.add(id(w))
        self.taped = taped
        self.restore = {w.target.value.id for w in self.nz.assigns if id(w) in taped}
        for c in walk_stmts(self.nz.top.body):
            if isinstance(c, syntax.For) and id(c) in self.need_at:
                lp = self.nz.loops[c.target.id]
                for n in self.nz.reads(lp.lo) | self.nz.reads(lp.hi):
                    # a tensor cell no store overwrites after the loop reads it (CSR row pointers,
                    # counts the kernel computes first) reads the same in reverse
                    if n in self.nz.tensors:
                        subs = [x for e in (lp.lo, lp.hi) for x in value_walk(e)
                                if isinstance(x, syntax.Subscript) and isinstance(x.value, syntax.Name) and x.value.id == n]
                        changed = any(target_name(a.target) == n and any(may_follow(self.nz, self.act, a, c, sub, n) for sub in subs)
                                      for a in self.nz.assigns)
                    else:
                        changed = any(target_name(a.target) == n and a is not self.nz.scalars[n].decl
                                      for a in self.nz.assigns)
                    if changed:
                        raise unsupported("a loop bound that the kernel changes while it runs", c)
        # Scalars: saved before an assignment whose old value is read later in reverse, and on entry
        # to each loop / branch (inside their declaring block) around such an assignment.
        self.entry = {}  # id(For/If) -> {scalar: tape or snapshot name}
        self.cond_snap = {}  # id(If) -> bool scalar holding its condition
        for s in self.nz.assigns:
            if id(s) not in snapped:
                continue
            n = s.target.id
            self.snap[id(s)] = self.names.fresh(f"{n}_old")
            decl_block = self.nz.scalars[n].block
            for c in self.nz.enclosing(s):
                if self.nz.info[id(c)].block.inside(decl_block):
                    names = self.entry.setdefault(id(c), {})
                    if n not in names:
                        names[n] = self.names.fresh(f"{n}_at_{c.target.id}" if isinstance(c, syntax.For) else f"{n}_before_if")
        assigned_in = {}
        for a in self.nz.assigns:
            if isinstance(a.target, syntax.Name):
                for c in self.nz.enclosing(a):
                    assigned_in.setdefault(id(c), set()).add(a.target.id)
        for s, names in self.replay_scalar_reads:
            b = self.nz.decl_block(target_name(s.target))
            for u in names:
                if u not in self.nz.scalars:
                    continue
                d = self.nz.scalars[u].block
                blk = b
                while blk is not None and blk is not d and blk.owner is not None and blk.inside(d):
                    c = blk.owner
                    if u in assigned_in.get(id(c), set()):
                        names_c = self.entry.setdefault(id(c), {})
                        if u not in names_c:
                            names_c[u] = self.names.fresh(f"{u}_at_{c.target.id}" if isinstance(c, syntax.For)
                                                    else f"{u}_before_if")
                    blk = blk.parent
        branches = {id(x.branch) for x in self.extrema.values()}
        for c in walk_stmts(self.nz.top.body):
            if id(c) in branches:
                continue
            if isinstance(c, syntax.If) and (id(c) in self.need_at or self.nz.reads(c.cond) & self.needed):
                changed = set()
                for s in walk_stmts(c.body + c.orelse):
                    if isinstance(s, syntax.Assign):
                        changed.add(target_name(s.target))
                if self.nz.reads(c.cond) & changed:
                    self.cond_snap[id(c)] = self.names.fresh("cond")
        # A condition saved inside a loop or branch goes to a tape at the top, filled by the forward part.
        self.cond_tape = {id(c): tuple(self.nz.info[id(c)].block.loops) for c in walk_stmts(self.nz.top.body)
                          if id(c) in self.cond_snap and self.nz.info[id(c)].block.parent is not None}

    def replay_conflict(self, s, sub) -> bool:
        """A replay recomputes ``s`` at the start of a reversed loop iteration (or branch): whether a
        tensor it reads may be overwritten later inside that same iteration."""
        t = sub.value.id
        if t not in self.nz.tensors:
            return False
        b = self.nz.decl_block(target_name(s.target))
        while b is not None and b.parent is not None:
            if not self.nz.tensors[t].block.inside(b):
                for w in self.nz.assigns:
                    if not (isinstance(w.target, syntax.Subscript) and w.target.value.id == t
                            and self.nz.info[id(w)].block.inside(b)):
                        continue
                    shared = [lp for lp in self.nz.info[id(w)].block.loops[len(b.loops):]
                              if lp in self.nz.info[id(s)].block.loops]
                    if (self.nz.info[id(w)].first >= self.nz.info[id(s)].first or shared) \
                            and cells_may_meet(self.nz, self.act, s, sub, w, len(b.loops)):
                        return True
            b = b.parent
        return False
