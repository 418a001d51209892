"""`vision-attn report`: one self-contained page of runs and ablations (no URL fetched, every picture a
data: URI), small enough for twenty runs; `ablate` writes one beside its other reports, `compare --html`
too; bad sources are one line."""
from __future__ import annotations

import contextlib
import io
import re
import shutil

import numpy as np
import pytest
from PIL import Image

from tests.analysis.explain_runs import VIT, classifier_run, write_images
from tests.analysis.report_runs import fake_run
from vision_attn.ablation import make_plan
from vision_attn.ablation.report import build_report, write_report
from tools.chromium_page import CHROMIUM, check_page
from vision_attn.cli import main

EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["']?(?!data:)[a-z]+:""", re.I)


@pytest.fixture(scope="module")
def ablation(tmp_path_factory):
    """A finished-looking CBAM ablation of 2 seeds (its seed-0 runs' checkpoints tiny ViTs) and its reports."""
    tmp = tmp_path_factory.mktemp("report")
    plan = make_plan("cnn_cbam_digits", ["none", "CBAM"], seeds=2, runs_dir=tmp, name="abl", epochs=3)
    for i, spec in enumerate(plan.runs()):
        fake_run(spec.folder, top1=0.9 + 0.02 * i, seed=spec.seed, params=11_181_642 + 89_880 * (i >= 2))
        if spec.seed == 0:  # the maps are drawn for the first seed of each variant
            classifier_run(spec.folder, "vit_tiny_patch16_224", VIT, seed=i)
    files = write_report(build_report(plan, latency=False))
    return tmp / "abl", files, write_images(tmp / "images")


def test_ablate_writes_the_page_beside_its_reports(ablation):
    folder, files, _ = ablation
    html = files["html"].read_text()
    assert files["html"] == folder / "report.html"
    assert "Ablation abl" in html and "cbam" in html and "[+" in html  # the paired interval's cell
    for name in ("none-s0", "none-s1", "cbam-s0", "cbam-s1"):
        assert name in html
    assert "model.lr" not in html  # same config in every run: the differing keys are the seeds
    assert "model.seed" in html


@pytest.fixture(scope="module")
def page(ablation, tmp_path_factory):
    """`vision-attn report` of the ablation with the maps of its two images, and what it printed."""
    folder, _, images = ablation
    out = tmp_path_factory.mktemp("page") / "r.html"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["report", str(folder), "-o", str(out), "--images", *map(str, images)]) == 0
    return out, printed.getvalue()


def test_report_with_maps_is_self_contained(page):
    out, printed = page
    assert "4 run(s), 1 ablation(s), maps of 2 image(s)" in " ".join(printed.split())  # wrapped at the terminal's width
    html = out.read_text()
    assert not EXTERNAL.findall(html), EXTERNAL.findall(html)[:3]
    assert "<link" not in html and "@import" not in html and "url(" not in html
    # intervals, curves, accuracy against GMACs, a map figure per image, 2 figures of each of the 4 runs
    assert html.count('<img src="data:image/') == html.count("<img") == 3 + 2 + 8
    assert "Where the runs look (gradcam)" in html


def test_the_page_opens_in_headless_chromium_offline(page, tmp_path):
    assert shutil.which(CHROMIUM), f"{CHROMIUM} is missing: `make test` installs it (apt-get install -y chromium)"
    out, _ = page
    result = check_page(out, tmp_path / "shot.png", height=900)
    assert (result.loaded, result.total) == (13, 13)  # every picture decoded
    assert result.console == []  # no error, no message at all
    with Image.open(result.screenshot) as shot:
        assert shot.size == (1280, 900) and len(np.unique(np.asarray(shot.convert("L")))) > 50  # drawn, not blank


def test_twenty_runs_stay_under_5_mb(tmp_path):
    runs = [fake_run(tmp_path / f"run{i:02d}", top1=0.5 + i / 50, seed=i, lr=0.01 * (1 + i % 3)) for i in range(20)]
    out = tmp_path / "r.html"
    assert main(["report", *map(str, runs), "-o", str(out)]) == 0
    html = out.read_text()
    assert out.stat().st_size < 5_000_000 and html.count("<img") == 2 + 40  # curves, compute, 2 per run
    assert "model.lr" in html and "model.seed" in html


def test_compare_writes_the_page_too(ablation, tmp_path):
    folder, _, _ = ablation
    out = tmp_path / "c.html"
    assert main(["compare", str(folder / "none-s0"), str(folder / "cbam-s0"), "--no-latency", "--html", str(out)]) == 0
    assert "none-s0" in out.read_text() and "cbam-s0" in out.read_text()


def test_a_folder_that_is_neither_is_one_line(tmp_path, capsys):
    (tmp_path / "old.html").write_text("old")
    assert main(["report", str(tmp_path / "nothing"), "-o", str(tmp_path / "old.html")]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {tmp_path / 'nothing'}: neither a run folder (metrics.json) nor an ablation folder " \
                  "(ablation.json); give finished runs or ablations\n"
    assert (tmp_path / "old.html").read_text() == "old"
