"""fleetgym.validation: types, ranges and the message style of every argument check.

Properties (hypothesis): a value of the wrong type raises TypeError, a value of the right
type out of range (or NaN, or infinite) raises ValueError, every message reads
``"<argument>: expected …, actual …"``, and a huge bad value is quoted in a bounded
number of characters.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleetgym.validation import (
    QUOTE_LIMIT,
    check_bool,
    check_choice,
    check_float,
    check_int,
    check_probability,
    check_timeout,
    quote,
)

NAME = "arg"
MESSAGE = re.compile(rf"^{NAME}: expected .+, actual .+$", re.DOTALL)
# Longest message a check may write: its fixed text plus one bounded quote of the value.
MAX_MESSAGE = 200 + QUOTE_LIMIT + 40

not_a_number = st.one_of(
    st.text(max_size=5),
    st.none(),
    st.booleans(),
    st.lists(st.integers(), max_size=3),
    st.builds(object),
    st.just(np.bool_(True)),
    st.complex_numbers(allow_nan=False, allow_infinity=False),
)
not_an_int = st.one_of(not_a_number, st.floats(), st.just(np.float64(3.0)))
huge_strings = st.text(min_size=QUOTE_LIMIT + 1, max_size=5000)


def _assert_style(exc: BaseException) -> None:
    text = str(exc)
    assert MESSAGE.match(text), text
    assert len(text) <= MAX_MESSAGE, len(text)


# ----------------------------------------------------------------- check_int
@given(st.integers(-(10**30), 10**30))
def test_int_in_range_comes_back_as_python_int(value):
    out = check_int(NAME, value)
    assert out == value and type(out) is int


@given(st.integers(-(2**62), 2**62))
def test_numpy_ints_are_ints(value):
    assert check_int(NAME, np.int64(value)) == value


@given(not_an_int)
def test_int_of_the_wrong_type_is_a_type_error(value):
    with pytest.raises(TypeError) as info:
        check_int(NAME, value)
    _assert_style(info.value)
    assert "expected an int" in str(info.value)


@given(st.integers(-100, 100), st.integers(0, 50), st.integers(0, 50))
def test_int_out_of_range_is_a_value_error(low, below, above):
    high = low + above
    for value, bad in ((low - below, below > 0), (high + above + 1, True)):
        if bad:
            with pytest.raises(ValueError) as info:
                check_int(NAME, value, low=low, high=high)
            _assert_style(info.value)
        else:
            assert check_int(NAME, value, low=low, high=high) == value


@given(st.integers(min_value=10**200, max_value=10**400))
def test_int_huge_out_of_range_value_is_quoted_briefly(value):
    with pytest.raises(ValueError) as info:
        check_int(NAME, value, high=0)
    _assert_style(info.value)


def test_int_bounds_in_the_message():
    with pytest.raises(ValueError, match=r"^n: expected an int >= 1, actual 0$"):
        check_int("n", 0, low=1)
    with pytest.raises(ValueError, match=r"^n: expected an int <= 3, actual 4$"):
        check_int("n", 4, high=3)
    with pytest.raises(ValueError, match=r"^n: expected an int in \[1, 3\], actual 4$"):
        check_int("n", 4, low=1, high=3)
    with pytest.raises(TypeError, match=r"^n: expected an int, actual bool True$"):
        check_int("n", True)
    with pytest.raises(TypeError, match=r"^n: expected an int, actual float 2.0$"):
        check_int("n", 2.0)


# ----------------------------------------------------------------- check_float
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_finite_floats_pass_and_come_back_as_python_floats(value):
    out = check_float(NAME, value)
    assert out == value and type(out) is float


@given(st.one_of(st.integers(-(10**6), 10**6), st.floats(-1e6, 1e6)))
def test_ints_and_numpy_numbers_are_numbers(value):
    assert check_float(NAME, np.float32(value)) == float(np.float32(value))
    assert type(check_float(NAME, value)) is float


@given(not_a_number)
def test_float_of_the_wrong_type_is_a_type_error(value):
    with pytest.raises(TypeError) as info:
        check_float(NAME, value)
    _assert_style(info.value)
    assert "expected a number" in str(info.value)


@given(st.sampled_from([math.nan, math.inf, -math.inf, np.float64(np.nan), np.float32(np.inf)]))
def test_nan_and_inf_are_value_errors(value):
    with pytest.raises(ValueError) as info:
        check_float(NAME, value)
    _assert_style(info.value)
    assert "a finite number" in str(info.value)


def test_inf_only_where_allowed_and_nan_never():
    assert check_float(NAME, math.inf, allow_inf=True) == math.inf
    with pytest.raises(ValueError, match="a number \\(not NaN\\)"):
        check_float(NAME, math.nan, allow_inf=True)
    with pytest.raises(ValueError, match="<= 5"):
        check_float(NAME, math.inf, high=5.0, allow_inf=True)


@given(
    st.floats(-1e6, 1e6),
    st.floats(0.0, 1e6),
    st.floats(min_value=1e-3, max_value=1e6),
    st.booleans(),
)
def test_float_range(low, width, outside, strict):
    high = low + width
    for value in (low - outside, high + outside):
        if low <= value <= high:  # rounding left the value on a bound: nothing to test
            continue
        with pytest.raises(ValueError) as info:
            check_float(NAME, value, low=low, high=high, strict=strict)
        _assert_style(info.value)
    if strict:
        with pytest.raises(ValueError, match="> "):
            check_float(NAME, low, low=low, strict=True)
    else:
        assert check_float(NAME, low, low=low, high=high) == low
        assert check_float(NAME, high, low=low, high=high) == high


def test_float_messages():
    with pytest.raises(ValueError, match=r"^x: expected a finite number >= 0, actual -1.0$"):
        check_float("x", -1.0, low=0.0)
    with pytest.raises(ValueError, match=r"^x: expected a finite number > 0, actual 0.0$"):
        check_float("x", 0.0, low=0.0, strict=True)
    with pytest.raises(TypeError, match=r"^x: expected a number, actual str '1'$"):
        check_float("x", "1")


# ----------------------------------------------------------------- the others
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_probability(value):
    if 0.0 <= value <= 1.0:
        assert check_probability(NAME, value) == value
    else:
        with pytest.raises(ValueError) as info:
            check_probability(NAME, value)
        _assert_style(info.value)


@given(st.one_of(st.booleans(), st.just(np.bool_(False))))
def test_bools_pass(value):
    assert check_bool(NAME, value) is bool(value)


@given(st.one_of(st.integers(), st.text(max_size=5), st.none(), st.floats()))
def test_non_bools_are_type_errors(value):
    with pytest.raises(TypeError) as info:
        check_bool(NAME, value)
    _assert_style(info.value)


@given(st.text(max_size=20))
def test_choice(value):
    choices = ("fast", "paper")
    if value in choices:
        assert check_choice(NAME, value, choices) == value
    else:
        with pytest.raises(ValueError) as info:
            check_choice(NAME, value, choices)
        _assert_style(info.value)
        assert "('fast', 'paper')" in str(info.value)
    with pytest.raises(TypeError):
        check_choice(NAME, 3, choices)


@given(st.one_of(st.none(), st.floats(min_value=1e-9, max_value=1e9)))
def test_timeout_passes_positive_seconds_and_none(value):
    assert check_timeout(NAME, value) == value


@given(st.sampled_from([0.0, -1.0, math.inf, math.nan]))
def test_timeout_rejects_zero_negative_and_non_finite(value):
    with pytest.raises(ValueError):
        check_timeout(NAME, value)


# ----------------------------------------------------------------- quote
@given(huge_strings)
def test_huge_values_are_quoted_in_bounded_length(value):
    text = quote(value)
    assert len(text) <= QUOTE_LIMIT + len(f"… ({len(repr(value))} characters)")
    assert text.endswith(f"({len(repr(value))} characters)")
    with pytest.raises(ValueError) as info:
        check_choice(NAME, value, ("a", "b"))
    _assert_style(info.value)
    with pytest.raises(TypeError) as info:
        check_float(NAME, value)
    _assert_style(info.value)


@given(st.text(max_size=QUOTE_LIMIT - 2))
def test_short_values_are_quoted_whole(value):
    if len(repr(value)) <= QUOTE_LIMIT:
        assert quote(value) == repr(value)
