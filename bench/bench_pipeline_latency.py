"""Bench: how much pipeline send latency Megatron-Core's own 1F1B order exposes, against the step model's p2p term.

The step model (advisor/model/perf/step.py) charges a pipeline's sends in two ways: exposed on every micro batch and
virtual stage where Megatron-Core's overlap_p2p_comm is off, and only in the fill and drain where it is on. This bench
checks that rule by event simulation of the real order: the warm-up counts (``get_pp_rank_microbatches``) and the
interleaved order of (micro batch, model chunk) (``get_schedule_table``) are the megatron-core wheel's own functions,
loaded by tests/support/mb_reference.py; each rank runs its forward and backward chunks in that order, a chunk starts
when its input has arrived (the neighbour's output plus one send over the link the step model picks for that
boundary), and with overlap off the sender also waits out its send. Chunk times are the step model's own
(``stage_seconds`` over the virtual stages; forward : backward 1 : 1 for LoRA, which computes no weight
gradients, else 1 : 2).

It prints, for a weak-scaling series of one layout (the same micro batches per rank, DP growing), the simulated
step (compute and sends only: no bubble model, no DP sync), its growth over the first GPU count, and the model's
p2p term. A growth the simulation shows but the model does not is a limit of the model; the measured trend of the
same series, where a published table has it, is the reference (not bundled: the fine-tuning tables are held out).

    python bench/bench_pipeline_latency.py                              # Llama 3 70B LoRA FP8, H100, TP2 PP4 VP20
    python bench/bench_pipeline_latency.py --model llama3.1-8b --tp 1 --pp 2 --vpp 0 --peft none --gpus 8 16 32
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from advisor.model.perf.calibration import EFFICIENCY, work_of  # noqa: E402
from advisor.model.perf.hardware import gpu_of  # noqa: E402
from advisor.model.perf.step import _boundary_spans, step_time  # noqa: E402
from advisor.plan import plan_from_dict  # noqa: E402
from tests.support.mb_reference import load_function  # noqa: E402

SCHEDULES = "megatron/core/pipeline_parallel/schedules.py"


class _Group:
    def __init__(self, size: int, rank: int) -> None:
        self._size, self._rank = size, rank

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return self._rank


class _Comm:
    """The one object ``get_pp_rank_microbatches`` reads: the pipeline group's size and rank, and the VPP size."""

    def __init__(self, pp: int, rank: int, vpp: int | None) -> None:
        self.pp_group = _Group(pp, rank)
        self.virtual_pipeline_model_parallel_size = vpp


def rank_orders(pp: int, vpp: int, micro_batches: int) -> list[list[tuple[str, int, int]]]:
    """Each pipeline rank's chunks in Megatron-Core's order: ("F" or "B", micro batch, model chunk)."""
    chunks = max(vpp, 1)
    if chunks > 1 and (micro_batches < pp or 0 < micro_batches % pp < pp):
        # forward_backward_pipelining_with_interleaving refuses these (micro-batch groups of PP)
        raise ValueError(
            f"Megatron-Core interleaves {micro_batches} micro batches over PP {pp} only as whole groups of PP"
        )
    warmups = load_function(SCHEDULES, "get_pp_rank_microbatches", {"Optional": object, "P2PCommunicator": object})
    if chunks > 1:
        table = load_function(SCHEDULES, "get_schedule_table")(micro_batches, chunks, pp)
    else:
        table = [(mb, 0) for mb in range(micro_batches)]
    orders = []
    for rank in range(pp):
        total, _, warm, _ = warmups(
            micro_batches, chunks, pp, p2p_communicator=_Comm(pp, rank, vpp if vpp > 1 else None)
        )
        seq = [("F", k) for k in range(warm)]
        for k in range(total - warm):
            seq += [("F", warm + k), ("B", k)]
        seq += [("B", k) for k in range(total - warm, total)]
        # the k-th backward runs the k-th entry's micro batch on the mirrored chunk (get_model_chunk_id)
        orders.append(
            [(kind, table[k][0], table[k][1] if kind == "F" else chunks - 1 - table[k][1]) for kind, k in seq]
        )
    return orders


