"""advisor/advice/global_batch.py against Megatron-Bridge 7bdc5ef4's own validation (tests/support/mb07.py): the
advisor refuses exactly the settings Megatron-Bridge refuses, by the same rules in the same order, each finding
citing the line of the check it reproduces, and the alignment multiple is the one ``validate`` pushes to the data."""

from __future__ import annotations

import ast
import re
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from advisor.advice.global_batch import GlobalBatchSettings, global_batch_padding_multiple, global_batch_problems
from tests.support import mb07

REASON = mb07.missing_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

# each advisor finding and a piece of the message Megatron-Bridge raises for the same rule
MB_MESSAGE = {
    "global_batch.exclusive": "mutually exclusive with offline, in-batch, and Energon packing",
    "global_batch.micro_batch_size": "requires train.micro_batch_size=1",
    "global_batch.per_token_loss": "requires model.calculate_per_token_loss=True",
    "global_batch.average_in_collective": "requires ddp.average_in_collective=False",
    "global_batch.cuda_graphs": "does not support CUDA graphs",
    "global_batch.pp": "does not yet support pipeline parallelism",
    "global_batch.dataloader": "set dataset.dataloader_type to 'single' or 'cyclic'",
    "global_batch.vpp": "does not yet support virtual pipeline parallelism",
    "global_batch.mamba": "does not yet support Mamba hybrid models",
    "global_batch.fsdp": "is not supported with Megatron FSDP",
    "global_batch.max_seqlen": "max_seqlen_per_dp_cp_rank must be set explicitly",
    "global_batch.dcp_decentralized_pg": "requires dist.use_decentralized_pg=False",
    "global_batch.dcp_pool": "needs a power-of-two dp * cp pool of at least 2",
    "global_batch.dcp_min_size": "min_dynamic_context_parallel_size must be a power of two",
    "global_batch.capacity": "Bin capacity too small",
    "global_batch.seq_length_multiple": "must be divisible by the CP/SP collate padding multiple",
}
# what Megatron-Bridge checks after the capacity check, which stops its collecting run when there is no cap
AFTER_CAPACITY = {"global_batch.seq_length_multiple"}
# the checks of the three methods the advisor does not reproduce, by line: the settings cannot express them
NOT_REPRODUCED = {
    1284: "the pinned Megatron-Core has no sequence_packing_scheduler",
    1289: "a dataset that does not yield unpacked samples",
    1301: "a hand-chosen scheduler that is not dynamic-CP under dynamic CP",
    1307: "the probe of the pinned Megatron-Core's scheduler API",
    1356: "dataset.seq_length above model.seq_length",
}
STATIC = GlobalBatchSettings(seq_length=8192, max_seqlen_per_dp_cp_rank=4096, dp=4, cp=2)
DYNAMIC = replace(STATIC, dynamic_cp=True, max_seqlen_per_dp_cp_rank=2048)
SETTINGS = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _mb_ids(messages: list[str]) -> list[str]:
    """Each of Megatron-Bridge's messages as the one advisor finding id whose piece it contains."""
    out = []
    for message in messages:
        ids = [i for i, piece in MB_MESSAGE.items() if piece in message]
        assert len(ids) == 1, f"Megatron-Bridge's message maps to {ids}: {message}"
        out.append(ids[0])
    return out


def _assert_same(s: GlobalBatchSettings) -> list[str]:
    advisor = [f.id for f in global_batch_problems(s)]
    messages, stopped = mb07.mb07_collected(s)
    reached = [i for i in advisor if i not in AFTER_CAPACITY] if stopped else advisor
    assert not stopped or s.max_seqlen_per_dp_cp_rank is None, (s, messages)
    assert reached == _mb_ids(messages), (s, messages)
    first = mb07.mb07_first_refusal(s)
    assert (first is None) == (not advisor) and (first is None or MB_MESSAGE[advisor[0]] in first)
    if not advisor:
        assert global_batch_padding_multiple(s) == mb07.mb07_padding_multiple(s), s
    return advisor


