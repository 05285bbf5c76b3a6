"""The dashboard in a real browser: Debian's chromium driven by Playwright, against the app on a loopback port.

Playwright cannot download its own browser here, so the test installs Debian's ``chromium`` package where it is
missing (as root, with apt-get) and skips with the reason where it cannot. Screenshots go to tests/screenshots/
(ignored by git).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.support import ROOT, SCREENSHOTS

pytestmark = pytest.mark.slow  # Chromium driving a served dashboard

CHROMIUM = "/usr/bin/chromium"
SHOTS = SCREENSHOTS
READY = "[data-testid='stApp'][data-test-script-state='notRunning']"


def _ensure_chromium() -> str | None:
    """The reason chromium cannot be had, or None once it is there."""
    if Path(CHROMIUM).exists():
        return None
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return "Debian's chromium is not installed and apt-get cannot run here (not root, or no apt)"
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
        proc = subprocess.run(
            cmd, capture_output=True, text=True, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        )
        if proc.returncode:
            return f"{' '.join(cmd)} failed: {proc.stderr.strip()[-300:]}"
    return None if Path(CHROMIUM).exists() else "chromium installed but /usr/bin/chromium is missing"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def app_url():
    reason = _ensure_chromium()
    if reason:
        pytest.skip(reason)
    pytest.importorskip("playwright.sync_api")
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            str(ROOT / "app.py"),
            "--server.port",
            str(port),
            "--server.address",
            "127.0.0.1",
            "--server.headless",
            "true",
            "--browser.gatherUsageStats",
            "false",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url + "/_stcore/health", timeout=2)
            break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("streamlit did not start within 90 s")
    yield url
    os.killpg(proc.pid, 15)
    proc.wait(timeout=20)


def test_dashboard_in_chromium(app_url, tmp_path):
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(exist_ok=True)
    upload = tmp_path / "lengths.csv"
    upload.write_text("num_tokens\n" + "\n".join(str(100 + 37 * i % 3000) for i in range(5000)) + "\n")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        page = browser.new_page(viewport={"width": 1500, "height": 1100}, accept_downloads=True)
        page.goto(app_url)
        page.wait_for_selector(READY, timeout=120_000)
        page.wait_for_selector(".js-plotly-plot", timeout=60_000)
        page.screenshot(path=str(SHOTS / "1_home.png"), full_page=True)

        page.locator("input[type='file']").first.set_input_files(str(upload))
        page.get_by_text("5,000", exact=True).first.wait_for(timeout=60_000)  # the summary shows the upload
        page.wait_for_selector(READY, timeout=120_000)
        assert page.get_by_role("heading", name="lengths.csv").count() == 1
        page.screenshot(path=str(SHOTS / "2_uploaded.png"), full_page=True)

        # a mock config in file mode names a server file: refused, naming nothing of the server, data kept
        secret = tmp_path / "secret.csv"
        secret.write_text("length\n31337\nAPI_KEY=sk-do-not-leak\n")
        hostile = tmp_path / "mock.json"
        hostile.write_text(json.dumps({"mode": "file", "path": str(secret)}))
        page.locator("input[type='file']").first.set_input_files(str(hostile))
        page.get_by_text("may not do: upload the CSV of lengths itself").wait_for(timeout=60_000)
        body = page.content()
        assert "sk-do-not-leak" not in body and "31337" not in body and str(secret) not in body
        assert page.get_by_role("heading", name="lengths.csv").count() == 1  # the previous data stays
        page.screenshot(path=str(SHOTS / "2b_refused_mock.png"), full_page=True)

        page.get_by_role("link", name="Packing", exact=True).click()
        page.get_by_role("heading", name="Packing", exact=True).wait_for(timeout=120_000)  # the new page
        page.wait_for_selector(READY, timeout=120_000)
        page.wait_for_selector(".js-plotly-plot", timeout=60_000)
        page.get_by_text("Megatron-Bridge metadata, as it will be written").wait_for(timeout=120_000)
        page.screenshot(path=str(SHOTS / "3_packing.png"), full_page=True)

        page.get_by_role("link", name="Online packing").click()
        page.get_by_role("heading", name="Online packing (Megatron-Bridge 0.7, Megatron-LM)", exact=True).wait_for(
            timeout=120_000
        )
        page.wait_for_selector(READY, timeout=180_000)
        page.get_by_text("trains fastest").first.wait_for(timeout=120_000)  # the comparison chart's title
        assert page.locator(".js-plotly-plot").count() == 3  # comparison, steps over the epoch, one step's ranks
        page.screenshot(path=str(SHOTS / "3b_online.png"), full_page=True)

        page.get_by_role("link", name="Memory and FLOPs").click()
        page.get_by_role("heading", name="Memory & FLOPs", exact=True).wait_for(timeout=120_000)  # the new page
        page.wait_for_selector(READY, timeout=120_000)
        page.wait_for_selector(".js-plotly-plot", timeout=60_000)
        page.screenshot(path=str(SHOTS / "4_memory.png"), full_page=True)

        page.get_by_role("link", name="Recommendations").click()
        page.get_by_role("heading", name="Recommendations & export", exact=True).wait_for(timeout=180_000)
        page.wait_for_selector(READY, timeout=180_000)
        with page.expect_download(timeout=60_000) as download:
            page.get_by_role("button", name="Download packing_config.py").click()
        snippet = Path(download.value.path()).read_text()
        assert "from megatron.bridge.data.packing import PackedSequenceSpecs" in snippet
        assert "cfg.dataset.enable_offline_packing = True" in snippet
        page.screenshot(path=str(SHOTS / "5_recommendations.png"), full_page=True)

        page.get_by_role("link", name="Trial").click()
        page.get_by_role("heading", name="Trial", exact=True).wait_for(timeout=120_000)  # the new page
        page.wait_for_selector(READY, timeout=120_000)
        page.get_by_role("spinbutton", name="Steps").fill("1")
        page.get_by_role("spinbutton", name="Trial pack size").fill("128")
        page.get_by_role("spinbutton", name="Trial pack size").press("Enter")
        page.wait_for_selector(READY, timeout=60_000)
        page.get_by_role("button", name="Start trial").click()
        page.get_by_text("Trial done").first.wait_for(timeout=300_000)  # the job runs apart from the page (a rerun
        # can show the old and the new message for a moment)
        page.wait_for_selector(".js-plotly-plot", timeout=60_000)
        page.screenshot(path=str(SHOTS / "6_trial.png"), full_page=True)
        browser.close()


def test_wikipedia_sample_in_chromium(app_url):
    """The 16.3M-sample Wikipedia histogram: pick it, open Packing, change the pack size, every chart draws."""
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        page.goto(app_url)
        page.wait_for_selector(READY, timeout=120_000)
        page.locator("[data-testid='stSelectbox']").first.click()
        page.get_by_role("option", name="Wikipedia BERT (real, 16.3M)").click()
        page.get_by_text("16,279,552", exact=True).first.wait_for(timeout=120_000)
        page.get_by_role("link", name="Packing", exact=True).click()
        page.get_by_role("heading", name="Packing", exact=True).wait_for(timeout=120_000)
        page.wait_for_selector(READY, timeout=180_000)
        page.get_by_text("Megatron-Bridge metadata, as it will be written").wait_for(timeout=120_000)
        assert '"pack_size": 512' in page.locator("code").first.inner_text()
        size = page.get_by_role("spinbutton", name="Pack size")
        size.fill("256")
        size.press("Enter")
        page.wait_for_function(
            "() => document.querySelector('code') && "
            "document.querySelector('code').innerText.includes('\"pack_size\": 256')",
            timeout=180_000,
        )
        page.wait_for_selector(READY, timeout=180_000)
        charts = page.locator(".js-plotly-plot")
        charts.nth(3).wait_for(timeout=60_000)
        assert charts.count() == 4  # sweep, pack fill, attention work, first packs
        for i in range(4):
            assert charts.nth(i).locator(".main-svg").count() >= 1  # drawn, not only placed
        page.screenshot(path=str(SHOTS / "7_wikipedia_packing.png"), full_page=True)
        browser.close()


def test_loss_weighting_chart_in_chromium(app_url):
    """The chat-like plan at 8k from a shared link: the Recommendations page draws the loss weighting; applying the
    per-token-loss fix makes it packing-invariant."""
    from playwright.sync_api import sync_playwright

    from advisor.plan import load_plan
    from advisor.ui.links import plan_to_query

    SHOTS.mkdir(exist_ok=True)
    plan = load_plan(ROOT / "sample_data" / "plans" / "llama8b_chat_8k.yaml")
    query = urllib.parse.urlencode(plan_to_query(plan, "chat-like (180k)"))
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        page.goto(f"{app_url}/?{query}")
        page.wait_for_selector(READY, timeout=120_000)
        page.get_by_role("link", name="Recommendations").click()
        page.get_by_role("heading", name="Will my loss change?").wait_for(timeout=180_000)
        page.wait_for_selector(READY, timeout=180_000)
        page.get_by_text("moves when packing is turned on").first.wait_for(timeout=60_000)  # the chart's title
        page.locator(".js-plotly-plot").first.scroll_into_view_if_needed()
        page.screenshot(path=str(SHOTS / "8_loss_weighting.png"), full_page=True)
        page.locator(".js-plotly-plot").first.screenshot(path=str(SHOTS / "8_loss_weighting_chart.png"))
        page.get_by_text("loss.per_token:").first.click()  # the warning's expander
        fix = page.get_by_role("button", name="calculate_per_token_loss").first
        fix.wait_for(timeout=60_000)
        # At a person's pace: on a loaded machine, a click sent within ~0.1 s of opening the expander was lost
        # (no message reached the server; 1 run in 6 on a fresh server), which a person never does.
        page.wait_for_timeout(700)
        fix.click()
        page.get_by_text("packing-invariant (every token 1/N)").first.wait_for(timeout=120_000)
        page.wait_for_selector(READY, timeout=120_000)
        page.locator(".js-plotly-plot").first.scroll_into_view_if_needed()
        page.screenshot(path=str(SHOTS / "8b_loss_weighting_per_token.png"), full_page=True)
        browser.close()


def test_the_tour_in_chromium(app_url):
    """The Tour from the sidebar: every step, one screenshot each, and a step's link opens its page."""
    from playwright.sync_api import sync_playwright

    from advisor.ui.tour import STEPS

    SHOTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        page.goto(app_url)
        page.wait_for_selector(READY, timeout=120_000)
        page.get_by_role("link", name="Tour: start here").click()
        for i, step in enumerate(STEPS):
            page.get_by_role("heading", name=step.title).wait_for(timeout=120_000)
            page.wait_for_selector(READY, timeout=120_000)
            page.get_by_text(f"Step {i + 1} of {len(STEPS)}").first.wait_for(timeout=60_000)
            page.screenshot(path=str(SHOTS / f"tour_{i + 1}.png"), full_page=True)
            if i < len(STEPS) - 1:
                page.get_by_role("button", name="Next").click()
        page.get_by_role("button", name=f"Open {STEPS[-1].page_title} with these settings").click()
        page.get_by_role("heading", name="Trial", exact=True).wait_for(timeout=120_000)
        browser.close()


