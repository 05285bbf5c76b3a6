"""Every metric, control and chart of the dashboard explained for an engineer new to packed sequences, in one place,
each text with the source it rests on (reviewed here, and a test checks every page uses one for each element).

Alternatives: help strings scattered over the pages (unreviewable), or a separate manual (never read where the number
is). Worked examples are computed live from the engine, so they cannot drift from what the pages compute.

>>> HELP["packing_factor"].source
'Megatron-Bridge docs, sft_peft/packed_sequence (packing factor n)'
>>> attention_example([100, 200, 300])["thd"]
140000
"""

from __future__ import annotations

from dataclasses import dataclass

MB_PACKING = "Megatron-Bridge 0.6.2 data/packing/offline.py"
MB_CONFIG = "Megatron-Bridge 0.6.2 training/config.py (ConfigContainer.validate)"
MB_DOCS = "Megatron-Bridge docs, sft_peft/packed_sequence (packing factor n)"
MLM_FLOPS = "Megatron-LM megatron/training/training.py (num_floating_point_operations)"


@dataclass(frozen=True, kw_only=True)
class Explanation:
    text: str
    source: str

    def __str__(self) -> str:
        return f"{self.text} (Source: {self.source}.)"


def _e(text: str, source: str) -> Explanation:
    return Explanation(text=text, source=source)