CASES = {
    "clean static": (STATIC, []),
    "clean static SP": (replace(STATIC, tp=2, sp=True), []),
    "clean dynamic": (DYNAMIC, []),
    "clean dynamic SP": (replace(DYNAMIC, tp=4, sp=True), []),
    "clean without CP": (replace(STATIC, cp=1, max_seqlen_per_dp_cp_rank=8192), []),
    "cyclic loader, vpp 1": (replace(STATIC, dataloader_type="cyclic", vpp=1), []),
    "other packing": (replace(STATIC, other_packing_enabled=True), ["global_batch.exclusive"]),
    "micro batch 2": (replace(STATIC, micro_batch_size=2), ["global_batch.micro_batch_size"]),
    "no per-token loss": (replace(STATIC, calculate_per_token_loss=False), ["global_batch.per_token_loss"]),
    "average in collective": (replace(STATIC, average_in_collective=True), ["global_batch.average_in_collective"]),
    "CUDA graphs": (replace(STATIC, cuda_graphs=True), ["global_batch.cuda_graphs"]),
    "PP 2": (replace(STATIC, pp=2), ["global_batch.pp"]),
    "batch loader": (replace(STATIC, dataloader_type="batch"), ["global_batch.dataloader"]),
    "no loader type": (replace(STATIC, dataloader_type=None), ["global_batch.dataloader"]),
    "VPP 2": (replace(STATIC, vpp=2), ["global_batch.vpp"]),
    "Mamba": (replace(STATIC, mamba_hybrid=True), ["global_batch.mamba"]),
    "FSDP": (replace(STATIC, megatron_fsdp=True), ["global_batch.fsdp"]),
    "no cap": (replace(STATIC, max_seqlen_per_dp_cp_rank=None), ["global_batch.max_seqlen"]),
    "static cap short": (replace(STATIC, max_seqlen_per_dp_cp_rank=4095), ["global_batch.capacity"]),
    "dynamic cap short": (replace(DYNAMIC, max_seqlen_per_dp_cp_rank=1023), ["global_batch.capacity"]),
    "dynamic decentralized": (replace(DYNAMIC, use_decentralized_pg=True), ["global_batch.dcp_decentralized_pg"]),
    "static decentralized": (replace(STATIC, use_decentralized_pg=True), []),
    "dynamic pool 6": (
        replace(DYNAMIC, dp=3, max_seqlen_per_dp_cp_rank=4096, seq_length=8196),
        ["global_batch.dcp_pool"],
    ),
    "static seq_length 8190": (replace(STATIC, seq_length=8190), ["global_batch.seq_length_multiple"]),
    "static SP seq_length 8196": (
        replace(STATIC, seq_length=8196, tp=8, sp=True, max_seqlen_per_dp_cp_rank=4098),
        ["global_batch.seq_length_multiple"],  # lcm(4, 16) = 16
    ),
    "dynamic seq_length 8200": (
        replace(DYNAMIC, seq_length=8200, max_seqlen_per_dp_cp_rank=1025),
        [
            "global_batch.seq_length_multiple"  # 2 x 4 x 2 = 16
        ],
    ),
    "dynamic pool 6, seq_length 8192": (
        replace(DYNAMIC, dp=3, max_seqlen_per_dp_cp_rank=4096),
        ["global_batch.dcp_pool", "global_batch.seq_length_multiple"],  # 8192 is no multiple of 2 x 3 x 2
    ),
    "dynamic pool 1": (replace(DYNAMIC, dp=1, cp=1, max_seqlen_per_dp_cp_rank=8192), ["global_batch.dcp_pool"]),
    "dynamic min 3": (replace(DYNAMIC, min_dynamic_cp_size=3), ["global_batch.dcp_min_size"]),
    "dynamic min 16": (replace(DYNAMIC, min_dynamic_cp_size=16), ["global_batch.dcp_min_size"]),
    "dynamic min 0": (replace(DYNAMIC, min_dynamic_cp_size=0), ["global_batch.dcp_min_size"]),
    "static min 3": (replace(STATIC, min_dynamic_cp_size=3), []),
}


@pytest.mark.parametrize("name", CASES)
def test_each_rule_alone_and_clean_plans(name):
    s, expected = CASES[name]
    assert _assert_same(s) == expected


def test_every_rule_at_once_in_megatron_bridge_order():
    worst = replace(
        DYNAMIC,
        dp=3,
        other_packing_enabled=True,
        micro_batch_size=4,
        calculate_per_token_loss=False,
        average_in_collective=True,
        cuda_graphs=True,
        pp=2,
        vpp=2,
        dataloader_type="external",
        mamba_hybrid=True,
        megatron_fsdp=True,
        use_decentralized_pg=True,
        min_dynamic_cp_size=8,
    )
    everything = list(MB_MESSAGE)  # in Megatron-Bridge's order
    without_cap = [i for i in everything if i != "global_batch.capacity"]
    assert _assert_same(replace(worst, max_seqlen_per_dp_cp_rank=None)) == without_cap
    assert _assert_same(replace(worst, max_seqlen_per_dp_cp_rank=100)) == [
        i for i in everything if i != "global_batch.max_seqlen"
    ]