def simulate(orders, fwd: float, bwd: float, hop, chunks: int, blocking: bool) -> float:
    """Seconds until the last chunk ends. ``hop(a, b)``: one send from pipeline rank a to b."""
    pp = len(orders)
    done: dict[tuple[str, int, int, int], float] = {}
    pos, free = [0] * pp, [0.0] * pp
    moved = True
    while moved:
        moved = False
        for r in range(pp):
            while pos[r] < len(orders[r]):
                kind, mb, c = orders[r][pos[r]]
                if kind == "F":
                    dep = ("F", mb, c, r - 1) if r else (("F", mb, c - 1, pp - 1) if c else None)
                    lat = hop(r - 1, r) if r else (hop(pp - 1, 0) if c else 0.0)
                    sends = not (r == pp - 1 and c == chunks - 1)
                    to = (r + 1) % pp
                else:
                    if r < pp - 1:
                        dep, lat = ("B", mb, c, r + 1), hop(r + 1, r)
                    elif c < chunks - 1:
                        dep, lat = ("B", mb, c + 1, 0), hop(0, pp - 1)
                    else:
                        dep, lat = ("F", mb, c, r), 0.0
                    sends = not (r == 0 and c == 0)
                    to = (r - 1) % pp
                if dep is not None and dep not in done:
                    break
                start = max(free[r], done[dep] + lat if dep is not None else 0.0)
                end = start + (fwd if kind == "F" else bwd)
                done[(kind, mb, c, r)] = end
                free[r] = end + (hop(r, to) if blocking and sends else 0.0)
                pos[r] += 1
                moved = True
    if any(pos[r] < len(orders[r]) for r in range(pp)):
        raise RuntimeError("the order deadlocked: a chunk waits on one that never runs")
    return max(free)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="llama3.1-70b")
    ap.add_argument("--gpu", default="H100-80GB")
    ap.add_argument("--precision", default="fp8")
    ap.add_argument("--peft", default="lora", choices=["lora", "none"])
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--pp", type=int, default=4)
    ap.add_argument("--vpp", type=int, default=20, help="0: no interleaving")
    ap.add_argument("--seq-length", type=int, default=4096)
    ap.add_argument("--micro-batches", type=int, default=32, help="per data-parallel rank and step")
    ap.add_argument("--gpus", type=int, nargs="+", default=[8, 16, 32])
    args = ap.parse_args()
    base = None
    print(
        f"{args.model} {args.peft} {args.precision} on {args.gpu}: TP{args.tp} PP{args.pp} VPP{args.vpp}, "
        f"seq {args.seq_length}, {args.micro_batches} micro batches per DP rank"
    )
    print(
        f"{'GPUs':>5} {'sim overlap':>12} {'growth':>7} {'sim blocking':>13} {'growth':>7} {'model step':>11} "
        f"{'growth':>7} {'model p2p':>10}"
    )
    orders = rank_orders(args.pp, args.vpp, args.micro_batches)
    for gpus in args.gpus:
        dp = gpus // (args.tp * args.pp)
        training = {
            "task": "llm-sft",
            "seq_length": args.seq_length,
            "micro_batch_size": 1,
            "recompute": "none",
            "precision": args.precision,
            "peft": args.peft,
            "global_batch_size": args.micro_batches * dp,
        }
        if args.precision == "fp8":
            training["fp8_recipe"] = "tensorwise"
        parallel = {"gpus": gpus, "tp": args.tp, "pp": args.pp, "sp": args.tp > 1, "tp_comm_overlap": args.tp > 1}
        if args.vpp:
            parallel["vpp"] = args.vpp
        plan = plan_from_dict(
            {
                "version": 2,
                "model": args.model,
                "parallel": parallel,
                "training": training,
                "packing": {"mode": "offline", "pack_size": args.seq_length},
                "hardware": {"gpu": args.gpu},
            },
            "bench",
        )
        work = work_of(plan)
        t = step_time(plan, work, EFFICIENCY)
        chunks = max(args.vpp, 1)
        b = t.breakdown
        share = 0.5 if args.peft == "lora" else 1 / 3  # forward's share of a chunk: LoRA has no weight gradients
        fwd, bwd = t.stage_seconds / chunks * share, t.stage_seconds / chunks * (1 - share)
        gpu = gpu_of(plan)
        p = plan.parallel
        spans = _boundary_spans(p.tp * p.cp * p.dp, p.pp, gpu.domain)
        act = work.tokens / p.cp / (p.tp if p.sp else 1) * plan.model.hidden_size * 2
        wrap = gpu.domain + 1 if p.tp * p.cp * p.dp * p.pp > gpu.domain else 1  # the last stage back to the first

        def hop(a: int, c: int, spans=spans, act=act, gpu=gpu, wrap=wrap) -> float:
            span = wrap if {a, c} == {0, len(spans)} and len(spans) > 1 else spans[min(a, c)]
            link = gpu.link(span)
            return link.latency + act / link.bandwidth

        sim = [simulate(orders, fwd, bwd, hop, chunks, blocking) for blocking in (False, True)]
        row = (sim[0], sim[1], t.step_seconds)
        base = base or row
        print(
            f"{gpus:>5} {sim[0]:>11.3f}s {100 * (sim[0] / base[0] - 1):>+6.1f}% {sim[1]:>12.3f}s "
            f"{100 * (sim[1] / base[1] - 1):>+6.1f}% {t.step_seconds:>10.3f}s {100 * (row[2] / base[2] - 1):>+6.1f}% "
            f"{b['pp_p2p']:>9.3f}s"
        )


if __name__ == "__main__":
    main()