HELP: dict[str, Explanation] = {
    # ----------------------------------------------------------------------------------------- data (home)
    "sample": _e(
        "Bundled length distributions: the real SQuAD and Wikipedia histograms and synthetic SFT, chat, "
        "long-context and VLM shapes. Each opens with a plan that suits it.",
        "sample_data/README.md",
    ),
    "upload": _e(
        "Your data set's token counts per sample (len(input_ids) after tokenization), one per row, or a "
        "length,count histogram. Only the lengths matter to packing, never the text.",
        "advisor/data/ingest.py",
    ),
    "raw_upload": _e(
        "A raw data set (Megatron-Bridge SFT JSONL with input/output fields, or chat JSONL with "
        "messages; or Parquet) to tokenize on the server, up to 64 MB and 200,000 records. Larger data "
        "sets: python -m advisor tokenize, with --sample for 100M records.",
        "advisor/ui/raw_data.py",
    ),
    "raw_tokenizer": _e(
        "The tokenizers the server's operator installed (ADVISOR_TOKENIZER_DIRS) and the bundled tiny "
        "sample tokenizer. Lengths depend on the tokenizer: use your model's.",
        "advisor/data/tokenize/tokenizer.py",
    ),
    "raw_format": _e(
        "sft: GPTSFTDataset's prompt template '{input} {output}' with EOS, the input cut to "
        "max_seq_length; sft, prompt-completion: its prompt-completion preprocessing of 'prompt' and "
        "'completion' fields (Bridge's defaults; the prompt cut first); chat: GPTSFTChatDataset with the "
        "tokenizer's own chat template (no cut); chat, legacy: the <extra_id_*> format of ShareGPT "
        "'conversations' with a 'system' field. The command line sets the rest (python -m advisor "
        "tokenize --help).",
        "Megatron-Bridge 0.6.2 data/datasets/gpt_sft.py, data/sft_processing.py",
    ),
    "raw_max_seq_length": _e(
        "GPTSFTDataset cuts the input field so a sample fits this many tokens (sft only).",
        "Megatron-Bridge 0.6.2 data/datasets/gpt_sft.py (_multiple_truncation)",
    ),
    "raw_tokenize": _e(
        "Tokenize every record exactly as Megatron-Bridge 0.6.2 would and use the lengths as the "
        "data set (records that cannot be tokenized are left out and counted).",
        "advisor/data/tokenize/engine.py",
    ),
    "lognormal": _e(
        "Megatron-LM's mock SFT data: lengths drawn from a lognormal with this mean and sigma, clipped "
        "to [min, max], seed 0 - what --sft-mock-dataset-config-json distribution mode trains on.",
        "Megatron-LM megatron/training/datasets/sft_dataset.py (mock SFT dataset)",
    ),
    "mb_samples": _e(
        "Samples a micro batch holds (the plan's micro_batch_size; fewer in the epoch's last one).",
        "advisor/model/micro_batches.py",
    ),
    "mb_tokens": _e("Data tokens a micro batch holds on average.", "advisor/model/micro_batches.py"),
    "mb_computed": _e(
        "Tokens the GEMMs run on per micro batch: the data plus the padding the mode adds (in-batch: "
        "each sample to the CP/SP multiple; no packing: to the longest).",
        "advisor/model/micro_batches.py",
    ),
    "mb_padding": _e("The share of computed tokens that are padding.", "advisor/model/micro_batches.py"),
    "mb_total": _e("Micro batches in one epoch of the data.", "advisor/model/micro_batches.py"),
    "micro_batch_tokens": _e(
        "Micro batches by tokens: green the data's, red what is computed (padding included). "
        "The gap between the two is what packing offline would save.",
        "advisor/ui/charts.py (micro_batch_tokens)",
    ),
    "data_format": _e(
        "What the lengths are (data.format): sft = Megatron-Bridge's GPTSFTDataset, which truncates a "
        "sample longer than the pack; chat = GPTSFTChatDataset, which does not, so offline packing "
        "skips it (create_hist). The Packing page counts the samples cut or skipped.",
        "advisor/plan/schema.py (data.format)",
    ),
    "plan_file": _e(
        "A YAML or JSON plan: model, parallel layout, training, packing, data and hardware. The same file "
        "the command line reads; its JSON Schema is python -m advisor schema.",
        "advisor/plan/schema.py",
    ),
    "log_x": _e(
        "Log scale for the length axis: long-tailed data sets (chat, long context) are easier to read.",
        "plotly axis types",
    ),
    "log_y": _e(
        "Log scale for the sample counts: shows the rare long samples that set the pack size.", "plotly axis types"
    ),
    "samples": _e("How many samples (sequences) the data set holds.", "advisor/data/lengths.py"),
    "mean": _e(
        "Mean tokens per sample. With packing, about pack size / mean samples share a pack.", "advisor/data/lengths.py"
    ),
    "p99": _e(
        "99 % of samples are at most this long: a pack size below it truncates more than 1 % of samples.",
        "advisor/data/lengths.py",
    ),
    "max": _e(
        "The longest sample. Samples longer than the sequence length are truncated (their tail is never trained on).",
        MB_PACKING + " (tokenize_dataset)",
    ),
    "length_histogram": _e(
        "How many samples have each length, with the pack size marked. Everything right of the "
        "line is cut; the area left of it decides how well samples fill packs.",
        "advisor/ui/charts.py",
    ),
    # ----------------------------------------------------------------------------------------- packing
    "algorithm": _e(
        "How samples are put into packs. first_fit_shuffle is what Megatron-Bridge's dataset builder "
        "uses (shuffle, then each sample into the first pack with room); first_fit_decreasing sorts "
        "longest first and packs tighter; the others are for comparison.",
        MB_PACKING,
    ),
    "pack_size": _e(
        "packed_sequence_size: the tokens in one packed row. Longer packs waste less at the end of each "
        "pack but need more activation memory per micro batch.",
        MB_PACKING,
    ),
    "pad_seq_to_mult": _e(
        "Every sample is padded up to a multiple of this before packing. Context parallelism "
        "cuts each sequence into 2*CP chunks, so it needs a multiple of 2*CP (and of CP*TP with "
        "sequence parallelism): the advisor uses lcm(2*CP, CP*TP with SP), the rule Megatron-Bridge "
        "0.6 enforces for in-batch packing; for offline packing you set it (the Llama recipes use "
        "2*CP when CP > 1).",
        MB_CONFIG + "; Megatron-Bridge recipes/llama/llama3.py",
    ),
    "packs": _e(
        "How many packed rows the data set becomes: one optimizer micro batch each with offline packing.", MB_PACKING
    ),
    "packing_factor": _e(
        "n = samples / packs: how many samples an average pack holds. Megatron-Bridge's "
        "global_batch_size counts packs, so divide your samples per step by n to keep the same "
        "learning-rate schedule.",
        MB_DOCS,
    ),
    "efficiency": _e(
        "Megatron-Bridge's packing_efficiency: filled slots / pack slots, in %, where a sample's "
        "pad_seq_to_mult padding counts as filled. With pad_seq_to_mult 1 it is the share of the row "
        "that is data; with a larger multiple see 'data share'.",
        MB_PACKING + " (packing_efficiency)",
    ),
    "data_share": _e(
        "Real tokens / pack slots, in %: the share of the computed tokens that are data. 100 % minus "
        "this is compute spent on padding, pad_seq_to_mult padding included.",
        "advisor/packing/metrics.py (padding_fraction)",
    ),
    "straggler_ratio": _e(
        "The heaviest pack's attention work over the mean. Each step waits for the slowest "
        "data-parallel rank, and attention grows with the square of each sample's length, so one "
        "pack holding a single long sample can slow every step.",
        "advisor/packing/metrics.py; Megatron-LM sequence packing schedulers (dev)",
    ),
    "metadata": _e(
        "The entry Megatron-Bridge writes to {pack_size}_metadata.jsonl beside the packed data "
        "(CUDA graphs read max_samples_per_bin from it).",
        MB_PACKING + " (packing metadata)",
    ),
    "prepare": _e(
        "advisor prepare tokenizes your raw SFT or chat data as Megatron-Bridge does and writes the packed "
        "Parquet files and metadata it trains on: with first_fit_shuffle or first_fit_decreasing and the "
        "same seed, byte for byte Megatron-Bridge's own files; with the advisor's packers, the same "
        "sequences in fewer packs. Point the plan's data.lengths at the folder and the exports set "
        "packed_train_data_path, packed_val_data_path and packed_metadata_path.",
        "advisor/prepare/run.py; Megatron-Bridge 0.6.2 data/packing/offline.py prepare_gpt_sft_packed_data",
    ),
    "sweep_metric": _e("Which figure the curves show against pack size.", "advisor/ui/charts.py"),
    "sweep": _e(
        "Efficiency (or padding, or n) against pack size, per algorithm, and the two ways of training "
        "without packing (dashed). The gap between the solid and dashed curves is the compute packing "
        "saves.",
        "advisor/ui/state.py (packing_sweep)",
    ),
    "pack_fill": _e(
        "How full the packs are. A pile at 100 % means samples fill packs well; a spread means many "
        "packs end with padding.",
        "advisor/packing/metrics.py",
    ),
    "attention_work": _e(
        "Attention work per pack, the sum of each sample's length squared (what variable-length "
        "THD attention computes). A long right tail means stragglers.",
        "advisor/packing/metrics.py",
    ),
    "pack_strip": _e("The first packs, each bar stacked from its samples: what one micro batch holds.", MB_PACKING),
    # ----------------------------------------------------------------------------------------- memory & FLOPs
    "model": _e(
        "A model preset (architecture numbers from the model's config) or your own fields; a preset with "
        "changed fields keeps them as overrides.",
        "advisor/plan/presets.py",
    ),
    "custom_model": _e(
        "Edit the architecture fields (Megatron TransformerConfig names) of the model.", "advisor/plan/schema.py"
    ),
    "gpu": _e(
        "The GPU: its memory, its dense peaks per precision, HBM, NVLink (8 GPUs a board, 72 in an NVL72 rack) "
        "and NICs set what fits and the step time.",
        "advisor/plan/presets.py",
    ),
    "precision": _e(
        "The precision of the linear layers' GEMMs: bf16; fp8 (Transformer Engine current scaling, or "
        "training.fp8_recipe delayed / blockwise); mxfp8 and nvfp4 on Blackwell only. Attention, the "
        "router and the output layer stay BF16; the step pays for casting each GEMM input, and layers "
        "keep the quantized copy of their inputs for backward.",
        "advisor/model/numerics.py",
    ),
    "fsdp": _e(
        "Megatron FSDP (Megatron-Bridge use_megatron_fsdp, optim_grads_params): weights, gradients and "
        "optimizer state sharded over the data-parallel ranks, each layer's weights gathered before its "
        "forward and backward and its gradients reduce-scattered after, behind the neighbouring layer's "
        "compute.",
        "advisor/model/perf/step.py",
    ),
    "cpu_offload": _e(
        "Layers whose saved activations Transformer Engine copies to host memory in forward and back "
        "for backward (Megatron-Core cpu_offloading_num_layers): the GPU holds the other layers' only. "
        "Needs PP 1 and no recompute. The copies hide behind the compute while the host link keeps up: "
        "NVLink-C2C on GB200/GB300 does, PCIe on x86 nodes much less.",
        "advisor/model/perf/offload.py",
    ),
    "vpp": _e(
        "Virtual pipeline stages per rank (interleaved 1F1B; 1 = none): the bubble shrinks by VP, each stage "
        "holds layers / (PP x VP) at a time and keeps more micro batches in flight. Needs PP > 1.",
        "Megatron-Core pipeline_parallel/schedules.py",
    ),
    "ep": _e(
        "Expert parallelism (MoE): the experts split over EP GPUs, tokens sent to their experts and back by the "
        "dispatcher (all-to-all) every MoE layer; EP x PP must divide the GPUs.",
        "Megatron-Core transformer/moe/token_dispatcher.py",
    ),
    "gpus": _e("GPUs in the job: tensor x pipeline x context x data parallel sizes.", "Megatron-Core parallel_state"),
    "tp": _e(
        "Tensor parallelism: each layer's matrices split over TP GPUs (fast links needed, usually one node).",
        "Megatron-Core tensor_parallel",
    ),
    "pp": _e("Pipeline parallelism: layers split into PP stages; packs are padded to the full length.", MB_CONFIG),
    "cp": _e(
        "Context parallelism: each sequence split over CP GPUs (2*CP chunks, rank r takes r and 2CP-1-r so "
        "causal attention work is balanced). Needed for long context.",
        "Transformer Engine context parallel",
    ),
    "micro_batch": _e("Rows per micro batch. Offline packing needs 1 (a row is already a pack of samples).", MB_CONFIG),
    "seq_length": _e(
        "model.seq_length and dataset.seq_length (Megatron-Bridge requires them equal): the longest row. "
        "With offline packing the pack size is at most this; SFT samples longer are truncated, chat "
        "samples longer are skipped. The search keeps it unless you free it.",
        MB_CONFIG,
    ),
    "sp": _e(
        "Sequence parallelism: with TP > 1, the activations outside the attention and MLP GEMMs are split over "
        "the TP ranks too (less memory, a reduce-scatter/all-gather instead of an all-reduce). With CP it sets "
        "the padding multiple lcm(2 CP, CP TP).",
        MB_CONFIG,
    ),
    "recompute": _e(
        "Activation recompute: selective recomputes core attention in backward (little time, large "
        "memory savings at long context); full recomputes every layer's forward (about 30 % slower; "
        "Megatron-Bridge's docs prefer more CP).",
        "Megatron-Bridge docs, performance tuning",
    ),
    "batch_unit": _e(
        "How the plan counts the global batch. samples: as an unpacked run counts them; the export "
        "divides by the packing factor n and rounds to a multiple of DP, so the samples a step really "
        "trains on (packs x n) differ a little. packs: Megatron-Bridge's own global_batch_size with "
        "offline packing, as your MB config writes it. Switching keeps the step's work.",
        MB_DOCS,
    ),
    "global_batch": _e(
        "The global batch per optimizer step, in the unit chosen beside it. Every page says it in both "
        "units: N packs ≈ M samples.",
        MB_DOCS,
    ),
    "vary": _e(
        "What the search may change besides the layout. By default it keeps your seq_length and the samples "
        "per step (within 5 %), so its gains compare runs that do the same work; free them to let it try "
        "longer packs or another batch. It also keeps your GPU, precision and FSDP setting unless you free "
        "gpu, precision or fsdp.",
        "advisor/advice/search.py",
    ),
    "memory": _e(
        "Memory on the most loaded GPU: weights, gradients, optimizer states, activations of one micro "
        "batch, logits, and a fixed overhead, against the GPU's memory.",
        "advisor/model/memory.py",
    ),
    "step_time": _e(
        "Seconds per optimizer step from the performance model: every layer's GEMMs by shape, attention "
        "by kernel, the communication Megatron does not hide (TP, CP, pipeline, data parallel, MoE), the "
        "pipeline bubble and the optimizer, times the straggler factor simulated from the real packs. "
        "Eight constants are fitted on 118 published pre-training runs (H100, B200, B300, GB200, GB300; "
        "BF16, FP8, MXFP8, NVFP4; 4K to 1M tokens, CP up to 32): median error 6.1 %, 90th percentile "
        "19.5 %, MoE models the weak part (the calibration table in docs/step-time.md).",
        "advisor/model/perf/calibration.py; sample_data/mb_performance_pretrain.csv, long_sequence_tflops.csv",
    ),
    "step_breakdown": _e(
        "Where one step's seconds go. Compute (GEMMs, attention, memory-bound work, recompute) is "
        "what the GPU must do; the communication terms are only the part left exposed (TP overlap, "
        "the CP ring behind attention, gradient sync behind the last backward); the bubble is "
        "(PP - 1) / VPP micro batches of fill and drain; the straggler wait is the time "
        "data-parallel ranks wait for the one with the heaviest packs; the slowest GPU's pace is what the "
        "compute stretches because the job runs at its slowest GPU's speed (1 % spread between GPUs, 1.4 % "
        "of the compute at 8 GPUs, 3.4 % at 2,048); offload is the wait for CPU "
        "offloading's copies. MFU = Megatron's model FLOPs / (step x GPUs x the dense peak of the "
        "precision the linear layers run in). LoRA skips the frozen weights' weight-gradient GEMMs: a "
        "third of the GEMM time.",
        "advisor/model/perf/step.py",
    ),
    "tokens_per_second": _e("Real (non-padding) tokens trained per second per GPU.", "advisor/model/throughput.py"),
    "epoch_time": _e("Time for one pass over the data set at that step time.", "advisor/model/throughput.py"),
    "memory_bar": _e(
        "Memory per GPU by component (left) beside Megatron-Bridge's own estimate (right) and the "
        "GPU's capacity (red line).",
        "advisor/model/memory.py; Megatron-Bridge estimate_training_memory",
    ),
    "attention_flops": _e(
        "Attention core FLOPs per step three ways: THD variable-length (sum of s_i^2), one "
        "block-diagonal mask over the packed row ((sum s_i)^2), and every sample padded to the "
        "sequence length (b x s^2).",
        MLM_FLOPS,
    ),
    "online_megatron_lm": _e(
        "Which Megatron-LM branch's scheduler to simulate. dev wires it into training "
        "(--sequence-packing-scheduler); main has the scheduler code but never calls it, and "
        "refuses global batches that fit in fewer packs than DP ranks (it never splits pack 0).",
        "megatron/core/datasets/data_schedule.py (main d98e8a64, dev d48bd6be)",
    ),
    "online_max_seqlen": _e(
        "--max-seqlen-per-dp-cp-rank: tokens one DP x CP rank holds per micro batch; a pack holds "
        "this x CP. 0 means Megatron-LM's default, seq_length / CP. Smaller packs give more micro "
        "batches per step and less memory.",
        "megatron/training/arguments.py (dev)",
    ),
    "online_shown": _e(
        "Which online scheduler the step charts show: dp_balanced (next fit to the buffer, pack count "
        "raised to a multiple of DP) or dev's dynamic CP (each sequence gets its own CP size).",
        "megatron/core/datasets/data_schedule.py",
    ),
    "online_step": _e("The global batch (optimizer step) shown in the heat map.", "advisor/packing/online/results.py"),
    "online_steps": _e(
        "How many micro batches each DP rank runs per step over the epoch (online packing changes it "
        "step by step: each global batch is packed on its own), and the straggler wait of each step: "
        "the slowest rank's attention work over the mean rank's. dp_balanced deals packs in order, so "
        "it balances pack counts, not work.",
        "advisor/packing/online/schedule.py",
    ),
    "online_rank_work": _e(
        "One step's attention work (sum of s^2 of the sequences, split over their CP group) per "
        "micro batch and rank. A column that sums far above the others is the rank every other "
        "rank waits for at the gradient sync.",
        "advisor/packing/online/loads.py",
    ),
    "packing_comparison": _e(
        "The same data, model and layout packed every way: offline by Megatron-Bridge (packs built once, "
        "before training), in-batch (each micro batch concatenated; GPT-SFT from Megatron-Bridge 0.7), "
        "global-batch (Megatron-Bridge 0.7: each global batch packed by Megatron-Core's dp_balanced or "
        "dynamic-CP scheduler as it arrives) and Megatron-LM's online packing (the same schedulers), with the "
        "step-time model on each: micro batches per step, padding, straggler, step time, time per sample, "
        "memory and tokens lost. A way Megatron-Bridge refuses on this layout says why. Offline's global batch "
        "counts packs, the others samples, so the recommendation compares time per sample: among the ways that "
        "fit, the fastest (within 2 %), then the fewest tokens lost, then the fewest new requirements.",
        "advisor/advice/compare.py",
    ),
    "online_use": _e(
        "Put the way chosen here (the recommended one unless you pick another) into the plan: its "
        "packing mode, scheduler, branch and buffer, the same samples per step in the unit that mode "
        "counts, and the releases it needs (Megatron-Bridge 0.7.1 and Megatron-Core 0.20.0 for global-batch "
        "packing). The Memory & FLOPs page, the recommendations and the exports then use it.",
        "advisor/plan/schema.py (packing.mode)",
    ),
    "memory_heatmap": _e(
        "Memory per GPU for other pack sizes and CP sizes; cells marked with a cross do not fit.",
        "advisor/analysis.py (memory_grid)",
    ),
    # ----------------------------------------------------------------------------------------- recommendations
    "findings": _e(
        "What the rules found in your plan: errors stop Megatron, warnings cost time or data, infos "
        "explain a derived setting. Apply fix changes the plan.",
        "advisor/advice/rules.py",
    ),
    "candidates": _e(
        "Layouts the search tried on your GPUs (TP, CP, pack size, micro batch) that fit and break no "
        "rule, fastest first, beside yours.",
        "advisor/advice/search.py",
    ),
    "mb_version": _e(
        "The Megatron-Bridge release: the packing API moved in 0.6 (enable_offline_packing).",
        "advisor/advice/exports.py",
    ),
    "export_format": _e(
        "What to export: a Python snippet for a recipe's ConfigContainer, overrides, Megatron-LM "
        "arguments, packed-file paths, the plan, a report, or trial launch scripts.",
        "advisor/advice/exports.py",
    ),
    "version_megatron_bridge": _e(
        "The Megatron-Bridge release the run uses: the export writes for it, and the pre-flight names the known "
        "traps of this release (crashes, hangs, silently wrong training) and the release that fixes each.",
        "advisor/plan/versions.py, advisor/advice/traps.py",
    ),
    "version_megatron_core": _e(
        "The Megatron-Core release the run uses (Megatron-Bridge pins one; pip shows it as megatron-core): the "
        "pre-flight checks its known traps.",
        "advisor/plan/versions.py, advisor/advice/traps.py",
    ),
    "version_transformer_engine": _e(
        "The Transformer Engine release the run uses (pip shows transformer-engine): the pre-flight checks its "
        "known traps, such as THD with CP padding before 2.18.",
        "advisor/plan/versions.py, advisor/advice/traps.py",
    ),
    "logged": _e(
        "The throughput your logs will print, from the frameworks' own formulas: Megatron-Bridge counts a packed "
        "row's padded tokens (and, with CP > 1, every row as seq_length dense), its tokens/s counts seq_length "
        "per pack (#1636); Megatron-LM counts the real tokens. Compare runs on the useful figures.",
        "advisor/model/logged.py",
    ),
    "preflight": _e(
        "Known traps of packed and long-context training that bite this plan at the releases it names, grouped by "
        "what they do; each cites its upstream thread and the release that fixes it.",
        "advisor/advice/traps.py",
    ),
    "export_mock": _e(
        "Without it the arguments read your data from $DATA_PATH; with it they name lengths.csv, downloaded beside "
        "them (export --lengths-csv lengths.csv).",
        "advisor/advice/exports.py megatron_lm_args",
    ),
    "export_recommended": _e("Export the search's best candidate instead of your plan.", "advisor/advice/search.py"),
    "loss_weights": _e(
        "How much of a step's gradient falls on samples of each length (loss tokens): token-uniform, "
        "what calculate_per_token_loss gives (every supervised token of the global batch weighs 1/N); "
        "your plan's run; and the same samples without packing. Without per-token loss each micro "
        "batch's loss is its own token mean, so a pack of many short samples and a micro batch of one "
        "sample weigh their tokens differently, and turning packing on changes what is optimised. "
        "The grey bars are the data's samples by length. Loss tokens are the data's loss mask where "
        "it has one (a packed folder, raw data tokenized here or with tokenize --loss-tokens: "
        "answer-only SFT, assistant turns), else every label token; the axis says which.",
        "Megatron-Bridge 0.6.2 training/losses.py; Megatron-Core schedules.py "
        "(forward_step_calc_loss), finalize_model_grads.py; advisor/model/loss_expectation.py",
    ),
    "loss_reported_ratio": _e(
        "Megatron-Bridge's logged lm loss at step 0, packed over unpacked: it sums losses and "
        "loss tokens over the global batch before dividing, so on the same samples it is 1 "
        "whatever the settings; on two random first steps it differs by sampling alone (the "
        "range is the 5th-95th percentile).",
        "Megatron-Bridge 0.6.2 training/train.py (train_step)",
    ),
    "loss_objective_ratio": _e(
        "The objective the gradient descends at step 0 (a mean of per-micro-batch means "
        "without per-token loss; what Megatron-LM's evaluate reports with --sft), packed over "
        "unpacked on the same samples, with a per-token loss that falls with the position in "
        "the sample (an assumed power law; the trial measures its own).",
        "Megatron-Core schedules.py (forward_step_calc_loss); advisor/model/loss_curve.py",
    ),
    "loss_moved": _e(
        "The share of a step's gradient weight that moves between samples when the same samples are "
        "trained packed instead of unpacked (half the summed absolute difference of their weights). "
        "Above 1 % the recommendations warn.",
        "advisor/model/loss_expectation.py",
    ),
    # ----------------------------------------------------------------------------------------- trial
    "trial_steps": _e(
        "Timed steps per way (packed, padded, block-masked, interleaved) after two warm-up steps; "
        "speeds are their medians with min, max and IQR.",
        "advisor/trial/report.py",
    ),
    "trial_pack_size": _e(
        "The trial's pack size; your lengths are scaled to it so the trial stays small.", "advisor/trial/run.py"
    ),
    "trial_scale": _e("How large the trial's model is (small runs on a CPU in seconds).", "advisor/trial/run.py"),
    "trial_upload": _e(
        "A trial.json from a run on a GPU node (python -m advisor trial PLAN --device cuda --out DIR).",
        "advisor/trial/run.py",
    ),
    "trial_loss": _e(
        "The same first-step samples run packed and unpacked on the same weights, their loss reduced "
        "as Megatron-Core does with and without calculate_per_token_loss: the measured ratio of the "
        "logged lm loss (1: token-weighted) and of the objective the gradient descends, beside the "
        "advisor's prediction from the same samples' per-token losses and from their per-position "
        "curve.",
        "advisor/trial/loss.py",
    ),
    "trial_chart": _e(
        "Median real tokens/s of the three ways on the same samples, whiskers from the slowest to "
        "the fastest timed step; the title gives the packed/padded speed-up of the medians with its "
        "95% bootstrap interval, and the FLOPs prediction.",
        "advisor/trial/report.py",
    ),
}


