"""Benchmark: dashboard pages on 1M-sample data (AppTest, no browser): first load, then a changed control.

    python bench/bench_dashboard.py
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from streamlit.testing.v1 import AppTest  # noqa: E402

from advisor.data.ingest import load_lengths  # noqa: E402
from advisor.data.megatron_mock import default_mock_config  # noqa: E402
from advisor.ui import state as dashboard  # noqa: E402

# page, how to change one control there
CHANGES = {
    "app.py": lambda at: at.toggle(key="log_x").set_value(True),
    "pages/1_Packing.py": lambda at: at.number_input[0].set_value(at.number_input[0].value * 2),
    "pages/2_Memory_and_FLOPs.py": lambda at: at.selectbox[1].set_value("H200-141GB"),
    "pages/3_Recommendations.py": lambda at: at.selectbox[1].set_value("overrides"),
}


def main() -> None:
    hist = load_lengths(json.dumps(default_mock_config(8192)))  # 1,000,000 samples
    plan = dashboard.default_plan("SFT-like (200k)")
    print(f"data: {hist.num_samples:,} samples (Megatron-LM's default mock lognormal at seq 8192)")
    for page, change in CHANGES.items():
        at = AppTest.from_file(str(ROOT / page), default_timeout=600)
        at.session_state["hist"], at.session_state["data_name"], at.session_state["plan"] = hist, "mock", plan
        t0 = time.perf_counter()
        at.run()
        first = time.perf_counter() - t0
        reruns = []
        for _ in range(3):
            t0 = time.perf_counter()
            change(at).run()
            reruns.append(time.perf_counter() - t0)
            plan = at.session_state["plan"]
        assert not at.exception, [e.value for e in at.exception]
        print(f"{page:<32} first load {first:6.2f} s   after a changed control: "
              f"{', '.join(f'{r:.2f}' for r in reruns)} s")


if __name__ == "__main__":
    main()
