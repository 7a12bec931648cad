"""Which terms a calibration frees: chosen by the evidence (marginal likelihood), never by
the model held out. The boards are stand-ins (no MCU here): whole-model totals made from
the tables' own estimate times a factor the test chooses, on cached zoo models."""

from __future__ import annotations

import numpy as np
import pytest

from devicefit.simulator.estimate.calibration.fit import (
    TERMS,
    Evidence,
    _design,
    _free,
    calibrate,
    log_evidence,
    prior_of,
)
from devicefit.simulator.estimate.calibration.logs import BoardLog
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.reader import read_model
from tests.zoo import model_path

MODELS = ("chain_int8", "residual_int8", "inception_int8", "mlp_int8")
PROFILE = "stm32l4r5-cortex-m4"


def _totals(factors: dict[str, float]) -> list[Evidence]:
    """Each model's whole-model latency on a board that runs it ``factors[name]`` × the
    tables' estimate."""
    profile = load_profile(PROFILE)
    out = []
    for name, factor in factors.items():
        model = read_model(model_path(name))
        before = prior_of(model, profile).total({}, 0.0)
        out.append(Evidence(name, model, BoardLog("board.csv", "whole-model latency",
                                                  total_ms=factor * before)))
    return out


def test_a_board_the_tables_already_fit_barely_moves() -> None:
    """Four totals within ±6% of the tables, two each way (the scatter ``OBS_SD`` allows):
    the evidence keeps the tables, so neither the fit nor any held-out fit moves them."""
    evidence = _totals(dict(zip(MODELS, (1.06, 0.95, 1.04, 0.97), strict=True)))
    cal = calibrate(load_profile(PROFILE), evidence)
    assert cal.terms == "tables"
    assert set(cal.scale.values()) == {1.0} and cal.extra_overhead_ms == 0.0
    for m in cal.moves:
        assert m.after_ms == pytest.approx(m.before_ms, rel=1e-9)
        assert m.held_out_terms == "tables"
        assert m.held_out_ms == pytest.approx(m.before_ms, rel=1e-9)


def test_a_board_off_in_one_direction_moves_by_its_factor() -> None:
    """The same models 1.4× the tables on this board: the board's factor is chosen (the
    per-group scales would add freedom the totals do not need) and every held-out model
    comes closer."""
    evidence = _totals(dict.fromkeys(MODELS, 1.4))
    cal = calibrate(load_profile(PROFILE), evidence)
    assert cal.terms == "board"
    assert 1.3 < cal.scale["default"] < 1.45
    for m in cal.moves:
        assert m.held_out_terms == "board"
        assert m.held_out_ms is not None
        assert abs(m.held_out_ms / m.measured_ms - 1) < 0.5 * abs(m.before_ms / m.measured_ms - 1)


def test_the_held_out_figure_takes_no_part_in_its_own_fit() -> None:
    """Tripling what the board measured for one model changes the other models' held-out
    fits (it is their evidence) but not its own held-out estimate or terms."""
    factors = dict(zip(MODELS, (1.3, 1.5, 1.35, 1.45), strict=True))
    profile = load_profile(PROFILE)
    first = calibrate(profile, _totals(factors))
    second = calibrate(profile, _totals({**factors, "inception_int8": 3 * 1.35}))
    for a, b in zip(first.moves, second.moves, strict=True):
        if a.name == "inception_int8":
            assert b.measured_ms == pytest.approx(3 * a.measured_ms)
            assert (b.held_out_ms, b.held_out_terms) == (a.held_out_ms, a.held_out_terms)
        else:
            assert b.held_out_ms != a.held_out_ms


def test_log_evidence_is_the_gaussian_marginal_likelihood() -> None:
    """Its columns-space form against the rows' multivariate normal density, directly:
    equal up to one constant for every term set."""
    profile = load_profile(PROFILE)
    evidence = _totals(dict(zip(MODELS, (1.2, 0.9, 1.1, 1.3), strict=True)))
    d = _design([prior_of(e.model, profile) for e in evidence], [e.log for e in evidence])
    gaps = []
    for terms in TERMS:
        free = _free(d, terms)
        xf = d.x[:, free]
        cov = np.eye(len(d.y)) + xf @ np.diag(d.prior_sd[free] ** 2) @ xf.T
        r = d.y - d.x @ d.beta0
        direct = -0.5 * (np.linalg.slogdet(2 * np.pi * cov)[1] + r @ np.linalg.solve(cov, r))
        gaps.append(direct - log_evidence(d, free))
    assert max(gaps) - min(gaps) == pytest.approx(0.0, abs=1e-9)
    assert gaps[0] == pytest.approx(-0.5 * len(d.y) * np.log(2 * np.pi))
