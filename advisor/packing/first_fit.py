"""First fit over millions of items, exactly as Megatron-Bridge's segment tree decides, in a fraction of the time.

Megatron-Bridge's ``first_fit`` (algorithms.py, 0.6.2) puts each item into the lowest-index bin whose remaining room
is at least the item's length, found by descending a binary max segment tree over bins: at 16M items and 8M bins
that is ~23 dependent loads and as many unpredictable branches down, and as many steps up, per item. The kernel
here answers the same question with the same kind of tree, made wide:

- Each node holds the largest room of 32 children (int16 rooms: 32 of them are one 64-byte line), so 8M bins are
  five levels deep instead of 23. A level is one vector comparison of the 32 children with the item's length
  (AVX-512: one instruction into a mask register) and a count of trailing zeros: no branch to mispredict.
- After a bin takes an item, its room and its block's largest room (the level above) are written without a branch,
  each from the siblings' largest room (one vector reduction, read before the write); the levels higher up only
  while they change (``_lowered``). Writing every level without a branch, or stopping right at the first level
  unchanged, both measured 5-12 % slower on 16M Wikipedia samples at pack sizes 384-2048: the first mispredicts
  where the bin is the largest of its block (large packs: the last bins take most items), the second does work
  above where nothing changes.
- The newest ``FRONT`` = 64 bins stay out of the tree: an item that no older bin takes (the top node says so)
  is matched against their rooms in one scan of two vectors, and a bin among them takes an item with one store,
  nothing carried up. Most items open a bin or land there (on 16M Wikipedia samples at pack size 384: 58 % open
  one, 32 % land among the newest 64, 10 % further back), and carrying a block's largest room up the tree was
  half of each placement's time. When a bin opens past the window, its older 32 bins join the tree (one
  reduction, their nodes raised). 384: 0.72 s -> 0.55 s, 2048: 1.05 s -> 0.38 s; four vectors (128 bins) were no
  faster.
- The next item's bin is looked for before the current item is placed, and checked after (placing an item only
  lowers its own bin's room or opens a bin after all others): the search's reads then wait for none of the
  placement's writes, and the two overlap.
- Rooms are stored exactly, so each bin's tokens are ``pack_size - room`` at the end; each bin's items and sum of
  squares are kept in two arrays that are the result as they stand. Sharing one row per bin (one cache line
  touched per placement instead of two) placed ~5 % faster, but the two columns then had to be copied out, and
  fresh pages cost more than that here: at pack size 384 on Wikipedia, median 0.58 s against 0.73 s.

Before it, the advisor used a kernel of left-to-right maxima of the rooms indexed in a bitset ("records", 1.5-2.2 s
at 16M Wikipedia samples; revealing new records among frozen bins cost more than the search it saved, 15M searches
at pack size 640) and a binary max tree like Megatron-Bridge's (``first_fit_tree``, kept as the benchmark's "before"
and a second opinion in tests). This one takes ~0.4-0.6 s at pack sizes 384-2048. Measured in bench/bench_packing.py
against both and against Megatron-Bridge's own packer.

Tried and not kept (16M Wikipedia samples, each against this kernel in the same run): writing a block back as one
vector so the next search's vector load forwards from the store (no faster); prefetching the found bin's counts
(no faster); skipping the carry when the bin was not its block's largest (slower: the branch mispredicts);
upper bounds tightened only when a search finds them stale (3M repairs, 3x slower); one branchless path for
opening and placing (no faster).

Two threads do not help: first fit is a chain of filters (bin 0 takes, in order, every item that fits what it has
left; bin 1 the same of the items bin 0 passed on; ...), so the first bins can be packed in one thread and the rest
in another a chunk behind, exactly. Measured on Wikipedia, it gained nothing: the work follows the frontier of new
bins, so the second stage starts only once the first has opened all its bins and then does most of the rest alone.

numba does not vectorize a search loop that stops early, so the vector steps are written as LLVM IR (``_at_least``,
``_max_but``: llvmlite, numba's own dependency); LLVM lowers them to whatever the CPU has (AVX-512,
AVX2, SSE). Written as plain loops they ran scalar, at twice the time.

The kernel runs in chunks of items with its state carried between them, so a long packing reports progress and a
background packing can pause between chunks (``first_fit``'s ``progress`` and ``pause``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.cpython.unsafe.numbers import trailing_zeros
from numba.extending import intrinsic

from advisor.packing.max_tree import grown, leftmost_with_room, set_room

__all__ = ["CHUNK", "STRIP", "FirstFit", "first_fit", "first_fit_bins", "first_fit_tree"]

CHUNK = 1 << 20  # items per kernel call: progress and pauses between calls, ~50 ms each
STRIP = 64  # the first bins whose items are kept in order while placing (a chart shows the first 40 packs)
# int16 rooms (and fills) up to this pack size: a fill rounded up to a multiple of 16, as the micro batches round
# it (advisor/model/micro_batches.py), still fits an int16
INT16_PACK = (1 << 15) - 16
WIDTH = 32  # children a node: 32 int16 rooms are one cache line, compared in one AVX-512 instruction
SHIFT = 5  # log2(WIDTH)
ALIGN = 64  # bytes: a node's children start a cache line (a node split over two lines costs two loads)
FRONT = 2 * WIDTH  # the newest bins, kept out of the tree and found by one scan of their rooms


# ---------------------------------------------------------------------------------------------- vector steps
def _block(context, builder, arrty, arr, base):
    """The WIDTH elements ``arr[base:base + WIDTH]`` as one LLVM vector (no alignment assumed)."""
    a = context.make_array(arrty)(context, builder, arr)
    elt = context.get_data_type(arrty.dtype)
    vty = ir.VectorType(elt, WIDTH)
    ptr = builder.bitcast(builder.gep(a.data, [base]), vty.as_pointer())
    return builder.load(ptr, align=elt.width // 8), elt, vty


@intrinsic
def _at_least(typingctx, arr, base, s):
    """A mask of the WIDTH elements from ``base`` that are >= s (bit j: element base + j)."""

    def codegen(context, builder, sig, args):
        v, elt, vty = _block(context, builder, sig.args[0], args[0], args[1])
        x = args[2]
        x = (
            builder.trunc(x, elt)
            if x.type.width > elt.width
            else builder.sext(x, elt)
            if x.type.width < elt.width
            else x
        )
        lane0 = builder.insert_element(ir.Constant(vty, ir.Undefined), x, ir.Constant(ir.IntType(32), 0))
        splat = builder.shuffle_vector(
            lane0, ir.Constant(vty, ir.Undefined), ir.Constant(ir.VectorType(ir.IntType(32), WIDTH), [0] * WIDTH)
        )
        mask = builder.bitcast(builder.icmp_signed(">=", v, splat), ir.IntType(WIDTH))
        return builder.zext(mask, ir.IntType(64))

    return types.uint64(arr, base, s), codegen


@intrinsic
def _max_but(typingctx, arr, base, lane):
    """The largest of the WIDTH elements from ``base`` but ``base + lane`` (the type's minimum when alone; lane
    WIDTH: the largest of all)."""

    def codegen(context, builder, sig, args):
        v, elt, vty = _block(context, builder, sig.args[0], args[0], args[1])
        lanes = ir.Constant(vty, list(range(WIDTH)))
        at = builder.insert_element(
            ir.Constant(vty, ir.Undefined), builder.trunc(args[2], elt), ir.Constant(ir.IntType(32), 0)
        )
        at = builder.shuffle_vector(
            at, ir.Constant(vty, ir.Undefined), ir.Constant(ir.VectorType(ir.IntType(32), WIDTH), [0] * WIDTH)
        )
        v = builder.select(builder.icmp_signed("==", lanes, at), ir.Constant(vty, [-(1 << (elt.width - 1))] * WIDTH), v)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(elt, [vty]), f"llvm.vector.reduce.smax.v{WIDTH}i{elt.width}"
        )
        return builder.sext(builder.call(fn, [v]), ir.IntType(64))

    return types.int64(arr, base, lane), codegen


@njit(cache=True, nogil=True, inline="always")
def _tz(m):
    return np.int64(trailing_zeros(m))


# ---------------------------------------------------------------------------------------------- the kernel
@njit(cache=True, nogil=True, inline="always")
def _leftmost(room, up, off, top, s, none):
    """The lowest-index bin whose room is >= s, or ``none``: down from the top node (at ``top``), the first able
    child at each level."""
    m = _at_least(up, top, s)
    if not m:
        return none
    i = _tz(m)
    for lvl in range(off.size - 2, -1, -1):
        i = (i << SHIFT) + _tz(_at_least(up, off[lvl] + (i << SHIFT), s))
    return (i << SHIFT) + _tz(_at_least(room, i << SHIFT, s))


@njit(cache=True, nogil=True, inline="always")
def _lowered(room, up, off, depth, b, r):
    """Bin b's room drops to r: the room and its block's largest room written at once (the block's others read
    first), then the largest rooms above carried up while they change."""
    sib = _max_but(room, (b >> SHIFT) << SHIFT, b & (WIDTH - 1))
    room[b] = r
    v = r if r > sib else sib
    i = b >> SHIFT
    for lvl in range(depth - 1):
        node = off[lvl] + i
        if lvl and up[node] == v:
            return
        sib = _max_but(up, off[lvl] + ((i >> SHIFT) << SHIFT), i & (WIDTH - 1))
        up[node] = v
        v = v if v > sib else sib
        i >>= SHIFT
    up[off[depth - 1] + i] = v


@njit(cache=True, nogil=True, inline="always")
def _joined(up, off, depth, i, v):
    """Block i of bins joins the tree with largest room v: its node and the ones above rise to v where below it."""
    for lvl in range(depth):
        node = off[lvl] + i
        if up[node] >= v:
            return
        up[node] = v
        i >>= SHIFT


@njit(cache=True, nogil=True, inline="always")
def _find(room, up, off, top, s, none, front):
    """The lowest-index bin whose room is >= s, or ``none``: among the tree's bins (those before ``front``) if the
    top node says one fits, else among the newest bins (``front`` on, at most ``FRONT``) by one scan of their
    rooms. Bins not yet opened have room 0, which only a length-0 item would take, and the tree always answers
    those (every node is >= 0)."""
    if _at_least(up, top, s):
        return _leftmost(room, up, off, top, s, none)
    m = _at_least(room, front, s) | (_at_least(room, front + WIDTH, s) << np.uint64(WIDTH))
    return front + _tz(m) if m else none


@njit(cache=True, nogil=True, inline="always")
def _front(nbins):
    """The first of the newest bins kept out of the tree, when ``nbins`` are open: a multiple of WIDTH, at most
    FRONT bins before nbins (the window's older half joins the tree when a bin would open past it)."""
    return 0 if nbins <= FRONT else ((nbins - FRONT + WIDTH - 1) >> SHIFT) << SHIFT


@njit(cache=True, nogil=True)
def _first_fit_chunk(items, table, k0, k1, pack_size, bin_of, room, up, off, nseq, work, strip, state):
    """First fit of ``items[k0:k1]`` (lengths, or indices into ``table`` when it is not empty), continuing from
    ``state`` = [bins open, strip entries].

    ``room`` holds every bin's room (unopened bins 0, as in Megatron-Bridge's tree), ``up`` the levels of the max
    tree above it (level ``lvl`` from ``off[lvl]``: node i is the largest room of its 32 children; the last level is
    one node) for the bins before ``_front(nbins)`` (the newest are scanned, ``_find``), ``nseq`` and ``work``
    each bin's items and sum of squares, ``strip`` the (bin, length) of every item placed in the first ``STRIP``
    bins, in order. Returns the index of the first item not placed: ``k1``, or an
    earlier one when the strip is full (the caller grows it and calls again from there).

    Why the strip is never grown in here: rebinding an array inside the loop made numba keep it as a reference
    counted in every iteration, ~20 ns an item (a third of the kernel's time at 16M Wikipedia samples).
    """
    nbins, nstrip = state[0], state[1]
    front = _front(nbins)
    cap = strip.shape[0]
    depth, top = off.size, off[-1]  # held in registers: the arrays' stores could alias them for all numba knows
    look = table.size > 0
    keep = bin_of.size > 0
    s = np.int64(table[items[k0]]) if look else np.int64(items[k0])
    b = _find(room, up, off, top, s, nbins, front)
    stop = k1
    for k in range(k0, k1):
        if (b if b < nbins else nbins) < STRIP and nstrip == cap:  # the strip is full: stop before this item
            stop = k
            break
        # the next item's bin is looked for before this one is placed (its reads then wait for no write of this
        # placement, so the two overlap) and checked after: placing an item lowers only its own bin's room and
        # opens bins after all others, so the bin found stays the first fit unless it is this one and lost the
        # room (look again), or none was found and this item opened one (it may fit). Looking further ahead (a
        # ring of found bins) measured no faster.
        s2 = q = 0
        if k + 1 < k1:
            s2 = np.int64(table[items[k + 1]]) if look else np.int64(items[k + 1])
            q = _find(room, up, off, top, s2, nbins, front)
        if b >= nbins:  # nothing open fits (an unopened bin answers only a length-0 item): a new bin
            if nbins == front + FRONT:  # the newest bins' older half joins the tree (the bin found stays first)
                _joined(up, off, depth, front >> SHIFT, _max_but(room, front, WIDTH))
                front += WIDTH
            b = nbins
            nbins += 1
            nseq[b] = 1
            work[b] = s * s
            room[b] = pack_size - s
            if q >= b:  # no bin before it fits the next item: the new one may
                q = b if pack_size - s >= s2 else nbins
        else:
            nseq[b] += 1
            work[b] += s * s
            if b < front:
                _lowered(room, up, off, depth, b, room[b] - s)
            else:  # one of the newest: nothing above it to carry
                room[b] -= s
            if q == b and room[b] < s2:  # the next item wanted this bin and no longer fits: look again
                q = _find(room, up, off, top, s2, nbins, front)
        if b < STRIP:
            strip[nstrip, 0], strip[nstrip, 1] = b, s
            nstrip += 1
        if keep:
            bin_of[k] = b
        b, s = q, s2
    state[0], state[1] = nbins, nstrip
    return stop


@dataclass(frozen=True, kw_only=True)
class FirstFit:
    """Where first fit put every item, and each bin's figures (computed while placing, so nothing needs the bins
    grouped: grouping 16M items costs as much as a third of the placing)."""

    bins: np.ndarray  # the bin of every item, in the items' order
    count: int  # bins opened
    fill: np.ndarray  # each bin's tokens (int16 up to packs of INT16_PACK, else int32)
    nseq: np.ndarray  # items (int32)
    work: np.ndarray  # attention work sum(s^2) (int32; int64 past packs of 46,340 tokens)
    strip: np.ndarray  # (k, 2): (bin, length) of the items in the first STRIP bins, in the order they were placed

    def first_packs(self) -> tuple[tuple[int, ...], ...]:
        """The first STRIP bins' items, in order (what a chart of the first packs draws)."""
        packs: list[list[int]] = [[] for _ in range(min(STRIP, self.count))]
        for b, length in self.strip.tolist():
            packs[b].append(length)
        return tuple(tuple(p) for p in packs)


def first_fit(
    items: np.ndarray,
    pack_size: int,
    progress: Callable[[float], None] | None = None,
    pause: Callable[[], None] | None = None,
    bins: bool = True,
    table: np.ndarray | None = None,
    tokens: int | None = None,
) -> FirstFit:
    """First fit of the items in the given order: Megatron-Bridge's ``first_fit`` exactly
    (``tests/oracle/test_packing_vs_megatron_bridge.py``). ``progress(fraction)`` is called and ``pause()`` may block
    between chunks of items. ``bins=False``: the bin of each item is not kept (``FirstFit.bins`` empty; 4 bytes an
    item less), for a caller that needs only the bins' figures. ``table``: the items are indices into it (the
    lengths are ``table[items]``, never made: ``offline.pack`` passes its cached shuffled order so). ``tokens``:
    their sum, if known.

    Fresh memory is what costs here (touching a new page costs more than the work done on it), so the per-bin
    arrays are as narrow as their values allow (int16 rooms up to packs of ``INT16_PACK``; int32 counts and sums
    of squares, int64 past packs of 46,340), the figures grown in place between chunks and returned as they
    stand, and int16 rooms turned into the fills in place (``FirstFit.fill`` is then int16: 9.4M packs at pack
    size 384 are 19 MB of fresh pages fewer than an int32 copy's 38 MB).

    >>> f = first_fit(np.array([3, 3, 1, 2, 4], np.int32), 4)
    >>> f.bins.tolist(), f.count, f.fill.tolist(), f.nseq.tolist(), f.work.tolist(), f.first_packs()
    ([0, 1, 0, 2, 3], 4, [4, 3, 2, 4], [2, 1, 1, 1], [10, 9, 4, 16], ((3, 1), (3,), (2,), (4,)))
    """
    items = np.ascontiguousarray(items)
    table = np.zeros(0, np.int32) if table is None else np.ascontiguousarray(table)
    n = int(items.size)
    if n == 0:
        empty = np.zeros(0, np.int32)
        return FirstFit(bins=empty, count=0, fill=empty, nseq=empty, work=empty, strip=np.zeros((0, 2), np.int64))
    if not _within(items, table, pack_size):  # Megatron-Bridge then opens bins of negative room
        lengths = (table[items] if table.size else items).astype(np.int32)
        found, count = first_fit_tree(lengths, pack_size)
        return _from_bins(lengths, found, count)
    if tokens is None:
        tokens = int(
            (table.astype(np.int64) * np.bincount(items, minlength=table.size)).sum()
            if table.size
            else items.sum(dtype=np.int64)
        )
    dtype = np.int16 if pack_size <= INT16_PACK else np.int32
    room, up, off = _tree(max(n, FRONT), dtype)  # the newest bins' scan reads FRONT rooms from a block start
    # room for the bins a good packing opens and a chunk more, grown in place (realloc) when first fit needs more
    cap = min(n, tokens * 21 // 20 // max(1, pack_size) + CHUNK)
    nseq = np.zeros(cap, np.int32)  # each bin's items and sum of squares
    work = np.zeros(cap, np.int32 if pack_size <= 46_340 else np.int64)
    strip = np.zeros((256, 2), np.int64)
    state = np.zeros(2, np.int64)
    kept = np.empty(n if bins else 0, np.int32)
    for k0 in range(0, n, CHUNK):
        k1 = min(n, k0 + CHUNK)
        if state[0] + (k1 - k0) > nseq.size:
            cap = min(n, max(int(state[0]) + (k1 - k0), nseq.size * 3 // 2))
            for column in (nseq, work):
                column.resize(cap, refcheck=False)  # in place: the new entries are zeros, nothing copied
        k = k0
        while k < k1:
            k = _first_fit_chunk(items, table, k, k1, pack_size, kept, room, up, off, nseq, work, strip, state)
            if k < k1:  # the strip filled (many short items in the first bins): twice the room, and on
                strip = np.concatenate((strip, np.zeros_like(strip)))
        if progress is not None:
            progress(k1 / n)
        if pause is not None and k1 < n:
            pause()
    count = int(state[0])
    if room.dtype == np.int16:  # the rooms become the fills, in place
        fill = room[:count]
        np.subtract(pack_size, fill, out=fill)
    else:
        fill = np.subtract(pack_size, room[:count], dtype=np.int32)
    for column in (nseq, work):  # shrunk in place to the bins opened: what a cache counts is what is held
        column.resize(count, refcheck=False)
    return FirstFit(bins=kept, count=count, fill=fill, nseq=nseq, work=work, strip=strip[: state[1]].copy())


def _within(items: np.ndarray, table: np.ndarray, pack_size: int) -> bool:
    """Every length in [0, pack_size]: the table's entries if they all are (no pass over the items), else the
    entries the items use."""
    if table.size:
        if 0 <= int(table.min()) and int(table.max()) <= pack_size:
            return True
        values = table[np.unique(items)]
    else:
        values = items
    return 0 <= int(values.min()) and int(values.max()) <= pack_size


def _tree(n: int, dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(room, up, off): zeroed rooms for n bins and the levels of the max tree above them, each level padded to
    whole nodes (a node's children are read as one vector), up to one node's worth. Zeroed pages cost nothing until
    touched, so they are sized for n bins (every item alone) and never grown: growing would move them off
    ``ALIGN``."""
    sizes = [-(-max(n, 1) >> SHIFT)]
    while sizes[-1] > WIDTH:  # the last level is read as one node
        sizes.append(-(-sizes[-1] >> SHIFT))
    off = np.zeros(len(sizes), np.int64)
    total = 0
    for lvl, size in enumerate(sizes):
        off[lvl] = total
        total += _blocks(size)
    return _aligned(_blocks(n), dtype), _aligned(total, dtype), off


def _aligned(n: int, dtype) -> np.ndarray:
    """n zeros starting an ``ALIGN``-byte line."""
    itemsize = np.dtype(dtype).itemsize
    buf = np.zeros(n + ALIGN // itemsize, dtype)
    k = (-buf.ctypes.data % ALIGN) // itemsize
    return buf[k : k + n]


def _blocks(n: int) -> int:
    """n rounded up to whole nodes."""
    return -(-n >> SHIFT) << SHIFT


def _from_bins(items: np.ndarray, bins: np.ndarray, count: int) -> FirstFit:
    values = items.astype(np.int64)
    first = bins < STRIP
    return FirstFit(
        bins=bins,
        count=count,
        fill=np.bincount(bins, weights=values, minlength=count).astype(np.int64),
        nseq=np.bincount(bins, minlength=count).astype(np.int64),
        work=np.bincount(bins, weights=values * values, minlength=count).astype(np.int64),
        strip=np.stack([bins[first], values[first]], axis=1),
    )


def first_fit_bins(
    items: np.ndarray,
    pack_size: int,
    progress: Callable[[float], None] | None = None,
    pause: Callable[[], None] | None = None,
) -> tuple[np.ndarray, int]:
    """The bin of every item under first fit in the given order, and the number of bins (``first_fit``).

    >>> bins, n = first_fit_bins(np.array([3, 3, 1, 2, 4], np.int32), 4)
    >>> bins.tolist(), n
    ([0, 1, 0, 2, 3], 4)
    """
    f = first_fit(items, pack_size, progress, pause)
    return f.bins, f.count


# ---------------------------------------------------------------------------------------------- the max tree
@njit(cache=True, nogil=True)
def _first_fit_tree(items, pack_size):
    size = 1024
    tree = np.zeros(2 * size, np.int32)
    bin_of = np.empty(items.size, np.int32)
    nbins = 0
    for k in range(items.size):
        s = items[k]
        b = leftmost_with_room(tree, size, s)
        if b == -1 or b >= nbins:
            b = nbins
            nbins += 1
            if nbins > size:
                tree, size = grown(tree, size)
            room = pack_size - s
        else:
            room = tree[b + size] - s
        set_room(tree, size, b, room)
        bin_of[k] = b
    return bin_of, nbins


def first_fit_tree(items: np.ndarray, pack_size: int) -> tuple[np.ndarray, int]:
    """First fit with a max segment tree over bins, as Megatron-Bridge searches (unopened bins hold 0, so a length-0
    item joins bin 0 once it exists): the kernel ``first_fit_bins`` replaced, kept as its benchmark's "before" and a
    second opinion in tests. O(log bins) per item.

    >>> bins, n = first_fit_tree(np.array([3, 3, 1, 2, 4], np.int32), 4)
    >>> bins.tolist(), n
    ([0, 1, 0, 2, 3], 4)
    """
    return _first_fit_tree(np.ascontiguousarray(items), pack_size)
