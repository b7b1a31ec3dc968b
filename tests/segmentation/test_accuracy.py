"""`harness accuracy --task segmentation` against this repository's segmenter, served for real,
on composites (harness/segmentation/data.py): objects cut out of real photos by the reference's
confident matte, pasted onto other real photos; the pasted region is the label."""

from __future__ import annotations

import json

import pytest

from harness.segmentation.data import generate, reference_matte
from tests.commands import harness
from tests.segmentation.conftest import SAMPLE
from tests.segmentation.test_segmentation_check import PLANTED_DIR

OBJECTS = ("n01440764_tench.JPEG", "n01860187_black_swan.JPEG", "n02097474_Tibetan_terrier.JPEG")
"""Photos whose reference matte holds one confident object (measured: harness.segmentation.data's rule)."""
BACKGROUNDS = ("n09428293_seashore.JPEG", "n09193705_alp.JPEG", "n09246464_cliff.JPEG")


@pytest.fixture(scope="module")
def composites(repository, tmp_path_factory):
    out = tmp_path_factory.mktemp("composites")
    generate([SAMPLE / n for n in OBJECTS], [SAMPLE / n for n in BACKGROUNDS], out, 3,
             matte=reference_matte(repository.parent))
    return out


def accuracy(server, composites, report, *args):
    result = harness("accuracy", composites / "images", "--labels", composites / "masks", "--task", "segmentation",
                     "--url", server.grpc_url, "--pipeline", "dali", "--pipeline", "opencv", "--report", report, *args)
    return result, (json.loads((report / "accuracy.json").read_text())
                    if (report / "accuracy.json").exists() else None)


def test_accuracy_scores_masks_against_the_composites_labels(segmentation_server, composites, tmp_path):
    """Aligned: every path near the reference and high against the labels (IoU 0.99 measured on these
    three); the threshold before upsampling planted in training: the reference's IoU falls on every
    image (0.990 to 0.986 measured), the deployed paths' stay as they were, and their masks change."""
    result, report = accuracy(segmentation_server, composites, tmp_path / "aligned")
    assert result.returncode == 0, result.stdout + result.stderr
    effect = report["effect"]
    assert effect["evaluated"] == 3 and not effect["unlabeled"]
    reference, *deployed = effect["paths"]
    assert reference["mean_iou"] > 0.8 and reference["mean_boundary_f"] > 0.5, reference
    for path in deployed:
        assert abs(path["mean_iou"] - reference["mean_iou"]) < 0.02 and path["mean_matte_mae"] < 0.1, path
        assert path["wilcoxon_iou"]["p_value"] > 0.05
    result, report = accuracy(segmentation_server, composites, tmp_path / "planted", "--spec",
                              PLANTED_DIR / "threshold_before.toml")
    assert result.returncode == 1, result.stdout + result.stderr
    planted, dali, opencv = report["effect"]["paths"]
    assert planted["mean_iou"] < reference["mean_iou"] - 0.002, (planted, reference)
    assert dali["mean_iou"] == pytest.approx(deployed[0]["mean_iou"], abs=1e-9) and dali["mask_changes"]
    assert "| reference |" in (tmp_path / "planted" / "accuracy.md").read_text()


def test_a_missing_and_a_wrong_size_label_are_error_rows(segmentation_server, composites, tmp_path):
    import shutil

    from PIL import Image

    masks = tmp_path / "masks"
    shutil.copytree(composites / "masks", masks)
    first, second, _ = sorted(masks.iterdir())
    first.unlink()
    Image.open(second).resize((17, 11)).save(second)
    result = harness("accuracy", composites / "images", "--labels", masks, "--task", "segmentation", "--url",
                     segmentation_server.grpc_url, "--pipeline", "opencv", "--report", tmp_path / "report")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stdout + result.stderr
    report = json.loads((tmp_path / "report" / "accuracy.json").read_text())
    assert report["effect"]["evaluated"] == 1
    text = (tmp_path / "report" / "accuracy.md").read_text()
    assert f"{first.name} is missing" in text and f"{second.name} is 17x11" in text
