"""Two-process DDP on the CPU (gloo) through the same module and driver, as a subprocess script
(Lightning starts the second process by running the script again)."""
import json
import os
import subprocess
import sys
import textwrap

from tests.folders import make_folder

SCRIPT = textwrap.dedent("""
    import sys
    from vision_attn.tasks import train_classifier

    if __name__ == "__main__":
        root, runs = sys.argv[1], sys.argv[2]
        train_classifier([
            "--name", "ddp", "--runs_dir", runs, "--data.root", root, "--data.img_size", "16",
            "--data.batch_size", "4", "--data.num_workers", "0", "--data.hflip", "0",
            "--model.model_kwargs", "{patch_size: 8, depth: 1, embed_dim: 32, num_heads: 2}",
            "--model.ema_decay", "0.9", "--model.mixup", "0.5",
            "--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp",
            "--trainer.max_epochs", "2", "--trainer.enable_progress_bar", "false"])
""")


def test_ddp_two_processes_on_cpu(tmp_path):
    root = make_folder(tmp_path / "data", n_train=8, n_val=3)  # 24 train images: 3 batches of 4 per process
    script = tmp_path / "ddp_train.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PL_DISABLE_FORK": "1"}
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    proc = subprocess.run([sys.executable, str(script), str(root), str(tmp_path / "runs")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = json.loads((tmp_path / "runs" / "ddp" / "metrics.json").read_text())
    assert m["world_size"] == 2 and m["devices"] == 2
    assert m["epochs"] == 2 and m["global_step"] == 2 * 3  # each process takes half of every epoch
    assert m["val_images"] == 9 and 0 <= m["val_top1"] <= 1
    assert (tmp_path / "runs" / "ddp" / "best.ckpt").is_file()