@pytest.mark.parametrize(
    "changes, multiple",
    [
        ({}, 4),  # 2 CP
        ({"tp": 2, "sp": True}, 4),  # lcm(2 CP, CP TP) = 4; the docs' product would be 8
        ({"cp": 4, "tp": 8, "sp": True, "max_seqlen_per_dp_cp_rank": 2048}, 32),
        ({"cp": 1, "tp": 4, "sp": True, "max_seqlen_per_dp_cp_rank": 8192}, 4),  # no CP: 1, SP: TP
        ({"cp": 1, "tp": 4, "max_seqlen_per_dp_cp_rank": 8192}, 1),  # TP without SP pads nothing
        ({"dynamic_cp": True}, 16),  # 2 DP CP
        ({"dynamic_cp": True, "tp": 4, "sp": True}, 16),  # lcm(2 DP CP, CP TP): the docs' DP CP TP would be 32
        ({"dynamic_cp": True, "dp": 2, "cp": 1, "tp": 8, "sp": True, "max_seqlen_per_dp_cp_rank": 8192}, 8),
    ],
)
def test_padding_multiple_is_megatron_bridges(changes, multiple):
    s = replace(STATIC, **changes)
    assert _assert_same(s) == []
    assert global_batch_padding_multiple(s) == mb07.mb07_padding_multiple(s) == multiple


def _container() -> ast.ClassDef:
    tree = ast.parse((mb07.oracle_root() / mb07.CONFIG).read_text())
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ConfigContainer")


def _method_and_if(line: int) -> tuple[str, ast.If]:
    """The ConfigContainer method holding the ``if`` at ``line``, and that ``if``."""
    for method in _container().body:
        if isinstance(method, ast.FunctionDef):
            for node in ast.walk(method):
                if isinstance(node, ast.If) and node.lineno == line:
                    return method.name, node
    raise LookupError(f"no if at line {line}")


def test_each_finding_cites_the_line_of_its_check():
    root = mb07.oracle_root()
    lines = (root / mb07.CONFIG).read_text().splitlines()
    worst = replace(STATIC, dynamic_cp=True, dp=3, other_packing_enabled=True, micro_batch_size=2, pp=2, vpp=2)
    worst = replace(worst, calculate_per_token_loss=False, average_in_collective=True, cuda_graphs=True)
    worst = replace(worst, dataloader_type="batch", mamba_hybrid=True, megatron_fsdp=True, use_decentralized_pg=True)
    found = global_batch_problems(replace(worst, max_seqlen_per_dp_cp_rank=None, min_dynamic_cp_size=3))
    found += global_batch_problems(replace(STATIC, max_seqlen_per_dp_cp_rank=1, seq_length=8190))
    assert {f.id for f in found} == set(MB_MESSAGE)
    for f in found:
        m = re.fullmatch(r"Megatron-Bridge 7bdc5ef4 \(PR #6127\) training/config.py (\w+) l\.(\d+)", f.source)
        assert m, f.source
        method, node = _method_and_if(int(m.group(2)))
        text = "\n".join(lines[node.lineno - 1 : node.end_lineno])
        assert method == m.group(1) and MB_MESSAGE[f.id] in text, (f.id, method, text)


def test_every_check_of_the_global_batch_methods_is_reproduced_or_named():
    """A new check in the copy (or a moved line) fails here: each ``if`` that raises in the three methods is a rule
    of the advisor (its line in a finding's source) or one it says it cannot express."""
    checked = {
        node.lineno
        for method in _container().body
        if isinstance(method, ast.FunctionDef)
        and method.name
        in (
            "_validate_thd_per_token_loss_mode",
            "_validate_global_batch_packing",
            "_apply_global_batch_packing_padding",
        )
        for node in ast.walk(method)
        if isinstance(node, ast.If) and any(isinstance(b, ast.Raise) for b in node.body)
    }
    cited = {int(f.source.rsplit("l.", 1)[1]) for s in _all_refused() for f in global_batch_problems(s)}
    assert checked == (cited - {1445}) | set(NOT_REPRODUCED)


