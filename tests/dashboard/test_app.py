"""Every dashboard page in AppTest: renders on the sample data, follows its controls, survives bad input."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from tests.support import ROOT
from tests.support.apptest import open_page

pytestmark = pytest.mark.slow  # every test runs a page in Streamlit's AppTest, seconds each

PAGES = [
    "app.py",
    "pages/1_Packing.py",
    "pages/6_Online_packing.py",
    "pages/2_Memory_and_FLOPs.py",
    "pages/3_Recommendations.py",
    "pages/4_Trial.py",
]


@pytest.fixture(autouse=True)
def _clear_caches():
    st.cache_data.clear()
    yield


def run(page: str, state: dict | None = None) -> AppTest:
    return open_page(page, state)


def shown(element) -> str:
    """A message as the visitor reads it (the pages escape Markdown in messages)."""
    return re.sub(r"\\(.)", r"\1", element.value)


def unescaped(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def value_of(at: AppTest, statistic: str) -> str:
    frame = at.dataframe[0].value
    return frame.set_index("statistic").loc[statistic, "value"]


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_on_the_sample_data(page):
    at = run(page)
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error


def test_upload_changes_the_summary_and_a_bad_file_keeps_the_data():
    at = run("app.py")
    before = value_of(at, "samples")
    assert before == "88,641"
    at.file_uploader(key="upload").set_value(("mine.csv", b"length\n100\n200\n300\n", "text/csv")).run()
    assert not at.exception
    assert value_of(at, "samples") == "3" and value_of(at, "max") == "300"
    at.file_uploader(key="upload").set_value(("bad.csv", b"length\n100\nabc\n", "text/csv")).run()
    assert not at.exception
    assert shown(at.error[0]) == "bad.csv, line 3: length 'abc' is not a number"
    assert value_of(at, "samples") == "3"  # the previous data stays


def test_a_file_removed_and_uploaded_again_is_used_again():
    """Reloading a file undoes what happened since: the same lengths file after a sample was chosen, the same plan
    file after an edit (both were ignored: the page remembered the file by name and size after it was removed)."""
    mine = ("mine.csv", b"length\n1000\n2000\n3000\n", "text/csv")
    at = run("app.py")
    at.file_uploader(key="upload").set_value(mine).run()
    assert value_of(at, "samples") == "3"
    assert dict(at.query_params).get("data") in ("upload", ["upload"])  # the link says so at once, not a run later
    next(s for s in at.selectbox if s.label == "Bundled sample").set_value("chat-like (180k)").run()
    assert value_of(at, "samples") == "180,000"
    at.file_uploader(key="upload").set_value(None).run()
    at.file_uploader(key="upload").set_value(mine).run()
    assert not at.exception and value_of(at, "samples") == "3"
    plan = (ROOT / "sample_data" / "plans" / "llama8b_chat_8k.yaml").read_bytes()
    at.file_uploader(key="plan_upload").set_value(("plan.yaml", plan, "text/yaml")).run()
    assert at.session_state["plan"].parallel.gpus == 16
    at.session_state["plan"] = at.session_state["plan"].changed({"parallel": {"gpus": 32}})
    at.file_uploader(key="plan_upload").set_value(None).run()
    at.file_uploader(key="plan_upload").set_value(("plan.yaml", plan, "text/yaml")).run()
    assert not at.exception and at.session_state["plan"].parallel.gpus == 16


def test_packing_page_metadata_follows_pack_size():
    at = run("pages/1_Packing.py")
    assert '"pack_size": 384' in at.code[0].value
    at.number_input[0].set_value(256).run()
    assert not at.exception
    assert '"pack_size": 256' in at.code[0].value
    assert at.session_state["plan"].packing.pack_size == 256  # kept for the other pages
    # a pack longer than seq_length is refused where it was typed, the plan and its metadata kept
    at.number_input[0].set_value(512).run()
    assert not at.exception and at.session_state["plan"].packing.pack_size == 256
    assert any("longer than training.seq_length 384" in shown(e) for e in at.error)


def test_memory_page_refuses_an_inconsistent_layout():
    at = run("pages/2_Memory_and_FLOPs.py")
    gpus = next(n for n in at.number_input if n.label == "GPUs")
    gpus.set_value(7).run()
    assert at.error and "parallel.gpus 7 is not divisible by tp*pp*cp = 2" in shown(at.error[0])
    assert at.session_state["plan"].parallel.gpus == 8  # the last good plan is kept


def test_memory_page_offloads_layers_and_refuses_what_megatron_core_refuses():
    """Offloading with selective recompute (the default) is refused and the plan kept; with recompute none the
    activations shrink and the page says what went to host memory."""
    from advisor.ui.controls import CONTROLS

    at = run("pages/2_Memory_and_FLOPs.py")
    offload = CONTROLS["training.cpu_offloading_num_layers"].key
    at.number_input(key=offload).set_value(8).run()
    assert "needs training.recompute none, not selective" in shown(at.error[0])
    assert at.session_state["plan"].training.cpu_offloading_num_layers == 0
    assert at.number_input(key=offload).value == 0
    at.selectbox(key=CONTROLS["training.recompute"].key).set_value("none").run()
    before = at.session_state["plan"]
    at.number_input(key=offload).set_value(8).run()
    assert not at.exception and not at.error
    plan = at.session_state["plan"]
    assert plan.training.cpu_offloading_num_layers == 8 and plan.model == before.model
    assert any("CPU offloading:" in shown(c) and "in host memory" in shown(c) for c in at.caption)


def test_leaving_full_recompute_drops_the_block_size():
    """A plan file's block recompute (recompute_num_layers) belongs to full recompute: choosing another recompute on
    the page drops it instead of refusing the edit; back to full, every layer is recomputed."""
    from advisor.ui.controls import CONTROLS
    from advisor.ui.state import default_plan

    plan = default_plan().changed({"training": {"recompute": "full", "recompute_num_layers": 2}})
    at = run("pages/2_Memory_and_FLOPs.py", {"plan": plan})
    key = CONTROLS["training.recompute"].key
    at.selectbox(key=key).set_value("selective").run()
    assert not at.error and at.session_state["plan"].training.recompute == "selective"
    assert at.session_state["plan"].training.recompute_num_layers is None
    at.selectbox(key=key).set_value("full").run()
    assert (at.session_state["plan"].training.recompute, at.session_state["plan"].training.recompute_num_layers) == (
        "full",
        None,
    )


def test_memory_page_sets_expert_and_virtual_pipeline_parallelism():
    """EP on a dense model and VP without PP are refused with the plan kept; on a MoE preset EP lands, and VP 1
    means no virtual pipeline."""
    from advisor.ui.controls import CONTROLS

    at = run("pages/2_Memory_and_FLOPs.py")
    ep, vp = CONTROLS["parallel.ep"].key, CONTROLS["parallel.vpp"].key
    at.number_input(key=ep).set_value(2).run()
    assert "parallel.ep > 1 needs a MoE model" in shown(at.error[0]) and at.number_input(key=ep).value == 1
    at.selectbox(key=CONTROLS["model.preset"].key).set_value("qwen3-30b-a3b").run()
    at.number_input(key=ep).set_value(8).run()
    assert not at.exception and at.session_state["plan"].parallel.ep == 8
    at.number_input(key=vp).set_value(2).run()
    assert "parallel.vpp needs pp > 1" in shown(at.error[0]) and at.session_state["plan"].parallel.vpp is None
    at.number_input(key=CONTROLS["parallel.pp"].key).set_value(2).run()  # EP 8 x PP 2 needs 16 GPUs
    assert "not divisible by ep*etp*pp = 16" in shown(at.error[0]) and at.session_state["plan"].parallel.pp == 1
    at.number_input(key=CONTROLS["parallel.gpus"].key).set_value(16).run()
    at.number_input(key=CONTROLS["parallel.pp"].key).set_value(2).run()
    at.number_input(key=vp).set_value(3).run()
    assert not at.exception and at.session_state["plan"].parallel.vpp == 3
    at.number_input(key=vp).set_value(1).run()
    assert at.session_state["plan"].parallel.vpp is None and at.number_input(key=vp).value == 1


def test_export_matches_the_command_line(tmp_path):
    at = run("pages/3_Recommendations.py")
    shown = at.code[0].value
    plan_file = tmp_path / "plan.yaml"
    from advisor.plan import dump_plan

    plan = at.session_state["plan"]
    plan_file.write_text(dump_plan(plan.changed({"data": {"lengths": str(ROOT / plan.data.lengths)}})))
    cli = subprocess.run(
        [sys.executable, "-m", "advisor", "export", str(plan_file), "--format", "python", "--quiet"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert cli.returncode == 0 and cli.stdout.rstrip("\n") == shown.rstrip("\n")


def test_apply_fix_changes_the_plan():
    from advisor.ui.state import default_plan

    vlm = default_plan("VLM-like (100k)")
    at = run("pages/3_Recommendations.py", {"plan": vlm.changed({"training": {"micro_batch_size": 1}})})
    button = next(b for b in at.button if "training.micro_batch_size 2" in unescaped(b.label))
    button.click().run()
    assert not at.exception
    assert at.session_state["plan"].training.micro_batch_size == 2  # packing.in_batch_mbs fixed
    assert not any("micro_batch_size" in unescaped(b.label) for b in at.button)


def test_share_link_reopens_the_plan():
    from advisor.ui.links import plan_from_query, plan_to_query
    from advisor.ui.samples import default_plan

    plan = default_plan("chat-like (180k)").changed({"parallel": {"cp": 2}, "model": {"num_layers": 16}})
    sample, back = plan_from_query(plan_to_query(plan, "chat-like (180k)"))
    assert sample == "chat-like (180k)" and back == plan


def test_custom_model_fields_drive_the_estimate():
    at = run("pages/2_Memory_and_FLOPs.py")
    base, plan_32 = at.metric[0].value, at.session_state["plan"]
    at.toggle(key="custom_model").set_value(True).run()
    assert not at.exception
    layers = next(n for n in at.number_input if n.label == "num_layers")
    layers.set_value(64).run()
    assert not at.exception
    assert at.session_state["plan"].model.num_layers == 64
    assert at.session_state["plan"].model.preset == "llama3.1-8b"  # an override of the preset, kept as one
    from advisor.model.estimate import estimate

    for before, plan in ((base, plan_32), (at.metric[0].value, at.session_state["plan"])):  # the page's own figure
        gib = estimate(plan, at.session_state["hist"]).memory.total / 2**30
        assert before.startswith(f"{gib:.1f} of "), (before, gib)


def test_a_hostile_share_link_shows_a_message_and_the_default_plan():
    import base64
    import zlib

    nested = base64.urlsafe_b64encode(zlib.compress(("[" * 5000 + "]" * 5000).encode())).decode()
    bomb = base64.urlsafe_b64encode(zlib.compress(b"{" + b" " * 50_000_000 + b"}")).decode()
    for query in ({"plan": nested}, {"plan": bomb}, {"plan": "not base64 at all!"}, {"sample": "../../etc/passwd"}):
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
        for k, v in query.items():
            at.query_params[k] = v
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert at.error and "the link's plan could not be read" in shown(at.error[0])
        assert value_of(at, "samples") == "88,641"  # the default sample and plan


@pytest.mark.parametrize("page", [*PAGES[1:], "pages/5_Tour.py"])
def test_a_link_whose_plan_is_refused_says_so_once_on_the_page_it_opens(page):
    """Issue 38 (found by bench/fuzz_round4.py): a link with a field past its schema bound, opened on the Trial,
    Tour or Online packing page, showed the default plan and no word of the refusal."""
    from advisor.ui import links
    from advisor.ui.samples import DEFAULT_SAMPLE, default_plan

    query = links.plan_to_query(default_plan(), DEFAULT_SAMPLE)
    raw = default_plan().to_dict()
    raw["parallel"]["gpus"] = 131_073  # one past the schema's bound
    import base64
    import json
    import zlib

    query["plan"] = base64.urlsafe_b64encode(zlib.compress(json.dumps(raw).encode())).decode()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    for k, v in query.items():
        at.query_params[k] = v
    at.switch_page(page)  # the link's own page, as its URL opens it
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    said = [shown(e) for e in at.error if "the link's plan could not be read" in shown(e)]
    assert len(said) == 1 and "parallel.gpus" in said[0], [shown(e) for e in at.error]
    assert at.session_state["plan"] == default_plan()
    at.button(key="plan_notes_seen").click().run()  # dismissed: gone from this page and the next
    assert not any("could not be read" in shown(e) for e in at.error)


def test_a_bad_plan_upload_keeps_the_last_good_plan():
    at = run("app.py")
    before = at.session_state["plan"]
    at.file_uploader(key="plan_upload").set_value(
        ("p.yaml", b"model: llama3.1-8b\nparallel: {gpus: 0}\n", "text/yaml")
    ).run()
    assert not at.exception
    assert "parallel.gpus" in shown(at.error[0]) and at.session_state["plan"] == before
    at.file_uploader(key="plan_upload").set_value(
        ("q.yaml", b"model: {preset: qwen3-8b, num_layers: 12}\n", "text/yaml")
    ).run()
    assert at.session_state["plan"].model.num_layers == 12 and at.session_state["plan"].model.preset == "qwen3-8b"


def test_uploads_over_the_memory_budget_are_refused_before_parsing(monkeypatch):
    from advisor.ui import state as ui

    state: dict = {}
    ui.init_state(state)
    before = state["hist"]
    monkeypatch.setattr(ui, "TEXT_UPLOAD_LIMIT_MB", 1)
    monkeypatch.setattr(ui, "_parse_upload", lambda *a: (_ for _ in ()).throw(AssertionError("parsed")))
    assert not ui.use_upload(state, b"length\n" + b"100\n" * 300_000, "big.csv")
    assert "over the dashboard's 1 MB limit" in state["upload_error"] and state["hist"] is before


def test_pages_survive_data_that_cannot_be_estimated():
    """Found by review: an in-batch (VLM) plan on fewer samples than one micro batch crashed the Memory page."""
    from advisor.ui import state as ui
    from advisor.ui.samples import default_plan

    for page in (
        "pages/2_Memory_and_FLOPs.py",
        "pages/3_Recommendations.py",
        "pages/1_Packing.py",
        "pages/6_Online_packing.py",
    ):
        state: dict = {}
        ui.init_state(state)
        state["plan"] = default_plan("VLM-like (100k)")
        assert ui.use_upload(state, b"length\n100\n200\n", "two.csv")
        at = run(page, {"hist": state["hist"], "plan": state["plan"], "data_name": "two.csv"})
        assert not at.exception, (page, [e.value for e in at.exception])
    at = run("pages/2_Memory_and_FLOPs.py", {"hist": state["hist"], "plan": state["plan"], "data_name": "two.csv"})
    assert "fewer samples" in shown(at.error[0])


def test_every_plan_bound_control_applies_consecutive_edits_and_refusals_restore_it():
    """advisor/ui/controls.py in AppTest (the browser test does the same with real typing): each edit lands in the
    plan and the control, one after another; a refused one leaves both as the plan was."""
    from advisor.ui.controls import CONTROLS

    at = run("pages/2_Memory_and_FLOPs.py")
    for name, values in (
        ("parallel.gpus", (16, 32, 64, 16)),
        ("parallel.tp", (4, 8, 2)),
        ("parallel.cp", (2, 4, 1)),
        ("training.seq_length", (1024, 2048, 384)),
        ("training.batch", (256, 64, 128)),
    ):
        for value in values:
            at.number_input(key=CONTROLS[name].key).set_value(value).run()
            assert not at.exception and not at.error, (name, value)
            assert at.number_input(key=CONTROLS[name].key).value == value
            assert CONTROLS[name].read(at.session_state) == value
    at.number_input(key=CONTROLS["parallel.tp"].key).set_value(1).run()  # SP is on: refused where it is typed
    assert any("parallel.sp needs tp > 1" in unescaped(e.value) for e in at.error)
    assert at.session_state["plan"].parallel.tp == 2 and at.number_input(key=CONTROLS["parallel.tp"].key).value == 2
    at.selectbox(key=CONTROLS["training.recompute"].key).set_value("full").run()
    assert at.session_state["plan"].training.recompute == "full"
    assert at.session_state["plan"].batch_in_packs == 128  # offline packing: the batch counts packs, as MB's does
    at.radio(key=CONTROLS["training.batch_unit"].key).set_value("samples").run()
    plan = at.session_state["plan"]
    assert plan.batch_in_packs is None and plan.training.global_batch_samples is not None
    assert at.number_input(key=CONTROLS["training.batch"].key).value == plan.training.global_batch_samples
    at.number_input(key=CONTROLS["parallel.gpus"].key).set_value(7).run()
    assert at.error and at.session_state["plan"].parallel.gpus == 16
    assert at.number_input(key=CONTROLS["parallel.gpus"].key).value == 16


def test_the_lognormal_draw_takes_the_bounds_it_shows_and_keeps_the_data_on_a_refusal():
    from advisor.data.ingest import load_lengths
    from advisor.data.megatron_mock import lognormal_lengths
    from advisor.plan.io import plan_from_text
    from advisor.ui import state as ui

    at = run("app.py")
    inputs = {n.label: n for n in at.number_input}
    for spec in ui.LOGNORMAL_INPUTS:  # the page draws each with the bounds the server checks
        assert (inputs[spec.label].min, inputs[spec.label].max, inputs[spec.label].value) == (
            spec.lo,
            spec.hi,
            spec.default,
        )
    state: dict = {"plan": ui.default_plan()}
    assert ui.use_lognormal(state, 1000, 0.5, 100, 4000)
    drawn = state["hist"]
    assert drawn.num_samples == 1_000_000 and drawn.lengths.min() >= 100 and drawn.lengths.max() <= 4000
    assert drawn.total_tokens == int(lognormal_lengths(1_000_000, 1000, 0.5, 100, 4000).sum())  # Megatron-LM's draw
    # the plan carries the draw (it kept SQuAD's path): the saved plan's data reads back as the very histogram
    saved = plan_from_text(ui.saved_plan(state), "saved.yaml")
    again = load_lengths(saved.data.lengths)
    assert again.lengths.tolist() == drawn.lengths.tolist() and again.counts.tolist() == drawn.counts.tolist()
    sigma = ui.LOGNORMAL_INPUTS[1]
    assert not ui.use_lognormal(state, 1000, sigma.hi * 2, 100, 4000)
    assert state["hist"] is drawn and f"lognormal_sigma {sigma.hi * 2:g} is outside" in state["upload_error"]
    assert not ui.use_lognormal(state, 1000, 0.5, 5000, 4000)
    assert state["hist"] is drawn and "min_seq_len 5000 is over max_seq_len 4000" in state["upload_error"]


@pytest.mark.slow  # AppTest
def test_recommendations_page_shows_the_loss_weighting_and_its_fix_makes_it_invariant():
    from advisor.ui.state import default_plan

    at = run("pages/3_Recommendations.py", {"plan": default_plan()})
    assert not at.exception
    labels = {m.label: m.value for m in at.metric}
    assert labels["lm loss at step 0, packed / unpacked"].startswith("1.000")
    assert float(labels["objective at step 0, packed / unpacked"]) < 1
    fix = next(b for b in at.button if "calculate\\_per\\_token\\_loss" in b.label)  # shown escaped
    fix.click().run()
    assert not at.exception and at.session_state["plan"].training.calculate_per_token_loss
    labels = {m.label: m.value for m in at.metric}
    assert labels["objective at step 0, packed / unpacked"] == "1.000"
    assert labels["gradient weight moved by packing"] == "0.0%"


def test_memory_page_names_the_recipe_layout_that_placed_deepseeks_layers():
    """DeepSeek-V3's 61 layers on PP 4 x VP 4: the page says the recipe layout placed them, rank by rank."""
    from advisor.plan import plan_from_dict

    plan = plan_from_dict(
        {
            "model": "deepseek-v3",
            "hardware": {"gpu": "GB200"},
            "parallel": {"gpus": 256, "pp": 4, "vpp": 4, "ep": 64},
            "training": {"task": "pretrain", "seq_length": 4096, "global_batch_samples": 2048},
            "packing": {"mode": "none"},
        }
    )
    at = run("pages/2_Memory_and_FLOPs.py", {"plan": plan})
    assert not at.exception
    captions = [shown(c) for c in at.caption]
    assert any(
        "Pipeline layout: Megatron-Bridge's deepseek-v3 recipe layout for PP 4 x VP 4" in c
        and "decoder layers per rank 16, 16, 16, 13" in c
        for c in captions
    ), captions


