"""``harness merge`` trusts nothing it can recompute (issue 35, defect 4): ``--report`` is
validated as check validates it (a file there is one line, status 2, and no staging folder is
left); the listing's hash is recomputed from the names of the rows merged (a row deleted with
``selected`` and ``listed`` edited to match is refused); every row's verdicts are judged again
from its own metrics (a ``max_abs`` that contradicts its verdict is refused); and the merged
folder has its run.json. Real shards of real photos checked against the real server."""

from __future__ import annotations

import json
import shutil

import pytest

from harness.check.job import CheckOptions, run
from harness.cli import main
from harness.errors import UsageError
from harness.merge import merge
from harness.paths import PROJECT_ROOT
from harness.session import Session
from harness.shard import SHARD_FILENAME, Shard
from tests.conftest import copy_photos

PHOTOS = ["baboon.jpg", "fruits.jpg", "orange.jpg", "squirrel_cls.jpg", "messi5.jpg"]
MISALIGNED = PROJECT_ROOT / "specs" / "misaligned_resize.toml"
"""Divergent and close stages: verdicts of every kind to contradict."""


@pytest.fixture(scope="module")
def shards(server, photos_dir, tmp_path_factory):
    images = copy_photos(photos_dir, PHOTOS, tmp_path_factory.mktemp("images"))
    out = tmp_path_factory.mktemp("shards")
    for k in range(2):
        run(Session(url=server.grpc_url, spec_file=MISALIGNED), CheckOptions(images, out / f"s{k}", shard=Shard(k, 2),
                                                                            isolate=False))
    return out


def copied(shards, tmp_path):
    for k in range(2):
        shutil.copytree(shards / f"s{k}", tmp_path / f"s{k}")
    return [tmp_path / f"s{k}" for k in range(2)]


def test_the_merged_folder_has_its_run_json(shards, tmp_path):
    result = merge([shards / "s0", shards / "s1"], tmp_path / "m")
    manifest = json.loads((tmp_path / "m" / "run.json").read_text())
    shard = json.loads((shards / "s0" / "run.json").read_text())
    assert manifest["identity"]["shard"] is None and manifest["identity"]["merged"]["shards"] == 2
    assert {k: v for k, v in manifest["identity"].items() if k not in ("shard", "merged")} == \
        {k: v for k, v in shard["identity"].items() if k != "shard"}
    assert result.report.summary.images == len(PHOTOS)
    assert not list((tmp_path / "m").glob(".merging*"))


def test_a_report_path_that_is_a_file_is_one_line_and_leaves_nothing(shards, tmp_path, capsys):
    target = tmp_path / "taken.txt"
    target.write_text("not a directory\n")
    status = main(["merge", str(shards / "s0"), str(shards / "s1"), "--report", str(target)])
    err = capsys.readouterr().err
    assert status == 2 and "Traceback" not in err and "is a file, not a directory" in err, err
    assert target.read_text() == "not a directory\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken.txt"]  # no hidden staging folder beside it


def test_a_deleted_row_with_its_counts_edited_to_match_is_refused(shards, tmp_path):
    both = copied(shards, tmp_path)
    big = max(both, key=lambda d: len((d / "images.jsonl").read_text().splitlines()))
    rows = (big / "images.jsonl").read_text().splitlines(keepends=True)
    assert len(rows) >= 2
    (big / "images.jsonl").write_text("".join(rows[1:]))
    for shard in both:  # the record edited to agree: one image fewer listed, one fewer selected there
        record = json.loads((shard / SHARD_FILENAME).read_text())
        record["listed"] -= 1
        record["selected"] -= shard == big
        (shard / SHARD_FILENAME).write_text(json.dumps(record))
    with pytest.raises(UsageError, match="not the listing the shards split .* a row was removed, added or renamed"):
        merge(both, tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_a_row_whose_metrics_contradict_its_verdict_is_refused(shards, tmp_path):
    s0, s1 = copied(shards, tmp_path)
    rows = [json.loads(line) for line in (s0 / "images.jsonl").read_text().splitlines()]
    row = next(r for r in rows if any(s["verdict"] == "equal" for s in r["stages"]))
    stage = next(s for s in row["stages"] if s["verdict"] == "equal")
    stage["metrics"]["max_abs"] = 50.0  # as if the deployment were 50 levels off, still "equal"
    (s0 / "images.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(UsageError, match=rf"{row['image']}.*stage {stage['stage']} says equal, its metrics .* say"):
        merge([s0, s1], tmp_path / "m")