def _all_refused() -> list[GlobalBatchSettings]:
    return [s for s, expected in CASES.values() if expected]


def test_the_advisor_assumes_megatron_core_dev():
    """The commit probes the pinned Megatron-Core: main d98e8a64 registers no dynamic-CP scheduler, so dynamic CP is
    refused there; static global-batch packing passes on both."""
    assert mb07.mb07_refusals(STATIC, mcore="main") == []
    (message,) = mb07.mb07_refusals(DYNAMIC, mcore="main")
    assert "'default_dynamic_cp' is not available" in message and "switch_mcore.sh dev" in message


# plan fields a fix changes -> the settings field they are
FIX_FIELDS = {
    ("training", "micro_batch_size"): "micro_batch_size",
    ("training", "calculate_per_token_loss"): "calculate_per_token_loss",
    ("training", "average_in_collective"): "average_in_collective",
    ("training", "cuda_graphs"): "cuda_graphs",
    ("parallel", "pp"): "pp",
    ("parallel", "vpp"): "vpp",
    ("parallel", "fsdp"): "megatron_fsdp",
    ("packing", "max_seqlen_per_dp_cp_rank"): "max_seqlen_per_dp_cp_rank",
    ("training", "seq_length"): "seq_length",
}


# the switches a drawn setting may break, each with the values that break it (the others keep an accepted value)
BREAKS = {
    "micro_batch_size": [2, 4],
    "calculate_per_token_loss": [False],
    "average_in_collective": [True],
    "cuda_graphs": [True],
    "pp": [2, 4],
    "vpp": [2, 4],
    "megatron_fsdp": [True],
    "mamba_hybrid": [True],
    "dataloader_type": ["batch", "external", None],
    "use_decentralized_pg": [True],
    "other_packing_enabled": [True],
    "min_dynamic_cp_size": [0, 3, 16, 64],
}


@st.composite
def global_batch_settings(draw) -> GlobalBatchSettings:
    """Random settings: DP, CP, TP powers of two and not, SP, dynamic CP on or off, caps around seq_length / CP and
    / (DP x CP) or none, lengths that are and are not multiples of the alignment, the accepted loader types, VPP
    sizes and minimum group sizes (2 and 4 out of range on a small pool), and up to three switches broken."""
    dp = draw(st.sampled_from([1, 2, 4, 8, 2, 4, 3, 6]))
    cp = draw(st.sampled_from([1, 2, 4, 8, 2, 3]))
    seq = draw(st.sampled_from([1024, 4096, 6000, 8192, 8200]))
    ranks = draw(st.sampled_from([1, cp, cp, dp * cp, 2 * cp]))
    cap = draw(st.sampled_from([None] + [max(1, -(-seq // ranks) + d) for d in (-1, 0, 0, 0, 1)]))
    accepted = {
        "dataloader_type": draw(st.sampled_from(["single", "cyclic"])),
        "vpp": draw(st.sampled_from([None, 1])),
        "min_dynamic_cp_size": draw(st.sampled_from([1, 1, 2, 4])),
    }
    n = draw(st.sampled_from([0, 0, 0, 1, 2, 3]))
    names = draw(st.sets(st.sampled_from(sorted(BREAKS)), min_size=n, max_size=n))
    broken = {name: draw(st.sampled_from(BREAKS[name])) for name in names}
    return GlobalBatchSettings(
        seq_length=seq,
        max_seqlen_per_dp_cp_rank=cap,
        dp=dp,
        cp=cp,
        tp=draw(st.sampled_from([1, 2, 4, 8, 3])),
        sp=draw(st.booleans()),
        dynamic_cp=draw(st.booleans()),
        **{**accepted, **broken},
    )


@SETTINGS
@given(global_batch_settings())
def test_the_advisor_refuses_exactly_what_megatron_bridge_refuses(s):
    ids = _assert_same(s)
    event("accepted" if not ids else f"{len(ids)} rule(s)")
    for f in global_batch_problems(s):  # a fix, applied, removes its finding
        changes = {FIX_FIELDS[(section, name)]: v for section, fields in f.fix.items() for name, v in fields.items()}
        if changes:
            assert f.id not in {g.id for g in global_batch_problems(replace(s, **changes))}, (f.id, changes)
