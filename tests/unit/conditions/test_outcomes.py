"""conditions/outcomes.py: how a check's outcome ends the task, a raised check's error classified on the way
(one call for a poke on a worker and for a trigger riding out an error)."""

from __future__ import annotations

from airflow_smart_ext.conditions.outcomes import Ending, Outcome, outcome_ending


class Flaky(Exception):
    """An error only the user calls transient."""


def test_a_transient_error_is_not_yet_whatever_the_flags_and_says_why() -> None:
    outcome = Outcome("error", message="refused", error=ConnectionRefusedError("refused"))
    ending, error_class = outcome_ending(outcome, never_fail=True)
    assert ending is Ending.NOT_YET
    assert error_class is not None and error_class.transient


def test_the_users_transient_types_are_added_to_the_classification() -> None:
    outcome = Outcome("error", message="flaky", error=Flaky("flaky"))
    assert outcome_ending(outcome)[0] is Ending.ERROR
    assert outcome_ending(outcome, never_fail=True)[0] is Ending.SKIP
    assert outcome_ending(outcome, silent_fail=True)[0] is Ending.NOT_YET
    assert outcome_ending(outcome, (Flaky,))[0] is Ending.NOT_YET


def test_only_a_raised_check_is_classified() -> None:
    assert outcome_ending(Outcome("failure", message="criteria")) == (Ending.FAIL, None)
    assert outcome_ending(Outcome("failure", message="criteria"), soft_fail=True) == (Ending.SKIP, None)
    # An error without its exception (a result that could not travel) is an error, unclassified.
    assert outcome_ending(Outcome("error", message="not JSON")) == (Ending.ERROR, None)