def test_raw_data_tokenized_in_chromium(app_url):
    """Home page, "from raw data": a chat JSONL and the bundled tokenizer become the data set."""
    from playwright.sync_api import expect, sync_playwright

    SHOTS.mkdir(exist_ok=True)
    raw = ROOT / "sample_data" / "raw" / "chat_sample.jsonl"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        page = browser.new_page(viewport={"width": 1500, "height": 1400})
        page.goto(app_url)
        page.wait_for_selector(READY, timeout=120_000)
        page.get_by_text("Or from raw data: JSONL or Parquet and a tokenizer").click()
        uploader = (
            page.locator("[data-testid='stFileUploader']")
            .filter(has_text="SFT or chat records")
            .locator("input[type='file']")
        )
        uploader.set_input_files(str(raw))
        # Tokenize is enabled once the upload has reached the server. The format is chosen only then: in CI, with
        # the format clicked while the upload was still in flight, the file never reached the server (the button
        # stayed disabled for 3 minutes; not seen here in 14 runs, loaded or not). A person whose upload did not
        # take would upload it again, once
        tokenize = page.get_by_role("button", name="Tokenize", exact=True)
        try:
            expect(tokenize).to_be_enabled(timeout=90_000)
        except AssertionError:
            uploader.set_input_files(str(raw))
            expect(tokenize).to_be_enabled(timeout=90_000)
        page.wait_for_selector(READY, timeout=120_000)
        page.get_by_role("radiogroup", name="Format", exact=True).get_by_text("chat", exact=True).click()
        page.wait_for_selector(READY, timeout=120_000)
        tokenize.click(timeout=180_000)
        page.get_by_role("heading", name="chat_sample.jsonl (tiny-bpe, chat)").wait_for(timeout=180_000)
        page.wait_for_selector(READY, timeout=120_000)
        page.get_by_text("300", exact=True).first.wait_for(timeout=60_000)  # the summary counts its samples
        page.screenshot(path=str(SHOTS / "1b_raw_data.png"), full_page=True)
        # issue 24: the tokenizer's masks reach the loss weighting (answer-only loss: the assistant turns)
        page.get_by_role("link", name="Recommendations", exact=True).click()
        heading = page.get_by_role("heading", name="Will my loss change?")
        heading.wait_for(timeout=180_000)
        page.wait_for_selector(READY, timeout=180_000)
        page.get_by_text("loss tokens: the data's loss mask (").first.wait_for(timeout=60_000)
        heading.scroll_into_view_if_needed()
        page.screenshot(path=str(SHOTS / "1c_raw_data_loss_mask.png"))
        browser.close()


