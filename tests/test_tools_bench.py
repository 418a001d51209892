"""tools/bench.py: the one entry point of the benchmark suites; each suite's quick setting runs and writes
its record (environment, parameters, figures). Shapes and keys only: no timing is asserted."""
import json
import subprocess
import sys
from pathlib import Path

from tools.suites import GROUPS, MODULES, suites
from tools.suites.harness import Param, Suite, alternate, markdown, median_ratio

ROOT = Path(__file__).resolve().parents[1]
BENCH = [sys.executable, str(ROOT / "tools" / "bench.py")]


def _bench(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([*BENCH, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_every_suite_is_declared_once_with_a_group_and_quick_settings():
    table = suites()
    assert len(table) == len(MODULES)
    for suite in table.values():
        assert suite.group in GROUPS and suite.help and suite.doc
        assert f"tools/bench.py {suite.name}" in suite.doc  # the docstring names the command
        names = [p.name for p in suite.params]
        assert len(set(names)) == len(names)


def test_list_names_every_suite():
    out = _bench("--list").stdout
    for name in suites():
        assert name in out


def test_alternate_reverses_the_order_every_other_round_and_drops_warmup_rounds():
    calls = []
    times = alternate({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, 2, warmup_calls=1,
                      warmup_rounds=1)
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b"]
    assert [len(v) for v in times.values()] == [2, 2]
    assert median_ratio({"a": [2.0, 4.0, 6.0], "b": [1.0, 1.0, 1.0]}, "a", "b") == 4.0
    assert markdown(["x", "y"], [["a", "1.5"]]).splitlines()[1] == "| --- | ---: |"


def test_quick_suite_writes_its_record(tmp_path):
    out = tmp_path / "optimizer.json"
    done = _bench("optimizer", "--quick", "--models", "resnet18", "--json", str(out))
    assert "| model | params (M) | optimizer | threads |" in done.stdout
    record = json.loads(out.read_text())
    assert record["suite"] == "optimizer"
    assert record["command"] == "python tools/bench.py optimizer --quick --models resnet18"
    assert record["params"] == {"models": ["resnet18"], "threads": [1], "rounds": 1, "steps": 1}
    env = record["environment"]
    assert {"cpu", "cpus", "isa", "threads", "torch", "versions"} <= set(env)
    assert {"avx2", "avx512f", "amx_tile"} <= set(env["isa"])
    rows = record["results"]["rows"]
    assert [(r["model"], r["optimizer"]) for r in rows] == [("resnet18", "adamw"), ("resnet18", "sgd")]
    assert all(r["fused ms"] > 0 and r["loop (default) ms"] > 0 for r in rows)


def test_a_suite_with_a_peer_and_fresh_processes(tmp_path):
    out = tmp_path / "vit.json"
    _bench("vit", "--quick", "--img-size", "32", "--json", str(out))
    r = json.loads(out.read_text())["results"]
    assert r["max_abs_diff"] <= 1e-4
    assert set(r["tensor_peak_mb"]) == set(r["rss_rise_mb"]) == {"timm", "ours"}
    assert r["ratio_median"] > 0


def test_params_become_options(tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    import bench

    def run(p, record):
        record.results["seen"] = vars(p)

    suite = Suite("t", "a test suite", run, (Param("sizes", [1, 2], quick=[1]), Param("flag", False),
                                               Param("name", "x", choices=["x", "y"])))
    parser = __import__("argparse").ArgumentParser()
    bench._add_params(parser, suite)
    args = parser.parse_args(["--flag", "--name", "y"])
    assert bench._values(suite, args, args.quick) == {"sizes": [1, 2], "flag": True, "name": "y"}
    args = parser.parse_args(["--quick"])
    assert bench._values(suite, args, args.quick) == {"sizes": [1], "flag": False, "name": "x"}
    record = bench.run(suite, {"sizes": [3], "flag": False, "name": "x"}, ["--sizes", "3"], str(tmp_path / "t.json"))
    assert json.loads((tmp_path / "t.json").read_text())["results"]["seen"]["sizes"] == [3]
    assert record.command == "python tools/bench.py t --sizes 3"


def test_suites_have_no_parser_of_their_own():
    """Options are declared (Param) and parsed by tools/bench.py alone; the other scripts of tools/ with a
    parser are the peer's trainer and the fine-tuning walk-through."""
    suites_dir = ROOT / "tools" / "suites"
    assert not [p.name for p in suites_dir.glob("*.py") if "argparse" in p.read_text()]
    scripts = sorted(p.name for p in (ROOT / "tools").iterdir() if p.suffix in (".py", ".sh"))
    assert scripts == ["bench.py", "chromium_page.py", "finetune_ultralytics_det.sh", "peer_ultralytics_det.py",
                       "ultralytics_env.py"]
    assert not [s for s in ("ultralytics_env.py", "chromium_page.py") if "argparse" in (ROOT / "tools" / s).read_text()]
