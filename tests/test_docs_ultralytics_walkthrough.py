"""docs/detection.md's walk-through from an ultralytics best.pt, run command by command as written on a
16-image generated set: ultralytics' own trainer (test-only peer, in a subprocess), then vision_attn's
eval det / yaml insert --checkpoint / eval det (the same mAP) / train det / compare."""
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.peers import quiet_ultralytics_environment
from vision_attn.cli import main
from vision_attn.data import DigitBoxesConfig, write_digit_boxes

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## Starting from an ultralytics checkpoint (best.pt)"


def _commands() -> list[str]:
    text = (ROOT / "docs" / "detection.md").read_text()
    section = text[text.index(SECTION):]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def test_walkthrough_from_an_ultralytics_best_pt(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for name in ("configs", "tools"):
        (tmp_path / name).symlink_to(ROOT / name)
    write_digit_boxes(tmp_path / "digits", DigitBoxesConfig(n_train=16, n_val=8, seed=1))
    quiet_ultralytics_environment()
    commands = _commands()
    assert [c.split()[:3] for c in commands][:2] == [["python", "tools/peer_ultralytics_det.py", "--data"],
                                                    ["vision-attn", "eval", "det"]]
    evals = []
    for line in commands:
        args = shlex.split(line)
        if args[0] == "python":
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            done = subprocess.run([sys.executable, *args[1:]], env=env, capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, done.stderr[-2000:]
            continue
        assert args[0] == "vision-attn"
        capsys.readouterr()
        assert main(args[1:]) == 0, line
        out = capsys.readouterr().out
        if args[1:3] == ["eval", "det"]:
            evals.append(json.loads(out))
        if args[1] == "compare":
            assert "finetuned" in out and "scratch" in out
    assert (tmp_path / "ul" / "peer" / "weights" / "best.pt").is_file()
    source, inserted = evals
    assert (inserted["map"], inserted["map50"]) == (source["map"], source["map50"])
    assert "[-1, 1, CBAM, [{zero_init: true}]]" in (tmp_path / "cbam.yaml").read_text()
    for run in ("finetuned", "scratch"):
        assert json.loads((tmp_path / "runs" / run / "metrics.json").read_text())["epochs"] == 1
