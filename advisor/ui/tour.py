"""The guided tour: the concepts of packed and long-context training in the order a newcomer needs them, one step a
screen, each computed live on a bundled sample and linked to the page where the concept lives, settings applied.

Alternatives: a static slide deck (its numbers drift from the engine) or tooltips alone (no order). Each step's
figures come from ``analyze`` on the step's sample, so the tour is as true as the pages.

>>> [s.page for s in STEPS][:2]
['pages/0_Data_and_plan.py', 'pages/1_Packing.py']
"""

from __future__ import annotations

from dataclasses import dataclass, field

from advisor.analysis import analyze
from advisor.packing.baselines import pad_to_sequence_length
from advisor.packing.config import PackingConfig
from advisor.packing.offline import runtime_lengths
from advisor.plan import Plan
from advisor.ui import state as ui
from advisor.ui import views
from advisor.ui.pages import PAGES

SQUAD, CHAT, LONG = "SQuAD 1.1 (real, 88k)", "chat-like (180k)", "long-context (20k)"


@dataclass(frozen=True, kw_only=True)
class Step:
    title: str
    text: str  # the concept, for an engineer new to it
    sample: str  # the bundled sample the step is computed on
    changes: dict = field(default_factory=dict)  # plan changes on top of the sample's default plan
    page: str  # where the concept lives: a path of the page registry (advisor/ui/pages.py)

    @property
    def page_title(self) -> str:
        """The page's title as the navigation shows it (from the registry, never typed twice)."""
        return next(p.title for p in PAGES if p.path == self.page)


STEPS: tuple[Step, ...] = (
    Step(
        title="Your data set is a list of lengths",
        text="Packing and memory depend only on how many tokens each sample has after tokenization. Without "
        "packing every sample is padded to the sequence length, and the GPUs compute on the padding.",
        sample=SQUAD,
        page="pages/0_Data_and_plan.py",
    ),
    Step(
        title="Packing puts several samples in one row",
        text="Offline packing (Megatron-Bridge) fills rows of pack_size tokens with whole samples before training. "
        "n, the packing factor, is how many samples a row holds on average; the data share is the part of "
        "the row that is data rather than padding.",
        sample=SQUAD,
        page="pages/1_Packing.py",
    ),
    Step(
        title="The global batch counts packs",
        text="With offline packing Megatron-Bridge's global_batch_size counts rows, that is packs, and so does the "
        "plan's: a pack holds n samples, so a step trains on about n times as many samples as its global "
        "batch. To ask for samples per step instead, give global_batch_samples (the samples unit on the "
        "Memory page): the export divides by n and rounds to a multiple of DP.",
        sample=SQUAD,
        page="pages/3_Recommendations.py",
    ),
    Step(
        title="Attention inside a pack: sum of squares, not square of sums",
        text="Variable-length (THD) attention keeps each sample to itself: its cost is the sum of s_i^2. A single "
        "block-diagonal mask over the whole row would cost (sum s_i)^2, and padding every sample to the "
        "longest costs b x s_max^2.",
        sample=SQUAD,
        page="pages/2_Memory_and_FLOPs.py",
    ),
    Step(
        title="Stragglers: one long sample slows every rank",
        text="Every step waits for the slowest data-parallel rank. Attention grows with the square of a sample's "
        "length, so a pack with one long sample can take several times the mean: the straggler ratio.",
        sample=CHAT,
        page="pages/1_Packing.py",
    ),
    Step(
        title="Context parallelism pads every sequence",
        text="CP splits each sequence into 2*CP chunks (rank r takes r and 2CP-1-r, balancing causal attention), "
        "so every packed sequence is padded to lcm(2*CP, CP*TP with sequence parallelism): pad_seq_to_mult.",
        sample=CHAT,
        changes={"parallel": {"cp": 2, "tp": 2, "sp": True}},
        page="pages/1_Packing.py",
    ),
    Step(
        title="Memory per GPU",
        text="Weights, gradients and optimizer states are split by TP, PP and the distributed optimizer; "
        "activations grow with the tokens of one micro batch, that is the pack size, divided by TP and CP.",
        sample=CHAT,
        changes={"parallel": {"cp": 2, "tp": 2, "sp": True}},
        page="pages/2_Memory_and_FLOPs.py",
    ),
    Step(
        title="What breaks at 128k",
        text="At long context a dense attention mask built by the data loader is gigabytes per sample, CP needs the "
        "loss settings that survive a rank with no labels, and full recompute is slower than more CP. The "
        "rules say which apply to your plan, why, and how to fix it.",
        sample=LONG,
        page="pages/3_Recommendations.py",
    ),
    Step(
        title="Where a step's time goes",
        text="A step is GEMMs, attention and memory-bound work on each GPU, plus the communication Megatron cannot "
        "hide (TP, CP, pipeline sends, the gradient sync), the pipeline bubble, the optimizer and the wait for "
        "the slowest rank. The step-time model prices each, fitted on NVIDIA's published runs; MFU is what "
        "results.",
        sample=CHAT,
        changes={"parallel": {"cp": 2, "tp": 2, "sp": True}},
        page="pages/2_Memory_and_FLOPs.py",
    ),
    Step(
        title="Online packing: Megatron-LM packs each global batch",
        text="Megatron-LM can pack online instead: each global batch's samples are grouped into packs as they "
        "arrive (--sequence-packing-scheduler), so the micro batches per step change from step to step and "
        "the packs are dealt to ranks in order, balancing their number, not their work.",
        sample=CHAT,
        changes={"parallel": {"cp": 2, "tp": 2, "sp": True}},
        page="pages/6_Online_packing.py",
    ),
    Step(
        title="Will my loss change with packing?",
        text="Without calculate_per_token_loss each micro batch's loss is the mean over its own loss tokens: "
        "unpacked at micro batch size 1 every sample counts the same, packed every pack does, so the same "
        "samples weigh differently and turning packing on changes what is optimised. Megatron-Bridge's logged "
        "lm loss is token-weighted, so at step 0 it reads the same on the same samples; the objective does "
        "not. calculate_per_token_loss weighs every token 1/N, packed or not, with no learning-rate change.",
        sample=CHAT,
        changes={"training": {"seq_length": 8192}, "packing": {"pack_size": 8192}},
        page="pages/3_Recommendations.py",
    ),
    Step(
        title="Export it, then check it",
        text="The export writes the settings Megatron-Bridge or Megatron-LM accepts as written. A short trial job "
        "trains a small model packed, padded and block-masked on your length distribution and checks the "
        "packed loss against each sample alone.",
        sample=SQUAD,
        page="pages/4_Trial.py",
    ),
)


