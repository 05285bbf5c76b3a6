"""Exports of a plan, with every setting its rules derive filled in: a Megatron-Bridge Python snippet (both API
generations), command-line overrides, Megatron-LM arguments with a mock-data file of the user's lengths, where the
packed files will go, the plan file, and a Markdown report.

API generations (Megatron-Bridge): up to 0.5.x ``PackedSequenceSpecs`` lives in
``megatron.bridge.data.datasets.packed_sequence`` and is set as ``cfg.dataset.packed_sequence_specs``; VLM
in-batch packing is ``pack_sequences_in_batch``. From 0.6.0 it lives in ``megatron.bridge.data.packing`` and
offline packing is ``enable_offline_packing`` with ``offline_packing_specs``; in-batch is ``enable_in_batch_packing``.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass

from advisor.data.lengths import LengthHistogram
from advisor.packing.online.from_plan import dataset_order
from advisor.plan import Plan, dump_plan

DEFAULT_MB_VERSION = "0.6.2"
FORMATS = ("python", "overrides", "megatron-lm", "paths", "plan", "markdown")
_VERSION = re.compile(r"(\d{1,4})\.(\d{1,4})\.(\d{1,4})", re.ASCII)


def _version(v: str) -> tuple[int, int]:
    """MAJOR.MINOR.PATCH and nothing else: the version is written into the snippet's comment, so it is data.

    >>> _version("0.6.2")
    (0, 6)
    """
    match = _VERSION.fullmatch(v) if isinstance(v, str) else None
    if match is None:
        raise ValueError(f"Megatron-Bridge version {str(v)[:40]!r}: give it as MAJOR.MINOR.PATCH, e.g. 0.6.2")
    return int(match.group(1)), int(match.group(2))


def new_packing_api(version: str) -> bool:
    return _version(version) >= (0, 6)


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Attribute settings per ConfigContainer section, and the PackedSequenceSpecs fields (if offline packing)."""

    model: dict
    train: dict
    dataset: dict
    ddp: dict
    specs: dict | None
    mode: str


# Plan model fields that are Megatron provider / TransformerConfig fields of the same name (checked against the wheels)
ARCHITECTURE_FIELDS = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups",
                       "kv_channels", "gated_linear_unit", "normalization", "share_embeddings_and_output_weights",
                       "vocab_size", "num_moe_experts", "moe_router_topk", "moe_ffn_hidden_size",
                       "moe_shared_expert_intermediate_size", "moe_layer_freq")


def architecture(plan: Plan) -> dict:
    """The model fields the recipe must change: a preset's overrides (the recipe is the preset's), or every field of
    a custom model, so a 16-layer override of a 32-layer preset is trained with 16 layers."""
    m = plan.model
    written = m.as_written()
    if isinstance(written, str):
        return {}
    fields = written if m.preset is not None else m.model_dump()
    return {k: fields[k] for k in ARCHITECTURE_FIELDS if k in fields and fields[k] is not None}


