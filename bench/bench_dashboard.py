"""Benchmark: the dashboard at the scale of real data sets, the cold start after a fresh install, and the command
line's start-up. Prints what issue 10's targets name; nothing is asserted (these machines are shared and noisy).

    python bench/bench_dashboard.py                 # SQuAD (88k), 1M mock samples, Wikipedia (16.3M)
    python bench/bench_dashboard.py --only squad    # one data set

Per data set and page (Streamlit's AppTest, no browser): the first load (fresh caches for that data set), then three
changes of one control, and the largest chart's JSON. Then, in fresh processes with an empty numba cache: compiling
every kernel (`advisor warmup`) and the first home page; last, `advisor pack` of a 10-sample file, warm, best of 5.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from streamlit.testing.v1 import AppTest  # noqa: E402

from advisor.data.ingest import load_lengths  # noqa: E402
from advisor.data.megatron_mock import default_mock_config  # noqa: E402
from advisor.ui import state as ui  # noqa: E402

PAGES = {  # page, how to change one control there
    "app.py": lambda at: at.toggle(key="log_x").set_value(not at.toggle(key="log_x").value),
    "pages/1_Packing.py": lambda at: at.number_input[0].set_value(
        at.number_input[0].value // 2 if at.number_input[0].value >= 512 else at.number_input[0].value * 2),
    "pages/2_Memory_and_FLOPs.py": lambda at: at.selectbox[1].set_value(
        "H200-141GB" if at.selectbox[1].value != "H200-141GB" else "B200"),
    "pages/3_Recommendations.py": lambda at: at.selectbox[1].set_value(
        "overrides" if at.selectbox[1].value != "overrides" else "python"),
}
MiB = 1 << 20


def data_sets(only: str | None):
    sets = {
        "squad": lambda: ("SQuAD 1.1 (real, 88k)", ui.load_sample("SQuAD 1.1 (real, 88k)"),
                          ui.default_plan("SQuAD 1.1 (real, 88k)")),
        "1m": lambda: ("mock 1M", load_lengths(json.dumps(default_mock_config(8192))),
                       ui.default_plan("SFT-like (200k)")),
        "wikipedia": lambda: ("Wikipedia BERT (real, 16.3M)", ui.load_sample("Wikipedia BERT (real, 16.3M)"),
                              ui.default_plan("Wikipedia BERT (real, 16.3M)")),
    }
    return {k: v for k, v in sets.items() if only in (None, k)}


def largest_chart(at: AppTest) -> int:
    return max((len(el.proto.spec) for el in at.get("plotly_chart")), default=0)


def pages(name: str, hist, plan) -> None:
    print(f"\n{name}: {hist.num_samples:,} samples")
    print(f"  {'page':<30} {'first load':>10}  {'control changes':<22} {'largest chart':>14}")
    for page, change in PAGES.items():
        at = AppTest.from_file(str(ROOT / page), default_timeout=900)
        at.session_state["hist"], at.session_state["data_name"], at.session_state["plan"] = hist, name, plan
        t0 = time.perf_counter()
        at.run()
        first = time.perf_counter() - t0
        changes = []
        for _ in range(3):
            t0 = time.perf_counter()
            change(at).run()
            changes.append(time.perf_counter() - t0)
        if at.exception:
            print(f"  {page}: {[e.value for e in at.exception]}")
        chart = largest_chart(at)
        print(f"  {page:<30} {first:9.2f}s  {', '.join(f'{c:.2f}' for c in changes):<22} {chart / 1024:11.1f} kB")


def scale_model_error(name: str, hist, plan) -> None:
    """How far the search's scale model is from the full data on the plan itself."""
    from advisor.analysis import analyze
    from advisor.data.lengths import SCALE_MODEL_SAMPLES

    if hist.num_samples <= SCALE_MODEL_SAMPLES:
        return
    exact = analyze(plan, hist).estimate
    model = analyze(plan, hist.scale_model(SCALE_MODEL_SAMPLES)).estimate
    rel = model.time.tokens_per_second_per_gpu / exact.time.tokens_per_second_per_gpu - 1
    print(f"  scale model ({SCALE_MODEL_SAMPLES:,} samples) against all {hist.num_samples:,}: tokens/s/GPU {rel:+.3%},"
          f" memory {model.memory.total / exact.memory.total - 1:+.3%}, straggler x{model.time.straggler_factor:.4f} "
          f"vs x{exact.time.straggler_factor:.4f}")


def cold_start() -> None:
    env = {**os.environ, "NUMBA_CACHE_DIR": tempfile.mkdtemp(prefix="numba-cold-")}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "advisor", "warmup"], env=env, cwd=ROOT, check=True, capture_output=True)
    warm = time.perf_counter() - t0
    env["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="numba-cold-")  # and a home page on a fresh cache
    code = ("import time; from streamlit.testing.v1 import AppTest; t=time.perf_counter(); "
            "AppTest.from_file('app.py', default_timeout=300).run(); print(time.perf_counter()-t)")
    home = float(subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, check=True, capture_output=True,
                                text=True).stdout.split()[-1])
    print(f"\nfresh install (empty numba cache): `advisor warmup` compiles every kernel in {warm:.1f} s; "
          f"the home page shows in {home:.2f} s (the kernels compile in a background thread meanwhile)")


def cli_start() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ten.csv"
        path.write_text("length\n" + "\n".join(str(3 + i) for i in range(10)) + "\n")
        runs = []
        for _ in range(5):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "advisor", "pack", str(path), "--pack-size", "16", "--quiet"],
                           cwd=ROOT, check=True, capture_output=True)
            runs.append(time.perf_counter() - t0)
    print(f"warm `advisor pack` of a 10-sample file: best {min(runs):.2f} s, median {sorted(runs)[2]:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", choices=("squad", "1m", "wikipedia"))
    parser.add_argument("--skip-cold", action="store_true")
    args = parser.parse_args()
    for make in data_sets(args.only).values():
        data = make()
        pages(*data)
        scale_model_error(*data)
    if not args.skip_cold:
        cold_start()
    cli_start()


if __name__ == "__main__":
    main()
