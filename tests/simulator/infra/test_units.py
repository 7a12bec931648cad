"""The one number formatter the views share (simulator.infra.units)."""

import pytest

from devicefit.simulator.infra.units import (
    decimal_prefixes,
    format_band,
    format_bytes,
    format_estimate,
    format_figure,
    format_percent,
    format_points,
    format_size,
    format_time_ms,
)


def test_a_band_is_low_to_high_in_the_figures_own_unit():
    assert format_band((3.36, 8.82)) == "3.36 ms–8.82 ms"
    assert format_band((0.5, 2.0)) == "500 us–2.00 ms"
    assert format_band((1024, 4096), format_size) == "1,024 B–4,096 B"
    assert format_band((-2.0, 3.0), lambda v: format_figure(v, "ms")) == "-2.00 ms–3.00 ms"


def test_a_band_whose_ends_print_alike_is_one_figure():
    # e.g. an Ethos-U estimate with nothing on the Cortex-M: no "182 us–182 us"
    assert format_band((0.182, 0.182)) == "182 us"
    assert format_band((0.1821, 0.1824)) == "182 us"


def test_an_estimate_carries_its_band_in_its_unit():
    assert format_estimate(18.27, "ms", (11.69, 21.74)) == "18.27 ms (likely 11.69 ms–21.74 ms)"
    assert format_estimate(6912, "bytes", [6000, 8000]) == "6,912 B (likely 6,000 B–8,000 B)"
    assert format_estimate(18.27, "ms", None) == "18.27 ms"  # predicted or measured


@pytest.mark.parametrize("ms,text", [
    (-273.547, "-273.55 ms"),  # was "-273547 us": a negative margin fell into the us branch
    (-18269285.859, "-18,269.29 s"),  # was "-18269285859 us"
    (0.182, "182 us"), (18.27, "18.27 ms"), (1000.0, "1.00 s"), (18_270_000.0, "18,270.00 s"),
    (-0.004, "-4.0 us"), (0.0, "0 us"),
    # Two significant digits under 10 us: the Edge TPU's 0.61 us printed "1 us" in the text
    # and "0.61 us" on the page; a nonzero time never reads "0 us" (nor "-0 us").
    (0.00061, "0.61 us"), (0.00015, "0.15 us"), (-0.0001, "-0.10 us"), (0.0058, "5.8 us"),
    (0.0000123, "0.012 us"), (1e-9, "< 0.001 us"), (0.0099, "9.9 us"), (0.00996, "10 us"),
    # Where the smaller unit would round to 1000, the larger one: never "1000 us".
    (0.9996, "1.00 ms"), (0.9994, "999 us"), (999.996, "1.00 s"),
])
def test_a_time_is_in_the_unit_that_fits_it_and_keeps_its_sign(ms, text):
    assert format_time_ms(ms) == text
    assert format_figure(ms, "ms") == text


def test_sizes_have_thousands_separators_and_their_budgets_prefixes():
    assert format_size(6912) == "6,912 B"  # was "6912 B" here and "6,912 B" in the text view
    assert format_size(125_304) == "122.4 KiB" and format_size(-55_632.6) == "-54.3 KiB"
    assert format_bytes(125_304) == "125,304 B (122.4 KiB)" and format_bytes(6912) == "6,912 B"
    assert format_bytes(-55_632.6) == "-55,633 B (-54.3 KiB)"
    # A budget written as 50MB is 50,000,000 B and prints as 50.0 MB, not 47.7 MiB.
    assert decimal_prefixes(50_000_000) and format_figure(50_000_000, "bytes", True) == "50.0 MB"
    assert not decimal_prefixes(512 * 1024) and not decimal_prefixes(1_024_000)
    assert format_figure(-0.4, "bytes") == "0 B"


@pytest.mark.parametrize("num_bytes,decimal,text", [
    # A margin of 1,045,000 B printed "1020.5 KiB": four digits move up a prefix.
    (1_045_000, False, "1.0 MiB"), (1_024_000, False, "0.98 MiB"), (999 * 1024, False, "999.0 KiB"),
    (-1_045_000, False, "-1.0 MiB"), (999_960, True, "1.0 MB"), (999_940, True, "999.9 kB"),
    (1024 ** 2, False, "1.0 MiB"), (2 ** 40, False, "1024.0 GiB"),
])
def test_a_size_never_needs_four_digits_before_its_point(num_bytes, decimal, text):
    assert format_size(num_bytes, decimal) == text


def test_shares_are_percentages_and_their_differences_percentage_points():
    assert format_percent(0.9778) == "97.78%" and format_figure(0.9778, "fraction") == "97.78%"
    assert format_percent(0.032, 1, signed=True) == "+3.2%"
    assert format_percent(-0.00001, 1, signed=True) == "0.0%"  # never "-0.0%"
    assert format_points(-0.001) == "0.00 pp"  # was "(-0.00 pp)"
    assert format_points(0.12) == "+0.12 pp" and format_points(-1.5) == "-1.50 pp"