def _settle(page, text: str) -> None:
    """Wait until the rerun an edit started has finished and shows ``text``."""
    page.get_by_text(text).first.wait_for(timeout=120_000)
    page.wait_for_selector(READY, timeout=120_000)


def _edit(page, label: str, value: int) -> None:
    box = page.get_by_role("spinbutton", name=label, exact=True)
    box.fill(str(value))
    box.press("Enter")


def test_consecutive_edits_all_apply_in_chromium(app_url):
    """Issue 19: every second edit of a plan-bound control used to snap back in a real browser (AppTest did not see
    it). Each edit here must show in the control and in the figures computed from it, one after another."""
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(exist_ok=True)
    log = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        page = browser.new_page(viewport={"width": 1600, "height": 1200})
        page.goto(app_url)
        page.wait_for_selector(READY, timeout=120_000)
        page.get_by_role("link", name="Memory and FLOPs").click()
        page.get_by_role("heading", name="Memory & FLOPs", exact=True).wait_for(timeout=120_000)
        page.wait_for_selector(READY, timeout=120_000)
        gpus = page.get_by_role("spinbutton", name="GPUs", exact=True)
        tp = page.get_by_role("spinbutton", name="TP", exact=True)
        cp = page.get_by_role("spinbutton", name="CP", exact=True)
        t0 = int(tp.input_value())
        assert cp.input_value() == "1" and page.get_by_role("spinbutton", name="PP", exact=True).input_value() == "1"
        for n in (16, 32, 64, 8, 16):  # DP = GPUs / TP, which the batch caption states
            _edit(page, "GPUs", n)
            _settle(page, f"a multiple of DP {n // t0})")
            assert gpus.input_value() == str(n)
            log.append(f"GPUs -> {n}: control {gpus.input_value()}, caption says DP {n // t0}")
        for t in (4, 8, 2):
            _edit(page, "TP", t)
            _settle(page, f"a multiple of DP {16 // t})")
            assert tp.input_value() == str(t)
            log.append(f"TP -> {t}: control {tp.input_value()}, caption says DP {16 // t}")
        _edit(page, "TP", 1)  # SP is on: Megatron-Core refuses it without TP, so the edit is refused where it is made
        page.get_by_text("parallel.sp needs tp > 1").first.wait_for(timeout=120_000)
        page.wait_for_selector(READY, timeout=120_000)
        assert tp.input_value() == "2"
        log.append("TP -> 1 with SP on: refused with its message, control back to 2")
        for c in (2, 4, 1):
            _edit(page, "CP", c)
            _settle(page, f"a multiple of DP {8 // c})")
            assert cp.input_value() == str(c)
            log.append(f"CP -> {c}: control {cp.input_value()}, caption says DP {8 // c}")
        refused = 7  # 16 GPUs at TP 2: 7 is not a multiple of TP x PP x CP; refused, the control shows the plan's 16
        _edit(page, "GPUs", refused)
        page.get_by_text("is not divisible by tp*pp*cp").first.wait_for(timeout=120_000)
        page.wait_for_selector(READY, timeout=120_000)
        assert gpus.input_value() == "16"
        log.append(f"GPUs -> {refused}: refused with its message, control back to 16")
        page.screenshot(path=str(SHOTS / "8_consecutive_edits_memory.png"), full_page=True)

        # a pack longer than seq_length is refused: room for three steps up first (the pack follows seq_length,
        # so pin it at the sample's 384 on the Packing page, then raise seq_length here)
        page.get_by_role("link", name="Packing", exact=True).click()
        page.get_by_role("heading", name="Packing", exact=True).wait_for(timeout=120_000)
        page.wait_for_selector(READY, timeout=120_000)
        size = page.get_by_role("spinbutton", name="Pack size", exact=True)
        start = int(size.input_value())
        minus = (
            page.locator("[data-testid='stNumberInput']")
            .filter(has=size)
            .locator("[data-testid='stNumberInputStepDown']")
        )
        minus.click()
        page.wait_for_function(
            "(want) => [...document.querySelectorAll('code')].some(c => "
            "c.innerText.includes('\"pack_size\": ' + want))",
            arg=start - 256,
            timeout=120_000,
        )
        page.wait_for_selector(READY, timeout=120_000)
        log.append(f"Pack size - -> {start - 256}: control {size.input_value()}")
        start -= 256
        plus = (
            page.locator("[data-testid='stNumberInput']")
            .filter(has=size)
            .locator("[data-testid='stNumberInputStepUp']")
        )
        for k in (1,):
            plus.click()
            want = start + 256 * k
            page.wait_for_function(
                "(want) => [...document.querySelectorAll('code')].some(c => "
                "c.innerText.includes('\"pack_size\": ' + want))",
                arg=want,
                timeout=120_000,
            )
            page.wait_for_selector(READY, timeout=120_000)
            assert size.input_value() == str(want)
            log.append(f"Pack size + -> {want}: control {size.input_value()}, metadata pack_size {want}")
        page.screenshot(path=str(SHOTS / "9_consecutive_edits_packing.png"), full_page=True)
        browser.close()
    (SHOTS / "consecutive_edits.log").write_text("\n".join(log) + "\n")
    print("\n".join(log))
    assert len(log) == 15


