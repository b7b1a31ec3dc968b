"""The fuzz campaign at benchmark size: hostile files (tests/fuzz_files.py, seeded) beside
the corpus photos, through `harness check`, `harness infer --pipeline dali --pipeline opencv` and
`harness accuracy`, against one running server. Prints, per command: exit status, wall
time, tracebacks (target 0), and images in vs compared + failed + rejected (target equal);
then whether the server is still ready and still calls the squirrel a fox squirrel.

First issue 45's: hostile label files through `harness accuracy --task ocr` and `--task
segmentation` (:func:`labels_campaign`; ``--labels`` runs only it).

Then issue 25's campaign: ``--names N`` entries under hostile names (not UTF-8, 240-255
bytes, controls, mathtext, markup, formulas; photos, hostile bytes, links in and out,
dangling, FIFOs, folders) through `check`; and for ``--seconds S``, random spec files and
random option values on two files, each `check` run in this process. Prints the cases, the
exit statuses, tracebacks (target 0), refusals not on one line (target 0) and lost rows
(target 0: entries in = compared + failed + rejected + skipped, or the run says it stopped).

    .venv/bin/python benchmarks/fuzz_campaign.py [--scale 4] [--seed 0] [--url HOST:PORT] [--names 200] [--seconds 600]

``--scale 1`` is the test's size (286 files); 4 gives about 900.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.paths import BUILD_DIR, DEFAULT_PHOTOS, DEFAULT_REPOSITORY  # noqa: E402
from harness.session import embedded_server  # noqa: E402
from tests.fuzz_files import hostile_files  # noqa: E402


def harness(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    start = time.perf_counter()
    env = {**os.environ, "COLUMNS": "400"}
    result = subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, env=env)
    return result, time.perf_counter() - start


def line(name: str, result: subprocess.CompletedProcess, seconds: float, counts: str) -> None:
    tracebacks = (result.stdout + result.stderr).count("Traceback")
    print(f"{name:<10} exit {result.returncode}  {seconds:7.1f} s  tracebacks {tracebacks}  {counts}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--url", default=None, help="gRPC host:port of a running server (default: an embedded one)")
    parser.add_argument("--timeout", default="30", help="seconds per request: a model that died shows fast (default 30)")
    parser.add_argument("--names", type=int, default=200, help="entries under hostile names (0: skip)")
    parser.add_argument("--seconds", type=float, default=600, help="time for random specs and options (0: skip)")
    parser.add_argument("--skip-files", action="store_true", help="skip the hostile files (issue 10's campaign)")
    parser.add_argument("--labels", action="store_true", help="only issue 45's hostile label files (accuracy --task ocr, "
                        "--task segmentation)")
    args = parser.parse_args()
    limits = ("--timeout", args.timeout)
    with ExitStack() as stack:
        url = args.url or stack.enter_context(embedded_server(DEFAULT_REPOSITORY, None)).grpc_url
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fuzz-", dir=BUILD_DIR)))
        labels_campaign(work, url, args)
        if args.labels:
            return 0
        if args.names:
            names_campaign(work, url, args)
            diagnose_and_merge_campaign(work, url, args)
        if args.seconds:
            specs_and_options_campaign(work, url, args)
        if args.skip_files:
            return 0
        files = hostile_files(DEFAULT_PHOTOS, work / "images", seed=args.seed, scale=args.scale)
        for photo in sorted(DEFAULT_PHOTOS.iterdir()):
            os.link(photo, work / "images" / photo.name)
        total = len(os.listdir(work / "images"))
        print(f"{len(files)} hostile files + {total - len(files)} photos = {total} (seed {args.seed}, scale {args.scale})")

        result, seconds = harness("check", str(work / "images"), "--url", url, "--report", str(work / "check"),
                                  "--no-isolate", "--retries", "1", *limits)
        if result.returncode == 2:
            print(result.stderr[-600:])
        r = json.loads((work / "check" / "report.json").read_text())
        rejected = sum(len(v) for v in r["rejected"].values())
        line("check", result, seconds, f"in {total} = compared {r['compared']} + failed {len(r['failed'])} "
             f"+ rejected {rejected} ({r['compared'] + len(r['failed']) + rejected})")

        result, seconds = harness("infer", str(work / "images"), "--pipeline", "dali", "--pipeline", "opencv", "--url", url,
                                  *limits)
        rows = sum(1 for text in result.stdout.splitlines()  # a wrapped reason's lines have a blank first cell
                   if text.startswith("│") and text[1:].split("│")[0].strip())
        line("infer", result, seconds, f"rows {rows} of {total}")

        result, seconds = harness("accuracy", str(work / "images"), "--url", url, "--report", str(work / "accuracy"),
                                  *limits)
        d = json.loads((work / "accuracy" / "accuracy.json").read_text())["dataset"]
        line("accuracy", result, seconds, f"in {d['images']} = evaluated {d['evaluated']} + left out {d['failed']} "
             f"(rejected {d['rejected']})")

        from harness.client import TritonClient

        with TritonClient(url, "grpc", timeout=30) as client:
            squirrel = (DEFAULT_PHOTOS / "squirrel_cls.jpg").read_bytes()
            labels = [client.classify([squirrel], p)[0][0].label for p in ("dali", "opencv")]
            print(f"server afterwards: ready {client.is_ready()}, squirrel_cls.jpg -> {labels}")
            for p in ("dali", "opencv"):  # the taps models, which check reads
                try:
                    print(f"taps {p}: input {client.stages(squirrel, p)['input'].shape}")
                except Exception as exc:
                    print(f"taps {p}: {type(exc).__name__}: {exc}")
    return 0


def labels_campaign(work: Path, url: str, args) -> None:
    """Issue 45: hostile label files through ``accuracy --task ocr`` (COCO boxes NaN, infinite,
    1e308, of 400 digits, negative, strings, missing; image names leading outside the folder,
    absolute, through a link) and ``--task segmentation`` (masks missing, of another size, 16-bit,
    colour, corrupt, a header declaring 20000 x 20000, a directory, a link out, under names not
    UTF-8 or with control characters): every entry an evaluated or a failed row (target: lost rows
    0, tracebacks 0); whole files that are not labels (nested 100,000 deep, not JSON): exit 2, one line."""
    import random

    import cv2
    import numpy as np

    from harness.detection.data import generate
    from tests.attack_files import png

    sample = DEFAULT_REPOSITORY.parent.parent / "shared" / "datasets" / "imagenet-sample" / "images"
    rng = random.Random(args.seed)
    # -- OCR: words rendered onto two photos, then entries each with its own defect
    ocr = work / "ocr"
    labels = json.loads(generate([sample / "n01530575_brambling.JPEG", sample / "n02328150_Angora.JPEG"], ocr, 2,
                                 seed=args.seed).read_text())
    images = ocr / "images"
    first = labels["images"][0]
    own = [a for a in labels["annotations"] if a["image_id"] == first["id"]]
    (work / "secret.txt").write_text("secret")
    os.symlink(work / "secret.txt", images / "link_out.jpg")
    boxes = [[float("nan"), 1, 2, 3], [1, 2, float("inf"), 4], [1e308, 2, 3, 4], [10 ** 400, 1, 2, 3], [1, 2, -3, 4],
             ["a", 1, 2, 3], None, [1, 2, 3], {"x": 1}, [True, 1, 2, 3]]
    names = ["../secret.txt", str(work / "secret.txt"), "images/link_out.jpg", "images/../../secret.txt"]
    entries = [(f"images/box{i}.jpg", {"bbox": box}) for i, box in enumerate(boxes)] \
        + [(n, {"bbox": [1, 2, 3, 4]}) for n in names]
    coco = {"images": [*labels["images"]], "categories": labels["categories"], "annotations": list(labels["annotations"])}
    for k, (name, annotation) in enumerate(rng.sample(entries, len(entries))):
        if "box" in name:
            os.link(ocr / first["file_name"], ocr / name)
        coco["images"].append({"id": 1000 + k, "file_name": name})
        coco["annotations"] += [{**a, "id": 10_000 + 10 * k + j, "image_id": 1000 + k} for j, a in enumerate(own)]
        coco["annotations"].append({"id": 20_000 + k, "image_id": 1000 + k, "category_id": own[0]["category_id"],
                                    "text": "x", **annotation})
    (ocr / "hostile.json").write_text(json.dumps(coco))
    result, seconds = harness("accuracy", str(ocr / "hostile.json"), "--task", "ocr", "--url", url, "--report",
                              str(work / "ocr-report"), "--timeout", args.timeout)
    _label_rows("ocr labels", result, seconds, work / "ocr-report", len(coco["images"]))
    for name, text in (("deep", "[" * 100_000 + "]" * 100_000), ("notjson", "{\"images\": [1, 2,")):
        (ocr / f"{name}.json").write_text(text)
        result, seconds = harness("accuracy", str(ocr / f"{name}.json"), "--task", "ocr", "--url", url, "--report",
                                  str(work / f"ocr-{name}"), "--timeout", args.timeout)
        last = (result.stderr.strip().splitlines() or [""])[-1]
        line(f"ocr {name}", result, seconds, f"one line: {last.startswith('error:')} ({last[:100]})")
    # -- segmentation: one photo under many names, each mask with its own defect
    seg = work / "seg"
    (seg / "images").mkdir(parents=True), (seg / "masks").mkdir()
    photo = cv2.resize(cv2.imread(str(sample / "n02328150_Angora.JPEG")), (160, 120))
    mask = np.zeros((120, 160), np.uint8)
    mask[30:90, 40:120] = 255
    ok, photo_jpg = cv2.imencode(".jpg", photo)
    ok, mask_png = cv2.imencode(".png", mask)
    defects = {
        "good": mask_png.tobytes(), "missing": None, "small": cv2.imencode(".png", mask[:60])[1].tobytes(),
        "deep16": cv2.imencode(".png", mask.astype(np.uint16) * 257)[1].tobytes(),
        "colour": cv2.imencode(".png", np.dstack([mask, mask // 2, mask]))[1].tobytes(),
        "corrupt": mask_png.tobytes()[:60], "bomb": png(20000), "jpeg": cv2.imencode(".jpg", mask)[1].tobytes(),
        "empty": b"", "dir": "dir", "link_out": "link", "caf\udce9": mask_png.tobytes(), "a\x1bb": mask_png.tobytes(),
        "x|<b>y": None,
    }
    (work / "outside.png").write_bytes(mask_png.tobytes())
    for stem, content in defects.items():
        (seg / "images" / f"{stem}.jpg").write_bytes(photo_jpg.tobytes())
        target = seg / "masks" / f"{stem}.png"
        if content == "dir":
            target.mkdir()
        elif content == "link":
            os.symlink(work / "outside.png", target)
        elif content is not None:
            target.write_bytes(content)
    result, seconds = harness("accuracy", str(seg / "images"), "--labels", str(seg / "masks"), "--task", "segmentation",
                              "--url", url, "--report", str(work / "seg-report"), "--timeout", args.timeout)
    _label_rows("seg labels", result, seconds, work / "seg-report", len(defects))


def _label_rows(name: str, result, seconds: float, report: Path, entries: int) -> None:
    try:
        data = json.loads((report / "accuracy.json").read_text())
    except (OSError, ValueError) as exc:
        line(name, result, seconds, f"no accuracy.json ({type(exc).__name__}): {result.stderr[-300:]}")
        return
    evaluated, failed = data["dataset"]["evaluated"], data["dataset"]["failed"]
    line(name, result, seconds, f"entries {entries} = evaluated {evaluated} + failed {failed}; lost rows "
         f"{entries - evaluated - failed}")


def counts(report: dict) -> tuple[int, int]:
    """(entries the report counts, their sum of outcomes)."""
    rejected = sum(len(v) for v in report["rejected"].values())
    return report["images"], report["compared"] + len(report["failed"]) + rejected + len(report.get("skipped", []))


def names_campaign(work: Path, url: str, args) -> None:
    from tests.fuzz_files import hostile_folder

    kinds = hostile_folder(DEFAULT_PHOTOS, work / "names", seed=args.seed, count=args.names)
    result, seconds = harness("check", str(work / "names"), "--url", url, "--report", str(work / "names-report"),
                              "--timeout", args.timeout)
    report = json.loads((work / "names-report" / "report.json").read_text())
    images, outcomes = counts(report)
    entries = len(os.listdir(work / "names"))
    line("names", result, seconds, f"entries {entries} ({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))}) "
         f"= compared {report['compared']} + failed {len(report['failed'])} + skipped {len(report['skipped'])} "
         f"({outcomes}); lost rows {entries - images}")


def diagnose_and_merge_campaign(work: Path, url: str, args) -> None:
    """Issue 35: the hostile names folder through ``diagnose`` (every entry an image searched, a
    failed or a skipped row) and through ``check --shard K/2`` twice and ``merge`` (the merged
    report holds every entry once), with ``merge --report`` onto a file refused in one line."""
    entries = len(os.listdir(work / "names"))
    result, seconds = harness("diagnose", str(work / "names"), "--url", url, "--report", str(work / "names-diagnosis"),
                              "--timeout", args.timeout)
    try:
        d = json.loads((work / "names-diagnosis" / "diagnosis.json").read_text())
        # "images": the image files given (those left out of the search among them, in "failed")
        line("diagnose", result, seconds, f"entries {entries} = images {d['images']} (left out {len(d['failed'])}) + "
             f"skipped {len(d['skipped'])}; lost rows {entries - d['images'] - len(d['skipped'])}")
    except (OSError, ValueError, KeyError) as exc:
        line("diagnose", result, seconds, f"no diagnosis.json ({type(exc).__name__}: {exc}): {result.stderr[-300:]}")
    shards = []
    for k in range(2):
        out = work / f"names-shard-{k}"
        result, seconds = harness("check", str(work / "names"), "--url", url, "--shard", f"{k}/2", "--report", str(out),
                                  "--no-isolate", "--timeout", args.timeout, "--format", "json")
        line(f"shard {k}/2", result, seconds, "")
        shards.append(str(out))
    result, seconds = harness("merge", *shards, "--report", str(work / "names-merged"), "--format", "json")
    try:
        images, outcomes = counts(json.loads((work / "names-merged" / "report.json").read_text()))
        manifest = (work / "names-merged" / "run.json").is_file()
        line("merge", result, seconds, f"entries {entries} = merged rows {images} (outcomes {outcomes}); lost rows "
             f"{entries - images}; run.json {manifest}")
    except (OSError, ValueError, KeyError) as exc:
        line("merge", result, seconds, f"no merged report ({type(exc).__name__}: {exc}): {result.stderr[-300:]}")
    (work / "a-file").write_text("x")
    result, seconds = harness("merge", *shards, "--report", str(work / "a-file"))
    lines = [t for t in result.stderr.strip().splitlines() if t.strip()]
    left = sorted(p.name for p in work.iterdir() if p.name.startswith(".a-file"))
    line("merge>file", result, seconds, f"refusal lines {len(lines)}; staging left {left}")


def specs_and_options_campaign(work: Path, url: str, args) -> None:
    import contextlib
    import io
    import random

    from harness.cli import main
    from tests.fuzz_files import random_options, random_spec

    images = work / "two"
    images.mkdir()
    (images / "baboon.jpg").write_bytes((DEFAULT_PHOTOS / "baboon.jpg").read_bytes())
    (images / "bad.jpg").write_bytes(b"not an image")
    (work / "self.toml").write_text('extends = "self.toml"\n')
    rng, deadline = random.Random(args.seed), time.monotonic() + args.seconds
    tally = {"spec": {}, "options": {}}
    tracebacks = not_one_line = lost = 0
    start, case = time.perf_counter(), 0
    while time.monotonic() < deadline:
        kind = "spec" if case % 2 == 0 else "options"
        report = work / f"case{case}"
        argv = ["check", str(images), "--url", url, "--report", str(report), "--timeout", args.timeout]
        if kind == "spec":
            (work / f"s{case}.toml").write_text(random_spec(rng, work))
            argv += ["--spec", str(work / f"s{case}.toml"), "--no-isolate"]
        else:
            argv += random_options(rng)
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                status = main(argv)
            except SystemExit as exc:
                status = exc.code
            except BaseException as exc:  # noqa: BLE001 - the campaign counts what escapes
                status = f"raised {type(exc).__name__}"
        text = err.getvalue()
        tally[kind][status] = tally[kind].get(status, 0) + 1
        tracebacks += "Traceback" in text or str(status).startswith("raised")
        not_one_line += status == 2 and not text.strip().splitlines()[-1].startswith("error:")
        if (report / "report.json").exists():
            data = json.loads((report / "report.json").read_text())
            entries, outcomes = counts(data)
            lost += (entries != 2 or outcomes != 2) and not data["run"]["stopped_reason"]
        shutil.rmtree(report, ignore_errors=True)
        case += 1
    print(f"specs+options: {case} cases in {time.perf_counter() - start:.0f} s (seed {args.seed}); exit statuses: "
          f"specs {dict(sorted(tally['spec'].items(), key=str))}, options {dict(sorted(tally['options'].items(), key=str))}; "
          f"tracebacks {tracebacks}; refusals not on one line {not_one_line}; lost rows {lost}")


if __name__ == "__main__":
    sys.exit(main())
