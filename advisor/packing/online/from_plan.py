"""A plan's scheduled packing (online: Megatron-LM; global-batch: Megatron-Bridge 0.7, the same Megatron-Core
schedulers): its scheduler settings, its samples in data-set order, and the schedule (cached).

The alternative, asking for every scheduler option on the command line, is what ``advisor schedule`` does; here
the plan's layout and batch settings are the run's, so the estimator and the exports see one configuration.
"""

from __future__ import annotations

import numpy as np

from advisor import caches
from advisor.data.lengths import LengthHistogram, check_expandable
from advisor.packing.cache import PACKING_CACHE_BYTES
from advisor.packing.online.config import OnlineConfig, default_dataset
from advisor.packing.online.inputs import SampleOrder, expand_histogram
from advisor.packing.online.results import RunSchedule, StepSchedule
from advisor.packing.online.schedule import schedule
from advisor.packing.permutation import shuffled_codes
from advisor.plan import Plan

SCHEDULE_CACHE_SIZE = 8  # the plan, its search candidates' few layouts, and a comparison


def online_config(plan: Plan) -> OnlineConfig:
    """The scheduler's view of the plan. Online packing: dev reads the mock SFT data set the exports write (the
    lengths file, in order); main has no mock SFT data set, so its samples are taken as given (``custom``).
    Global-batch packing: Megatron-Bridge runs Megatron-Core's scheduler (wrap_data_iterator, at dev's API, which
    7bdc5ef4 validates against) with ``max_seqlen_per_dp_cp_rank`` as the cap (seq_length / CP, Megatron-Bridge's
    own suggestion, until the plan sets one: the rules report it missing) on its GPT-SFT data set (``gpt_sft``),
    or for pre-training on Megatron-LM's variable-length data set, padded as dev's SFT data sets pad.

    >>> from advisor.plan import plan_from_dict
    >>> c = online_config(plan_from_dict({"model": "llama3.1-8b", "parallel": {"gpus": 8, "cp": 2},
    ...                                   "training": {"seq_length": 16384, "global_batch_size": 64},
    ...                                   "packing": {"mode": "online"}}))
    >>> c.commit, c.dataset, c.dp, c.cp, c.num_microbatches
    ('dev', 'mock_sft', 4, 2, 16)
    >>> c = online_config(plan_from_dict({"model": "llama3.1-8b", "parallel": {"gpus": 8, "cp": 2},
    ...                                   "training": {"seq_length": 16384, "global_batch_size": 64},
    ...                                   "packing": {"mode": "global-batch"}}))
    >>> c.commit, c.dataset, c.max_seqlen_per_dp_cp_rank
    ('dev', 'gpt_sft', 8192)
    """
    p, t, k = plan.parallel, plan.training, plan.packing
    cap = k.max_seqlen_per_dp_cp_rank
    if plan.packing_mode == "global-batch":
        commit, dataset = "dev", ("mock_sft" if t.task == "pretrain" else "gpt_sft")
        cap = cap or -(-t.seq_length // p.cp)
    else:
        commit, dataset = k.megatron_lm, default_dataset(k.megatron_lm)
    return OnlineConfig(
        commit=commit,
        scheduler=k.scheduler,
        dataset=dataset,
        seq_length=t.seq_length,
        global_batch_size=plan.batch_in_samples,
        micro_batch_size=t.micro_batch_size,
        dp=p.dp,
        cp=p.cp,
        tp=p.tp,
        sequence_parallel=p.sp and p.tp > 1,
        pp=p.pp,
        vpp=p.vpp,
        max_seqlen_per_dp_cp_rank=cap,
        num_moe_experts=plan.model.num_moe_experts,
        calculate_per_token_loss=True,
        te_version=plan.versions.transformer_engine,  # the plan's release: TransformerConfig checks it
    )


def dataset_order(hist: LengthHistogram, seed: int) -> np.ndarray:
    """The samples in the order the data set holds them: a per-sample file's own order, or a histogram shuffled
    with the plan's seed (the order the exported lengths file gets, so Megatron-LM reads what was simulated).

    >>> h = LengthHistogram.from_samples([3, 5, 5, 9, 9, 9])
    >>> dataset_order(h, 7).tolist() == sample_order(h, 7).values().tolist()
    True
    """
    if hist.order is not None:
        return hist.order.astype(np.int64)
    return expand_histogram(hist.lengths, hist.counts, order="shuffle", seed=seed, source=hist.source)


def sample_order(hist: LengthHistogram, seed: int) -> np.ndarray | SampleOrder:
    """``dataset_order`` without one array of every sample for a histogram: its shuffled order as indices into its
    distinct lengths (``expand_histogram`` shuffles ``repeat(lengths, counts)`` with the same permutation that
    ``shuffled_codes`` applies to ``repeat(arange, counts)``), cached and shared with first_fit_shuffle's."""
    if hist.order is not None:
        return hist.order.astype(np.int64)
    check_expandable(hist.num_samples, hist.source, "schedule")
    return SampleOrder(lengths=hist.lengths, codes=shuffled_codes(hist, seed), tally=hist.counts)


SCHEDULE_CACHE_BYTES = PACKING_CACHE_BYTES // 2  # a 512-GPU schedule holds hundreds of MB of per-rank arrays
SCHEDULES = caches.bounded(
    "online schedules",
    size=SCHEDULE_CACHE_SIZE,
    max_bytes=SCHEDULE_CACHE_BYTES,
    arrays=caches.held_arrays,
    by_histogram=True,
)
# None: every step of the epoch (the command line). A server sharing its memory sets a sample budget, and an epoch
# over it is simulated as a scale model (schedule's max_samples): about 150 bytes a sample are held while scheduling.
_SAMPLE_BUDGET: list[int | None] = [None]


def limit_samples(budget: int | None) -> None:
    """Schedule at most about ``budget`` samples per run from now on in this process (None: whole epochs)."""
    _SAMPLE_BUDGET[0] = budget


STEPS = caches.bounded("online steps", size=64, by_histogram=True)  # single steps a page shows: a few kB each


def step_of(plan: Plan, hist: LengthHistogram, step: int) -> StepSchedule:
    """Step ``step`` of the plan's online epoch, exactly as the real run schedules it (cached), whether or not the
    page's scale model of the epoch holds it: a step costs milliseconds however large the data set."""
    cfg = online_config(plan)
    return STEPS.get(
        hist,
        (hist.order_digest, cfg, plan.packing_seed, int(step)),
        lambda: schedule(
            sample_order(hist, plan.packing_seed), cfg, source=hist.source, only_steps=np.array([int(step)])
        ).step(0),
    )


def schedule_of(plan: Plan, hist: LengthHistogram) -> RunSchedule:
    """One epoch of the plan's data under its online scheduler (cached on the data, its order and the settings),
    a scale model of it when this process limits the samples scheduled (``limit_samples``)."""
    cfg, budget = online_config(plan), _SAMPLE_BUDGET[0]
    return SCHEDULES.get(
        hist,
        (hist.order_digest, cfg, plan.packing_seed, budget),
        lambda: schedule(sample_order(hist, plan.packing_seed), cfg, source=hist.source, max_samples=budget),
    )