def _peak_rss_mib(pid: int) -> float:
    """The largest resident memory of a process and its children still alive (VmHWM), in MiB."""
    total = 0
    for p in [pid, *_descendants(pid)]:
        try:
            for line in open(f"/proc/{p}/status"):
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def _descendants(pid: int) -> list[int]:
    out = []
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            if int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1]) == pid:
                out += [int(p), *_descendants(int(p))]
        except (OSError, ValueError, IndexError):
            continue
    return out


def test_three_sessions_one_hostile_in_chromium():
    """Issue 25: one visitor's crafted link (the 16.3M-sample Wikipedia sample on the Online packing page at CP 2 and
    a tiny batch, then the layout search) runs while two others edit their plans. The two see every edit applied,
    the hostile one gets its scale model or one message, and the server's memory stays bounded. Timings go to
    tests/screenshots/three_sessions.log (a shared machine's timings are reported, not asserted)."""
    from playwright.sync_api import sync_playwright

    from advisor.ui import links
    from advisor.ui.samples import default_plan

    reason = _ensure_chromium()
    if reason:
        pytest.skip(reason)
    wiki = "Wikipedia BERT (real, 16.3M)"
    hostile_plan = default_plan(wiki).changed({"parallel": {"cp": 2}, "training": {"global_batch_samples": 8}})
    query = urllib.parse.urlencode(links.plan_to_query(hostile_plan, wiki))
    port = _free_port()
    server = _server(port)
    url, log = f"http://127.0.0.1:{port}", []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
            calm = [_memory_page(browser, url) for _ in range(2)]
            hostile = browser.new_context().new_page()
            hostile.set_viewport_size({"width": 1400, "height": 1100})
            t0 = time.perf_counter()
            hostile.goto(f"{url}/Online_packing?{query}", wait_until="commit")
            hostile.get_by_text("Online packing (Megatron-Bridge 0.7, Megatron-LM)").first.wait_for(timeout=120_000)
            tp = int(calm[0].get_by_role("spinbutton", name="TP", exact=True).input_value())
            for i, n in enumerate((16, 32, 8, 64, 16, 8)):
                page = calm[i % 2]
                start = time.perf_counter()
                _edit(page, "GPUs", n)
                _settle(page, f"a multiple of DP {n // tp})")
                took = time.perf_counter() - start
                running = hostile.locator("[data-testid='stApp'][data-test-script-state='running']").count() > 0
                log.append(
                    f"session {i % 2 + 1}: GPUs -> {n} applied in {took:.2f} s (hostile session "
                    f"{'still running' if running else 'idle'} at {time.perf_counter() - t0:.1f} s)"
                )
                assert page.get_by_role("spinbutton", name="GPUs", exact=True).input_value() == str(n)
            hostile.wait_for_selector(READY, timeout=300_000)
            shown = hostile.locator("[data-testid='stAlert']").all_inner_texts()
            log.append(f"hostile session done after {time.perf_counter() - t0:.1f} s; its messages: {shown}")
            assert any(
                "scale model" in t
                or "heavy job" in t
                or "CPU seconds" in t
                or "more than this server gives one job" in t  # the comparison's memory budget, one message
                or "Recommended" in t
                for t in shown
            ), shown
            hostile.get_by_role("link", name="Recommendations").click()
            hostile.get_by_role("heading", name="Recommendations & export").wait_for(timeout=120_000)
            start = time.perf_counter()
            _edit(calm[0], "GPUs", 32)
            _settle(calm[0], f"a multiple of DP {32 // tp})")
            took = time.perf_counter() - start
            log.append(f"session 1 during the hostile search: GPUs -> 32 applied in {took:.2f} s")
            hostile.wait_for_selector(READY, timeout=300_000)
            browser.close()
        peak = _peak_rss_mib(server.pid)
        log.append(f"server peak resident memory: {peak:,.0f} MiB")
        assert peak < 3 * 1024, log
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=20)
        SHOTS.mkdir(exist_ok=True)
        (SHOTS / "three_sessions.log").write_text("\n".join(log) + "\n")