def help_text(key: str) -> str:
    """The explanation with its source, as a widget's ``help=``."""
    return str(HELP[key])


# --------------------------------------------------------------------------------------------- worked examples
def attention_example(lengths: list[int]) -> dict:
    """Attention work of a few samples packed in one row, three ways.

    >>> attention_example([100, 200, 300])
    {'lengths': [100, 200, 300], 'thd': 140000, 'block_mask': 360000, 'padded': 270000}
    """
    longest = max(lengths)
    return {
        "lengths": list(lengths),
        "thd": sum(s * s for s in lengths),
        "block_mask": sum(lengths) ** 2,
        "padded": len(lengths) * longest * longest,
    }


def global_batch_example(plan, packing_factor: float) -> dict:
    """Megatron-Bridge's global batch in packs for the plan's samples per step (``Plan.global_batch_packs``).

    >>> from advisor.plan import plan_from_dict
    >>> global_batch_example(plan_from_dict({"model": "llama3.1-8b", "training": {"global_batch_samples": 128}}), 2.1)
    {'samples': 128, 'n': 2.1, 'dp': 8, 'packs': 64, 'samples_trained': 134}
    """
    samples_per_step, dp = plan.requested_samples, plan.dp
    packs = plan.global_batch_packs(packing_factor)
    return {
        "samples": samples_per_step,
        "n": packing_factor,
        "dp": dp,
        "packs": packs,
        "samples_trained": round(packs * packing_factor),
    }


def cp_padding_example(length: int, multiple: int, cp: int) -> dict:
    """A sequence padded to the plan's multiple (``Plan.pad_seq_to_mult``) and, with CP > 1, cut into 2 CP chunks.

    >>> cp_padding_example(1001, multiple=8, cp=2)
    {'length': 1001, 'multiple': 8, 'padded': 1008, 'chunks': 4, 'chunk_tokens': 252}
    >>> cp_padding_example(1001, multiple=2, cp=1)["chunks"]
    1
    """
    padded = -(-length // multiple) * multiple
    chunks = 2 * cp if cp > 1 else 1
    return {
        "length": length,
        "multiple": multiple,
        "padded": padded,
        "chunks": chunks,
        "chunk_tokens": padded // chunks,
    }