def derived_settings(plan: Plan, version: str = DEFAULT_MB_VERSION, packing_factor: float | None = None) -> Settings:
    """What the plan and its rules set: layout, loss and DDP settings under CP, batch sizes, packing, CUDA graphs.

    With offline packing Megatron-Bridge's global batch counts packs: the plan's samples per step over the packing
    factor n of the data (``Plan.global_batch_packs``), so offline exports need n.
    """
    p, t, k = plan.parallel, plan.training, plan.packing
    mode = plan.packing_mode
    _version(version)
    if mode == "online":
        raise ValueError("online packing is Megatron-LM's scheduler (--sequence-packing-scheduler); Megatron-Bridge "
                         "has no such option: export --format megatron-lm")
    if mode == "offline" and not packing_factor:
        raise ValueError("offline packing: Megatron-Bridge's global_batch_size counts packs, which needs the data's "
                         "packing factor; give the lengths (--lengths or the plan's data.lengths)")
    sft = t.task != "pretrain"
    model = {"tensor_model_parallel_size": p.tp, "pipeline_model_parallel_size": p.pp,
             "context_parallel_size": p.cp, "expert_model_parallel_size": p.ep,
             "expert_tensor_parallel_size": p.etp, "sequence_parallel": p.sp, "seq_length": t.seq_length}
    if p.vpp is not None:
        model["virtual_pipeline_model_parallel_size"] = p.vpp
    for flag in ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split"):
        if getattr(p, flag):
            model[flag] = True
    if p.tp_comm_overlap:
        model["tp_comm_overlap"] = True
    if p.cp > 1:
        model["cp_comm_type"] = p.cp_comm_type
        if p.cp_comm_type == "a2a+p2p":
            model["hierarchical_context_parallel_sizes"] = list(p.hierarchical_cp_sizes or [])
        if sft:
            model["calculate_per_token_loss"] = True  # ConfigContainer.validate asserts it for SFT with CP > 1
    model.update(architecture(plan))
    model["recompute_granularity"] = None if t.recompute == "none" else t.recompute
    if t.recompute == "full":
        model["recompute_method"] = "uniform"
        model["recompute_num_layers"] = 1
    ddp = {"use_distributed_optimizer": t.distributed_optimizer}
    if p.cp > 1 and sft:
        ddp["average_in_collective"] = False  # same assertion: a CP rank with all tokens masked would give NaN
    train = {"micro_batch_size": 1 if mode == "offline" else t.micro_batch_size,
             "global_batch_size": plan.global_batch_packs(packing_factor) if mode == "offline" else
             t.global_batch_size}
    dataset: dict = {"seq_length": t.seq_length}
    if mode == "offline":
        # the packing shuffle's seed, GPTSFTDatasetConfig.seed (the dataclass default is 1234, recipes set 5678), so
        # the packs Megatron-Bridge writes are the ones the advisor simulated (only the SFT config has the field)
        dataset["seed"] = k.seed
    specs = None
    if mode == "offline":
        specs = {"packed_sequence_size": plan.pack_size, "pad_seq_to_mult": plan.pad_seq_to_mult}
        if t.cuda_graphs:
            specs["pad_cu_seqlens"] = True
        if new_packing_api(version):
            dataset["enable_offline_packing"] = True
            if (k.pack_size or t.seq_length) < t.seq_length:
                specs["max_single_sequence_length"] = k.pack_size
    elif mode == "in-batch":
        dataset["enable_in_batch_packing" if new_packing_api(version) else "pack_sequences_in_batch"] = True
    if mode != "none" and (t.cuda_graphs or p.pp > 1 or p.ep > 1):
        dataset["dataset_kwargs"] = {"pad_to_max_length": True}  # CUDA graphs replay fixed shapes
    return Settings(model=model, train=train, dataset=dataset, ddp=ddp, specs=specs, mode=mode)


def _py(value) -> str:
    return repr(value)


def python_snippet(plan: Plan, version: str = DEFAULT_MB_VERSION, packing_factor: float | None = None) -> str:
    """Python that edits a recipe's ``ConfigContainer`` named ``cfg``, importing what it uses. Every value is
    written with ``repr`` and the model name only in a comment, so no plan text can become code."""
    s = derived_settings(plan, version, packing_factor)
    new = new_packing_api(version)
    lines = [f"# Sequence packing advisor: settings for Megatron-Bridge {version}, model {_comment(plan.model_name)}, "
             f"{plan.parallel.gpus} GPUs.", "# Apply to the ConfigContainer your recipe returns (cfg = recipe(...))."]
    if s.specs is not None:
        module = "megatron.bridge.data.packing" if new else "megatron.bridge.data.datasets.packed_sequence"
        lines.append(f"from {module} import PackedSequenceSpecs")
    lines.append("")
    for section, values in (("model", s.model), ("train", s.train), ("ddp", s.ddp), ("dataset", s.dataset)):
        for name, value in values.items():
            if name == "dataset_kwargs":
                lines.append("cfg.dataset.dataset_kwargs = {**(cfg.dataset.dataset_kwargs or {}), "
                             "'pad_to_max_length': True}")
                continue
            lines.append(f"cfg.{section}.{name} = {_py(value)}")
    if s.specs is not None:
        args = ", ".join(f"{k}={_py(v)}" for k, v in s.specs.items())
        target = "offline_packing_specs" if new else "packed_sequence_specs"
        lines.append(f"cfg.dataset.{target} = PackedSequenceSpecs({args})")
    if not plan.training.grad_reduce_in_fp32:
        # MixedPrecisionConfig.setup copies its grad_reduce_in_fp32 onto cfg.ddp, so cfg.ddp alone would be undone
        lines += ["# the plan reduces gradients in BF16: on the recipe's MixedPrecisionConfig (a name such as",
                  "# 'bf16_mixed' first through get_mixed_precision_config) set grad_reduce_in_fp32 = False"]
    return "\n".join(lines) + "\n"


