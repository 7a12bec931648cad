"""The one number formatter the views share (simulator.units)."""

from devicefit.simulator.units import format_band, format_estimate, format_figure, format_size


def test_a_band_is_low_to_high_in_the_figures_own_unit():
    assert format_band((3.36, 8.82)) == "3.36 ms–8.82 ms"
    assert format_band((0.5, 2.0)) == "500 us–2.00 ms"
    assert format_band((1024, 4096), format_size) == "1024 B–4096 B"
    assert format_band((-2.0, 3.0), lambda v: format_figure(v, "ms")) == "-2.00 ms–3.00 ms"


def test_a_band_whose_ends_print_alike_is_one_figure():
    # e.g. an Ethos-U estimate with nothing on the Cortex-M: no "182 us–182 us"
    assert format_band((0.182, 0.182)) == "182 us"
    assert format_band((0.1821, 0.1824)) == "182 us"


def test_an_estimate_carries_its_band_in_its_unit():
    assert format_estimate(18.27, "ms", (11.69, 21.74)) == "18.27 ms (likely 11.69 ms–21.74 ms)"
    assert format_estimate(6912, "bytes", [6000, 8000]) == "6912 B (likely 6000 B–8000 B)"
    assert format_estimate(18.27, "ms", None) == "18.27 ms"  # predicted or measured
