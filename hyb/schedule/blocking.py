"""Register and cache blocking of contraction bands, for a CPU.

A *contraction band* is a permutable band with a reduction member ``K`` (not coincident) and two
coincident members ``I`` and ``J`` such that some statement in it writes a tensor cell that does
not move with ``K`` and moves with ``I`` and, with unit stride, with ``J``: ``c[i, j] += a[i, k] *
b[k, j]`` in any loop order, batched, transposed, with ``alpha``/``beta``, a convolution's output
channels and pixels.  It is found from the band's accesses and coincidence alone.

Such a band is shaped the way BLIS runs a gemm::

    for (tiles of the other members, I by MC, J by NC, K by KC)   cache tiles
      for (I by MR, J by NR)                                       register tiles
        for k in the K tile                                        the reduction
          for i < MR: for j < NR                                   the register block
            S(i, j, k)

Statements of the band that are no contraction (``c[i, j] *= beta``) are ordered before or after
the reduction loop inside the register tile, where the dependences allow.  The register block
(MR, NR) comes from the machine's vector registers: MR x NR/lanes accumulators, NR/lanes vectors
of the ``J`` operand and one broadcast value must fit (:func:`block_shape`); the cache tiles from
its L1 and L2 sizes (:func:`cache_tiles`).  :mod:`hyb.schedule.promote` then keeps the block's
cells in registers across the reduction loop.

Every transformed schedule is checked against the dependences before it is kept (and its loops
again by :mod:`hyb.schedule.verify`); a band where the check fails is tiled the usual way.
"""
from __future__ import annotations

import islpy as isl
import numpy as np

from ..dsl import types
from ..target import CpuTarget
from .options import PARALLEL_TILES, fit_sizes
from .counting import access_strides, work
from .loops import block_mark
from . import islmem

# Element types whose register blocks LLVM keeps in vector registers (float16 and bfloat16 are
# computed in float32 after conversion; bool has no arithmetic to block).
BLOCK_DTYPES = frozenset({"float32", "float64", "int32", "int64", "uint32", "uint64"})
MAX_MR = 8  # rows of a register block: more unrolled rows than this only lengthen the code
MIN_PANEL_ROWS = 16  # reduction steps a packed panel needs to repay its copy (schedule.promote)
# Instances a band needs before blocks chosen by the model pay for their longer compile (blocks
# the user asks for with schedule={"register": (MR, NR)} are made at any size).
MIN_BLOCK_WORK = 1 << 15