def test_three_links_with_the_largest_global_batch_leave_a_fourth_session_responsive_in_chromium():
    """Issue 38: a link whose global batch is the largest the schema allows (2^24 packs under offline packing) made
    the loss weighting allocate without bound (8.4 GiB from one link). Three visitors open such a link on the
    Recommendations page at once while a fourth edits its plan: each of the three gets one message (the scale
    model the loss weighting stands on), the fourth sees its edit applied, and the server stays under 1.5 GiB.
    Figures go to tests/screenshots/largest_batch.log."""
    from playwright.sync_api import sync_playwright

    from advisor.plan.schema import TrainingSpec
    from advisor.ui import links
    from advisor.ui.samples import DEFAULT_SAMPLE, default_plan

    reason = _ensure_chromium()
    if reason:
        pytest.skip(reason)
    largest = TrainingSpec.model_fields["global_batch_size"].metadata[-1].le
    hostile_plan = default_plan().changed({"training": {"global_batch_size": largest}})
    query = urllib.parse.urlencode(links.plan_to_query(hostile_plan, DEFAULT_SAMPLE))
    port = _free_port()
    server = _server(port)
    url = f"http://127.0.0.1:{port}"
    log = [f"global_batch_size {largest:,} packs (the schema's largest), three links at once"]
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
            calm = _memory_page(browser, url)
            t0 = time.perf_counter()
            hostile = []
            for _ in range(3):
                page = browser.new_context().new_page()
                page.set_viewport_size({"width": 1400, "height": 1100})
                page.goto(f"{url}/Recommendations?{query}", wait_until="commit")
                hostile.append(page)
            tp = int(calm.get_by_role("spinbutton", name="TP", exact=True).input_value())
            for n in (16, 32):
                start = time.perf_counter()
                _edit(calm, "GPUs", n)
                _settle(calm, f"a multiple of DP {n // tp})")
                log.append(
                    f"fourth session: GPUs -> {n} applied in {time.perf_counter() - start:.2f} s, "
                    f"{time.perf_counter() - t0:.1f} s after the three links"
                )
                assert calm.get_by_role("spinbutton", name="GPUs", exact=True).input_value() == str(n)
            for i, page in enumerate(hostile):
                page.get_by_role("heading", name="Recommendations & export").wait_for(timeout=300_000)
                page.wait_for_selector(READY, timeout=300_000)
                said = [
                    t
                    for t in page.locator(
                        "[data-testid='stAlert'], [data-testid='stCaptionContainer']"
                    ).all_inner_texts()
                    if "beyond what the advisor draws" in t
                ]
                log.append(
                    f"link {i + 1}: done {time.perf_counter() - t0:.1f} s after opening; "
                    f"{len(said)} scale-model message(s): {said[:1]}"
                )
                assert len(said) == 1, said
                assert page.locator("[data-testid='stException']").count() == 0
            hostile[0].screenshot(path=str(SHOTS / "largest_batch.png"), full_page=True)
            browser.close()
        peak = _peak_rss_mib(server.pid)
        log.append(f"server peak resident memory: {peak:,.0f} MiB")
        assert peak < 1.5 * 1024, log
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=20)
        SHOTS.mkdir(exist_ok=True)
        (SHOTS / "largest_batch.log").write_text("\n".join(log) + "\n")
        print("\n".join(log))


