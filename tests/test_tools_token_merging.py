"""tools/suites/token_merging.py: given a run, the suite times the run's own network at the run's image
size (not ``--model``), and reports the tokens left after the last block at each rate; with ``--epochs 0``
the accuracy rows are off the shelf only. No timing or accuracy is asserted (random weights)."""
from types import SimpleNamespace

from tools.suites.harness import Record
from tools.suites.token_merging import SUITE
from tests.checkpoints import classifier_checkpoint


def test_speed_rows_time_the_runs_network_at_its_size(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    classifier_checkpoint(run / "best.ckpt")  # 16 px, 4 px patches: a class token and 16 patch tokens, 2 blocks
    p = SimpleNamespace(**{q.name: q.default for q in SUITE.params})
    p.run, p.rates, p.rounds, p.iters, p.batch, p.threads, p.clock, p.epochs = str(run), [3], 1, 1, 2, 1, "cpu", 0
    record = Record("token_merging", {}, "")
    SUITE.run(p, record)  # p.model (vit_small at 224) would take seconds and 197 tokens
    speed = {row["rate"]: row for row in record.results["speed"]}
    assert {k: (row["img_size"], row["tokens_out"]) for k, row in speed.items()} == {
        "r=0": ([16, 16], 17), "r=3": ([16, 16], 11)}  # 3 patch tokens merged in each of the 2 blocks
    assert speed["r=0"]["speedup"] == 1.0 and speed["r=3"]["speedup"] > 0 and speed["r=3"]["clock"] == "cpu"
    accuracy = record.results["accuracy"]
    assert [(row["rate"], row["top1_fine_tuned"]) for row in accuracy] == [(3, None)]  # --epochs 0: off the shelf
    assert "16x16 px, 1 threads, cpu time" in capsys.readouterr().out
