"""OCR and segmentation with limits (issue 45), against the embedded server (cpu profile, the
repository's own specs):

1. a page of 1,000 words (``tests/attack_files.text_page``: 2048 x 2048, 25 x 40 words; the
   detector's cap is 1,000 boxes) to ``ocr_dali`` and ``ocr_opencv``: seconds, words read and
   unread, the answer's bytes naming the outputs and naming none, the server's growth;
2. a normal OCR request (a photo with a few words) alone, then while two such pages are read
   at once (one heavy request must not starve the others);
3. a photo at the decode limit (13376 x 13376 JPEG, about 4.5 MB) to ``segment_dali`` and
   ``segment_opencv``: seconds, the answer's bytes, the server's growth.

Targets: the page under 30 s and under 1 GB of growth for each OCR model, a request naming no
outputs under 20 MB. Printed, with exit 1 when missed.

    .venv/bin/python benchmarks/ocr_limits.py [--skip-segmentation] [--skip-starvation]
"""

from __future__ import annotations

import argparse
import io
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.decode_bomb_rss import server_rss_mb  # noqa: E402
from harness.paths import DEFAULT_REPOSITORY, PROJECT_ROOT  # noqa: E402
from harness.session import embedded_server  # noqa: E402
from tests.attack_files import text_page  # noqa: E402

SAMPLE = PROJECT_ROOT.parent / "shared" / "datasets" / "imagenet-sample" / "images"


def infer(url: str, model: str, data: bytes, outputs: list[str] | None, timeout: float = 600):
    """(seconds, {name: array}) of one gRPC request; outputs None: none named."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    tensor = grpcclient.InferInput("IMAGE", [1, len(data)], "UINT8")
    tensor.set_data_from_numpy(np.frombuffer(data, np.uint8)[None])
    asked = [grpcclient.InferRequestedOutput(n) for n in outputs] if outputs else None
    start = time.perf_counter()
    try:
        result = client.infer(model, [tensor], outputs=asked, client_timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - a refusal is a figure too
        return time.perf_counter() - start, str(exc).splitlines()[0]
    finally:
        client.close()
    seconds = time.perf_counter() - start
    return seconds, {o.name: result.as_numpy(o.name) for o in result.get_response().outputs}


def size_mb(answer) -> str:
    return f"{sum(a.nbytes for a in answer.values()) / 1e6:.2f} MB" if isinstance(answer, dict) else answer[:90]


def normal_photo() -> bytes:
    import random

    import cv2

    from harness.detection.data import render_words

    photo = cv2.cvtColor(cv2.imread(str(SAMPLE / "n01530575_brambling.JPEG")), cv2.COLOR_BGR2RGB)
    drawn, _ = render_words(photo, random.Random(0))
    return cv2.imencode(".jpg", cv2.cvtColor(drawn, cv2.COLOR_RGB2BGR))[1].tobytes()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--skip-segmentation", action="store_true")
    parser.add_argument("--skip-starvation", action="store_true")
    args = parser.parse_args()
    page = text_page(2048, 25, 40, 18)
    photo = normal_photo()
    missed = 0
    with embedded_server(DEFAULT_REPOSITORY) as server:
        url, pid = server.grpc_url, server.process.pid
        for model in ("ocr_dali", "ocr_opencv", "segment_dali", "segment_opencv"):  # warm
            infer(url, model, photo, ["TEXTS"] if model.startswith("ocr") else ["MASK"])
        print(f"server RSS after warming: {server_rss_mb(pid):.0f} MB; the page: {len(page)} bytes")
        for model in ("ocr_dali", "ocr_opencv"):
            before = server_rss_mb(pid)
            seconds, answer = infer(url, model, page, ["TEXTS", "BOXES", "WORDS_UNREAD"])
            grown = server_rss_mb(pid) - before
            read = answer["TEXTS"].shape[1] if isinstance(answer, dict) else "-"
            unread = int(answer["WORDS_UNREAD"][0, 0]) if isinstance(answer, dict) else "-"
            print(f"{model}: the 1,000-word page in {seconds:.1f} s, {read} words read, {unread} unread, answer "
                  f"{size_mb(answer)}, server growth {grown:+.0f} MB")
            none_seconds, none = infer(url, model, page, None)
            print(f"{model}: naming no outputs: {none_seconds:.1f} s, answer {size_mb(none)} "
                  f"({', '.join(sorted(none)) if isinstance(none, dict) else ''})")
            missed += seconds >= 30 or grown >= 1024 or not isinstance(none, dict) \
                or sum(a.nbytes for a in none.values()) >= 20e6
        if not args.skip_starvation:
            for model in ("ocr_dali", "ocr_opencv"):
                alone, _ = infer(url, model, photo, ["TEXTS"])
                heavy = [threading.Thread(target=infer, args=(url, model, page, ["TEXTS"])) for _ in range(2)]
                for thread in heavy:
                    thread.start()
                time.sleep(1.0)
                during, answer = infer(url, model, photo, ["TEXTS"])
                for thread in heavy:
                    thread.join()
                print(f"{model}: a normal request alone {alone:.1f} s; while two pages are read {during:.1f} s "
                      f"({'answered' if isinstance(answer, dict) else answer})")
        if not args.skip_segmentation:
            from PIL import Image

            side = 13376
            small = Image.open(SAMPLE / "n02328150_Angora.JPEG").convert("RGB")
            buf = io.BytesIO()
            small.resize((side, side), Image.BILINEAR).save(buf, "JPEG", quality=85)
            huge = buf.getvalue()
            for model in ("segment_dali", "segment_opencv"):
                before = server_rss_mb(pid)
                seconds, answer = infer(url, model, huge, None)
                print(f"{model}: a {side}x{side} JPEG ({len(huge) / 1e6:.1f} MB) in {seconds:.1f} s, answer "
                      f"{size_mb(answer)}, server growth {server_rss_mb(pid) - before:+.0f} MB")
        print(f"server RSS at the end: {server_rss_mb(pid):.0f} MB")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
