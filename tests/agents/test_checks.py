"""fleetgym.agents.checks: the shared integer and number checks."""

from __future__ import annotations

import numpy as np
import pytest

from fleetgym.agents.checks import check_integer, check_number


def test_valid_values_come_back_as_python_numbers():
    assert check_integer("n", np.int32(3), 1) == 3 and type(check_integer("n", 3, 0)) is int
    assert check_number("x", np.float32(0.5)) == 0.5 and type(check_number("x", 2)) is float
    assert check_number("x", 0.0) == 0.0


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda: check_integer("n", 2.0, 1), TypeError, r"n: expected an integer, actual float"),
        (lambda: check_integer("n", True, 0), TypeError, r"n: expected an integer, actual bool"),
        (lambda: check_integer("n", 0, 1), ValueError, r"n: expected an integer >= 1, actual 0"),
        (lambda: check_number("x", "1"), TypeError, r"x: expected a number, actual str"),
        (lambda: check_number("x", -1.0), ValueError, r"x: expected a finite number >= 0, actual"),
        (lambda: check_number("x", float("nan")), ValueError, r"x: expected a finite number"),
        (
            lambda: check_number("x", 0.0, strict=True),
            ValueError,
            r"x: expected a finite number > 0",
        ),
    ],
)
def test_errors_say_what_was_expected(call, exc, match):
    with pytest.raises(exc, match=match):
        call()
