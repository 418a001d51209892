"""`tools/bench.py profile-inference`: the op-by-op profile of ours (eager and frozen) against OpenVINO's nodes."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("openvino")


@pytest.mark.parametrize("frozen", [False, True])
def test_profile_inference_reports_both_sides(tmp_path, frozen):
    out = tmp_path / "profile.json"
    cmd = [sys.executable, str(ROOT / "tools" / "bench.py"), "profile-inference", "--model", "vit_tiny_patch16_224",
           "--img-size", "32", "--threads", "1", "--iters", "1", "--rounds", "1", "--json", str(out)] + (
               ["--frozen"] if frozen else [])
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "| concept | ours ms/call | OpenVINO ms/call |" in proc.stdout
    d = json.loads(out.read_text())["results"]
    assert d["frozen"] is frozen and d["latency_ms"]["ours"] > 0 and d["latency_ms"]["openvino"] > 0
    assert any("linear" in op or "addmm" in op for op in d["ours"])  # the matrix products on our side
    assert any(node.startswith("FullyConnected") or node.startswith("MatMul") for node in d["openvino"])
