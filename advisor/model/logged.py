"""What the frameworks' logs will print for a plan's step, beside the useful figures: Megatron-Bridge's and
Megatron-LM's own throughput formulas (from their source), so a user can hold the prediction against their logs
and compare packed with unpacked runs on useful tokens. The alternative, one "tokens/s" for everything, is what
Megatron-Bridge #1636 and #4214 report: its logged tokens/s counts ``seq_length`` per sample, whatever a pack holds.

Sources (read from the published code):

- Megatron-Bridge 0.6.2 ``training/utils/flop_utils.py num_floating_point_operations`` (l.425) with the per-micro-
  batch sums of ``accumulate_flops_metadata`` (l.258): THD rows (``cp == 1``, ``gpt_step.py`` l.405) count the
  padded row (``mbs x tokens.shape[1]``) in the linear terms and the real sequences' sum(L^2) in attention; any
  other step counts ``batch x seq_length`` and ``batch x seq_length^2`` (dense). ``train_utils.py training_log``
  (l.1104-1136) prints it per GPU over the interval as "MODEL_TFLOP/s/GPU" from rank 0; the "throughput per GPU"
  line (l.1181) comes from the last pipeline stage, which loads no tokens, so with PP > 1 it is the dense count.
  ``report_throughput`` (l.1408-1491) logs ``GBS x dataset.seq_length / step`` tokens/s (TensorBoard, W&B).
- Megatron-LM main ``training.py num_floating_point_operations`` (l.802) with ``consume_seqlen_stats_in_iteration``
  (l.752): THD steps count the real tokens and sum(L^2) of the real ``cu_seqlens``; others ``batch x seq_length``.

>>> from advisor.model.flops import FlopsCoefficients
>>> c = FlopsCoefficients(linear=10.0, core=1.0)
>>> mb_logged_flops(c, rows=2, row_tokens=8.0, seq_sq_sum=20.0, seq_length=8, thd=True)   # 10 x 16 + 2 x 20
200.0
>>> mb_logged_flops(c, rows=2, row_tokens=8.0, seq_sq_sum=20.0, seq_length=8, thd=False)  # dense: 10 x 16 + 2 x 64
288.0
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.model.flops import FlopsCoefficients


@dataclass(frozen=True, kw_only=True)
class LoggedFigure:
    framework: str  # "Megatron-Bridge 0.6.2", "Megatron-LM", "the advisor"
    line: str  # where it is printed: the log line's words
    value: float
    unit: str  # "TFLOP/s/GPU" or "tokens/s"
    counts: str  # what it counts, in a few words


@dataclass(frozen=True, kw_only=True)
class LoggedThroughput:
    useful_tokens_per_second: float  # data tokens per second, all GPUs
    useful_tflops_per_gpu: float  # Megatron-LM's model FLOPs on the real tokens, per GPU
    mb_tokens_per_second: float
    mb_model_tflops_per_gpu: float  # "MODEL_TFLOP/s/GPU" (rank 0)
    mb_throughput_tflops_per_gpu: float  # "throughput per GPU (TFLOP/s/GPU)" (the last pipeline stage)
    mlm_tflops_per_gpu: float
    mb_thd_counted: bool  # whether Megatron-Bridge counts this step as THD (packed and CP 1)

    def figures(self) -> list[LoggedFigure]:
        """Every figure as a row: what the logs print, then the useful ones."""
        thd = "padded rows, real sum(L^2)" if self.mb_thd_counted else "batch x seq_length, dense (not THD)"
        return [
            LoggedFigure(
                framework="Megatron-Bridge",
                line="MODEL_TFLOP/s/GPU (rank 0)",
                value=self.mb_model_tflops_per_gpu,
                unit="TFLOP/s/GPU",
                counts=thd,
            ),
            LoggedFigure(
                framework="Megatron-Bridge",
                line="throughput per GPU (TFLOP/s/GPU)",
                value=self.mb_throughput_tflops_per_gpu,
                unit="TFLOP/s/GPU",
                counts=thd
                if self.mb_throughput_tflops_per_gpu == self.mb_model_tflops_per_gpu
                else "batch x seq_length, dense (the last pipeline stage has no tokens)",
            ),
            LoggedFigure(
                framework="Megatron-Bridge",
                line="throughput/tokens_per_sec (TensorBoard, W&B)",
                value=self.mb_tokens_per_second,
                unit="tokens/s",
                counts="global batch x seq_length (#1636)",
            ),
            LoggedFigure(
                framework="Megatron-LM",
                line="throughput per GPU (TFLOP/s/GPU)",
                value=self.mlm_tflops_per_gpu,
                unit="TFLOP/s/GPU",
                counts="real tokens and sum(L^2) (THD); batch x seq_length otherwise",
            ),
            LoggedFigure(
                framework="the advisor",
                line="useful tokens/s",
                value=self.useful_tokens_per_second,
                unit="tokens/s",
                counts="data tokens only: compare runs on this",
            ),
            LoggedFigure(
                framework="the advisor",
                line="useful TFLOP/s/GPU",
                value=self.useful_tflops_per_gpu,
                unit="TFLOP/s/GPU",
                counts="model FLOPs of the data tokens",
            ),
        ]


def mb_logged_flops(
    coef: FlopsCoefficients, *, rows: float, row_tokens: float, seq_sq_sum: float, seq_length: int, thd: bool
) -> float:
    """Megatron-Bridge 0.6.2's FLOPs of one step: ``rows`` micro-batch rows (packs, or micro batch x samples) of
    ``row_tokens`` computed tokens each with ``seq_sq_sum`` real sum(L^2) each when counted as THD, else dense
    ``rows x seq_length`` and ``rows x seq_length^2``."""
    if thd:
        return float(coef(rows * row_tokens, rows * seq_sq_sum))
    return float(coef(rows * seq_length, rows * float(seq_length) ** 2))


def logged_throughput(
    *,
    coef: FlopsCoefficients,
    step_seconds: float,
    gpus: int,
    rows: float,
    samples_per_row: float,
    row_tokens: float,
    real_tokens_per_row: float,
    seq_sq_sum: float,
    seq_length: int,
    model_flops_per_step: float,
    packed: bool,
    cp: int,
    pp: int,
) -> LoggedThroughput:
    """The figures the logs print for one step of ``step_seconds`` on ``gpus`` GPUs. ``rows``: micro-batch rows per
    step (packs under packing); per row: ``samples_per_row`` samples (the micro batch under no packing),
    ``row_tokens`` computed tokens, ``real_tokens_per_row`` data tokens, ``seq_sq_sum`` sum(L^2) of its real
    sequences; ``model_flops_per_step``: Megatron-LM's count of the real tokens (the estimate's)."""
    thd = packed and cp == 1
    # the step's batch as train.py counts it (dp x micro batch x micro batches): packs when packed, else samples
    global_batch = rows if packed else rows * samples_per_row
    mb = mb_logged_flops(coef, rows=rows, row_tokens=row_tokens, seq_sq_sum=seq_sq_sum, seq_length=seq_length, thd=thd)
    dense = mb_logged_flops(coef, rows=global_batch, row_tokens=0.0, seq_sq_sum=0.0, seq_length=seq_length, thd=False)
    mlm = model_flops_per_step if packed else dense
    per_gpu = lambda flops: flops / step_seconds / gpus / 1e12  # noqa: E731
    return LoggedThroughput(
        useful_tokens_per_second=rows * real_tokens_per_row / step_seconds,
        useful_tflops_per_gpu=per_gpu(model_flops_per_step),
        mb_tokens_per_second=global_batch * seq_length / step_seconds,
        mb_model_tflops_per_gpu=per_gpu(mb),
        mb_throughput_tflops_per_gpu=per_gpu(mb if pp == 1 else dense),
        mlm_tflops_per_gpu=per_gpu(mlm),
        mb_thd_counted=thd,
    )
