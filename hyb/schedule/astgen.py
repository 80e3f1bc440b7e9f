"""isl AST generation: a schedule → loop IR (:mod:`hyb.schedule.loops`)."""
from __future__ import annotations

from dataclasses import replace

import islpy as isl

from ..errors import HybridInternalError
from . import loops
from .extract import PolyProgram
from . import islmem

_OPS = {
    isl.ast_expr_op_type.add: "add", isl.ast_expr_op_type.sub: "sub", isl.ast_expr_op_type.mul: "mul",
    isl.ast_expr_op_type.minus: "neg", isl.ast_expr_op_type.min: "min", isl.ast_expr_op_type.max: "max",
    isl.ast_expr_op_type.fdiv_q: "fdiv_q", isl.ast_expr_op_type.pdiv_q: "pdiv_q",
    isl.ast_expr_op_type.pdiv_r: "pdiv_r", isl.ast_expr_op_type.zdiv_r: "zdiv_r",
    isl.ast_expr_op_type.div: "div", isl.ast_expr_op_type.select: "select",
    isl.ast_expr_op_type.cond: "select", isl.ast_expr_op_type.eq: "eq", isl.ast_expr_op_type.le: "le",
    isl.ast_expr_op_type.lt: "lt", isl.ast_expr_op_type.ge: "ge", isl.ast_expr_op_type.gt: "gt",
    isl.ast_expr_op_type.and_: "and", isl.ast_expr_op_type.and_then: "and",
    isl.ast_expr_op_type.or_: "or", isl.ast_expr_op_type.or_else: "or",
}


def convert_expr(e: isl.AstExpr):
    t = e.get_type()
    if t == isl.ast_expr_type.int:
        return loops.LInt(islmem.int_value(e.get_val()))
    if t == isl.ast_expr_type.id:
        return loops.LVar(e.get_id().get_name())
    op = e.get_op_type()
    if op not in _OPS:
        raise HybridInternalError(f"isl AST operation {op} is not handled", "loops")
    return loops.LOp(_OPS[op], tuple(convert_expr(e.get_op_arg(i)) for i in range(e.get_op_n_arg())))


def _const_step(e: isl.AstExpr) -> int:
    if e.get_type() != isl.ast_expr_type.int:
        raise HybridInternalError("isl produced a loop with a non-constant step", "loops")
    return islmem.int_value(e.get_val())


def convert_node(n: isl.AstNode) -> list:
    t = n.get_type()
    if t == isl.ast_node_type.block:
        out = []
        children = n.block_get_children()
        for i in range(children.n_ast_node()):
            out.extend(convert_node(children.get_at(i)))
        return out
    if t == isl.ast_node_type.for_:
        var = n.for_get_iterator().get_id().get_name()
        init = convert_expr(n.for_get_init())
        body = tuple(convert_node(n.for_get_body()))
        if n.for_is_degenerate():
            # A loop that runs once: bind the iterator with a one-trip loop LLVM folds away.
            return [loops.For(var, init, loops.LOp("le", (loops.LVar(var), init)), 1, body)]
        return [loops.For(var, init, convert_expr(n.for_get_cond()), _const_step(n.for_get_inc()), body)]
    if t == isl.ast_node_type.if_:
        cond = convert_expr(n.if_get_cond())
        then = tuple(convert_node(n.if_get_then_node()))
        orelse = tuple(convert_node(n.if_get_else_node())) if n.if_has_else_node() else ()
        return [loops.If(cond, then, orelse)]
    if t == isl.ast_node_type.user:
        call = n.user_get_expr()
        name = call.get_op_arg(0).get_id().get_name()
        args = [convert_expr(call.get_op_arg(i)) for i in range(1, call.get_op_n_arg())]
        return [loops.StmtCall(name, tuple(args))]
    if t == isl.ast_node_type.mark:
        body = convert_node(n.mark_get_node())
        fields = loops.mark_fields(n.mark_get_id().get_name())
        return _mark_first_for(body, fields)[0] if fields else body
    raise HybridInternalError(f"isl AST node {t} is not handled", "loops")


def _mark_first_for(body, fields: dict) -> tuple:
    """``(body with its first loop given the fields of a mark, whether one was found)``."""
    out = list(body)
    for k, s in enumerate(out):
        if isinstance(s, loops.For):
            out[k] = replace(s, **fields)
            return out, True
        if isinstance(s, loops.If):
            then, found = _mark_first_for(s.then, fields)
            if not found:
                orelse, found = _mark_first_for(s.orelse, fields)
                if found:
                    out[k] = replace(s, orelse=tuple(orelse))
            else:
                out[k] = replace(s, then=tuple(then))
            if found:
                return out, True
    return out, False


def generate(p: PolyProgram, schedule: isl.Schedule | None = None) -> loops.LoopNest:
    """Loop IR for ``p`` under ``schedule`` (an isl schedule tree; None: the original program order)."""
    if not p.statements:
        return loops.LoopNest.of(p, ())
    build = isl.AstBuild.from_context(p.context())
    if schedule is None:
        node = build.node_from_schedule_map(p.union("order").intersect_domain(p.union("domain")))
    else:
        node = build.node_from_schedule(_separated(p, schedule))
    return loops.LoopNest.of(p, convert_node(node))


def _separated(p: PolyProgram, schedule: isl.Schedule) -> isl.Schedule:
    """``schedule`` with the members of each band that runs a statement outside every loop
    (``m = x[0, 0]``, which isl may schedule at one point of another nest's loops) generated as
    separate loops: the point's iterations apart from the rest, so that no inner loop tests
    for it at every step (a guard there keeps LLVM from vectorising the loop)."""
    points = {st.name for st in p.statements if not st.iters}
    if not points:
        return schedule

    def visit(node):
        if node.get_type() == isl.schedule_node_type.band:
            names = {st.name for st in p.statements_in(node.get_domain())}
            if names & points and names - points:
                for m in range(node.band_n_member()):
                    node = node.band_member_set_ast_loop_type(m, isl.ast_loop_type.separate)
        return node

    return schedule.map_schedule_node_bottom_up(visit)
