"""Pass 4 of reverse mode: the gradient kernel itself.

``emit(normalised, activity, save_plan, with_outputs)`` returns the ``Gradient``: a new syntax
tree and the tapes it allocates.  It makes up names (adjoints, tapes, loop variables) with a
``Names`` allocator of its own, seeded with every name the kernel and the save plan use.
The gradient kernel has three parts:

1. **forward**: the statements of the kernel that compute needed values (the rest is
   dropped), with the saves of the save plan: old values pushed to tapes, scalars copied
   before they are assigned again, conditions recorded;
2. **adjoints**: ``d_<x>`` for every active tensor and scalar (an output's adjoint starts as
   its incoming gradient; one nothing writes is the incoming gradient itself);
3. **reverse**: the statements in reverse order, loops run backwards unless their iterations
   share only adjoint sums (``direction.py``: then forwards).  For ``x[i] = e`` it takes
   ``t = d_x[i]``, clears ``d_x[i]`` and adds ``t * de/dr`` to the adjoint of each read ``r``
   of ``e`` (a clear and the first increment of the same cell are one assignment, and so is the
   increment of the one statement reading a temporary or an input); an accumulation
   ``x[i] = x[i] + e`` only adds.  Saved values are written back after the adjoint of the
   statement that overwrote them.  A running maximum or minimum of the save plan's ``extrema``
   gets its closed-form adjoint instead (``reverse_extremum``).

The reverse body of a loop or branch first *replays* the forward statements of that body
that compute values local to it (scalars, ``allocate`` temporaries), then runs backwards.
Tapes are sized by an affine bound on the iteration count of the loops they are indexed by.
A costly call the replay computes in a loop is kept in a row for the adjoints of the same
iteration (``rows.py``).  A loop nest around one assignment may instead be turned into gathers
(``gathers.py``).
"""
from __future__ import annotations

from ..dsl import ast as syntax
from ..dsl.intrinsics import INTRINSICS
from ..dsl.unparse import Comment
from ..dsl.unparse import expr as unparse_expr
from . import dependence, rules
from .activity import Activity
from .affine import aff_add, aff_expr, aff_scale
from .direction import runs_forwards
from .rows import Frame, Rows
from .firsts import Firsts
from .saves import SavePlan, chain
from .gathers import gather_nest, writes_each_cell_once
from .normalise import Normalised, stmt_exprs, walk_stmts
from .rules import add, call, name, num
from .tree import (Block, Gradient, Loop, Names, accumulation, attr, copy_loop, increment, subscript, subst,
                   replace_expr, replace_reads, target_name, unconditional_calls, unsupported, value_walk, walk)


def emit(nz: Normalised, act: Activity, plan: SavePlan, with_outputs: bool = False, rows: bool = True) -> Gradient:
    """Pass 4: the gradient kernel of the normalised kernel ``nz`` (taking its outputs too where
    ``with_outputs``)."""
    return _Emitter(nz, act, plan, with_outputs, rows).run()