def step_plan(step: Step) -> Plan:
    return ui.default_plan(step.sample).changed(step.changes) if step.changes else ui.default_plan(step.sample)


def _packed(a, index: int):
    """The step's packing: the steps that show packs run on plans that pack offline."""
    if a.packing is None:
        raise ValueError(f"tour step {index}: its plan packs no packs")
    return a.packing


def step_figures(index: int) -> list[str]:
    """The step's figures, computed on its sample (each a line to show)."""
    step = STEPS[index]
    hist, plan = ui.load_sample(step.sample), step_plan(step)
    a = analyze(plan, hist)
    s = hist.num_samples
    if index == 0:
        counts = runtime_lengths(hist, PackingConfig(pack_size=plan.pack_size)).counts
        padded = pad_to_sequence_length(counts, plan.pack_size)
        return [
            f"{step.sample}: {s:,} samples, mean {hist.total_tokens / s:,.0f} tokens, longest {hist.max_length:,}.",
            f"Padded to {plan.pack_size} tokens without packing: {padded.efficiency:.1f} % of the computed tokens "
            f"are data; {100 - padded.efficiency:.1f} % is padding.",
        ]
    if index == 1:
        packing = _packed(a, index)
        m = packing.metadata
        data = 100 * (1 - packing.metrics.padding_fraction)
        return [
            f"Packed into rows of {plan.pack_size}: {packing.num_packs:,} packs, n = {m['packing_factor']}, "
            f"{data:.2f} % of the row is data (Megatron-Bridge's packing_efficiency, which counts the "
            f"pad_seq_to_mult padding as filled: {m['packing_efficiency']} %)."
        ]
    if index == 2:
        return [views.global_batch_example_text(plan, a.packing_factor)]
    if index == 3:
        f = a.estimate.flops
        return [
            views.attention_example_text(),
            f"On this data at pack size {plan.pack_size}: THD / block-masked attention = {f.attention_ratio:.2f}.",
        ]
    if index == 4:
        packing = _packed(a, index)
        return [
            f"At pack size {plan.pack_size:,} the heaviest pack has {packing.metrics.straggler_ratio:.2f}x the "
            f"mean attention work; the simulated step waits x{a.estimate.time.straggler_factor:.2f}."
        ]
    if index == 5:
        return [views.cp_example_text(plan), f"The plan's pad_seq_to_mult: {plan.pad_seq_to_mult}."]
    if index == 6:
        m = a.estimate.memory
        return [
            f"{plan.model_name}, {plan.parallel.gpus} GPUs (TP {plan.parallel.tp}, CP {plan.parallel.cp}), "
            f"pack {plan.pack_size:,}: {m.total / 2**30:.1f} GiB per GPU of {m.capacity / 2**30:.0f} "
            f"({'fits' if m.fits else 'does not fit'})."
        ]
    if index == 7:
        return [f"{f.id}: {f.message}" for f in a.findings if f.id.startswith(("long_context", "cp."))][:4]
    if index == 8:
        t = a.estimate.time
        top = sorted(t.breakdown.items(), key=lambda kv: -kv[1])[:4]
        terms = ", ".join(f"{k.replace('_', ' ')} {v:.2f} s" for k, v in top)
        return [f"Step {t.step_seconds:.2f} s, MFU {t.mfu:.0%} of the {t.peak_format.upper()} peak: {terms}."]
    if index == 9:
        c = views.packing_comparison(plan, hist)
        rows = {r["way"]: r for r in c.rows()}
        online = next(r for w, r in rows.items() if w.startswith("online dp_balanced"))
        return [
            f"Online dp_balanced: {online['micro_batches_mean']:.2f} micro batches per step "
            f"({online['micro_batches_min']}-{online['micro_batches_max']}), ranks wait "
            f"x{online['straggler']:.2f}.",
            f"Recommended here: {c.recommended}.",
        ]
    if index == 10:
        lw, fixed = a.loss, analyze(plan.changed({"training": {"calculate_per_token_loss": True}}), hist).loss
        return [
            f"{lw.moved_vs_unpacked:.0%} of each step's gradient weight moves between samples when packing is "
            f"turned on; step 0, packed / unpacked: lm loss {lw.reported_same:.3f}, objective "
            f"{lw.objective_same.mean:.3f} (with an assumed per-token loss that falls with position).",
            f"With calculate_per_token_loss: {fixed.moved_vs_unpacked:.0%} moves, objective "
            f"{fixed.objective_same.mean:.3f}.",
        ]
    lines = [line for line in a.export("python").splitlines() if "global_batch_size" in line or "Specs(" in line]
    return [f"The Megatron-Bridge export of this plan sets, among others: {line}" for line in lines]


