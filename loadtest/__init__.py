"""Load tests of the deployed ensembles: CPU decode (``classify_opencv``) vs GPU decode (``classify_dali``).

- :mod:`loadtest.locustfile`  Locust users calling Triton through tritonclient (HTTP or gRPC);
  usable on its own: ``locust -f loadtest/locustfile.py``.
- :mod:`loadtest.sweep`       the sweep: every ensemble x client count x protocol, a bounded
  run each, then the comparison table, the server-side breakdown and the plots
  (``python -m loadtest.sweep`` or ``harness loadtest``).
- :mod:`loadtest.payloads`, :mod:`loadtest.samples`, :mod:`loadtest.stats`,
  :mod:`loadtest.metrics`, :mod:`loadtest.report`, :mod:`loadtest.triton`,
  :mod:`loadtest.locust_control`: small pure pieces the two above are made of.

Nothing here imports the ``harness`` package but :mod:`harness.errors` (standard library only:
the errors here are :class:`~harness.errors.HarnessError`, so the sweep exits by the harness's
one status policy) and, lazily, what starts the embedded server and local Locust processes and
reads a model's config; the Locust image mounts ``harness/`` and only needs locust,
tritonclient, numpy, matplotlib and rich.
"""
