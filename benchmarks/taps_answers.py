"""What a stage-taps model answers (issue 58, item 4), against the embedded server (cpu profile):
``preprocess_dali_taps`` (validate_image -> preprocess_dali_stages, as in the gpu profile) and
``classify_dali`` for a photo, for the most elongated images the image guard admits at a few
widths (1 x N pixels: the shorter side resized to 256 makes RESIZED 256 x 256N, float32), and
for one just beyond what the guard admits. Printed: seconds, the answer's bytes, the file's.

The bound (no server): the guard admits at most MAX_PIXELS decoded pixels and, for the spec's
resize, at most MAX_PIXELS resized ones, so DECODED <= 3 * MAX_PIXELS bytes (uint8) and
RESIZED <= 12 * MAX_PIXELS bytes (float32); CROPPED and INPUT are the model input's size.

    .venv/bin/python benchmarks/taps_answers.py [--widths 100,350]
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.paths import DEFAULT_REPOSITORY, PROJECT_ROOT  # noqa: E402
from harness.preprocessing.image_check import MAX_PIXELS  # noqa: E402
from harness.session import embedded_server  # noqa: E402
from harness.spec import load_spec  # noqa: E402


def infer(url: str, model: str, data: bytes):
    """(seconds, answer bytes or the refusal's first line) of one gRPC request naming no outputs."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    tensor = grpcclient.InferInput("IMAGE", [1, len(data)], "UINT8")
    tensor.set_data_from_numpy(np.frombuffer(data, np.uint8)[None])
    start = time.perf_counter()
    try:
        result = client.infer(model, [tensor], client_timeout=600)
    except Exception as exc:  # noqa: BLE001 - a refusal is a figure too
        return time.perf_counter() - start, str(exc).splitlines()[0][:110]
    finally:
        client.close()
    seconds = time.perf_counter() - start
    return seconds, sum(result.as_numpy(o.name).nbytes for o in result.get_response().outputs)


def strip(width: int) -> bytes:
    """A 1 x ``width`` RGB PNG (a gradient): the most elongated image of its width."""
    from PIL import Image

    row = np.stack([np.linspace(0, 255, width, dtype=np.uint8)] * 3, axis=-1)[None]
    out = io.BytesIO()
    Image.fromarray(row).save(out, "PNG")
    return out.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--widths", default="100,350", help="the strips' widths (comma-separated)")
    args = parser.parse_args()
    resize = load_spec(DEFAULT_REPOSITORY / "preprocessing.toml").preprocess.resize
    widest = max(w for w in range(1, 10_000) if np.prod(resize.output_size(1, w)) <= MAX_PIXELS)
    print(f"bound: DECODED <= {3 * MAX_PIXELS / 1e6:.0f} MB, RESIZED <= {12 * MAX_PIXELS / 1e9:.2f} GB "
          f"(the widest 1-pixel strip admitted: {widest}, resized to {resize.output_size(1, widest)})")
    cases = {"photo squirrel_cls.jpg": (PROJECT_ROOT / "data" / "photos" / "squirrel_cls.jpg").read_bytes(),
             **{f"strip 1 x {w}": strip(w) for w in map(int, args.widths.split(","))},
             f"strip 1 x {widest + 1} (beyond)": strip(widest + 1)}
    with embedded_server(DEFAULT_REPOSITORY, models=["classify_dali", "preprocess_dali_taps"], log=print) as server:
        for name, data in cases.items():
            for model in ("preprocess_dali_taps", "classify_dali"):
                seconds, answer = infer(server.grpc_url, model, data)
                shown = f"{answer / 1e6:.1f} MB" if isinstance(answer, int) else answer
                print(f"{name:28} {len(data):6} B  {model:21} {seconds:6.2f} s  {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
