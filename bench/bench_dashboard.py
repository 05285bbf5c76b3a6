"""Benchmark: the dashboard at the scale of real data sets, the cold start after a fresh install, and the command
line's start-up. Prints what issues 10 and 22 name; nothing is asserted (these machines are shared and noisy).

    python bench/bench_dashboard.py                        # SQuAD (88k), 1M mock samples, Wikipedia (16.3M)
    python bench/bench_dashboard.py --only wikipedia 1m    # some data sets
    python bench/bench_dashboard.py --pages packing online --skip-cold

Per data set, in a fresh process (its peak resident memory is the session's): each page as a visitor opens it
(app.py's frame first, so the server's settings apply; every cache emptied before the page, so the first load is
cold), then each of the page's controls changed three times, each change timed, and the largest chart's JSON.
On the Packing page the pack size is changed three ways: to sizes never packed, back to sizes seen, and to a
neighbour of the current size after the page has been left idle (what the background worker computes ahead); last,
to sizes never packed under first fit decreasing (the algorithm and the size set in one rerun).
Then, in fresh processes with an empty numba cache: compiling every kernel (`advisor warmup`) and the first home
page; last, `advisor pack` of a 10-sample file, warm, best of 5.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MiB = 1 << 20
DATA_SETS = ("squad", "1m", "wikipedia")


def data_set(key: str):
    import json as _json

    from advisor.data.ingest import load_lengths
    from advisor.data.megatron_mock import default_mock_config
    from advisor.ui import state as ui

    if key == "squad":
        name = "SQuAD 1.1 (real, 88k)"
        return name, ui.load_sample(name), ui.default_plan(name)
    if key == "1m":
        return "mock 1M", load_lengths(_json.dumps(default_mock_config(8192))), ui.default_plan("SFT-like (200k)")
    name = "Wikipedia BERT (real, 16.3M)"
    return name, ui.load_sample(name), ui.default_plan(name)


# ------------------------------------------------------------------------------------------------ controls
def _find(at, kind: str, label: str):
    for el in at.get(kind):
        if getattr(el, "label", None) == label:
            return el
    return None


def _pack_size(at):
    return at.number_input(key="plan.packing.pack_size")


def _idle(timeout: float = 120.0) -> float:
    """Wait until the background worker (advisor/ui/ahead.py, if this version has one) has nothing left to do;
    the seconds waited."""
    t0 = time.perf_counter()
    try:
        from advisor.ui import ahead
    except ImportError:
        return 0.0
    ahead.WORKER.wait_idle(timeout)
    return time.perf_counter() - t0


def packing_controls(start: int):
    """(name, [change, ...]) on the Packing page, the plan's pack size being ``start``."""
    # never packed before, and at most the plan's seq_length (a longer pack is refused: a pack is one model row)
    new = [start - start // 8, start - start // 4, start - start // 4 - start // 8]
    seen = [start, new[0], new[1]]

    def to(size):
        return lambda at: _pack_size(at).set_value(size)

    def neighbour(at):
        return _pack_size(at).increment()

    def decreasing(size):  # first fit decreasing at a size never packed, in one rerun
        def change(at):
            at.selectbox(key="plan.packing.algorithm").set_value("first_fit_decreasing")
            return _pack_size(at).set_value(size)

        return change

    return [
        ("pack size, new", [to(s) for s in new]),
        ("pack size, seen before", [to(s) for s in seen]),
        ("pack size +step after idle", [neighbour] * 3),
        (
            "algorithm",
            [
                lambda at, a=a: at.selectbox(key="plan.packing.algorithm").set_value(a)
                for a in ("first_fit_decreasing", "best_fit_decreasing", "first_fit_shuffle")
            ],
        ),
        (
            "pad_seq_to_mult",
            [lambda at, m=m: at.number_input(key="plan.packing.pad_seq_to_mult").set_value(m) for m in (8, 64, 1)],
        ),
        (
            "curve",
            [
                lambda at, c=c: _find(at, "radio", "Curve").set_value(c)
                for c in ("padding_fraction", "packing_factor", "packing_efficiency")
            ],
        ),
        ("pack size, new (decreasing)", [decreasing(start - k * start // 16) for k in (1, 3, 5)]),
    ]


def online_controls(at):
    def shown(at, i):
        box = _find(at, "selectbox", "Schedule shown")
        return box.set_value(box.options[i % len(box.options)])

    def step(at, frac):
        s = _find(at, "slider", "Step")
        top = s.max if getattr(s, "max", None) is not None else s.proto.max
        return s.set_value(int(top * frac))

    return [
        (
            "Megatron-LM branch",
            [lambda at, b=b: _find(at, "selectbox", "Megatron-LM").set_value(b) for b in ("main", "dev", "main")],
        ),
        (
            "max_seqlen_per_dp_cp_rank",
            [
                lambda at, v=v: _find(at, "number_input", "max_seqlen_per_dp_cp_rank (0: default)").set_value(v)
                for v in (8192, 16384, 0)
            ],
        ),
        ("schedule shown", [lambda at, i=i: shown(at, i) for i in (1, 0, 1)]),
        ("step", [lambda at, f=f: step(at, f) for f in (0.5, 1.0, 0.25)]),
    ]


def page_controls(page: str, at):
    if page == "pages/1_Packing.py":
        return packing_controls(int(_pack_size(at).value))
    if page == "pages/6_Online_packing.py":
        return online_controls(at)
    if page == "app.py":
        return [("log x", [lambda at: at.toggle(key="log_x").set_value(not at.toggle(key="log_x").value)] * 3)]
    if page == "pages/2_Memory_and_FLOPs.py":
        return [
            (
                "GPU",
                [
                    lambda at, g=g: at.selectbox(key="plan.hardware.gpu").set_value(g)
                    for g in ("H200-141GB", "B200", "H100-80GB")
                ],
            )
        ]
    if page == "pages/3_Recommendations.py":
        return [
            (
                "export format",
                [
                    lambda at, f=f: _find(at, "selectbox", "Format").set_value(f)
                    for f in ("overrides", "python", "overrides")
                ],
            )
        ]
    return []


PAGES = {
    "home": "app.py",
    "packing": "pages/1_Packing.py",
    "online": "pages/6_Online_packing.py",
    "memory": "pages/2_Memory_and_FLOPs.py",
    "recommendations": "pages/3_Recommendations.py",
}


def largest_chart(at) -> int:
    return max((len(el.proto.spec) for el in at.get("plotly_chart")), default=0)


def _shown(at) -> str:
    """What the page shows as its headline figures (to check a change took effect)."""
    return " ".join(f"{m.label}={m.value}" for m in at.metric)[:200]


def hwm() -> int:
    return int(re.search(r"VmHWM:\s+(\d+)", Path("/proc/self/status").read_text()).group(1)) * 1024


def one_data_set(key: str, pages: list[str]) -> dict:
    """Every page of ``pages`` on one data set, in this process; the rows and this process's peak memory."""
    from streamlit.testing.v1 import AppTest

    from advisor import caches

    name, hist, plan = data_set(key)
    rows = []
    for page_key in pages:
        page = PAGES[page_key]
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=900)
        at.session_state["hist"], at.session_state["data_name"], at.session_state["plan"] = hist, name, plan
        at.session_state["sample_choice"] = name
        if page != "app.py":
            at.run()
        _idle()
        caches.clear()
        t0 = time.perf_counter()
        if page == "app.py":
            at.run()
        else:
            at.switch_page(page)
            at.run()
        first = time.perf_counter() - t0
        problems = [str(e.value)[:200] for e in at.exception]
        row = {
            "data": name,
            "samples": hist.num_samples,
            "page": page,
            "first_load": first,
            "controls": [],
            "largest_chart_bytes": largest_chart(at),
            "problems": problems,
        }
        for control, changes in page_controls(page, at):
            times = []
            for change in changes:
                before = _shown(at)
                if control.endswith("after idle"):
                    _idle()
                t0 = time.perf_counter()
                change(at).run()
                times.append(time.perf_counter() - t0)
                if at.exception:
                    problems.append(f"{control}: {str(at.exception[0].value)[:200]}")
                row.setdefault("shown", []).append((control, before != _shown(at)))
            row["controls"].append({"control": control, "seconds": times})
            row["largest_chart_bytes"] = max(row["largest_chart_bytes"], largest_chart(at))
        rows.append(row)
        print_row(row, flush=True)
    _idle()
    try:
        from advisor.ui.ahead import WORKER

        print(
            f"  packed ahead in the background: {WORKER.done} kept, {WORKER.dropped} dropped (no room), "
            f"{WORKER.preempted} stopped for a visitor's work"
        )
    except ImportError:
        pass
    return {"data": name, "samples": hist.num_samples, "rows": rows, "peak_rss_bytes": hwm()}


def print_row(row: dict, flush: bool = False) -> None:
    print(
        f"  {row['page']:<28} first load {row['first_load']:6.2f} s   largest chart "
        f"{row['largest_chart_bytes'] / 1024:8.1f} kB",
        flush=flush,
    )
    for c in row["controls"]:
        print(f"      {c['control']:<30} {', '.join(f'{s:.2f}' for s in c['seconds'])} s", flush=flush)
    for p in row["problems"]:
        print(f"      PROBLEM: {p}", flush=flush)


def scale_model_error(key: str) -> None:
    """How far the search's scale model is from the full data on the plan itself."""
    from advisor.analysis import analyze
    from advisor.data.lengths import SCALE_MODEL_SAMPLES

    name, hist, plan = data_set(key)
    if hist.num_samples <= SCALE_MODEL_SAMPLES:
        return
    exact = analyze(plan, hist).estimate
    model = analyze(plan, hist.scale_model(SCALE_MODEL_SAMPLES)).estimate
    rel = model.time.tokens_per_second_per_gpu / exact.time.tokens_per_second_per_gpu - 1
    print(
        f"  scale model ({SCALE_MODEL_SAMPLES:,} samples) against all {hist.num_samples:,}: tokens/s/GPU {rel:+.3%},"
        f" memory {model.memory.total / exact.memory.total - 1:+.3%}, straggler x{model.time.straggler_factor:.4f} "
        f"vs x{exact.time.straggler_factor:.4f}"
    )


def cold_start() -> None:
    env = {**os.environ, "NUMBA_CACHE_DIR": tempfile.mkdtemp(prefix="numba-cold-")}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "advisor", "warmup"], env=env, cwd=ROOT, check=True, capture_output=True)
    warm = time.perf_counter() - t0
    env["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="numba-cold-")  # and a home page on a fresh cache
    code = (
        "import time; from streamlit.testing.v1 import AppTest; t=time.perf_counter(); "
        "AppTest.from_file('app.py', default_timeout=300).run(); print(time.perf_counter()-t)"
    )
    home = float(
        subprocess.run(
            [sys.executable, "-c", code], env=env, cwd=ROOT, check=True, capture_output=True, text=True
        ).stdout.split()[-1]
    )
    print(
        f"\nfresh install (empty numba cache): `advisor warmup` compiles every kernel in {warm:.1f} s; "
        f"the home page shows in {home:.2f} s (the kernels compile in a background thread meanwhile)"
    )


def cli_start() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ten.csv"
        path.write_text("length\n" + "\n".join(str(3 + i) for i in range(10)) + "\n")
        runs = []
        for _ in range(5):
            t0 = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "advisor", "pack", str(path), "--pack-size", "16", "--quiet"],
                cwd=ROOT,
                check=True,
                capture_output=True,
            )
            runs.append(time.perf_counter() - t0)
    print(f"warm `advisor pack` of a 10-sample file: best {min(runs):.2f} s, median {sorted(runs)[2]:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="+", choices=DATA_SETS, default=list(DATA_SETS))
    parser.add_argument("--pages", nargs="+", choices=list(PAGES), default=list(PAGES))
    parser.add_argument("--skip-cold", action="store_true")
    parser.add_argument("--json", type=Path, help="also write every row here")
    parser.add_argument("--child", choices=DATA_SETS, help=argparse.SUPPRESS)  # one data set, in this process
    args = parser.parse_args()
    if args.child:
        result = one_data_set(args.child, args.pages)
        print("RESULT " + json.dumps(result))
        return
    results = []
    for key in args.only:
        print(f"\n{key}:", flush=True)
        out = subprocess.run(
            [sys.executable, __file__, "--child", key, "--pages", *args.pages],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        lines = out.stdout.splitlines()
        for line in lines:
            if not line.startswith("RESULT "):
                print(line, flush=True)
        got = [json.loads(line[7:]) for line in lines if line.startswith("RESULT ")]
        if not got:
            print(f"  the child for {key} failed (exit {out.returncode})")
            continue
        results.append(got[0])
        print(
            f"  {got[0]['data']} ({got[0]['samples']:,} samples): peak resident memory of the session "
            f"{got[0]['peak_rss_bytes'] / MiB:,.0f} MiB",
            flush=True,
        )
        scale_model_error(key)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    if not args.skip_cold:
        cold_start()
        cli_start()


if __name__ == "__main__":
    main()
