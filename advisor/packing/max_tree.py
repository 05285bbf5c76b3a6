"""The binary max segment tree over bins that Megatron-Bridge's ``first_fit`` searches (algorithms.py, 0.6.2):
leaf b holds bin b's room (unopened bins 0), each node the larger of its children, so the leftmost bin with room
for an item is one descent from the root. The max-tree first fit kept as the benchmark's "before"
(``first_fit.first_fit_tree``) uses it; the fast first fit uses first_fit.py's 32-wide tree, and first fit
decreasing runs on the counts (decreasing.py).

The tree is ``tree[1:2 * size]`` with leaves at ``size + b``; it grows by doubling (``grown``).

    >>> tree, size = np.zeros(4, np.int32), 2
    >>> set_room(tree, size, 0, 3); set_room(tree, size, 1, 5)
    >>> leftmost_with_room(tree, size, 4), leftmost_with_room(tree, size, 6)
    (1, -1)
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["grown", "leftmost_with_room", "set_room"]


@njit(cache=True, nogil=True)  # nogil: a dashboard session packing 16M samples never stalls the others
def grown(tree, size):
    """The max-tree with twice the leaves (new bins hold 0, as unopened bins do in Megatron-Bridge's tree)."""
    bigger = np.zeros(4 * size, np.int32)
    bigger[2 * size : 3 * size] = tree[size : 2 * size]
    for i in range(2 * size - 1, 0, -1):
        left, right = bigger[2 * i], bigger[2 * i + 1]
        bigger[i] = left if left > right else right
    return bigger, 2 * size


@njit(cache=True, nogil=True)
def leftmost_with_room(tree, size, s):
    """Leftmost leaf whose room is at least s, or -1."""
    if tree[1] < s:
        return -1
    i = 1
    while i < size:
        i = 2 * i if tree[2 * i] >= s else 2 * i + 1
    return i - size


@njit(cache=True, nogil=True)
def set_room(tree, size, b, room):
    """Bin b's room, and its ancestors' maxima up to the root."""
    i = b + size
    tree[i] = room
    i //= 2
    while i >= 1:
        left, right = tree[2 * i], tree[2 * i + 1]
        tree[i] = left if left > right else right
        i //= 2