# ------------------------------------------------------------------------------------------ one plan, one meaning
LINK_PAGES = [
    "pages/0_Data_and_plan.py",
    "pages/1_Packing.py",
    "pages/6_Online_packing.py",
    "pages/2_Memory_and_FLOPs.py",
    "pages/3_Recommendations.py",
    "pages/4_Trial.py",
    "pages/5_Tour.py",
]


@pytest.mark.parametrize("page", LINK_PAGES)
def test_every_page_keeps_the_link_and_it_reopens_the_same_plan(page):
    """Round 4: only the Data and plan page carried ?plan=, so a link copied from Memory & FLOPs opened 8 GPUs
    instead of 16. Every page sets it; opened in a fresh session it gives the plan back, field by field."""
    from advisor.ui.links import plan_from_query

    at = run(page)
    at.session_state["plan"] = at.session_state["plan"].changed({"parallel": {"gpus": 16}, "data": {"format": "chat"}})
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    query = {
        k: at.query_params[k][0] if isinstance(at.query_params[k], list) else at.query_params[k]
        for k in at.query_params
    }
    _, back = plan_from_query(query)
    assert back == at.session_state["plan"] and back.parallel.gpus == 16 and back.data.format == "chat"
    fresh = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    for k, v in query.items():
        fresh.query_params[k] = v
    fresh.run()
    assert fresh.session_state["plan"] == back


