"""What the pages show (advisor/ui/views.py), without Streamlit: every table row, sweep point and worked example is
checked against the engine's own numbers or an independent recomputation on the bundled samples."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.advice.search import search
from advisor.analysis import analyze, memory_grid
from advisor.data.lengths import SCALE_MODEL_SAMPLES, LengthHistogram
from advisor.findings import by_severity
from advisor.formats import EXPORTS
from advisor.model.estimate import estimate
from advisor.packing.config import PackingConfig
from advisor.packing.offline import pack
from advisor.plan import plan_from_dict
from advisor.ui import views
from advisor.ui.samples import MAX_DASHBOARD_PACK, default_plan


def _numbers(text: str) -> list[float]:
    """The numbers in a sentence, in order ("1,008" is one number)."""
    return [float(x.replace(",", "")) for x in re.findall(r"\d[\d,]*(?:\.\d+)?", text)]


def _samples(hist: LengthHistogram) -> np.ndarray:
    return np.repeat(hist.lengths, hist.counts)


def _runtime_tokens(hist: LengthHistogram, size: int) -> int:
    """Tokens Megatron-Bridge packs at this size without a padding multiple: each sample cut to ``size`` stored
    tokens, minus the trailing one (labels are the shifted input)."""
    return int((np.maximum(np.minimum(hist.lengths, size) - 1, 0) * hist.counts).sum())


# ---------------------------------------------------------------------------------------------- the data
@pytest.mark.parametrize("name", ["squad", "chat", "long_context"])
def test_summary_table_holds_the_datas_own_figures(name, request):
    hist = request.getfixturevalue(name)
    s = np.sort(_samples(hist))
    n = s.size
    table = dict(views.summary_table(hist).itertuples(index=False))
    assert _numbers(table["samples"]) == [n] and _numbers(table["tokens"]) == [s.sum()]
    assert float(table["mean"].replace(",", "")) == pytest.approx(s.mean(), abs=0.05)
    for q in (50, 90, 99):  # the smallest length with at least q % of the samples at or below it
        assert _numbers(table[f"p{q}"]) == [s[-(-q * n // 100) - 1]], q
    assert _numbers(table["max"]) == [s[-1]] and _numbers(table["rows left out"]) == [0]
    shares = {int(k.split("> ")[1].replace(",", "")): v for k, v in table.items() if k.startswith("share > ")}
    assert shares
    for size, shown in shares.items():
        assert float(shown.rstrip("%")) == pytest.approx(100 * (s > size).mean(), abs=0.005)
    big = views.summary_numbers(hist)  # the figures shown large are the table's
    assert big["samples"] == table["samples"] and big["p99"] == table["p99"] and big["max"] == table["max"]
    assert float(big["mean"].replace(",", "")) == round(s.mean())


@pytest.mark.parametrize("name", ["squad", "chat"])
def test_the_sweep_points_are_the_packing_at_each_size(name, request):
    hist = request.getfixturevalue(name)
    sizes = views.sweep_sizes(hist)[-3:]
    sweep = views.packing_sweep(hist, sizes, list(views.SWEEP_ALGORITHMS))
    assert sweep.attrs == {"samples": hist.num_samples, "scale_model": False}
    assert len(sweep) == len(sizes) * (len(views.SWEEP_ALGORITHMS) + 2)
    for size in sizes:
        real = _runtime_tokens(hist, size)
        for algorithm in views.SWEEP_ALGORITHMS:
            (row,) = sweep[(sweep.pack_size == size) & (sweep.algorithm == algorithm)].to_dict("records")
            result = pack(hist, PackingConfig(pack_size=size, algorithm=algorithm, seed=1234))
            fill = np.add.reduceat(result.items, result.offsets[:-1])
            assert fill.max() <= size and int(fill.sum()) == real  # every runtime token packed, no pack over
            packs = result.num_packs
            assert row["packing_factor"] == hist.num_samples / packs
            assert row["padding_fraction"] == pytest.approx(1 - real / (packs * size), rel=1e-12)
            assert row["packing_efficiency"] == pytest.approx(100 * real / (packs * size), rel=1e-12)
            work = np.add.reduceat(result.items.astype(np.int64) ** 2, result.offsets[:-1])
            assert row["straggler_ratio"] == pytest.approx(work.max() / work.mean(), rel=1e-12)
        padded = sweep[(sweep.pack_size == size) & (sweep.algorithm == "no packing: pad to sequence length")]
        assert padded.packing_efficiency.item() == pytest.approx(100 * real / (hist.num_samples * size))
        assert padded.packing_factor.item() == 1.0


def test_the_plans_own_packing_is_the_sweeps_point_at_its_size(squad):
    """What the Packing page shows for the plan (analyze(plan, hist).packing) and the sweep at that size agree."""
    plan = default_plan()
    packing = analyze(plan, squad).packing
    point = views.packing_sweep(squad, [plan.pack_size], [plan.packing.algorithm], seed=plan.packing_seed)
    row = point[point.algorithm == plan.packing.algorithm].iloc[0]
    assert row.packing_factor == packing.metrics.num_sequences / packing.num_packs
    assert row.padding_fraction == packing.metrics.padding_fraction
    assert row.packing_efficiency == packing.metrics.packing_efficiency


def test_a_sweep_over_many_samples_runs_on_their_scale_model(wikipedia):
    assert wikipedia.num_samples > SCALE_MODEL_SAMPLES
    sweep = views.packing_sweep(wikipedia, [256, 512], ["first_fit_decreasing"])
    model = wikipedia.scale_model(SCALE_MODEL_SAMPLES)
    assert sweep.attrs["scale_model"] and sweep.attrs["samples"] == model.num_samples
    assert abs(model.num_samples - SCALE_MODEL_SAMPLES) <= 1
    for size in (256, 512):
        row = sweep[(sweep.pack_size == size) & (sweep.algorithm == "first_fit_decreasing")].iloc[0]
        real = _runtime_tokens(model, size)
        packs = round(model.num_samples / row.packing_factor)
        assert row.padding_fraction == pytest.approx(1 - real / (packs * size), rel=1e-12)
        assert packs == pack(model, PackingConfig(pack_size=size, algorithm="first_fit_decreasing")).num_packs


@given(st.lists(st.integers(1, 3_000_000), min_size=1, max_size=60))
def test_sweep_sizes_are_the_powers_of_two_from_the_short_samples_to_the_longest(lengths):
    hist = LengthHistogram.from_samples(lengths)
    sizes = views.sweep_sizes(hist)
    s = np.sort(np.asarray(lengths))
    p10 = s[max(0, -(-10 * s.size // 100) - 1)]
    top = min(MAX_DASHBOARD_PACK, max(16, 1 << math.ceil(math.log2(s[-1]))))  # the first power of two holding all
    low = min(top, max(16, 2 ** (int(p10).bit_length())))  # the first power of two above the 10th percentile
    assert sizes == [2**k for k in range(low.bit_length() - 1, top.bit_length())][-6:]
    assert sizes[-1] >= min(s[-1], MAX_DASHBOARD_PACK) and (sizes[-1] == 16 or sizes[-1] // 2 < s[-1])


# ---------------------------------------------------------------------------------------------- worked examples
@given(st.lists(st.integers(1, 100_000), min_size=1, max_size=6))
def test_the_attention_example_adds_up(lengths):
    text = views.attention_example_text(tuple(lengths))
    squares = sum(s * s for s in lengths)
    block, padded = sum(lengths) ** 2, len(lengths) * max(lengths) ** 2
    assert f"= {squares:,};" in text and f"({sum(lengths)})² = {block:,} ({block / squares:.1f}x)" in text
    assert text.endswith(f"{len(lengths)} x {max(lengths)}² = {padded:,}.")


@pytest.fixture(scope="module")
def squad_n(squad) -> float:
    return analyze(default_plan(), squad).packing_factor


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(samples=st.integers(1, 1 << 16), dp=st.sampled_from([1, 2, 3, 4, 8, 16, 64, 512]))
def test_the_global_batch_example_is_the_nearest_multiple_of_dp(squad_n, samples, dp):
    plan = plan_from_dict(
        {
            "model": "llama3.1-8b",
            "parallel": {"gpus": dp},
            "training": {"seq_length": 384, "global_batch_samples": samples},
            "packing": {"pack_size": 384},
        }
    )
    text = views.global_batch_example_text(plan, squad_n)
    tail = text.split("Megatron-Bridge global_batch_size ")[1]
    packs, shown_dp, trained = _numbers(tail)
    assert f"{samples} samples per step / n = {squad_n:.2f}" in text and shown_dp == dp
    assert packs % dp == 0 and packs >= dp
    if packs > dp:  # the multiple of DP nearest to samples / n
        assert abs(packs - samples / squad_n) <= dp / 2 + 1e-9
    else:
        assert samples / squad_n <= 1.5 * dp
    assert trained == round(packs * squad_n) and packs == plan.global_batch_packs(squad_n)


def test_the_global_batch_example_of_plans_that_count_packs_or_do_not_pack(squad, squad_n):
    packs = default_plan().changed({"training": {"global_batch_size": 24, "global_batch_samples": None}})
    text = views.global_batch_example_text(packs, squad_n)
    assert "your plan counts packs" in text and f"global_batch_size 24 packs (a multiple of DP {packs.dp})" in text
    assert f"≈ {round(24 * squad_n)} samples per step" in text
    vlm = default_plan("VLM-like (100k)")
    assert vlm.packing_mode == "in-batch"
    text = views.global_batch_example_text(vlm, 2.0)
    assert "no division by n" in text and f"({vlm.requested_samples:,} samples per step)" in text


@pytest.mark.parametrize(
    "tp,cp,sp", [(1, 1, False), (2, 1, True), (1, 2, False), (2, 2, True), (4, 2, True), (2, 4, False), (8, 4, True)]
)
def test_the_cp_example_pads_to_the_plans_multiple_and_cuts_equal_chunks(tp, cp, sp):
    plan = plan_from_dict(
        {
            "model": "llama3.1-8b",
            "parallel": {"gpus": 64, "tp": tp, "cp": cp, "sp": sp},
            "training": {"seq_length": 8192},
        }
    )
    text = views.cp_example_text(plan)
    multiple = plan.pad_seq_to_mult
    if cp == 1:  # no CP: nothing is split, so the recipes pad nothing
        assert multiple == 1 and text == "Worked example: with pad_seq_to_mult 1 a sequence is packed as it is."
        return
    assert multiple % (2 * cp) == 0 and (not sp or multiple % (cp * tp) == 0)
    padded = -(-1001 // multiple) * multiple
    assert f"with pad_seq_to_mult {multiple} (CP {cp}, TP {tp}" in text
    assert f"a 1001-token sequence is padded to {padded} and cut into {2 * cp} chunks of {padded // (2 * cp)}" in text
    assert padded % (2 * cp) == 0 and 0 <= padded - 1001 < multiple


def test_the_memory_banner_states_the_estimate(long_context):
    plan = plan_from_dict(
        {
            "model": "llama3.1-8b",
            "parallel": {"gpus": 16, "tp": 1, "cp": 8},
            "training": {"seq_length": 131072, "global_batch_samples": 64},
            "packing": {"mode": "offline", "pack_size": 131072},
            "hardware": {"gpu": "H100-80GB"},
        }
    )
    est = estimate(plan, long_context)
    assert not est.memory.fits
    text = views.memory_error_text(est)
    needed, capacity = _numbers(text)[:2]
    assert needed == round(est.memory.total / 2**30, 1) > capacity == 80
    assert f"({est.memory.stage} stage)" in text


# ---------------------------------------------------------------------------------------------- advice
def _findings_pool(squad, long_context):
    """Real findings: the default plan, a 128k plan that does not fit, a plan with a wrong micro batch."""
    big = plan_from_dict(
        {
            "model": "llama3.1-8b",
            "parallel": {"gpus": 16, "tp": 1, "cp": 8},
            "training": {"seq_length": 131072, "global_batch_samples": 64},
        }
    )
    plans = [
        (default_plan(), squad),
        (big, long_context),
        (default_plan("VLM-like (100k)").changed({"training": {"micro_batch_size": 1}}), squad),
    ]
    return [f for plan, hist in plans for f in analyze(plan, hist).findings]


def test_by_severity_partitions_without_loss(squad, long_context):
    pool = _findings_pool(squad, long_context)
    assert {f.severity for f in pool} == {"error", "warning", "info"}, "the pool has every severity"

    @settings(max_examples=100, deadline=None)
    @given(st.lists(st.sampled_from(pool), max_size=30))
    def partitions(findings):
        groups = by_severity(findings)
        assert list(groups) == ["error", "warning", "info"]
        for severity, group in groups.items():
            assert group == [f for f in findings if f.severity == severity]  # same findings, same order
        assert sum(map(len, groups.values())) == len(findings)

    partitions()


def test_the_candidates_table_shows_the_searchs_figures(chat):
    hist = chat.scale_model(20_000)
    plan = plan_from_dict(
        {
            "model": "llama3.1-8b",
            "parallel": {"gpus": 16},
            "training": {"seq_length": 8192, "global_batch_samples": 128},
        }
    )
    result = search(plan, hist, top=5)
    table = views.candidates_table(result)
    assert table.plan.tolist() == ["yours"] + [f"#{i + 1}" for i in range(len(result.best))]
    for row, c in zip(table.to_dict("records"), (result.baseline, *result.best), strict=True):
        p = c.plan.parallel
        assert (row["tp"], row["cp"], row["dp"], row["sp"]) == (p.tp, p.cp, c.plan.dp, p.sp)
        assert row["packs/step (MB GBS)"] == c.plan.global_batch_packs(c.estimate.packing.packing_factor)
        assert row["≈ samples/step"] == round(c.global_batch_packs * c.estimate.packing.packing_factor)
        assert row["GiB"] == round(c.estimate.memory.total / 2**30, 1)
        assert row["tokens/s/GPU"] == round(c.estimate.time.tokens_per_second_per_gpu)
        assert row["fits"] == (c.estimate.memory.total <= c.estimate.memory.capacity) and row["why"] == c.why
    # what matters first, so it is on screen at 1280-1440 px: the layout, then memory and throughput, then the batch
    assert list(table.columns[:8]) == ["plan", "tp", "sp", "cp", "dp", "GiB", "fits", "tokens/s/GPU"]


def test_the_search_note_says_when_nothing_beats_the_plan_and_when_a_scale_model_was_used(squad, wikipedia):
    plan = default_plan()
    small = analyze(plan, squad)
    result = small.search
    assert result.best and views.search_note(small, result) is None
    note = views.search_note(small, replace(result, best=()))
    assert note.startswith(f"No layout of {plan.parallel.gpus} GPUs beats yours")
    big = analyze(plan, wikipedia)  # lazy: nothing is packed to say this
    note = views.search_note(big)
    assert f"({SCALE_MODEL_SAMPLES:,} of {wikipedia.num_samples:,} samples" in note


def test_export_text_is_the_commands_and_a_plan_without_estimate_gets_one_line(squad):
    a = analyze(default_plan(), squad)
    for fmt in ("python", "overrides", "plan"):
        assert views.export_text(a, fmt, None, False) == (a.export(fmt), EXPORTS[fmt].file_name)
    two = LengthHistogram.from_samples([100, 200], source="two.csv")
    vlm = analyze(default_plan("VLM-like (100k)"), two)
    with pytest.raises(ValueError) as err:  # the report needs the estimate: fewer samples than a micro batch
        vlm.export("markdown")
    assert views.export_text(vlm, "markdown", "0.6.2", False) == (f"# cannot export: {err.value}\n", "error.txt")


def test_the_memory_grid_frame_holds_each_cells_estimate(squad):
    a = analyze(default_plan(), squad)
    frame = views.memory_grid_frame(a)
    assert list(frame.columns) == ["cp", "pack_size", "memory_gib", "fits", "breaks"]
    assert frame.to_dict("records") == memory_grid(a)
    own = frame[(frame.cp == a.plan.parallel.cp) & (frame.pack_size == a.plan.pack_size)].iloc[0]
    assert own.memory_gib == a.estimate.memory.total / 2**30 and own.fits == a.estimate.memory.fits
    for row in frame.itertuples():
        assert a.plan.parallel.gpus % (a.plan.parallel.tp * a.plan.parallel.pp * row.cp) == 0


def test_the_comparison_table_is_the_comparisons_rows(squad):
    plan = default_plan()
    comparison = views.packing_comparison(plan, squad)
    assert views.comparison_kept(plan, squad) and views.packing_comparison(plan, squad) is comparison
    table = views.comparison_table(comparison)
    rows = comparison.rows()
    assert table.way.tolist() == [r["way"] for r in rows] == [r.label for r in comparison.runs]
    for shown, r, run in zip(table.to_dict("records"), rows, comparison.runs, strict=True):
        if run.estimate is None:  # refused on this layout: the reason, no figures
            assert shown["refused"] == run.refusal and shown["step s"] == "-"
            continue
        mb = run.estimate.micro_batches
        padding = 1 - mb.real_tokens.sum() / mb.computed_tokens.sum()  # the micro batches' own padding
        assert float(shown["padding"].rstrip("%")) == pytest.approx(100 * padding, abs=0.005)
        assert float(shown["step s"]) == pytest.approx(run.estimate.time.step_seconds, abs=5e-4)
        assert float(shown["memory GiB"].split()[0]) == pytest.approx(run.estimate.memory.total / 2**30, abs=0.05)
        assert shown["memory GiB"].endswith("(does not fit)") == (not run.estimate.memory.fits)
        mean, low, high = _numbers(shown["micro batches / step"])  # "19.33 (17-22)"
        assert low <= mean <= high and (low, high) == (r["micro_batches_min"], r["micro_batches_max"])


def test_the_sweeps_baselines_skip_overlong_chat_samples_as_the_packs_do():
    """Chat data (GPTSFTChatDataset) skips samples past the max length: the no-packing baselines see the same data
    as the packs, as the command line's ``pack`` does."""
    from advisor.packing.baselines import pad_to_sequence_length
    from advisor.packing.config import PackingConfig
    from advisor.packing.offline import runtime_lengths

    hist = LengthHistogram.from_samples([100, 200, 300, 5000, 9000])
    sweep = views.packing_sweep(hist, [1024], ["first_fit_decreasing"], overlong="skip")
    padded = sweep[sweep.algorithm == "no packing: pad to sequence length"].iloc[0]
    kept = LengthHistogram.from_samples([100, 200, 300])  # nothing past 1024 left: skipping leaves these three
    counts = runtime_lengths(kept, PackingConfig(pack_size=1024)).counts
    assert padded.packing_efficiency == pytest.approx(pad_to_sequence_length(counts, 1024).efficiency)
    truncated = views.packing_sweep(hist, [1024], ["first_fit_decreasing"], overlong="truncate")
    assert (
        truncated[truncated.algorithm == "no packing: pad to sequence length"].iloc[0].packing_efficiency
        > padded.packing_efficiency
    )  # the two cut samples fill their rows


def test_the_loss_caption_names_the_scale_model_once_when_the_step_is_beyond_what_is_drawn(squad):
    """Issue 38: at the schema's largest global batch the loss weighting stands on smaller steps; the page said
    nothing of it (the scale model was in the CLI's lines only)."""
    plan = default_plan().changed({"training": {"global_batch_size": 1 << 24}})
    caption = views.loss_caption(analyze(plan, squad).loss)
    assert caption.count("beyond what the advisor draws") == 1 and "Scale model: a step of" in caption
    assert "beyond what the advisor draws" not in views.loss_caption(analyze(default_plan(), squad).loss)
