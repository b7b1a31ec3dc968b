"""harness/outcome.py: one enum names what became of an image."""

import json

from harness.outcome import Outcome, Side


def test_outcomes_are_their_plain_names_and_say_which_are_one_sided():
    assert Outcome.rejected_by("deployment") is Outcome.REJECTED_BY_DEPLOYMENT == "rejected by deployment"
    assert Outcome.rejected_by(Side.TRAINING) is Outcome.REJECTED_BY_TRAINING
    assert [o.one_sided for o in Outcome] == [False, False, True, True, False]  # skipped: not a rejection
    assert json.dumps({"outcome": Outcome.FAILED}) == '{"outcome": "failed"}'