def test_a_link_made_on_uploaded_data_says_so_and_keeps_the_plan():
    at = run("app.py")
    at.file_uploader(key="upload").set_value(("mine.csv", b"length\n100\n200\n300\n", "text/csv")).run()
    at.session_state["plan"] = at.session_state["plan"].changed({"parallel": {"gpus": 16}})
    at.run()
    query = {
        k: at.query_params[k][0] if isinstance(at.query_params[k], list) else at.query_params[k]
        for k in at.query_params
    }
    assert query.get("data") == "upload" and "sample" not in query
    fresh = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    for k, v in query.items():
        fresh.query_params[k] = v
    fresh.run()
    assert not fresh.exception and fresh.session_state["plan"].parallel.gpus == 16
    assert any("made on uploaded data, which a link cannot carry" in shown(i) for i in fresh.info)
    assert value_of(fresh, "samples") == "88,641"  # the sample, said to be the sample


def test_a_loaded_plan_keeps_its_data_format_and_a_version_1_file_gets_its_note():
    """Round 4: the dashboard dropped a plan file's data.format: chat (n 6.31 there, 6.87 on the CLI)."""
    at = run("app.py")
    old = (ROOT / "sample_data" / "plans" / "llama8b_chat_8k.yaml").read_text().replace("version: 2\n", "")
    old = old.replace("format: sft", "format: chat")
    at.file_uploader(key="plan_upload").set_value(("old.yaml", old.encode(), "text/yaml")).run()
    assert not at.exception
    plan = at.session_state["plan"]
    assert plan.data.format == "chat" and plan.batch_in_packs == 128
    infos = [shown(i) for i in at.info]
    assert any("training.global_batch_size 128 is read as Megatron-Bridge reads it" in i for i in infos)
    assert any("data.lengths" in i and "path on your machine" in i for i in infos)
    assert at.radio(key="plan.data.format").value == "chat"
    at.radio(key="plan.data.format").set_value("sft").run()
    assert at.session_state["plan"].data.format == "sft"