def block_shape(machine: CpuTarget, itemsize: int, rows: int | None, cols: int | None) -> tuple | None:
    """(MR, NR) for elements of ``itemsize`` bytes: NR a multiple of the vector's lanes, MR rows,
    with MR * v accumulators + v loaded vectors + one broadcast value within the vector
    registers (v = NR / lanes), maximising the multiply-adds per value loaded (MR*v / (MR + v)).
    Where J's whole extent is shorter than MAX_V vectors and no multiple of the lanes, one block
    across all of it (its last vector in part) is weighed too, against the blocks at J's edge
    the others leave, which run on scalars: J = 40 on 16 lanes in blocks of 32 spent most of its
    time in the 8 left over, and one block of 40 ran 3.9 times as fast.  ``rows`` and ``cols`` are
    the extents of I and J (None: unknown).  None where no block pays (J shorter than one vector,
    or I shorter than two rows)."""
    lanes = max(1, machine.vector_bits // (8 * itemsize))
    if (cols is not None and cols < lanes) or (rows is not None and rows < 2):
        return None

    def rows_for(v):
        mr = min(MAX_MR, (machine.vector_registers - v - 1) // v)
        return mr if rows is None else min(mr, rows)

    best = None
    for v in range(1, MAX_V + 1):
        if cols is not None and v * lanes > cols:
            break
        mr = rows_for(v)
        if mr < 1:
            continue
        score = mr * v / (mr + v)
        if best is None or score > best[0]:
            best = (score, mr, v * lanes)
    if best is None:
        return None
    if cols is not None and cols % lanes and cols < MAX_V * lanes:
        v = -(-cols // lanes)
        mr = min(rows_for(v), WHOLE_MR)
        whole = mr * v / (mr + v) * cols / (v * lanes)  # the last vector in part
        edge = 1.0 - (cols // best[2] * best[2]) / cols
        if mr >= 1 and 1.0 / whole < (1.0 - edge) / best[0] + edge * EDGE_COST * lanes / 16:
            return (mr, cols)
    return best[1], best[2]


MAX_V = 4  # vectors across a register block
# rows of a block across all of J with its last vector in part: batches of 32x48 by 48x{20,37,40}
# (float32) ran 1.3 to 1.4 times as fast in blocks of 4 rows as of 8; of 48x40 by 40x50, as fast
WHOLE_MR = 4
# the cost of a block at J's edge (scalar code, a stack array) per unit of work, on the scale of
# 1 / (multiply-adds per value loaded) of a full block, for 16 lanes
EDGE_COST = 8.0


MAX_ROW_VECTORS = 8  # a block of one row: its accumulators, and as many loaded vectors


def row_shape(machine: CpuTarget, itemsize: int, cols: int | None) -> tuple | None:
    """(1, NR) for a block of one row: NR as many whole vectors as J's extent holds, at most
    MAX_ROW_VECTORS; None where J is shorter than one vector."""
    lanes = max(1, machine.vector_bits // (8 * itemsize))
    if cols is not None and cols < lanes:
        return None
    v = MAX_ROW_VECTORS if cols is None else min(MAX_ROW_VECTORS, cols // lanes)
    return (1, v * lanes) if v * lanes >= 2 else None


def cache_tiles(machine: CpuTarget, itemsize: int, mr: int, nr: int, extents: tuple, packed: bool = False) -> tuple:
    """(MC, NC, KC): the MR x KC rows of I's operand stay in half of L1 while the register tiles of
    one row of blocks sweep J; the KC x NC block of J's operand stays in half of L2 while the rows
    of blocks sweep I; MC rows of blocks make the I tile (``packed``, where every KC x NR panel of
    J's operand is copied before the I tile's blocks use it: as many rows as keep the MC x KC
    block of I's operand in half of L2, which repays each copy over more blocks).  Each is a multiple of its register size
    and no larger than the extent (rounded up to a whole block); KC is a power of two (measured on
    AMD Zen 4 with float32 and float64 gemm: 512 and 256 beat 672 and 336 by 10 %)."""
    ext_i, ext_j, ext_k = extents
    kc = _power_of_two_below(max(16, (machine.l1d_bytes // 2) // (mr * itemsize)))
    nc = max(nr, (machine.l2_bytes // 2) // (kc * itemsize) // nr * nr)
    mc = mr * 16
    if packed:
        mc = max(mc, (machine.l2_bytes // 2) // (min(kc, ext_k or kc) * itemsize) // mr * mr)

    def clamp(size, ext, unit):
        if ext is None:
            return size
        return max(unit, min(size, -(-ext // unit) * unit))

    return clamp(mc, ext_i, mr), clamp(nc, ext_j, nr), clamp(kc, ext_k, 1)


def _power_of_two_below(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def find(shaper, node: isl.ScheduleNode) -> dict | None:
    """The contraction of a permutable band: ``{"I", "J": member positions, "K": the reduction
    members, "statements": names of the statements that are contractions, "dtype": the written
    tensor's dtype}``, or None.  ``J``, the loop the block is vectorised along, is a coincident
    member the written cell moves with and along which every read that moves is unit-stride (the
    band's innermost member where it is one: a transposed product ``c[i, j] += a[k, i] * b[j, k]``
    is vectorised along ``i``, its ``c`` read and written across the vector only outside the
    reduction); the ``K`` members are the members that are not coincident and along
    which the written cell stays put; ``I`` is the coincident member the written cell moves with
    that the fewest reads share with ``J`` (a convolution's output channel rather than its row of
    pixels: its rows reuse the vector of inputs loaded for ``J``)."""
    n = node.band_n_member()
    if n < 2:
        return None
    coincident = [bool(node.band_member_get_coincident(m)) for m in range(n)]
    p = shaper.p
    mupa = node.band_get_partial_schedule()
    found, shape, dtype, steps = [], None, None, []
    for st in p.statements:
        if node.get_domain().intersect(isl.UnionSet.from_set(st.domain)).is_empty():
            continue
        accesses = _accesses(p, st)
        if accesses is None:
            continue
        its = [shaper.member_iterator(mupa.get_at(m), st) for m in range(n)]
        if any(it is None for it in its) or len(set(its)) < n:
            continue
        w, t, strides, reads = accesses
        ks = tuple(m for m in range(n) if not coincident[m] and its[m] not in strides)
        moving = {its[m] for m in range(n) if coincident[m] and its[m] in strides}
        reduction = {its[m] for m in ks}
        # J: a parallel loop the written cell moves with, along which every read that moves
        # reads consecutive elements (one vector load each step of the reduction), at least one
        # does; else one along which a single read is transposed (q[i, d] * k[j, d]: packed, where
        # there is one reduction member)
        along = {m: _along(its[m], reads, reduction, moving, len(ks) == 1)
                 for m in range(n) if coincident[m] and its[m] in strides}
        vectors = [m for m, how in along.items() if how == "vector"]
        packed = [m for m, how in along.items() if how == "packed"]
        if not vectors and not packed:
            continue
        needs_pack = not vectors  # (J along a transposed read: only a packed panel of it is unit-stride)
        vectors = vectors or packed
        j = n - 1 if n - 1 in vectors else vectors[-1]
        rows = [m for m in range(n) if m != j and coincident[m] and its[m] in strides]
        if not ks:
            continue

        def shared(m):
            return sum(1 for rs in reads if its[m] in rs and its[j] in rs)

        # (no rows: a block of one row, the vector of cells kept across one reduction loop; across
        # nested ones, a weight gradient's, it measured slower than the unit-stride loop moved
        # below them, schedule.vector)
        i = min(rows, key=lambda m: (shared(m), -m)) if rows else None
        if i is None and (needs_pack or len(ks) != 1):
            continue
        if shape is not None and shape != (i, j, ks, needs_pack):
            continue
        if dtype is not None and types.concrete(t.dtype) != dtype:
            return None
        shape, dtype = (i, j, ks, needs_pack), types.concrete(t.dtype)
        found.append(st.name)
        if len(ks) == 1:  # J's operand: read along J in a row, moving to the next row with K
            steps += [_step_bytes(p, r, its[ks[0]]) for r in st.reads
                      if r.tensor != w.tensor and p.kernel.tensors[r.tensor].kind != "scalar"
                      and access_strides(r, len(st.iters)).get(its[j]) == 3.0]
    if not found:
        return None
    return {"I": shape[0], "J": shape[1], "K": shape[2], "statements": found, "dtype": dtype,
            "transposed": shape[3], "panel_steps": tuple(x for x in steps if x)}


def candidates(p, min_work: int = MIN_BLOCK_WORK) -> list:
    """The names of the statements of ``p`` that a register block could serve under some
    schedule: what :func:`find` asks of a contraction statement that holds whatever the band
    around it (its members, their coincidence).  One write, exact, to a tensor of a dtype in
    BLOCK_DTYPES, accumulated (the statement reads the cell it writes) across an iterator the cell
    does not move with (the reduction); an iterator the cell moves with along which every read
    that moves reads consecutive elements, at least one does (J), or along which one read is
    transposed and the others consecutive; ``min_work`` instances or more (blocks the user's
    schedule={"register": (MR, NR)} asks for are made at any size: 0)."""
    out = []
    for st in p.statements:
        accesses = _accesses(p, st)
        if accesses is None or len(st.iters) < 2:
            continue
        w, _, strides, reads = accesses
        if not strides or not w.exact or not any(r.tensor == w.tensor and r.exact and r.relation.is_equal(w.relation)
                                                 for r in st.reads):
            continue
        reduction = {k for k in range(len(st.iters)) if k not in strides}
        if not reduction or not any(_along(k, reads, reduction, set(strides), True) for k in strides):
            continue
        if not min_work or work(p, isl.UnionSet.from_set(st.domain), nominal=True) >= min_work:
            out.append(st.name)
    return out


def _accesses(p, st):
    """``(write, written tensor, the write's strides, the strides of every other tensor's read)``
    of a statement a register block may serve: unguarded, not opaque, one affine write to a tensor
    of a dtype in BLOCK_DTYPES, affine reads (the written cell's own reads are the accumulators:
    they leave the reduction loop); else None."""
    if st.guards or st.opaque or len(st.writes) != 1:
        return None
    w = st.writes[0]
    t = p.kernel.tensors[w.tensor]
    if t.kind == "scalar" or types.concrete(t.dtype) not in BLOCK_DTYPES:
        return None
    strides = access_strides(w, len(st.iters))
    reads = [access_strides(r, len(st.iters)) for r in st.reads
             if p.kernel.tensors[r.tensor].kind != "scalar" and r.tensor != w.tensor]
    if strides is None or any(rs is None for rs in reads):
        return None
    return w, t, strides, reads


def _along(k: int, reads: list, reduction: set, moving: set, packable: bool) -> str | None:
    """How a register block may run along the iterator ``k`` the written cell moves with:
    ``"vector"`` where every read that moves along it reads consecutive elements and at least one
    does, ``"packed"`` (``packable`` only) where one read moves along it with a long stride and
    otherwise with the reduction alone (a panel of it, packed with ``k`` as its unit stride,
    serves the block; rows of blocks, the other ``moving`` iterators, reuse it) and the others
    consecutively; else None."""
    if any(k in rs for rs in reads) and all(rs.get(k, 3.0) == 3.0 for rs in reads):
        return "vector"

    def transposed(rs):
        return rs.get(k, 3.0) != 3.0 and set(rs) & reduction and bool(moving - set(rs))

    if packable and sum(1 for rs in reads if transposed(rs)) == 1 and all(rs.get(k, 3.0) == 3.0 or transposed(rs)
                                                                         for rs in reads):
        return "packed"
    return None


def _step_bytes(p, acc, k: int) -> int | None:
    """The bytes between the elements ``acc`` reads at one iteration of iterator ``k`` and the
    next (a tensor of a shape known now, an affine access), or None."""
    t = p.kernel.tensors[acc.tensor]
    if not all(isinstance(d, int) for d in t.shape):
        return None
    try:
        pma = isl.PwMultiAff.from_map(acc.relation)
    except isl.Error:
        return None
    step, size = 0, np.dtype(types.numpy_dtype(t.dtype)).itemsize
    for d in reversed(range(len(t.shape))):
        pieces = pma.get_pw_aff(d).get_pieces()
        if len(pieces) != 1:
            return None
        c = pieces[0][1].get_coefficient_val(isl.dim_type.in_, k)
        if not c.is_int():
            return None
        step += islmem.int_value(c) * size
        size *= t.shape[d]
    return abs(step)


# register tiles of I a packed panel must serve to repay its copy (the copy is K x NR elements
# for every MC x K x NR products it feeds)
PANEL_ROW_TILES = 4


def panel_pays(machine: CpuTarget, itemsize: int, mr: int, nr: int, kc: int, ext_i: int | None) -> bool:
    """Whether a KC x NR panel of J's operand, copied once for the cache tile, serves it better
    than its rows read in place: the panel serves PANEL_ROW_TILES register tiles of I or more (an
    extent not known now counts as long) and is larger than L1, so that its rows come from L2
    every time a register tile of I passes them, each row a full row of the operand apart (page
    and set conflicts a contiguous copy does not have).  As libraries pack every panel of a large
    gemm.  (Measured on this project's Xeon machine, float32, one thread, the panel packed against
    read in place: 1000x900x1100 44 against 63 ms, 256x768x2304 17-19 against 27 ms, the
    shape-generic 1024^3 42 against 100 ms; 512^3, which the L2's sets already made it pack, the
    same; 128^3, whose panel stays in L1, not packed.)"""
    return (ext_i is None or ext_i >= PANEL_ROW_TILES * mr) and kc * nr * itemsize > machine.l1d_bytes


def aliased(machine: CpuTarget, step: int, rows: int, row_bytes: int) -> bool:
    """Whether ``rows`` rows of ``row_bytes`` each, ``step`` bytes apart (a cache tile of J's
    operand), crowd into too few sets of the L2 to stay in it: rows a large power of two apart
    start in the same few sets (a 1024-wide float32 matrix: every 16th set of 1024) and evict one
    another, so that a gemm's J panel is read from further out at every reduction step.  A packed
    copy of the panel is contiguous.  (Measured on AMD Zen 5, float32 gemm, one thread: 1024^3
    13.9 -> 11.5-12.0 ms packed; 512^3, whose 512 x 128 tile just fits the sets it has, 1.27 ms
    as it is, 1.39-1.43 packed.)"""
    line = 64
    sets = machine.l2_bytes // (line * max(1, machine.l2_ways))
    if step % line or sets < 2:
        return False
    starts = sets // np.gcd(step // line, sets)  # the sets the rows start in
    per_row = -(-row_bytes // line)
    covered = starts * min(per_row, sets // starts)
    return rows * per_row > covered * machine.l2_ways


def block(shaper, node: isl.ScheduleNode, contraction: dict, register=None, tile=None):
    """The band at ``node`` blocked for registers and caches (see the module's description), or
    None where no block pays or the blocked schedule breaks a dependence.  ``register``: (MR, NR)
    given by the user; ``tile``: cache tile sizes given by the user (outermost first)."""
    machine = shaper.machine
    n = node.band_n_member()
    i, j, ks = contraction["I"], contraction["J"], contraction["K"]
    itemsize = np.dtype(contraction["dtype"]).itemsize
    coincident = [bool(node.band_member_get_coincident(m)) for m in range(n)]
    rowless = i is None  # a block of one row (no loop but J moves the written cell)
    others = [m for m in range(n) if m not in (i, j, *ks)]
    order = others + ([] if rowless else [i]) + [j, *ks]
    if not register and work(shaper.p, node.get_domain()) < MIN_BLOCK_WORK:
        return None
    if contraction["transposed"] and not _rectangular(node, i, j):
        # a block needs its panel full in every row (schedule.promote), and in a triangle that
        # depends on the row, which no panel made outside the rows can know
        return None
    def extents_of(extents):
        k_ext = 1
        for m in ks:
            k_ext = None if k_ext is None or extents[m] is None else k_ext * extents[m]
        return (1 if rowless else extents[i], extents[j], k_ext)

    # shape-generic code: the block shape of the shape that compiles it, or where no block pays at
    # that shape (the code serves larger ones too), that of unknown (long) extents; its cache tiles
    # are those of unknown extents (tiles sized for a small shape would serve large ones badly)
    extents = shaper.extents(node)
    for ext in ((extents_of(shaper.extents(node, hinted=True)),) if shaper.p.hint else ()) + (extents_of(extents),):
        if rowless:
            shape = (1, register[1]) if register else row_shape(machine, itemsize, ext[1])
        else:
            shape = tuple(register) if register else block_shape(machine, itemsize, ext[0], ext[1])
        if shape is not None and not (ext[2] is not None and ext[2] < 2):
            break
    else:
        return None
    ext = extents_of(extents)
    mr, nr = shape
    def panel_wanted(sizes):  # J's operand's panel pays for its copy, or its cache tile crowds the L2's sets
        return not rowless and (len(ks) == 1 and panel_pays(machine, itemsize, mr, nr, sizes[-1], ext[0])
                                or any(aliased(machine, step, sizes[-1], sizes[len(others) + 1] * itemsize)
                                       for step in contraction.get("panel_steps", ())))

    if tile:  # the user's sizes, for the blocked band's members (others, I, J, then K)
        sizes = fit_sizes(tile, n)
        wanted = panel_wanted(sizes)
    else:
        mc, nc, kc = cache_tiles(machine, itemsize, mr, nr, ext, packed=contraction["transposed"])
        if rowless:  # the KC x NR block of J's operand, read once per row, stays in half of L2
            kc = min(kc, _power_of_two_below(max(16, machine.l2_bytes // 2 // (nr * itemsize))))
        k_sizes = []
        for m in reversed(ks):  # KC shared out from the innermost reduction member
            size = kc if extents[m] is None else max(1, min(extents[m], kc))
            k_sizes.insert(0, size)
            kc = max(1, kc // size)
        sizes = (1,) * len(others) + (() if rowless else (mc,)) + (nc,) + tuple(k_sizes)
        wanted = panel_wanted(sizes)
        panel = contraction["transposed"] or (wanted and shaper.opts.pack is None)
        if wanted and panel and not contraction["transposed"]:  # the I tile of a packed panel
            mc = cache_tiles(machine, itemsize, mr, nr, ext, packed=True)[0]
            sizes = sizes[:len(others)] + (mc,) + sizes[len(others) + 1:]
        if (not rowless and machine.threads > 1 and shaper.under_parallel_mark(node) and not others
                and ext[0] is not None):
            # every thread should get tiles of I to work on (fewer, larger ones where each
            # packed panel is to serve as many blocks as it can, rounded up to whole register
            # tiles so that no short tile is left over at the end, which would copy every panel
            # once more for a few rows); code for one thread keeps the tiles the caches want
            tiles = PARALLEL_TILES // 2 if panel else PARALLEL_TILES
            if -(-ext[0] // sizes[0]) < PARALLEL_TILES // 2:
                mc = (max(2 * mr, -(-ext[0] // tiles // mr) * mr) if panel
                      else max(mr, -(-ext[0] // tiles) // mr * mr))
                sizes = (mc,) + sizes[1:]
    depth = node.get_tree_depth()
    within = node.get_domain()  # the instances whose order the blocking changes
    node = shaper.permute(node, order, coincident)
    node = _tile(node, sizes)
    point = node.child(0)
    if others:
        point = point.band_split(len(others)).child(0)
    point = point.band_split(1 if rowless else 2)  # (I, J) above (K...)
    point = _tile(point, (nr,) if rowless else (mr, nr))  # register tiles above the block
    # J's operand is packed where the user asks, where the block needs it (a transposed
    # operand, whose panel gets J as its unit stride), where the panel pays for its copy
    # (panel_pays) and where its cache tile's rows crowd into a few sets of the L2 (aliased); a
    # block that needs it and cannot have it is not made
    pack = (not rowless and (shaper.opts.pack is True
                             or ((contraction["transposed"] or wanted) and shaper.opts.pack is None))
            and len(ks) == 1 and sizes[-1] >= MIN_PANEL_ROWS
            and (ext[0] is None or ext[0] >= 2 * mr) and sizes[len(others)] >= 2 * mr)
    if contraction["transposed"] and not pack:
        return None
    if pack:
        # the register tiles of J outside those of I: a KC x NR panel of J's operand, packed once
        # (schedule.promote), serves every register tile of I in the cache tile
        point = shaper.permute(point, [1, 0], [True, True])
    block_node = point.child(0)
    block_sched = block_node.band_get_partial_schedule()
    kband = block_node.delete()  # now the K band
    below, steps = kband.child(0), 1
    while below.get_type() == isl.schedule_node_type.band:  # bands isl left below (a convolution's taps)
        below, steps = below.child(0), steps + 1
    inner = below.insert_partial_schedule(block_sched)
    inner = inner.band_set_permutable(1).band_member_set_coincident(0, 1)
    if not rowless:
        inner = inner.band_member_set_coincident(1, 1)
    kband = inner.ancestor(steps)
    rest = islmem.union_set((st.domain for st in shaper.p.statements if st.name not in contraction["statements"]),
                            kband.get_domain().get_space())
    rest = rest.intersect(kband.get_domain())
    note = ""
    if not rest.is_empty():
        placed = None
        for how in ("order_before", "order_after"):
            tried = getattr(kband, how)(rest)
            if shaper.respects(tried.get_schedule(), within):
                placed, note = tried, (" (the band's other statements " +
                                       ("before" if how == "order_before" else "after") + " the reduction loops)")
                break
        if placed is None and shaper.deps is not None:
            # a prologue and an epilogue (`y[i, j] = 0` before, `y[i, j] = relu(...)` after):
            # each statement on the side its dependences on the contraction put it
            done = islmem.union_set((st.domain for st in shaper.p.statements if st.name in contraction["statements"]),
                                    kband.get_domain().get_space()).intersect(kband.get_domain())
            after = shaper.deps.intersect_domain(done).range().intersect(rest)
            before = rest.subtract(after)
            tried = kband.order_before(before) if not before.is_empty() else kband
            tried = tried.order_after(after) if not after.is_empty() else tried
            if shaper.respects(tried.get_schedule(), within):
                placed, note = tried, " (the band's other statements before and after the reduction loops)"
        if placed is None:
            return None
        kband = placed
    elif not shaper.respects(kband.get_schedule(), within):
        return None
    # the decision travels as a mark: the AST generator gives the reduction loop under it the
    # block's shape, and schedule.promote keeps the cells of exactly those loops in registers
    # (the last blocks of I and J: every cache tile is a multiple of the block)
    edge = (0, 0, 0)
    if not rowless and not tile:
        lanes = max(1, machine.vector_bits // (8 * itemsize))
        cols = ext[1] % nr if ext[1] is not None else 0
        edge = (ext[0] % mr if ext[0] is not None else 0, cols, min(nr, -(-cols // lanes) * lanes))
    kband = kband.insert_mark(isl.Id(block_mark(mr, nr, edge)))
    out = kband.ancestor(kband.get_tree_depth() - depth)
    shaper.blocks.append(((mr, nr), tuple(sizes)))
    shaper.blocked.extend(contraction["statements"])
    names = ", ".join(contraction["statements"])
    shaper.decisions.append(
        f"band of {n} tiled {sizes} for the caches; contraction {names}: register block {mr}x{nr} "
        f"({contraction['dtype']}, for {machine.vector_registers} {machine.vector_bits}-bit vector registers), "
        f"{len(ks)} reduction loop(s) outside it{note}"
        + ("; register tiles of J outside those of I, for a packed panel of J's operand" if pack else ""))
    return out


def _rectangular(node: isl.ScheduleNode, i: int, j: int) -> bool:
    """Whether the values band members ``i`` and ``j`` take over the band's instances form a
    rectangle (the range of ``j`` the same for every value of ``i``)."""
    mupa = node.band_get_partial_schedule()
    pair = isl.UnionMap.from_union_pw_aff(mupa.get_at(i)).flat_range_product(
        isl.UnionMap.from_union_pw_aff(mupa.get_at(j)))
    values = pair.intersect_domain(node.get_domain()).range()
    if values.is_empty():
        return True
    plane = isl.Set.from_union_set(values)
    rows, cols = plane.project_out(isl.dim_type.set, 1, 1), plane.project_out(isl.dim_type.set, 0, 1)
    return rows.flat_product(cols).is_subset(plane)


def _tile(node: isl.ScheduleNode, sizes) -> isl.ScheduleNode:
    """``node``'s band tiled by ``sizes``, the tile loops counting tiles (not scaled by the sizes):
    the loops' subscripts stay affine without the existential step that scaled tile loops need, which
    keeps the check of the generated loops (schedule.verify) quick."""
    ctx = isl.DEFAULT_CONTEXT
    scale = ctx.get_tile_scale_tile_loops()
    ctx.set_tile_scale_tile_loops(0)
    try:
        return node.band_tile(multi_val(node, sizes))
    finally:
        ctx.set_tile_scale_tile_loops(scale)


def multi_val(node: isl.ScheduleNode, sizes) -> isl.MultiVal:
    """The tile sizes of the band at ``node``, as isl takes them."""
    mv = isl.MultiVal.zero(node.band_get_space())
    for m, s in enumerate(sizes):
        mv = mv.set_val(m, isl.Val.int_from_si(isl.DEFAULT_CONTEXT, int(s)))
    return mv


def merge_reduction(shaper, node: isl.ScheduleNode) -> isl.ScheduleNode:
    """A band whose body is a sequence of one contraction's reduction loop and statements without
    loops of their own around it (``y[i, j] = 0``, the reduction ``y[i, j] += x[i, k] * w[k, j]``,
    then the epilogue ``y[i, j] = max(y[i, j] + b[j], 0.0)``), as isl schedules a contraction fused
    with its prologue and epilogue, merged into one band with the reduction loop as its last
    member: each statement before the reduction at the reduction's first step for its cell, each
    one after it at its last step (the first and last over the reduction's instances of the same
    values of the band; at 0 where it has none).  :func:`block` can then give the contraction a
    register block and run the other statements before and after the reduction loop inside the
    register tile, on the block's cells while they are in L1, instead of a contraction kept apart
    from nests that pass over its whole output again.  Where the merged band breaks a dependence,
    or the shape is not this one, the node is returned as it is."""
    if node.get_type() != isl.schedule_node_type.band or not node.band_get_permutable() or node.band_n_member() < 2:
        # (over a band of one member, the rows of a block of one row, the statements around the
        # reduction cost one pass over a vector: measured no gain, gemver's 12 % loss)
        return node
    seq = node.child(0)
    if seq.get_type() != isl.schedule_node_type.sequence:
        return node
    kids = [seq.child(k).child(0) for k in range(seq.n_children())]
    bands = [k for k, c in enumerate(kids) if c.get_type() == isl.schedule_node_type.band]
    if len(bands) != 1 or len(kids) < 2:
        return node
    c = bands[0]
    kb = kids[c]
    if (kb.band_n_member() != 1 or kb.band_member_get_coincident(0)
            or kb.child(0).get_type() != isl.schedule_node_type.leaf
            or any(x.get_type() != isl.schedule_node_type.leaf for k, x in enumerate(kids) if k != c)):
        return node
    p = shaper.p
    dom_c = kb.get_domain()
    inside = [st.name for st in p.statements_in(dom_c)]
    least = 0 if isinstance(shaper.opts.register, tuple) else MIN_BLOCK_WORK  # (a block the user asks for: any size)
    wanted = set(p.derived(("block candidates", least), lambda: tuple(candidates(p, least))))
    if not inside or not set(inside) <= wanted:
        return node
    outer = node.band_get_partial_schedule()
    bmap = isl.UnionMap.from_multi_union_pw_aff(outer)
    kupa = kb.band_get_partial_schedule().get_at(0)
    steps = bmap.intersect_domain(dom_c).reverse().apply_range(isl.UnionMap.from_union_pw_aff(kupa).intersect_domain(dom_c))
    member = kupa.intersect_domain(dom_c)
    for k, x in enumerate(kids):
        if k == c:
            continue
        dom = x.get_domain()
        ends = steps.lexmax() if k > c else steps.lexmin()
        at = bmap.intersect_domain(dom).apply_range(ends)
        none = dom.subtract(at.domain())
        if not none.is_empty():
            at = at.union(isl.UnionMap.from_domain_and_range(none, isl.UnionSet(isl.Set("{ [0] }"))))
        try:
            member = member.union_add(isl.MultiUnionPwAff.from_union_map(at).get_at(0))
        except isl.Error:
            return node
    n = node.band_n_member()
    coincident = [node.band_member_get_coincident(m) for m in range(n)]
    merged = outer.flat_range_product(isl.MultiUnionPwAff.from_union_pw_aff(member))
    within = node.get_domain()
    new = seq.insert_partial_schedule(merged).band_set_permutable(1)
    for m in range(n):
        new = new.band_member_set_coincident(m, coincident[m])
    new = new.band_member_set_coincident(n, 0)
    new = new.parent().delete()  # the band above, whose members the merged band holds
    new = new.child(0).child(c).child(0).delete().ancestor(3)  # the reduction's own band
    if not shaper.respects(new.get_schedule(), within):
        return node
    shaper.decisions.append(
        f"contraction {', '.join(inside)}: its reduction loop merged into the band around it, the statements "
        "before it at its first step and those after it at its last, so that they run inside its register tile")
    return new