def _memory_page(browser, url: str):
    """A visitor of its own at 1400 px, on the Memory and FLOPs page, reached from the front page as a person does."""
    page = browser.new_context().new_page()
    page.set_viewport_size({"width": 1400, "height": 1100})
    page.goto(url)
    page.wait_for_selector(READY, timeout=120_000)
    page.get_by_role("link", name="Memory and FLOPs").click()
    page.get_by_role("heading", name="Memory & FLOPs", exact=True).wait_for(timeout=120_000)
    page.wait_for_selector(READY, timeout=120_000)
    return page


def _server(port: int) -> subprocess.Popen:
    """A dashboard of its own on a loopback port, up and answering (the caller stops it)."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            str(ROOT / "app.py"),
            "--server.port",
            str(port),
            "--server.address",
            "127.0.0.1",
            "--server.headless",
            "true",
            "--server.fileWatcherType",
            "none",
            "--browser.gatherUsageStats",
            "false",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.time() + 90
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2)
            return proc
        except OSError:
            if time.time() > deadline:
                os.killpg(proc.pid, 15)
                pytest.fail("streamlit did not start within 90 s")
            time.sleep(0.5)


def _packs_shown(page) -> str:
    """The Packing page's "packs" figure as displayed."""
    return (
        page.locator("[data-testid='stMetric']")
        .filter(has_text="packs")
        .first.locator("[data-testid='stMetricValue']")
        .inner_text()
    )


def _wait_packs_changed(page, before: str) -> None:
    """Until the Packing page's "packs" figure no longer shows ``before`` (the new figures on screen)."""
    page.wait_for_function(
        "(old) => { const m = [...document.querySelectorAll('[data-testid=\"stMetric\"]')].find("
        "e => e.innerText.startsWith('packs')); return m && !m.innerText.includes(old); }",
        arg=before,
        timeout=180_000,
    )


THINK_SECONDS = 3.0  # a visitor reads the figures before the next click; the server packs ahead meanwhile


def test_pack_size_changes_on_wikipedia_in_chromium():
    """Issue 22: on the 16.3M-sample Wikipedia sample, the pack size changed three times in a row with the control's
    + (a reader's pause between clicks), each change shown when the displayed pack count changes; then a pack size
    not seen nor packed ahead, during which the previous figures stay on screen with the progress. The times are
    logged to tests/screenshots/pack_size_changes.log (a shared machine's timings are reported, not asserted; the
    issue's target is 1 s a change)."""
    from playwright.sync_api import sync_playwright

    reason = _ensure_chromium()
    if reason:
        pytest.skip(reason)
    SHOTS.mkdir(exist_ok=True)
    port = _free_port()
    server, log = _server(port), []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
            page = browser.new_page(viewport={"width": 1500, "height": 1200})
            page.goto(f"http://127.0.0.1:{port}")
            page.wait_for_selector(READY, timeout=120_000)
            page.locator("[data-testid='stSelectbox']").first.click()
            page.get_by_role("option", name="Wikipedia BERT (real, 16.3M)").click()
            page.get_by_text("16,279,552", exact=True).first.wait_for(timeout=120_000)
            page.wait_for_selector(READY, timeout=120_000)
            # packs up to seq_length (a longer pack is refused): room for the changes below
            page.get_by_role("link", name="Memory and FLOPs").click()
            page.get_by_role("heading", name="Memory & FLOPs", exact=True).wait_for(timeout=120_000)
            page.wait_for_selector(READY, timeout=180_000)
            _edit(page, "seq_length", 4096)
            page.wait_for_selector(READY, timeout=180_000)
            t0 = time.perf_counter()
            page.get_by_role("link", name="Packing", exact=True).click()
            page.get_by_text("Megatron-Bridge metadata, as it will be written").wait_for(timeout=180_000)
            page.wait_for_selector(READY, timeout=180_000)
            log.append(f"Packing page first shown in {time.perf_counter() - t0:.2f} s (packs {_packs_shown(page)})")
            size = page.get_by_role("spinbutton", name="Pack size", exact=True)
            minus = (
                page.locator("[data-testid='stNumberInput']")
                .filter(has=size)
                .locator("[data-testid='stNumberInputStepDown']")
            )
            assert int(size.input_value()) == 4096  # the pack follows seq_length
            for k in range(3):
                before, start = _packs_shown(page), int(size.input_value())
                time.sleep(THINK_SECONDS)
                t0 = time.perf_counter()
                minus.click()
                _wait_packs_changed(page, before)
                shown = time.perf_counter() - t0
                page.wait_for_selector(READY, timeout=180_000)
                settled = time.perf_counter() - t0
                after = _packs_shown(page)
                assert after != before and int(size.input_value()) == start - 256
                assert f'"pack_size": {start - 256}' in page.locator("code").first.inner_text()
                log.append(
                    f"change {k + 1}: pack size {start} -> {start - 256}: packs {before} -> {after} shown in "
                    f"{shown:.2f} s, page settled in {settled:.2f} s"
                )
            page.screenshot(path=str(SHOTS / "10_pack_size_changes.png"), full_page=True)
            # a size nobody packed: the previous figures stay, with the progress, until the new ones replace them
            before, target = _packs_shown(page), 2048
            t0 = time.perf_counter()
            size.fill(str(target))
            size.press("Enter")
            # the progress and the previous figures together, seen in one frame: read one after the other, the
            # packing (about a second) could finish in between (it did in CI)
            page.wait_for_function(
                "(old) => { const m = document.querySelector('[data-testid=\"stMetric\"]'); "
                "return document.body.innerText.includes('while pack size 2,048 is packed') && m "
                "&& m.innerText.includes(old); }",
                arg=before,
                timeout=60_000,
                polling="raf",
            )
            page.screenshot(path=str(SHOTS / "10b_previous_figures_while_packing.png"), full_page=True)
            _wait_packs_changed(page, before)
            shown = time.perf_counter() - t0
            page.wait_for_function(
                "() => [...document.querySelectorAll('code')].some(c => c.innerText.includes('\"pack_size\": 2048'))",
                timeout=180_000,
            )
            page.wait_for_selector(READY, timeout=180_000)
            log.append(
                f"pack size -> {target} (nothing kept, nothing ahead): the previous figures stayed on screen "
                f"while it packed; packs {before} -> {_packs_shown(page)} shown in {shown:.2f} s, page settled in "
                f"{time.perf_counter() - t0:.2f} s"
            )
            browser.close()
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=20)
        (SHOTS / "pack_size_changes.log").write_text("\n".join(log) + "\n")
    print("\n".join(log))


