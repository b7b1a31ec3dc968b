"""Training with the deployed preprocessing: a loader for PyTorch training loops
(:mod:`harness.training.loader`), fine-tuning EfficientNet-Lite0 (:mod:`harness.training.train`),
and the experiment that measures what a train/serve preprocessing mismatch costs
(:mod:`harness.training.experiment`)."""
