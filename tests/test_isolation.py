"""The ``isolated`` marker (tests/conftest.py): such a test runs in a fresh interpreter."""
from __future__ import annotations

import os

import pytest


@pytest.mark.isolated
def test_an_isolated_test_runs_in_its_own_interpreter():
    """Bug class: the marker ignored, so a native stack's state meets the whole suite's."""
    assert os.environ.get("ANB_ISOLATED_CHILD") == "1"


def test_other_tests_run_in_the_suites_interpreter():
    assert os.environ.get("ANB_ISOLATED_CHILD") != "1"
