"""``harness deploy``: the user's model and training definition written as a Triton model repository of
this project's shape, validated, and checked on photos (:mod:`harness.deploy.job`)."""
