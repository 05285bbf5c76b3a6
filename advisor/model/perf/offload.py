"""What CPU offloading of activations costs a micro batch: the copies Transformer Engine's default synchronizer
cannot hide behind the layers' compute.

Alternatives: free (the copies run on their own stream: true while the host link keeps up) or all exposed (what a
synchronous copy would cost). Here: Transformer Engine's schedule, simulated layer by layer
(transformer_engine/pytorch/cpu_offload.py, DefaultOffloadSynchronizer, which Megatron-Core's
cpu_offloading_num_layers drives): layers 0 .. n-1 are offloaded, one copy at a time on one stream, each starting
when its layer's forward ends; layer i's copy must be done before layer L - n + i starts its forward (so that only
L - n layers' activations are ever on the GPU). In backward layer i's reload starts when the backward reaches layer
L - 1 - n + i, and layer i's backward waits for it.
"""

from __future__ import annotations


def offload_seconds(layers: int, offloaded: int, forward: float, backward: float, copy: float) -> tuple[float, float]:
    """Seconds the forward and the backward of one micro batch wait for copies: ``layers`` layers of ``forward`` and
    ``backward`` seconds each, the first ``offloaded`` of them copied out and back in ``copy`` seconds each.

    >>> offload_seconds(80, 40, forward=0.015, backward=0.030, copy=0.010)   # the link keeps up: hidden
    (0.0, 0.0)
    >>> [round(x, 3) for x in offload_seconds(4, 3, forward=0.01, backward=0.02, copy=0.05)]
    [0.15, 0.15]
    """
    if offloaded <= 0:
        return 0.0, 0.0
    # forward: layer j waits for the copy of layer j - (L - n) to be done
    now, stream, fwd = 0.0, 0.0, 0.0
    done: dict = {}
    for j in range(layers):
        i = j - (layers - offloaded)
        if 0 <= i < offloaded and done[i] > now:
            fwd += done[i] - now
            now = done[i]
        now += forward
        if j < offloaded:
            stream = max(now, stream) + copy
            done[j] = stream
    # backward, layers in reverse: at layer j the reload of layer j - (L - 1 - n) starts; layer i < n waits for its own
    now, stream, back, bwd = 0.0, 0.0, {}, 0.0
    for j in range(layers - 1, -1, -1):
        i = j - (layers - 1 - offloaded)
        if 0 <= i < offloaded:
            stream = max(now, stream) + copy
            back[i] = stream
        if j < offloaded and back[j] > now:
            bwd += back[j] - now
            now = back[j]
        now += backward
    return fwd, bwd