def test_the_tours_examples_can_be_undone_back_to_the_visitors_own_work():
    at = run("app.py")
    at.file_uploader(key="upload").set_value(("mine.csv", b"length\n100\n200\n300\n", "text/csv")).run()
    mine = at.session_state["plan"].changed({"parallel": {"gpus": 16}})
    at.session_state["plan"] = mine
    at.switch_page("pages/5_Tour.py").run()
    next(b for b in at.button if b.label.startswith("Open ")).click().run()
    assert at.session_state["data_name"] != "mine.csv"
    undo = next(b for b in at.button if b.label.startswith("Back to your own data (mine.csv)"))
    undo.click().run()
    assert not at.exception and at.session_state["data_name"] == "mine.csv" and at.session_state["plan"] == mine
    assert not any(b.label.startswith("Back to your own data") for b in at.button)


def test_after_the_tours_undo_the_sample_selector_shows_the_visitors_sample():
    """The selector showed the tour's sample after the undo (Streamlit drops its key while the Tour page is shown),
    so choosing that sample did nothing."""
    at = run("app.py")
    next(s for s in at.selectbox if s.label == "Bundled sample").set_value("chat-like (180k)").run()
    at.switch_page("pages/5_Tour.py").run()
    next(b for b in at.button if b.label.startswith("Open ")).click().run()
    at.switch_page("pages/0_Data_and_plan.py").run()
    next(b for b in at.button if b.key == "tour_undo_button").click().run()
    assert not at.exception and at.session_state["data_name"] == "chat-like (180k)"
    assert next(s for s in at.selectbox if s.label == "Bundled sample").value == "chat-like (180k)"


