"""``harness accuracy``: does the deployed preprocessing change what the model predicts?

On a labeled image set, the reference path (the training recipe and the reference model,
in-process) and each deployed ensemble (``classify_dali``, ``classify_opencv``, through
the server) classify every image. Per path: top-1 and top-k (5) accuracy, per-class recall and
precision with macro averages over the classes present in the dataset; per deployed path:
the prediction flip rate against the reference (share of images whose top-1 class
differs; needs no labels) and McNemar's exact test on the images one path gets right and
the other wrong.

Datasets: an ImageFolder layout (one sub-directory per class, named by a class name from
the model's ``labels.txt`` or a class index), a CSV of ``file,label`` (paths relative to
the CSV), or a flat directory of unlabeled images (flip rates only).

Nothing is dropped silently: an image that fails on any path (unreadable, not an image,
rejected by the server) is listed with its reasons and excluded from every path alike, so
all paths are scored on the same images. An image one side rejects while the other
classifies it is labelled ``rejected by deployment`` or ``rejected by training``: the
model cannot serve an image it was trained on (or the reverse), a divergence of its own.

A top-1 change is a **tie** when the reference's margin between its top-1 logit and its
logit for the deployed top-1 is within ``tie_margin`` (default: the output tolerance; see
:mod:`harness.compare.ties`); flip rates are given with and without ties. Accuracy,
McNemar and flip counts stay on all evaluated images: ties are labelled, never dropped.

The job reads every path as the task asks and scores it with the task's own hook (one path for
every task: :func:`harness.accuracy.job.score`, :meth:`harness.task_api.Task.effect_on`); every
task's report is one :class:`harness.results.AccuracyReport`, its accuracy.json one layout (the
task's scores under ``effect``).

- :mod:`~harness.accuracy.dataset`: reading the labeled set;
- :mod:`~harness.accuracy.predict`: each path's predictions;
- :mod:`harness.compare.top_k_effect`: classification's scores (pure functions of the predictions);
- :mod:`~harness.accuracy.report`: accuracy.json and accuracy.md, from a
  :class:`harness.results.AccuracyReport`;
- :mod:`~harness.accuracy.job`: the job the command line runs (:func:`~harness.accuracy.job.run`).
"""

from harness.accuracy.dataset import CSV_HEADER_FILE, CSV_HEADER_LABEL, Dataset, DatasetError, Sample, class_indices, load_dataset
from harness.accuracy.predict import REFERENCE, TOP_K, Predictions, predict_deployed, predict_reference, top_k_classes
from harness.accuracy.report import render_markdown, write_report
from harness.compare.top_k_effect import (
    ClassScore,
    McNemar,
    PathScore,
    TopKEffect,
    TopKScores,
    class_scores,
    evaluate,
    flip_count,
    flip_verdicts,
    mcnemar_exact,
    top_k_accuracy,
)

__all__ = ["CSV_HEADER_FILE", "CSV_HEADER_LABEL", "ClassScore", "Dataset", "DatasetError", "McNemar", "PathScore",
           "Predictions", "REFERENCE", "Sample", "TOP_K", "TopKEffect", "TopKScores", "class_indices", "class_scores",
           "evaluate", "flip_count", "flip_verdicts", "load_dataset", "mcnemar_exact", "predict_deployed",
           "predict_reference", "render_markdown", "top_k_accuracy", "top_k_classes", "write_report"]
