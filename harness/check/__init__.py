"""``harness check``: reference vs deployed, stage by stage, image by image.

For each image: the reference recipe and model produce the training-side stages; the
server produces the deployed ones (taps model, then the production ensemble); each stage
is compared (cumulative error) and, where the reference has the previous stage, the
deployed stage is also run alone on it (isolated error). Results stream to disk as they
complete, so a stopped run keeps its work and ``--resume`` picks up where it stopped.

- :mod:`~harness.check.image`: one image, both sides, every stage compared and isolated;
- :mod:`~harness.check.run`: the run over every image (the request loop:
  :func:`~harness.check.run.check_concurrently`), streamed to disk, resumable;
- :mod:`~harness.check.files`: images.jsonl, per_image.csv and the saved tensors;
- :mod:`~harness.check.visuals`: heat maps and crops of the worst images.
"""

from harness.check.files import (
    CSV_FILENAME,
    RESULTS_FILENAME,
    TENSORS_DIRNAME,
    VISUALS_DIRNAME,
    csv_header,
    csv_row,
    load_image_tensors,
    save_image_tensors,
)
from harness.check.image import ImageChecker, ImageTensors
from harness.check.run import RunOutcome, check_concurrently, run_check
from harness.check.visuals import VisualStore, visual_arrays

__all__ = ["CSV_FILENAME", "RESULTS_FILENAME", "TENSORS_DIRNAME", "VISUALS_DIRNAME", "ImageChecker", "ImageTensors",
           "RunOutcome", "VisualStore", "check_concurrently", "csv_header", "csv_row", "load_image_tensors",
           "run_check", "save_image_tensors", "visual_arrays"]
