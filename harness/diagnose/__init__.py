"""``harness diagnose``: search the known culprits for every cause of a divergence.

- :mod:`~harness.diagnose.catalogue`: the known culprits, each a change to the reference recipe.
- :mod:`~harness.diagnose.deployed`: the deployed tensors of every image, read from the server once.
- :mod:`~harness.diagnose.evaluation`: a setting of the reference replayed against them;
  :mod:`~harness.diagnose.outcomes`: what it does on each image and on a set of images.
- :mod:`~harness.diagnose.rounds`: rounds of the search, each re-locating the first divergent
  stage under the changes found so far, and the causes ranked by what they cost in predictions.
- :mod:`~harness.diagnose.findings`: what it found (:class:`Round`, :class:`Cause`,
  :class:`Diagnosis`); :mod:`~harness.diagnose.conclusion`: the same in words.
- :mod:`~harness.diagnose.advice`: the change in spec terms, on the side that can change, and
  the corrected reference spec.
"""

from harness.diagnose.advice import corrected_spec, recommend, reference_toml
from harness.diagnose.catalogue import Hypothesis, candidate_hypotheses, resolve_auto
from harness.diagnose.deployed import Deployed, fetch_deployed
from harness.diagnose.evaluation import SCREEN_IMAGES, Diagnoser
from harness.diagnose.findings import Cause, Diagnosis, Round
from harness.diagnose.outcomes import Evaluation, ImageOutcome
from harness.diagnose.rounds import MAX_ROUNDS, diagnose

__all__ = ["Cause", "Deployed", "Diagnoser", "Diagnosis", "Evaluation", "Hypothesis", "ImageOutcome", "MAX_ROUNDS",
           "Round", "SCREEN_IMAGES", "candidate_hypotheses", "corrected_spec", "diagnose", "fetch_deployed", "recommend",
           "reference_toml", "resolve_auto"]
