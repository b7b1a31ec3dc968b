"""`harness accuracy` as a user runs it (a subprocess), against the running session server."""

import json
import shutil

import pytest

from harness.model import read_labels
from tests.commands import harness
from tests.test_accuracy import LABELED_PHOTOS, build_labeled_set, write_bgr_spec

TABLE_HEADER = ("| path | top-1 | diff | top-5 | diff | recall (macro) | diff | precision (macro) | diff "
                "| flip rate vs reference | without ties | McNemar b/c, p |")


@pytest.fixture(scope="module")
def labeled_set(photos_dir, tmp_path_factory):
    return build_labeled_set(photos_dir, tmp_path_factory.mktemp("labeled") / "set")


def test_aligned_deployment_exits_0_with_the_same_accuracy(server, labeled_set, tmp_path):
    # The ONNX reference model (the same network as the PyTorch default) keeps the test fast on 2 cores.
    result = harness("accuracy", labeled_set, "--url", server.http_url, "--protocol", "http",
                     "--reference-model", "onnx", "--report", tmp_path)
    assert result.returncode == 0, result.stderr
    assert TABLE_HEADER in result.stdout and result.stdout.strip() == (tmp_path / "accuracy.md").read_text().strip()
    assert str(tmp_path / "accuracy.md") in result.stderr and "accuracy.json" in result.stderr
    report = json.loads((tmp_path / "accuracy.json").read_text())
    reference, *deployed = report["effect"]["paths"]
    assert [p["ensemble"] for p in deployed] == ["classify_dali", "classify_opencv"]
    assert report["dataset"]["layout"] == "imagefolder" and report["dataset"]["labels"] == sorted(LABELED_PHOTOS.values())
    assert report["dataset"]["images"] == report["dataset"]["evaluated"] == len(report["images"]) == 35
    for path in deployed:
        assert path["top1"] == reference["top1"] and path["flips"] == path["ties"] == 0
        assert path["diff_points"] == {"top1": 0.0, "top5": 0.0, "recall_macro": 0.0, "precision_macro": 0.0}
        assert path["mcnemar"] == {"b": 0, "c": 0, "p_value": 1.0}
    assert report["versions"]["tritonserver"] == "2.51.0" and report["spec"].endswith("preprocessing.toml")


def test_a_csv_dataset_with_a_misaligned_spec_flips_predictions_and_exits_1(server, labeled_set, repository, tmp_path):
    spec = write_bgr_spec(tmp_path, repository)
    classes = read_labels(repository / "classifier" / "labels.txt")
    rows = ["file,label"]  # paths relative to the CSV; labels by name and by index
    for i, image in enumerate(sorted(labeled_set.rglob("*.jpg"))):
        name = image.parent.name
        rows.append(f"set/{name}/{image.name},{classes.index(name) if i % 2 else name}")
    (labeled_set.parent / "labels.csv").write_text("\n".join(rows) + "\n")
    result = harness("accuracy", labeled_set.parent / "labels.csv", "--spec", spec, "--url", server.grpc_url,
                     "--reference-model", "onnx", "--pipeline", "dali", "--report", tmp_path / "report")
    assert result.returncode == 1, result.stderr
    report = json.loads((tmp_path / "report" / "accuracy.json").read_text())
    reference, dali = report["effect"]["paths"]
    assert report["dataset"]["layout"] == "csv" and report["dataset"]["evaluated"] == 35
    assert dali["flips"] == sum(i["top1"]["reference"] != i["top1"]["dali"] for i in report["effect"]["images"]) > 0
    assert f"{100 * dali['flip_rate']:.2f}% ({dali['flips']}/35)" in result.stdout


def test_an_unknown_class_directory_is_a_usage_error(server, photos_dir, tmp_path):
    (tmp_path / "fox squirel").mkdir()
    shutil.copy(photos_dir / "squirrel_cls.jpg", tmp_path / "fox squirel" / "squirrel.jpg")
    result = harness("accuracy", tmp_path, "--url", server.grpc_url, "--report", tmp_path / "report")
    assert result.returncode == 2
    message = " ".join(result.stderr.split())  # the console wraps long lines
    assert "'fox squirel' (directory 'fox squirel') is not a known class (did you mean 'fox squirrel'?)" in message
    assert not (tmp_path / "report").exists()
    missing = harness("accuracy", tmp_path / "nowhere", "--url", server.grpc_url)
    assert missing.returncode == 2 and "dataset not found" in missing.stderr