def _comment(text: str) -> str:
    return repr(text)[1:-1].replace("\n", " ")


def overrides(plan: Plan, version: str = DEFAULT_MB_VERSION, packing_factor: float | None = None) -> str:
    """The same settings as OmegaConf dotlist overrides for Megatron-Bridge recipe scripts, one per line."""
    s = derived_settings(plan, version, packing_factor)
    out = []
    for section, values in (("model", s.model), ("train", s.train), ("ddp", s.ddp), ("dataset", s.dataset)):
        for name, value in values.items():
            if name == "dataset_kwargs":
                out.append("dataset.dataset_kwargs.pad_to_max_length=true")
                continue
            out.append(f"{section}.{name}={_dotlist(value)}")
    if s.specs is not None:
        target = "offline_packing_specs" if new_packing_api(version) else "packed_sequence_specs"
        out += [f"dataset.{target}.{k}={_dotlist(v)}" for k, v in s.specs.items()]
    return "\n".join(out) + "\n"


def _dotlist(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ",".join(str(v) for v in value) + "]"
    return str(value)


def mock_lengths_csv(hist: LengthHistogram, seed: int = 1234) -> str:
    """The lengths one per line, under a header line that Megatron-LM's pandas reader drops (``mode: file``), in
    the data set's order: a per-sample file's own, a histogram's shuffled with ``seed`` (the packing seed). The
    online scheduler packs in this order, which is what the advisor simulates (a sorted file would put every short
    sample in the first steps)."""
    return "length\n" + "\n".join(str(v) for v in dataset_order(hist, seed).tolist()) + "\n"


def megatron_lm_args(plan: Plan, lengths_csv: str = "lengths.csv") -> str:
    """Megatron-LM arguments for the same layout and packing, SFT on mock data of the user's length distribution.

    Online packing: dev's ``--sequence-packing-scheduler`` (model_parallel_config.py) with its buffer; main has the
    scheduler but no option to turn it on, so an online plan on main is refused here.
    """
    p, t, m, k = plan.parallel, plan.training, plan.model, plan.packing
    if plan.packing_mode == "online" and k.megatron_lm == "main":
        raise ValueError("Megatron-LM main d98e8a64 has no --sequence-packing-scheduler (its training loop never "
                         "calls the scheduler): set packing.megatron_lm to dev")
    mbs = 1 if plan.packing_mode == "offline" else t.micro_batch_size
    # Megatron-LM's global batch counts samples (its online packing too) and must divide by micro batch x DP
    # (megatron/core/num_microbatches_calculator.py asserts it at start-up)
    unit = mbs * p.dp
    gbs = max(unit, round(t.global_batch_size / unit) * unit)
    head = [f"# global batch {t.global_batch_size} samples rounded to {gbs}, a multiple of micro batch x DP = {unit}"] \
        if gbs != t.global_batch_size else []
    args = [f"--tensor-model-parallel-size {p.tp}", f"--pipeline-model-parallel-size {p.pp}",
            f"--context-parallel-size {p.cp}", f"--expert-model-parallel-size {p.ep}",
            f"--micro-batch-size {mbs}", f"--global-batch-size {gbs}", f"--seq-length {t.seq_length}",
            f"--max-position-embeddings {t.seq_length}",
            f"--num-layers {m.num_layers}", f"--hidden-size {m.hidden_size}", f"--ffn-hidden-size {m.ffn_hidden_size}",
            f"--num-attention-heads {m.num_attention_heads}", f"--kv-channels {m.head_dim}",
            f"--normalization {m.normalization}"]
    if m.query_groups != m.num_attention_heads:
        args += ["--group-query-attention", f"--num-query-groups {m.query_groups}"]
    if m.gated_linear_unit:
        args.append("--swiglu")
    if not m.share_embeddings_and_output_weights:
        args.append("--untie-embeddings-and-output-weights")
    if m.num_moe_experts:
        args += [f"--num-experts {m.num_moe_experts}", f"--moe-router-topk {m.moe_router_topk}"]
        if m.moe_ffn_hidden_size:
            args.append(f"--moe-ffn-hidden-size {m.moe_ffn_hidden_size}")
    if p.vpp:
        args.append(f"--num-layers-per-virtual-pipeline-stage "
                    f"{(plan.model.num_layers + p.pipeline_slots) // (p.pp * p.vpp)}")
    if p.account_for_embedding_in_pipeline_split:
        args.append("--account-for-embedding-in-pipeline-split")
    if p.account_for_loss_in_pipeline_split:
        args.append("--account-for-loss-in-pipeline-split")
    if p.tp_comm_overlap:
        args.append("--tp-comm-overlap")
    if p.sp:
        args.append("--sequence-parallel")
    if p.cp > 1:
        args.append(f"--cp-comm-type {p.cp_comm_type}")
        if p.cp_comm_type == "a2a+p2p":
            args.append("--hierarchical-context-parallel-sizes " + " ".join(map(str, p.hierarchical_cp_sizes or [])))
        args.append("--calculate-per-token-loss")
    if t.seq_length > 65536 or p.cp > 1:
        args.append("--no-create-attention-mask-in-dataloader")
    if t.recompute == "selective":
        args.append("--recompute-granularity selective")
    elif t.recompute == "full":
        args += ["--recompute-granularity full", "--recompute-method uniform", "--recompute-num-layers 1"]
    if t.distributed_optimizer:
        args.append("--use-distributed-optimizer")
    if not t.grad_reduce_in_fp32:
        args.append("--grad-reduce-in-bf16")
    if plan.packing_mode == "online":
        args.append(f"--sequence-packing-scheduler {k.scheduler}")
        if k.scheduler == "default_dynamic_cp":
            args.append("--dynamic-context-parallel")
        if k.max_seqlen_per_dp_cp_rank is not None:
            args.append(f"--max-seqlen-per-dp-cp-rank {k.max_seqlen_per_dp_cp_rank}")
        if "--calculate-per-token-loss" not in args:
            args.append("--calculate-per-token-loss")  # dynamic CP asserts it; packed THD loss is per token
    if t.task != "pretrain":
        mock = json.dumps({"mode": "file", "path": lengths_csv})
        args += ["--sft", "--mock-data", f"--sft-mock-dataset-config-json {shlex.quote(mock)}"]
    return "".join(line + "\n" for line in head) + " \\\n  ".join(args) + "\n"


def packed_paths(plan: Plan, version: str = DEFAULT_MB_VERSION, tokenizer: str = "meta-llama/Llama-3.1-8B",
                 dataset_root: str = "<dataset_root>", packing_factor: float | None = 1.0) -> str:
    """Where Megatron-Bridge writes the packed files and metadata, by version (the layout changed twice).

    0.3.x: ``packed/{tokenizer}_pad_seq_to_mult{N}/training_{size}.npy``; 0.4-0.5: Parquet ``.idx.parquet``;
    0.6: a folder suffixed ``_sft_{fingerprint}`` (12 hex digits of the dataset settings' hash).
    """
    s = derived_settings(plan, version, packing_factor)
    if s.specs is None:
        return "No offline packing in this plan: Megatron-Bridge writes no packed files.\n"
    size, mult = s.specs["packed_sequence_size"], s.specs["pad_seq_to_mult"]
    name = tokenizer.replace("/", "--")
    major, minor = _version(version)
    if (major, minor) >= (0, 6):
        folder = f"{name}_pad_seq_to_mult{mult}_sft_<fingerprint>"
        ext = ".idx.parquet"
    elif (major, minor) >= (0, 4):
        folder, ext = f"{name}_pad_seq_to_mult{mult}", ".idx.parquet"
    else:
        folder, ext = f"{name}_pad_seq_to_mult{mult}", ".npy"
    base = f"{dataset_root}/packed/{folder}"
    return (f"tokenizer_model_name = {tokenizer!r}  (set it on the PackedSequenceSpecs so the folder name is stable)\n"
            f"train:    {base}/training_{size}{ext}\n"
            f"val:      {base}/validation_{size}{ext}\n"
            f"metadata: {base}/{size}_metadata.jsonl  (one JSON list, one dict per split)\n"
            + ("<fingerprint> is the first 12 hex digits of a hash of the dataset settings "
               "(data/builders/gpt_sft.py _packing_fingerprint).\n" if (major, minor) >= (0, 6) else ""))


def markdown_report(plan: Plan, findings: list, est=None, search_result=None) -> str:
    """Findings and estimates in one page for a review."""
    p, t = plan.parallel, plan.training
    lines = [f"# Packing plan: {_comment(plan.model_name)}", "",
             f"- Layout: {p.gpus} x {plan.hardware.gpu}, TP {p.tp}, PP {p.pp}, CP {p.cp}, EP {p.ep}, DP {p.dp}, "
             f"SP {'on' if p.sp else 'off'}",
             f"- Training: {t.task}, seq_length {t.seq_length}, micro batch {t.micro_batch_size}, global batch "
             f"{t.global_batch_size} samples, recompute {t.recompute}", f"- Packing: {plan.packing_mode}", ""]
    if est is not None:
        m, f, tm = est.memory, est.flops, est.time
        lines += ["## Estimates", "", "| component | GiB |", "| --- | ---: |"]
        lines += [f"| {k} | {v / 2**30:.2f} |" for k, v in m.breakdown.items()]
        lines += [f"| **total** ({'fits' if m.fits else 'does not fit'} in {m.capacity / 2**30:.1f}) | "
                  f"**{m.total / 2**30:.2f}** |", "",
                  f"Megatron-Bridge's own estimate: {m.megatron_bridge.total_bytes / 2**30:.2f} GiB.", "",
                  f"- Step {tm.step_seconds:.3f} s, {tm.tokens_per_second_per_gpu:,.0f} tokens/s/GPU, "
                  f"straggler x{tm.straggler_factor:.2f}, epoch {tm.epoch_seconds / 3600:.2f} h",
                  f"- FLOPs per step {f.model_per_step:.3e} on real tokens, {f.padding_waste:.1%} spent on padding",
                  ""]
        if est.packing is not None:
            lines += ["Megatron-Bridge packing metadata:", "", "```json", json.dumps(est.packing.metadata), "```", ""]
    lines += ["## Findings", ""]
    if not findings:
        lines.append("None.")
    for fd in findings:
        lines.append(f"- **{fd.severity}** `{fd.id}`: {fd.message}. {fd.reason} _Source: {fd.source}_")
    if search_result is not None and search_result.best:
        lines += ["", "## Best candidates", "", "| plan | TP | CP | pack size | GBS | GiB | tokens/s/GPU | why |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for label, c in [("yours", search_result.baseline)] + [(f"#{i + 1}", c) for i, c in
                                                                enumerate(search_result.best)]:
            s = c.summary()
            gib = f"{s['memory_gib']:.1f}" if s["memory_gib"] is not None else "-"
            lines.append(f"| {label} | {s['tp']} | {s['cp']} | {s['pack_size']} | {s['global_batch_size']} | {gib} "
                         f"| {s['tokens_per_second_per_gpu']:,.0f} | {s['why']} |")
    return "\n".join(lines) + "\n"


def export(plan: Plan, fmt: str, version: str = DEFAULT_MB_VERSION, packing_factor: float | None = None,
           findings=None, est=None, search_result=None) -> str:
    """One export as text; ``fmt`` is one of FORMATS. Offline packing needs the data's packing factor n."""
    _version(version)
    if fmt == "python":
        return python_snippet(plan, version, packing_factor)
    if fmt == "overrides":
        return overrides(plan, version, packing_factor)
    if fmt == "megatron-lm":
        return megatron_lm_args(plan)
    if fmt == "paths":
        return packed_paths(plan, version, packing_factor=packing_factor or 1.0)
    if fmt == "plan":
        return dump_plan(plan)
    if fmt == "markdown":
        return markdown_report(plan, findings or [], est, search_result)
    raise ValueError(f"unknown export format {str(fmt)[:40]!r}; choose from {', '.join(FORMATS)}")