@pytest.mark.parametrize("page", ["pages/1_Packing.py", "pages/2_Memory_and_FLOPs.py", "pages/5_Tour.py"])
def test_a_page_url_opened_first_after_a_start_works(page):
    """Round 4: the first request after a server start for a page's URL was an exception page (Streamlit ran the
    page alone, the old multipage way, because of the pages/ folder). pages/_frame.py frame() sets the session up."""
    from streamlit.runtime.pages_manager import PagesManager

    at = AppTest.from_file(str(ROOT / page), default_timeout=300)  # the page alone, as Streamlit then runs it
    PagesManager.uses_pages_directory = True  # a fresh server process: the old mode is on until navigation runs
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert "plan" in at.session_state and "plan" in at.query_params
    assert PagesManager.uses_pages_directory is False  # the next run goes through app.py


def test_the_packing_page_shows_micro_batches_not_packs_under_in_batch_packing():
    """Round 4 of issue 34: a VLM plan's Packing page showed a pack size, "22,737 packs" and an MB metadata file
    that in-batch packing does not have. It shows what a micro batch holds, the estimate's own numbers."""
    from advisor.model.estimate import estimate
    from advisor.ui.state import default_plan

    plan = default_plan("VLM-like (100k)")
    at = run("pages/1_Packing.py", {"plan": plan})
    assert not at.exception and not at.code  # no metadata file
    assert not [n for n in at.number_input if n.label == "Pack size"]
    labels = {m.label: m.value for m in at.metric}
    assert "packs" not in labels and "samples per micro batch" in labels
    mb = estimate(plan, at.session_state["hist"]).micro_batches
    assert labels["computed per micro batch"] == f"{float(mb.computed_tokens.mean()):,.0f}"
    assert any("no packs, no pack size and no metadata file" in unescaped(i.value) for i in at.info)


def test_the_megatron_lm_export_reads_the_users_data_unless_mock_data_is_asked_and_then_offers_its_file():
    at = run("pages/3_Recommendations.py")
    next(s for s in at.selectbox if s.label == "Format").set_value("megatron-lm").run()
    assert not at.exception
    code = at.code[0].value
    assert '--data-path "${DATA_PATH:?' in code and "--mock-data" not in code
    next(t for t in at.toggle if t.label.startswith("Train on Megatron-LM's mock data")).set_value(True).run()
    code = at.code[0].value
    assert "--mock-data" in code and '"path": "lengths.csv"' in code
    labels = [d.label for d in at.get("download_button")]
    assert any(label.startswith("Download lengths.csv") for label in labels), labels