def _radio(page, label: str, option: str, shows: str | None = None) -> None:
    """Choose ``option`` and wait for what a person would see: the option checked, and (``shows``) the text the
    page shows once the rerun it started is done. The run state alone can read "not running" before that rerun
    begins, and an edit made then lands in the page as it was (the global batch typed into packs mode)."""
    radio = page.locator("[data-testid='stRadio']").filter(has_text=label)
    radio.get_by_text(option, exact=True).click()
    page.wait_for_function(
        "([label, option]) => [...document.querySelectorAll(\"[data-testid='stRadio']\")]"
        ".filter(r => r.innerText.includes(label))"
        ".some(r => [...r.querySelectorAll('input[type=radio]:checked')]"
        ".some(i => i.closest('label').innerText.trim() === option))",
        arg=[label, option],
        timeout=120_000,
    )
    if shows is not None:
        page.get_by_text(shows).first.wait_for(timeout=120_000)
    page.wait_for_selector(READY, timeout=120_000)


def _memory_figures(page) -> dict:
    """The Memory & FLOPs page's headline metrics, label -> value, as a visitor reads them."""
    out = {}
    for metric in page.locator("[data-testid='stMetric']").all():
        label = metric.locator("[data-testid='stMetricLabel']").inner_text().strip()
        out[label] = metric.locator("[data-testid='stMetricValue']").inner_text().strip()
    return out


