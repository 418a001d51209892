"""Detection under two-process DDP on the CPU (gloo), with bf16-mixed: each process trains half of every
epoch, validation gathers every image's detections to rank 0 (the mAP covers the whole val split), and
the run folder is written once. Run as a subprocess script: Lightning starts the second process by
running the script again."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from vision_attn.data import DigitBoxesConfig, write_digit_boxes

SCRIPT = textwrap.dedent("""
    import sys
    from vision_attn.tasks.detect.fit import train_detector

    if __name__ == "__main__":
        root, runs, model_yaml = sys.argv[1], sys.argv[2], sys.argv[3]
        train_detector([
            "--name", "ddp", "--runs_dir", runs, "--data.data", root, "--data.img_size", "64",
            "--data.batch_size", "4", "--data.num_workers", "0", "--model.yaml", model_yaml,
            "--model.scale", "n", "--model.warmup_epochs", "0.5", "--model.min_warmup_steps", "1",
            "--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp",
            "--trainer.precision", "bf16-mixed", "--trainer.max_epochs", "1",
            "--trainer.enable_progress_bar", "false"])
""")


def test_detection_ddp_two_processes_bf16(tmp_path):
    root = write_digit_boxes(tmp_path / "data", DigitBoxesConfig(n_train=16, n_val=5, seed=2))
    model_yaml = Path(__file__).resolve().parents[2] / "configs" / "models" / "yolov8.yaml"
    script = tmp_path / "ddp_det.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PL_DISABLE_FORK": "1"}
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    proc = subprocess.run([sys.executable, str(script), str(root), str(tmp_path / "runs"), str(model_yaml)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = json.loads((tmp_path / "runs" / "ddp" / "metrics.json").read_text())
    assert m["world_size"] == 2 and m["devices"] == 2 and m["precision"] == "bf16-mixed"
    assert m["epochs"] == 1 and m["global_step"] == 2  # 16 images, batch 4, half per process
    assert m["val_images"] == 5 and 0 <= m["val_map"] <= m["val_map50"] <= 1
    assert (tmp_path / "runs" / "ddp" / "best.ckpt").is_file()