class _Emitter:
    """Builds one ``Gradient``; used once, by ``emit``.  Besides the records it reads, it holds
    what it decides while writing: names (adjoints, tapes, copies), the tapes and where each
    is declared.  ``gathers.py`` reads and adds to it too."""

    def __init__(self, nz: Normalised, act: Activity, plan: SavePlan, with_outputs: bool, rows: bool = True):
        self.nz = nz
        self.act = act
        self.plan = plan
        self.with_outputs = with_outputs
        self.keep_rows = rows  # whether costly values are kept in rows (rows.py)
        self.names = Names(plan.used)

    def fresh(self, base: str) -> str:
        return self.names.fresh(base)

    # ------------------------------------------------------------ questions of the other passes
    def chain(self, s, g):
        return chain(self.nz, self.act, self.plan.recompute, s, g, self.plan.extrema)

    def affine(self, e):
        return dependence.affine(self.nz, self.act, e)

    def may_follow(self, w, s, sub, n) -> bool:
        return dependence.may_follow(self.nz, self.act, w, s, sub, n)

    def constant_like(self, n) -> bool:
        return dependence.constant_like(self.nz, self.act, n)

    # ------------------------------------------------------------ the kernel
    def run(self) -> Gradient:
        self.tapes = []
        self.dout_direct = {}  # id(last store of an output) -> the incoming gradient its reverse code reads
        self.rows = Rows(self, self.keep_rows)
        self.firsts = Firsts(self)
        self.rules = []  # the idiom rules applied, in words
        self.extremum_nests = {id(x.nest): (k, x) for k, x in self.plan.extrema.items()}
        # the save plan's scalar copies -> the scalar each copies (assigned where that scalar lives)
        self.copies = {self.plan.first[k]: x.name for k, x in self.plan.extrema.items()}
        self.copies.update({snap: target_name(a.target) for a in self.nz.assigns for snap in [self.plan.snap.get(id(a))]
                            if snap is not None})
        self.fwd_names = {}  # forward name -> name in the gradient kernel
        self.adj = {}  # tensor or scalar -> its adjoint's name
        self.pending_tapes = {}  # id(block) -> [(stmt whose subtree needs it, Assign)]
        params = list(self.nz.params)
        out_params = {}
        if self.with_outputs:
            for o in self.nz.outputs:
                out_params[o] = self.fresh(f"{o}_out")
                params.append(out_params[o])
        single = len(self.nz.outputs) == 1
        douts = {}
        for o in self.nz.outputs:
            douts[o] = self.fresh("dout" if single else f"dout_{o}")
            params.append(douts[o])
        body = []
        # In-place inputs: the forward part works on a copy.
        for o in self.nz.outputs:
            if o in self.nz.tensor_params and o in self.plan.needed:
                copy = self.fresh(f"{o}_fwd")
                self.fwd_names[o] = copy
                body.append(syntax.Assign(None, name(copy), call("allocate", attr(o, "shape"), attr(o, "dtype"))))
                body.extend(copy_loop(copy, o, self.fresh("idx")))
        self.passed = set()
        for o in self.nz.outputs:
            if self.with_outputs and o not in self.plan.restore and o not in self.nz.tensor_params \
                    and self.reads_see_final(o):
                self.fwd_names[o] = out_params[o]
                self.passed.add(o)
        self.plan_tapes()
        body.extend(self.forward(self.nz.top, replay=False))
        # Adjoints of the top block.
        body.append(Comment(None, "adjoints"))
        for p in self.nz.tensor_params:
            if p in self.act.active_t:
                a = self.adj[p] = self.fresh(f"d_{p}")
                body.append(syntax.Assign(None, name(a), call("output_tensor", attr(p, "shape"), attr(p, "dtype"))))
                if p in self.nz.outputs:
                    body.extend(copy_loop(a, douts[p], self.fresh("idx")))
        for o in self.nz.outputs:
            if o in self.nz.tensor_params or o not in self.act.active_t:
                continue
            if self.adjoint_written(o):
                a = self.adj[o] = self.fresh(f"d_{o}")
                t = self.nz.tensors[o]
                body.append(syntax.Assign(None, name(a), call("allocate", subst(t.shape, self.fwd_names),
                                                         subst(t.dtype, self.fwd_names))))
                last = self.firsts.covering_last_store(o)
                if last is not None:
                    # its reverse code reads every cell first: from the incoming gradient itself
                    self.dout_direct[id(last)] = douts[o]
                else:
                    body.extend(copy_loop(a, douts[o], self.fresh("idx")))
            else:
                self.adj[o] = douts[o]
        body.extend(self.adjoint_decls(self.nz.top, skip=set(self.nz.outputs)))
        body.append(Comment(None, "reverse"))
        body.extend(self.reverse(self.nz.top))
        grads = [p in self.act.active_t for p in self.nz.params]
        body.append(syntax.Return(None, [name(self.adj[p]) for p in self.nz.params if p in self.act.active_t]))
        kdef = syntax.KernelDef(self.nz.kdef.span, f"{self.nz.kdef.name}_grad", [syntax.Param(None, p) for p in params], body,
                           f"Gradient of `{self.nz.kdef.name}` (derived by hyb): takes its inputs"
                           f"{', its outputs' if self.with_outputs else ''} and one gradient per output, "
                           "returns one gradient per differentiable input.")
        return Gradient(kdef, grads, list(self.nz.outputs), self.tapes, params, self.rules)

    def reads_see_final(self, t) -> bool:
        """Whether every read of tensor ``t`` sees its final value (no store to the cell after it)."""
        stores = [w for w in self.nz.assigns if isinstance(w.target, syntax.Subscript) and w.target.value.id == t]
        for s in self.nz.assigns:
            exprs = [s.value] + (list(s.target.indices) if isinstance(s.target, syntax.Subscript) else [])
            for e in exprs:
                for x in value_walk(e):
                    if isinstance(x, syntax.Subscript) and isinstance(x.value, syntax.Name) and x.value.id == t \
                            and any(self.may_follow(w, s, x, t) for w in stores):
                        return False
        return True

    def adjoint_written(self, t) -> bool:
        """Whether the adjoint of tensor ``t`` is ever written (a read of ``t`` adds to it, or a store
        to ``t`` clears it): if not, the incoming gradient can serve as the adjoint."""
        for s in self.nz.assigns:
            if isinstance(s.target, syntax.Subscript) and s.target.value.id == t and self.clears(s):
                return True
            if id(s) not in self.plan.chains:
                continue
            acc, pairs = self.plan.chains[id(s)]
            for read, _ in pairs:
                if isinstance(read, syntax.Subscript) and read.value.id == t:
                    return True
        return False

    def read_anywhere(self, t) -> bool:
        for s in self.nz.assigns:
            acc = accumulation(s) if id(s) in self.plan.chains and self.plan.chains[id(s)][0] else None
            for x in value_walk(s.value if acc is None else acc[1]):
                if isinstance(x, syntax.Subscript) and x.value.id == t:
                    return True
            for x in value_walk(s.target):
                if isinstance(x, syntax.Subscript) and x is not s.target and x.value.id == t:
                    return True
        for c in walk_stmts(self.nz.top.body):
            for e in stmt_exprs(c) if isinstance(c, (syntax.For, syntax.If)) else []:
                if t in self.nz.reads(e):
                    return True
        return False

    def clears(self, s) -> bool:
        """Whether the adjoint of the target of store ``s`` must be cleared after its adjoint."""
        acc = self.plan.chains.get(id(s), (False, []))[0]
        if acc:
            return False
        if isinstance(s.target, syntax.Name):
            return s is not self.nz.scalars[s.target.id].decl
        t = s.target.value.id
        if self.read_anywhere(t) or t in self.nz.tensor_params:
            return True  # (an input written in place: its adjoint is the input's gradient)
        # Nothing reads the tensor: its adjoint matters only to other stores of the same cell.
        stores = [w for w in self.nz.assigns if isinstance(w.target, syntax.Subscript) and w.target.value.id == t]
        if len(stores) > 1:
            return True
        # a loop that writes one cell more than once
        return not writes_each_cell_once(self, s, self.nz.info[id(s)].block.loops[len(self.nz.tensors[t].block.loops):])

    # ------------------------------------------------------------ tapes
    def plan_tapes(self):
        self.store_tape = {}  # id(store) -> (tape name, index tuple)
        for s in self.nz.assigns:
            if id(s) not in self.plan.taped:
                continue
            t = self.nz.tensors[s.target.value.id]
            loops = self.nz.info[id(s)].block.loops[len(t.block.loops):]
            tape = self.fresh(f"{t.name}_tape")
            shape = syntax.Tuple(None, [self.trip_bound(lp) for lp in loops])
            index = [self.iteration(lp) for lp in loops]
            # A temporary's tape takes its declared dtype when that is a literal: a sweep that replays
            # the stores to tape need not declare the temporary itself.
            dtype = t.dtype if t.kind == "temp" and isinstance(t.dtype, syntax.Str) else attr(self.fwd(t.name), "dtype")
            decl = syntax.Assign(None, name(tape), call("allocate", shape, dtype))
            self.tapes.append((tape, shape, dtype, f"old values of `{t.name}`"))
            self.store_tape[id(s)] = (tape, index)
            self.add_pending(t.block, s, decl)
        for c in walk_stmts(self.nz.top.body):
            if id(c) in self.plan.cond_tape:
                shape = syntax.Tuple(None, [self.trip_bound(lp) for lp in self.plan.cond_tape[id(c)]])
                tape = self.plan.cond_snap[id(c)]
                self.tapes.append((tape, shape, syntax.Str(None, "bool"), "a condition at each iteration"))
                self.add_pending(self.nz.top, c, syntax.Assign(None, name(tape), call("allocate", shape, syntax.Str(None, "bool"))))
        for st in self.nz.assigns:
            if id(st) in self.plan.value_tape:
                loops = self.nz.info[id(st)].block.loops
                shape = syntax.Tuple(None, [self.trip_bound(lp) for lp in loops])
                tape = self.plan.value_tape[id(st)]
                n = target_name(st.target)
                if n in self.nz.tensors:
                    dtype = self.F(self.nz.tensors[n].dtype)
                else:  # a scalar: kept in float64 (int64, bool), exact for every float (integer) dtype
                    decl = self.nz.scalars[n]
                    dtype = syntax.Str(None, "bool" if decl.bool_typed else "int64" if decl.int_typed else "float64")
                self.tapes.append((tape, shape, dtype, f"values of `{n}` computed on line "
                                                       f"{getattr(st.span, 'line', '?')}"))
                self.add_pending(self.nz.top, st, syntax.Assign(None, name(tape), call("allocate", shape, dtype)))
        self.scalar_tape = {}  # (id(For), scalar) -> tape name
        for cid, names in self.plan.entry.items():
            c = self.find(cid)
            if not isinstance(c, syntax.For):
                continue
            lp = self.nz.loops[c.target.id]
            for n, tape in names.items():
                shape = syntax.Tuple(None, [self.trip_bound(lp)])
                decl = syntax.Assign(None, name(tape), call("allocate", shape, attr(n, "dtype")))
                self.tapes.append((tape, shape, attr(n, "dtype"), f"`{n}` at each iteration of `{lp.var}`"))
                self.add_pending(self.nz.info[cid].block, c, decl, needs=n)

    def max_over_loops(self, aff, loops):
        """Upper bound of affine ``aff`` over the iterations of ``loops`` (innermost eliminated first)."""
        for lp in reversed(loops):
            c = aff.get(lp.var, 0)
            if c == 0:
                continue
            if (c > 0) == (lp.step > 0):
                bound = self.affine(lp.hi)
                if bound is None:
                    raise unsupported("a loop with bounds that are not affine", lp.node)
                bound = aff_add(bound, {None: -1 if lp.step > 0 else 1}, 1)
            else:
                bound = self.affine(lp.lo)
                if bound is None:
                    raise unsupported("a loop with bounds that are not affine", lp.node)
            rest = dict(aff)
            del rest[lp.var]
            aff = aff_add(rest, aff_scale(bound, c), 1)
        if any(isinstance(k, str) for k in aff):
            raise unsupported("loop bounds the tape size cannot be bounded for")
        return aff

    def trip_bound(self, lp: Loop):
        """An expression bounding the iteration count of ``lp`` for every iteration around it."""
        lo, hi = self.affine(lp.lo), self.affine(lp.hi)
        if lo is None or hi is None:
            raise unsupported("a loop with bounds that are not affine", lp.node)
        span = aff_add(hi, lo, -1) if lp.step > 0 else aff_add(lo, hi, -1)
        outer = self.loops_around(lp)
        m = aff_expr(self.max_over_loops(span, outer))
        k = abs(lp.step)
        if k != 1:
            m = syntax.BinOp(None, "//", add(m, num(k - 1)), num(k))
        return call("max", num(0), m)

    def loops_around(self, lp: Loop) -> list:
        return self.nz.info[id(lp.node)].block.loops

    def iteration(self, lp: Loop):
        v = name(lp.var)
        if lp.step > 0:
            d = rules.sub(v, lp.lo)
            return d if lp.step == 1 else syntax.BinOp(None, "//", d, num(lp.step))
        d = rules.sub(lp.lo, v)
        return d if lp.step == -1 else syntax.BinOp(None, "//", d, num(-lp.step))

    def cond_ref(self, s):
        return subscript(self.plan.cond_snap[id(s)], [self.iteration(lp) for lp in self.plan.cond_tape[id(s)]])

    def find(self, cid):
        for c in walk_stmts(self.nz.top.body):
            if id(c) == cid:
                return c
        raise KeyError(cid)

    def add_pending(self, block, stmt, decl, needs=None):
        """Declare ``decl`` in ``block`` just before the statement of ``block`` containing ``stmt``
        (a scalar's tape only where that scalar is computed: ``needs``)."""
        self.pending_tapes.setdefault(id(block), []).append((stmt, decl, needs))

    # ------------------------------------------------------------ forward part / replay
    def fwd(self, n: str) -> str:
        return self.fwd_names.get(n, n)

    def F(self, e):
        """A forward expression as the gradient kernel writes it (costly calls kept in a row read
        from it, ``rows.py``)."""
        return self.rows.use(subst(e, self.fwd_names))

    def keep_names(self, block: Block, extra=()) -> set:
        """The names whose assignments the forward part of ``block`` (or its replay) runs: the
        needed values declared in ``block``, ``extra``, and what computing them reads inside it."""
        keep = {n for n in self.plan.needed if (n in self.nz.tensors or n in self.nz.scalars)
                and self.nz.decl_block(n) is block} | set(extra)
        if block.parent is None:
            for c in walk_stmts(block.body):
                if id(c) in self.plan.cond_tape:
                    keep |= {m for m in self.nz.reads(c.cond)}
                if id(c) in self.plan.value_tape:
                    keep.add(target_name(c.target))
        typed = {n for n, sc in self.nz.scalars.items() if sc.block is block and n in self.act.active_s}
        for n, sc in self.nz.scalars.items():
            # Constants such as `m = a.shape[1]`: shapes, bounds and tapes may use them.
            if sc.block is block and self.constant_like(n):
                keep.add(n)
        work = list(keep | typed)
        seen = set(work)
        while work:
            n = work.pop()
            for a in self.nz.assigns:
                if target_name(a.target) != n or not self.nz.info[id(a)].block.inside(block):
                    continue
                if n not in keep and a is not self.nz.scalars[n].decl:
                    continue  # kept for its dtype only
                more = self.nz.reads(a.value) | (self.nz.index_reads(a.target) if isinstance(a.target, syntax.Subscript)
                                              else set())
                for c in self.nz.enclosing(a):
                    if not self.nz.info[id(c)].block.inside(block):
                        break
                    more |= self.nz.compound_reads(c)
                for m in more:
                    if m not in seen and self.nz.decl_block(m).inside(block):
                        seen.add(m)
                        keep.add(m)
                        work.append(m)
        self._typed_only = typed - keep
        return keep

    def forward(self, block: Block, replay: bool, extra=()) -> list:
        keep = self.keep_names(block, extra)
        typed_only = set(self._typed_only)
        return self.forward_block(block, keep, typed_only, replay)

    def forward_block(self, block, keep, typed_only, replay) -> list:
        out = []
        declared = set()
        for s in block.body:
            if isinstance(s, syntax.Return):
                continue
            if isinstance(s, syntax.Assign) and isinstance(s.target, syntax.Name) and s.target.id in self.nz.tensors:
                t = self.nz.tensors[s.target.id]
                made = []
                if t.name in keep and t.name not in self.passed:
                    made = [syntax.Assign(s.span, name(t.name), call("allocate", self.F(t.shape), self.F(t.dtype)))]
            elif isinstance(s, syntax.Assign):
                made = self.forward_assign(s, keep, typed_only, replay)
            elif isinstance(s, syntax.For):
                made = self.forward_for(s, keep, typed_only, replay)
                if made and self.rows.frames:
                    made = self.rows.frames[-1].decls.pop(id(s), []) + made
                if made and id(s) in self.extremum_nests:
                    k, x = self.extremum_nests[id(s)]
                    made = [syntax.Assign(None, name(self.plan.first[k]), name(x.name))] + made
            else:
                made = self.forward_if(s, keep, typed_only, replay)
            if not made:
                continue
            for stmt, decl, needs in self.pending_tapes.get(id(block), []):
                if needs is not None and needs not in keep:
                    continue
                i, j = self.nz.info[id(s)], self.nz.info[id(stmt)]
                if i.first <= j.first <= i.last and id(decl) not in declared:
                    declared.add(id(decl))
                    out.append(decl)
            out.extend(made)
        return out

    def forward_assign(self, s: syntax.Assign, keep, typed_only, replay=False) -> list:
        if id(s) in self.plan.value_tape and target_name(s.target) in keep:
            saved = subscript(self.plan.value_tape[id(s)], [self.iteration(lp) for lp in self.nz.info[id(s)].block.loops])
            if isinstance(s.target, syntax.Name):
                # The assignment runs as written (it fixes the scalar's dtype), then takes the saved value.
                plain = self.forward_assign_plain(s, keep, typed_only)
                if replay:
                    return plain + [syntax.Assign(None, name(s.target.id), saved)]
                return plain + [syntax.Assign(None, saved, name(s.target.id))]
            if replay:
                return [syntax.Assign(s.span, self.F(s.target), saved)]
            return [syntax.Assign(s.span, self.F(s.target), self.F(s.value)), syntax.Assign(None, saved, self.F(s.target))]
        return self.forward_assign_plain(s, keep, typed_only)

    def forward_assign_plain(self, s: syntax.Assign, keep, typed_only) -> list:
        n = target_name(s.target)
        if n in typed_only and s is self.nz.scalars[n].decl:
            return [syntax.Assign(s.span, name(n), self.F(s.value))]
        if n not in keep or n in self.passed:
            return []
        out = []
        if id(s) in self.plan.snap:
            out.append(syntax.Assign(None, name(self.plan.snap[id(s)]), name(n)))
        tgt = self.F(s.target)
        if id(s) in self.store_tape:
            tape, index = self.store_tape[id(s)]
            out.append(syntax.Assign(None, subscript(tape, index), tgt))
        out.extend(self.rows.keep(s))
        out.append(syntax.Assign(s.span, tgt, self.F(s.value)))
        return out

    def forward_for(self, s: syntax.For, keep, typed_only, replay) -> list:
        lp = self.nz.loops[s.target.id]
        inner = self.nz.blocks[id(s)]
        self.rows.loops.append(lp)
        rest = self.forward_block(inner, keep, typed_only, replay)
        self.rows.loops.pop()
        if not any(not isinstance(x, Comment) for x in rest):
            return []
        body = [syntax.Assign(None, subscript(tape, [self.iteration(lp)]), name(n))
                for n, tape in self.plan.entry.get(id(s), {}).items() if n in keep]
        return [syntax.For(s.span, s.target, self.F(s.iter), body + rest)]

    def forward_if(self, s: syntax.If, keep, typed_only, replay) -> list:
        then, orelse = self.nz.blocks[id(s)]
        a = self.forward_block(then, keep, typed_only, replay)
        b = self.forward_block(orelse, keep, typed_only, replay)
        taped = id(s) in self.plan.cond_tape
        if not a and not b and not (taped and not replay):
            return []
        out = []
        cond = self.F(s.cond)
        if taped:
            ref = self.cond_ref(s)
            if not replay:
                out.append(syntax.Assign(None, ref, cond))
            cond = ref
        elif id(s) in self.plan.cond_snap:
            out.append(syntax.Assign(None, name(self.plan.cond_snap[id(s)]), cond))
            cond = name(self.plan.cond_snap[id(s)])
        for n, snap in self.plan.entry.get(id(s), {}).items():
            if n in keep:
                out.append(syntax.Assign(None, name(snap), name(n)))
        out.append(syntax.If(s.span, cond, a or [syntax.Pass(None)], b))
        return out

    # ------------------------------------------------------------ adjoint declarations
    def adjoint_decls(self, block: Block, skip=()) -> list:
        out = []
        for t in self.nz.tensors.values():
            if t.block is block and t.kind != "param" and t.name in self.act.active_t and t.name not in skip:
                a = self.adj[t.name] = self.fresh(f"d_{t.name}")
                out.append(syntax.Assign(None, name(a), call("allocate", self.F(t.shape), self.F(t.dtype))))
        for sc in self.nz.scalars.values():
            if sc.block is block and sc.name in self.act.active_s:
                a = self.adj[sc.name] = self.fresh(f"d_{sc.name}")
                out.append(syntax.Assign(None, name(a), syntax.Call(None, attr(sc.name, "dtype"), [num(0)])))
        return out

    # ------------------------------------------------------------ reverse part
    def line_comment(self, s) -> Comment:
        """A comment quoting the source line of ``s``, put before its reverse code."""
        line = getattr(s.span, "line", None)
        text = ""
        if line and self.nz.module.lines and 0 < line <= len(self.nz.module.lines):
            text = self.nz.module.lines[line - 1].strip()
        return Comment(None, f"line {line}: {text}" if line else "generated")

    def has_reverse(self, s) -> bool:
        for x in walk_stmts([s]):
            if isinstance(x, syntax.Assign) and (id(x) in self.plan.chains or id(x) in self.plan.snap or id(x) in self.store_tape
                                            or (x in self.nz.assigns and self.target_active(x) and self.clears(x))):
                return True
        return False

    def reverse(self, block: Block) -> list:
        out = []
        for s in reversed(block.body):
            if isinstance(s, syntax.Assign):
                if not (id(s) in self.plan.chains or id(s) in self.plan.snap or id(s) in self.store_tape
                        or (s in self.nz.assigns and self.target_active(s) and self.clears(s))):
                    continue
                out.append(self.line_comment(s))
                out.extend(self.reverse_assign(s))
            elif isinstance(s, syntax.For) and id(s) in self.extremum_nests:
                out.append(self.line_comment(s))
                out.extend(self.reverse_extremum(*self.extremum_nests[id(s)]))
            elif isinstance(s, syntax.For) and self.has_reverse(s):
                if not (isinstance(block.owner, syntax.For) and s.span is not None and block.owner.span == s.span):
                    out.append(self.line_comment(s))  # (the loops of one `grid` share a line: one comment)
                out.extend(self.reverse_for(s))
            elif isinstance(s, syntax.If) and self.has_reverse(s):
                out.append(self.line_comment(s))
                out.extend(self.reverse_if(s))
        return out

    def reverse_assign(self, s: syntax.Assign) -> list:
        # First undo the assignment (its coefficients read the values it saw), then its adjoint.
        out = []
        if id(s) in self.store_tape:
            tape, index = self.store_tape[id(s)]
            out.append(syntax.Assign(None, self.F(s.target), subscript(tape, index)))
        if id(s) in self.plan.snap:
            out.append(syntax.Assign(None, name(s.target.id), name(self.plan.snap[id(s)])))
        if id(s) not in self.plan.chains:
            if self.target_active(s) and self.clears(s):
                out.append(syntax.Assign(None, self.adjoint_of(s.target), num(0.0)))
            return out
        acc, pairs = self.plan.chains[id(s)]
        tgt_adj = self.adjoint_of(s.target)
        if acc:
            # `t[..] += e`: the target's adjoint passes through unchanged; a copy of it is needed only
            # where an increment below may change it first (`e` reads `t`).  Otherwise each increment
            # reads it itself, and the increments stay separate statements without a shared scalar,
            # which the scheduler may split into loop nests of their own (a matrix product's two
            # gradients, each then tiled as a matrix product).
            g = tgt_adj
            if (isinstance(s.target, syntax.Subscript) and len(pairs) > 1
                    and any(isinstance(r, syntax.Subscript) and r.value.id == s.target.value.id for r, _ in pairs)):
                tmp = self.fresh("g")
                out.append(syntax.Assign(None, name(tmp), tgt_adj))
                g = name(tmp)
        else:
            tmp = self.fresh("g")
            out.append(syntax.Assign(None, name(tmp), self.incoming(s)))
            g = name(tmp)
        # Cleared, then added to: the clear and the first increment of the same cell are one
        # assignment.  A sole store to a temporary whose one reader has already given its adjoint
        # needs no clear at all (nothing adds to it afterwards).
        clear = not acc and self.clears(s) and not self.firsts.sole_store(s)
        _, pairs = self.chain(s, g)
        kept = [(read, self.F(coef)) for read, coef in pairs
                if not (isinstance(read, syntax.Subscript) and read.value.id not in self.act.active_t)]
        named, coefs = self.name_repeated_calls(s, [coef for _, coef in kept])
        out.extend(named)
        kept, coefs = summed_per_read(kept, coefs)
        first = set()  # reads whose increment is the first into a cell that holds zero
        if clear:
            same = [k for k, (read, _) in enumerate(kept) if unparse_expr(read) == unparse_expr(s.target)]
            if same and not isinstance(coefs[same[0]], rules.Guard):
                first.add(same[0])
            else:
                out.append(syntax.Assign(None, tgt_adj, num(0.0)))
        seen = set()
        for k, (read, _) in enumerate(kept):
            text = unparse_expr(read)
            if (isinstance(read, syntax.Subscript) and self.firsts.sole_reader(read.value.id) is s and text not in seen
                    and not isinstance(coefs[k], rules.Guard)):
                first.add(k)
            seen.add(text)
        for k, ((read, _), coef) in enumerate(zip(kept, coefs)):
            if k in first:
                out.append(syntax.Assign(None, self.adjoint_of(read), coef))
            elif not rules.is_num(coef, 0):
                out.append(increment(self.adjoint_of(read), coef))
        return out

    def incoming(self, s: syntax.Assign):
        """What the reverse code of store ``s`` reads as its target's adjoint: the incoming
        gradient itself for an output's last store (``dout_direct``), else the adjoint."""
        if id(s) in self.dout_direct:
            return syntax.Subscript(None, name(self.dout_direct[id(s)]), [self.F(i) for i in s.target.indices])
        return self.adjoint_of(s.target)

    def name_repeated_calls(self, s: syntax.Assign, coefs: list) -> tuple:
        """``(assignments, coefficients)``: a call of a built-in function that the coefficients
        repeat (a max-pool's `max(...)` in every branch of its derivative) computed once, into a
        name, before them.  Only calls the forward statement itself evaluates whatever its
        conditions are: those are safe to evaluate here too (their reads are the ones it made)."""
        names, assigns = [], []  # (call text, name) of each call named so far; their assignments
        for c in unconditional_calls(s.value, INTRINSICS):
            c = self.F(c)
            for text, n in names:
                c = replace_expr(c, text, name(n))
            text = unparse_expr(c)
            if sum(count_calls(x, text) for x in coefs) < 2:
                continue
            n = self.fresh(f"{rules.call_name(c)}_v")
            names.append((text, n))
            assigns.append(syntax.Assign(None, name(n), c))
            coefs = [replace_expr(x, text, name(n)) for x in coefs]
        return assigns, coefs

    def target_active(self, s) -> bool:
        n = target_name(s.target)
        return n in self.act.active_t if isinstance(s.target, syntax.Subscript) else n in self.act.active_s

    def adjoint_of(self, ref):
        if isinstance(ref, syntax.Name):
            return name(self.adj[ref.id])
        return syntax.Subscript(None, name(self.adj[ref.value.id]), [self.F(i) for i in ref.indices])

    def reverse_for(self, s: syntax.For) -> list:
        self.rows.loops.append(None)  # (gathers keep no rows)
        gathered = gather_nest(self, s)
        self.rows.loops.pop()
        if gathered is not None:
            return gathered
        lp = self.nz.loops[s.target.id]
        inner = self.nz.blocks[id(s)]
        before = set(self.names.used)
        body = []
        for n, tape in self.plan.entry.get(id(s), {}).items():
            body.append(syntax.Assign(None, name(n), subscript(tape, [self.iteration(lp)])))
        self.rows.loops.append(lp)
        frame = Frame(inner)
        self.rows.frames.append(frame)
        body.extend(self.forward(inner, True, self.plan.entry.get(id(s), {})))
        frame.filling = False
        body.extend(self.adjoint_decls(inner))
        body.extend(self.reverse(inner))
        self.rows.frames.pop()
        self.rows.loops.pop()
        local = (self.names.used - before) | {n for n in self.nz.scalars if self.nz.decl_block(n).inside(inner)} \
            | {n for n in self.nz.tensors if self.nz.decl_block(n).inside(inner)} \
            | {copy for copy, n in self.copies.items() if self.nz.decl_block(n).inside(inner)}
        if runs_forwards(body, lp.var, local):
            return [syntax.For(s.span, name(lp.var), self.F(s.iter), body)]
        lo, hi, st = self.F(lp.lo), self.F(lp.hi), lp.step
        if st > 0:
            start = rules.sub(hi, num(1)) if st == 1 else add(lo, rules.mul(syntax.BinOp(None, "//", rules.sub(rules.sub(hi, lo), num(1)),
                                                                             num(st)), num(st)))
            it = call("serial" if lp.kind == "serial" else "range", start, rules.sub(lo, num(1)), num(-st))
        else:
            k = -st
            start = add(hi, num(1)) if k == 1 else rules.sub(lo, rules.mul(syntax.BinOp(None, "//", rules.sub(rules.sub(lo, hi), num(1)),
                                                                            num(k)), num(k)))
            it = call("serial" if lp.kind == "serial" else "range", start, add(lo, num(1)), num(k))
        return [syntax.For(s.span, name(lp.var), it, body)]

    def reverse_extremum(self, k, x) -> list:
        """The adjoint of a running maximum or minimum (``idioms.Extremum``) in closed form, with
        the result's adjoint ``d_m`` given to the positions holding it.  Split evenly: the ties
        counted first (the first value and each value equal to the result), then each tied
        position given its share.  The branch form: the first position holding it gets it all.
        What the first value gets is left in ``d_m`` for its declaration's reverse code."""
        self.rules.append(x.rule)
        m, first, d_m = name(x.name), name(self.plan.first[k]), name(self.adj[x.name])
        e = self.F(replace_reads(x.operand, self.plan.recompute[id(x.stmt)])
                   if id(x.stmt) in self.plan.recompute else x.operand)
        tied = syntax.Compare(None, ["=="], [e, m])
        first_tied = syntax.Compare(None, ["=="], [first, m])
        zero = syntax.Call(None, attr(x.name, "dtype"), [num(0)])
        one = syntax.Call(None, attr(x.name, "dtype"), [num(1)])
        if x.branch is None:
            ties = name(self.fresh(f"{x.name}_ties"))
            share = name(self.fresh(f"d_{x.name}_share"))
            before = [syntax.Assign(None, ties, syntax.IfExp(None, first_tied, one, zero)),
                      *self.nest_like(x.nest, [syntax.AugAssign(None, ties, "+", syntax.IfExp(None, tied, one, zero))]),
                      syntax.Assign(None, share, rules.div(d_m, ties))]
            given, update = syntax.IfExp(None, tied, share, zero), []
        else:
            won = name(self.fresh(f"{x.name}_won"))  # whether a position holding it has been met
            before = [syntax.Assign(None, won, first_tied)]
            share = d_m
            given = syntax.IfExp(None, syntax.BoolOp(None, "and", [tied, syntax.UnaryOp(None, "not", won)]), d_m, zero)
            update = [syntax.Assign(None, won, syntax.BoolOp(None, "or", [won, tied]))]
        g = name(self.fresh("g"))
        _, pairs = self.chain(x.stmt, g)
        kept = [(read, self.F(coef)) for read, coef in pairs
                if not (isinstance(read, syntax.Subscript) and read.value.id not in self.act.active_t)]
        named, coefs = self.name_repeated_calls(x.stmt, [coef for _, coef in kept])
        give = [syntax.Assign(None, g, given), *update, *named]
        give += [increment(self.adjoint_of(read), coef) for (read, _), coef in zip(kept, coefs)]
        return [*before, *self.nest_like(x.nest, give),
                syntax.Assign(None, d_m, syntax.IfExp(None, first_tied, share, zero))]

    def nest_like(self, nest, body) -> list:
        """The loops of ``nest`` (a loop nest each of whose bodies holds the next loop), run
        forwards, around ``body``."""
        loops = [nest]
        while isinstance(loops[-1].body[0], syntax.For):
            loops.append(loops[-1].body[0])
        for lp in reversed(loops):
            body = [syntax.For(lp.span, lp.target, self.F(lp.iter), body)]
        return body

    def reverse_if(self, s: syntax.If) -> list:
        then, orelse = self.nz.blocks[id(s)]
        branches = []
        for blk in (then, orelse):
            body = []
            for n, snap in self.plan.entry.get(id(s), {}).items():
                body.append(syntax.Assign(None, name(n), name(snap)))
            body.extend(self.forward(blk, True, self.plan.entry.get(id(s), {})))
            body.extend(self.adjoint_decls(blk))
            body.extend(self.reverse(blk))
            branches.append(body)
        if id(s) in self.plan.cond_tape:
            cond = self.cond_ref(s)
        else:
            cond = name(self.plan.cond_snap[id(s)]) if id(s) in self.plan.cond_snap else self.F(s.cond)
        return [syntax.If(s.span, cond, branches[0], branches[1] if any(not isinstance(x, Comment) for x in branches[1])
                     else [])]