def test_one_plan_one_meaning_through_a_link_in_chromium(app_url, tmp_path):
    """Issue 34: upload lengths, set the format to chat, change seq_length, the global batch in both units and the
    GPUs, copy the link from the Memory page and open it in a fresh browser context: the same plan, a note that the
    uploaded data did not travel, and the same figures once the same file is uploaded there."""
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(exist_ok=True)
    upload = tmp_path / "mine.csv"
    upload.write_text("length\n" + "\n".join(str(200 + 97 * i % 7000) for i in range(5000)) + "\n")
    log = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(app_url)
        page.wait_for_selector(READY, timeout=120_000)
        page.locator("input[type='file']").first.set_input_files(str(upload))
        page.get_by_role("heading", name="mine.csv").wait_for(timeout=120_000)
        page.wait_for_selector(READY, timeout=120_000)
        _radio(page, "data format", "chat")
        log.append("uploaded mine.csv (5,000 lengths), data format -> chat")
        page.get_by_role("link", name="Memory and FLOPs").click()
        page.get_by_role("heading", name="Memory & FLOPs", exact=True).wait_for(timeout=120_000)
        page.wait_for_selector(READY, timeout=120_000)
        _edit(page, "seq_length", 8192)
        _settle(page, "packs ≈")
        page.wait_for_function(
            "() => [...document.querySelectorAll('input')].some(i => i.value === '8192')", timeout=120_000
        )
        log.append("seq_length -> 8192")
        _edit(page, "GPUs", 16)
        _settle(page, "a multiple of DP 8)")
        log.append("GPUs -> 16")
        _edit(page, "global batch", 64)
        _settle(page, "Batch: 64 packs ≈")
        log.append("global batch (packs) -> 64: 'Batch: 64 packs ≈ ...'")
        _radio(page, "global batch counts", "samples", shows="samples requested)")
        _edit(page, "global batch", 300)
        _settle(page, "(300 samples requested)")
        log.append("global batch counts samples -> 300: '(300 samples requested)'")
        page.wait_for_selector(READY, timeout=120_000)
        link, figures = page.url, _memory_figures(page)
        assert "plan=" in link and "data=upload" in link
        page.screenshot(path=str(SHOTS / "34_memory_before_link.png"), full_page=True)

        fresh = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        fresh.goto(link)
        fresh.wait_for_selector(READY, timeout=120_000)
        fresh.get_by_text("made on uploaded data, which a link cannot carry").first.wait_for(timeout=120_000)
        for label, value in (("GPUs", "16"), ("seq_length", "8192"), ("global batch", "300")):
            assert fresh.get_by_role("spinbutton", name=label, exact=True).input_value() == value, label
        fresh.get_by_text("(300 samples requested)").first.wait_for(timeout=120_000)
        log.append("opened the link in a fresh context: GPUs 16, seq_length 8192, 300 samples; note shown")
        fresh.screenshot(path=str(SHOTS / "34_link_opened.png"), full_page=True)
        fresh.get_by_role("link", name="Data and plan").click()
        fresh.get_by_role("heading", name="Data", exact=True).wait_for(timeout=120_000)
        fresh.wait_for_selector(READY, timeout=120_000)
        assert (
            fresh.locator("[data-testid='stRadio']")
            .filter(has_text="data format")
            .locator("input[type='radio']:checked")
            .evaluate("e => e.closest('label').innerText")
            .strip()
            == "chat"
        )
        fresh.locator("input[type='file']").first.set_input_files(str(upload))
        fresh.get_by_role("heading", name="mine.csv").wait_for(timeout=120_000)
        fresh.wait_for_selector(READY, timeout=120_000)
        fresh.get_by_role("link", name="Memory and FLOPs").click()
        fresh.get_by_role("heading", name="Memory & FLOPs", exact=True).wait_for(timeout=120_000)
        fresh.wait_for_selector(READY, timeout=120_000)
        fresh.get_by_text("(300 samples requested)").first.wait_for(timeout=120_000)
        again = _memory_figures(fresh)
        log.append(f"the same file uploaded there: figures {again}")
        assert again == figures, (figures, again)
        browser.close()
    (SHOTS / "34_link_round_trip.log").write_text("\n".join(log) + "\n")
    print("\n".join(log))


def test_preflight_names_the_traps_of_old_releases_and_a_fix_removes_them_in_chromium(app_url):
    """Issue 37: a link to a 70B plan (PP 4, CP 2, packed) at Megatron-Bridge 0.3.1 and Transformer Engine 2.16 opens
    on the Recommendations page with both traps under "Would train wrong", linked to their threads; choosing the
    newest Transformer Engine in its selector takes one away, "Apply fix" on the other takes the last; the Memory
    page shows what the logs will print."""
    from playwright.sync_api import sync_playwright

    from advisor.plan import plan_from_dict
    from advisor.ui.links import plan_to_query

    SHOTS.mkdir(exist_ok=True)
    plan = plan_from_dict(
        {
            "model": "llama3.1-70b",
            "parallel": {"gpus": 64, "tp": 4, "pp": 4, "cp": 2, "sp": True},
            "training": {"seq_length": 16384, "global_batch_samples": 512, "recompute": "full"},
            "versions": {"megatron_bridge": "0.3.1", "transformer_engine": "2.16"},
        }
    )
    query = urllib.parse.urlencode(plan_to_query(plan, "SFT-like (200k)"))
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        page.goto(f"{app_url}/Recommendations?{query}")
        page.get_by_role("heading", name="Recommendations & export", exact=True).wait_for(timeout=120_000)
        page.get_by_text("Would train wrong (2)").wait_for(timeout=180_000)
        page.wait_for_selector(READY, timeout=180_000)
        assert page.locator("a[href='https://github.com/NVIDIA-NeMo/Megatron-Bridge/issues/2952']").count() == 1
        assert page.locator("a[href='https://github.com/NVIDIA/TransformerEngine/issues/3331']").count() == 1
        page.screenshot(path=str(SHOTS / "preflight_old_releases.png"), full_page=True)
        page.get_by_role("combobox", name="Transformer Engine").click()  # the plan-bound selector
        page.get_by_role("option", name="2.20.2").click()
        page.get_by_text("Would train wrong (1)").wait_for(timeout=180_000)
        page.wait_for_selector(READY, timeout=180_000)
        page.get_by_role("button", name="Apply fix").first.click()
        page.get_by_text("No known trap bites this plan at Megatron-Bridge 0.6.2").wait_for(timeout=180_000)
        page.wait_for_selector(READY, timeout=180_000)
        page.screenshot(path=str(SHOTS / "preflight_fixed.png"), full_page=True)
        page.get_by_role("link", name="Memory and FLOPs").click()
        page.get_by_role("heading", name="What your logs will print").wait_for(timeout=180_000)
        page.wait_for_selector(READY, timeout=180_000)
        assert page.get_by_text("MODEL_TFLOP/s/GPU (rank 0)").count() >= 1
        page.screenshot(path=str(SHOTS / "memory_logs.png"), full_page=True)
        browser.close()
