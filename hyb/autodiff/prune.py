"""Pass 5 of reverse mode: the statements of the gradient kernel whose values nothing uses, removed.

The emission pass writes the forward values the reverse part may need, and the reverse part
replays loops to restore them; where no adjoint ends up reading a value, what computed it is
dead code that makes the gradient harder to read (and leaves work to LLVM).  ``prune(gradient)``
removes, until nothing changes:

* a temporary (``allocate``) that nothing reads: its declaration and every store into it;
* an assignment to a scalar whose value no later statement reads (backward liveness over the
  structured body: a loop's body is iterated until its live set is stable, both branches of an
  ``if`` count), unless it is what declares the name for a later use: a scalar assigned inside
  a block that has ended is not visible, so for each use (of its value or of its ``.dtype``)
  the latest assignment before it in its block or the blocks around it stays;
* loops and branches left with nothing in them, and the comments quoting a source line whose
  statements are all gone.

Stores into outputs and parameters are never removed, nor is anything a ``return`` reads.
Expressions have no side effects in the language (a read out of bounds would have stopped the
forward kernel first), so removing one changes no result.
"""
from __future__ import annotations

from dataclasses import replace

from ..dsl import ast as syntax
from ..dsl.unparse import Comment
from .tree import Gradient, value_walk, walk


def prune(g: Gradient) -> Gradient:
    """``g`` with its dead statements removed (a new record; ``g`` is not changed)."""
    body = list(g.kdef.body)
    while True:
        new = _Pruner(body).run()
        if _same(new, body):
            break
        body = new
    kdef = replace(g.kdef, body=body)
    left = {s.target.id for s in walk_all(body) if isinstance(s, syntax.Assign) and isinstance(s.target, syntax.Name)}
    return replace(g, kdef=kdef, tapes=[t for t in g.tapes if t[0] in left])


def walk_all(body):
    for s in body:
        yield from walk(s)


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def _reads(*exprs) -> set:
    """Names whose values ``exprs`` read (not those only asked for a shape or dtype)."""
    return {x.id for e in exprs for x in value_walk(e) if isinstance(x, syntax.Name)}


def _uses(*exprs) -> set:
    """Every name ``exprs`` mention: values, dtypes and shapes."""
    return {x.id for e in exprs for x in walk(e) if isinstance(x, syntax.Name)}


def _quotes_line(s) -> bool:
    return isinstance(s, Comment) and s.text.startswith("line ")


def _maker(s) -> str | None:
    if (isinstance(s, syntax.Assign) and isinstance(s.target, syntax.Name) and isinstance(s.value, syntax.Call)
            and isinstance(s.value.func, syntax.Name) and s.value.func.id in ("allocate", "output_tensor")):
        return s.target.id
    return None