def count_calls(e, text: str) -> int:
    """How many calls in ``e`` read as ``text``."""
    return sum(1 for x in walk(e) if isinstance(x, syntax.Call) and unparse_expr(x) == text)


def summed_per_read(kept: list, coefs: list) -> tuple:
    """``(kept, coefs)`` with one coefficient for each read that the statement makes more than
    once: the coefficients are collected as terms, equal terms counted with their signs, so that
    the read's adjoint gets one increment per statement.  In ``(x + x) - (x + x)`` the four terms
    cancel exactly and add nothing, where four increments would add and take away the same large
    terms and lose what the adjoint held before; ``x + x`` adds ``2.0 * g``.  A coefficient
    that sums to nothing is 0.0.  A guarded coefficient (its update under an ``if``) stays an
    increment of its own."""
    out, at = [], {}  # [read, a guarded coefficient or {term text: [term, count]}]; read text -> index
    for (read, _), coef in zip(kept, coefs):
        if isinstance(coef, rules.Guard):
            out.append((read, coef))
            continue
        text = unparse_expr(read)
        if text not in at:
            at[text] = len(out)
            out.append((read, {}))
        sign, term = 1, coef
        while isinstance(term, syntax.UnaryOp) and term.op == "-":
            sign, term = -sign, term.operand
        out[at[text]][1].setdefault(unparse_expr(term), [term, 0])[1] += sign
    summed = [(read, _counted_sum(c.values()) if isinstance(c, dict) else c) for read, c in out]
    return summed, [coef for _, coef in summed]


def _counted_sum(terms) -> syntax.Node:
    """The sum of ``count * term`` over ``(term, count)`` pairs, in their order (0.0 for none)."""
    total = None
    for term, count in terms:
        if not count:
            continue
        part = term if abs(count) == 1 else rules.mul(num(float(abs(count))), term)
        if total is None:
            total = part if count > 0 else rules.neg(part)
        else:
            total = add(total, part) if count > 0 else rules.sub(total, part)
    return num(0.0) if total is None else total