UNDO_KEYS = ("hist", "data_name", "plan", "sample_choice")


def apply_step(state, index: int) -> None:
    """Load the step's sample and plan into the session (the page it links to then shows them), keeping the
    visitor's own data and plan to go back to (``undo_step``): the first step opened keeps them, later ones do not
    overwrite them, so one undo always returns to the visitor's own work."""
    step = STEPS[index]
    if "tour_undo" not in state:
        state["tour_undo"] = {k: state[k] for k in UNDO_KEYS if k in state}
    ui.use_sample(state, step.sample)
    state["sample_choice"] = step.sample
    state["plan"] = step_plan(step)  # exactly the plan the step's figures were computed on


def undo_step(state) -> bool:
    """Put back the data and plan the visitor had before the tour opened its first example; False if none."""
    kept = state.pop("tour_undo", None)
    if kept is None:
        return False
    for key, value in kept.items():
        state[key] = value
    # the selector follows the data put back: Streamlit drops a widget's key while its page is not shown (the Tour
    # page has no selector), so the kept copy may lack it and the selector went on showing the tour's sample
    state["sample_choice"] = ui.sample_choice(state)
    state.pop("plan_error", None)
    return True


def undo_text(state) -> str | None:
    """What the undo button puts back, or None when the tour replaced nothing."""
    kept = state.get("tour_undo")
    if not kept:
        return None
    return f"Back to your own data ({kept.get('data_name', '?')}) and plan, as before the tour's examples"