class _Pruner:
    """One round of removals over a kernel body."""

    def __init__(self, body: list):
        self.body = body
        self.tensors = set()
        allocated = set()
        used = set()  # every name whose value or dtype/shape is read anywhere (tensor loads included)
        for s in walk_all(body):
            made = _maker(s)
            if made is not None:
                self.tensors.add(made)
                if s.value.func.id == "allocate":
                    allocated.add(made)
            used |= self.uses(s)
        self.unread = allocated - used  # temporaries no statement reads
        # the assignment that declares each use's name where it is used: it stays, live or not
        self.pins: set = set()
        self.declarations(body, [])

    @staticmethod
    def uses(s) -> set:
        """The names a statement's own expressions read (values, dtypes and shapes)."""
        if _maker(s) is not None:
            return _uses(*s.value.args)
        if isinstance(s, (syntax.Assign, syntax.AugAssign)):
            t = s.target
            if isinstance(t, syntax.Name):
                return _uses(s.value) | ({t.id} if isinstance(s, syntax.AugAssign) else set())
            return _uses(s.value, *t.indices)
        if isinstance(s, syntax.For):
            return _uses(s.iter)
        if isinstance(s, syntax.If):
            return _uses(s.cond)
        if isinstance(s, syntax.Return):
            return _uses(*s.values)
        return set()

    def declarations(self, stmts: list, chain: list):
        """Pin, for each name a statement uses, the latest assignment of it before the statement
        in the statement's block or the blocks around it (a scalar assigned inside a block that
        has ended is not visible)."""
        chain = chain + [{}]
        for s in stmts:
            if isinstance(s, Comment):
                continue
            for n in self.uses(s):
                for scope in reversed(chain):
                    if n in scope:
                        self.pins.add(id(scope[n]))
                        break
            if isinstance(s, syntax.For):
                self.declarations(s.body, chain)
            elif isinstance(s, syntax.If):
                self.declarations(s.body, chain)
                self.declarations(s.orelse, chain)
            elif isinstance(s, (syntax.Assign, syntax.AugAssign)) and isinstance(s.target, syntax.Name):
                chain[-1][s.target.id] = s

    def run(self) -> list:
        self.dead: set = set()
        self.live_block(self.body, set(), mark=True)
        return self.rebuild(self.body)

    # ------------------------------------------------------------ liveness
    def live_block(self, stmts: list, live: set, mark: bool) -> set:
        live = set(live)
        for s in reversed(stmts):
            live = self.live_stmt(s, live, mark)
        return live

    def live_stmt(self, s, live: set, mark: bool) -> set:
        if isinstance(s, Comment):
            return live
        if _maker(s) is not None:
            if _maker(s) in self.unread:
                if mark:
                    self.dead.add(id(s))
                return live
            return live | _reads(*s.value.args)
        if isinstance(s, (syntax.Assign, syntax.AugAssign)):
            t = s.target
            if isinstance(t, syntax.Name):
                if t.id not in live and id(s) not in self.pins:
                    if mark:
                        self.dead.add(id(s))
                    return live
                out = live - {t.id} if isinstance(s, syntax.Assign) else live | {t.id}
                return out | _reads(s.value)
            if isinstance(t.value, syntax.Name) and t.value.id in self.unread:
                if mark:
                    self.dead.add(id(s))
                return live
            return live | _reads(s.value, *t.indices)
        if isinstance(s, syntax.If):
            return self.live_block(s.body, live, mark) | self.live_block(s.orelse, live, mark) | _reads(s.cond)
        if isinstance(s, syntax.For):
            var = s.target.id
            out = set(live)
            while True:
                inside = self.live_block(s.body, out, False) - {var}
                grown = out | inside
                if grown == out:
                    break
                out = grown
            if mark:
                self.live_block(s.body, out, True)
            return out | _reads(s.iter)
        if isinstance(s, syntax.Return):
            return live | _reads(*s.values)
        return live | _reads(s)

    # ------------------------------------------------------------ removal
    def rebuild(self, stmts: list) -> list:
        out = []
        changed = False
        for s in stmts:
            if id(s) in self.dead:
                changed = True
                continue
            if isinstance(s, syntax.For):
                body = self.rebuild(s.body)
                if not [b for b in body if not isinstance(b, Comment)]:
                    changed = True
                    continue
                if not _same(body, s.body):
                    s = replace(s, body=body)
                    changed = True
            elif isinstance(s, syntax.If):
                body, orelse = self.rebuild(s.body), self.rebuild(s.orelse)
                real = [b for b in body if not isinstance(b, Comment)]
                real_else = [b for b in orelse if not isinstance(b, Comment)]
                if not real and not real_else:
                    changed = True
                    continue
                if not _same(body, s.body) or not _same(orelse, s.orelse):
                    s = replace(s, body=body if real else [syntax.Pass(None)], orelse=orelse if real_else else [])
                    changed = True
            out.append(s)
        # a comment quoting a source line whose statements are all gone
        kept = []
        for k, s in enumerate(out):
            if _quotes_line(s) and (k + 1 == len(out) or _quotes_line(out[k + 1])):
                changed = True
                continue
            kept.append(s)
        return kept if changed else stmts
