"""training.stats: t intervals at any n, the exact sign test, Wilson intervals, bad input,
and scipy kept out of the modules the OpenRLHF workers import at startup."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
from scipy.stats import binomtest, norm

from training.stats import Z95, mean_ci, paired_difference, sign_test, wilson_interval


def _plus_minus(n: int) -> list[float]:
    """n values, half +1 and half -1: mean 0, sample sd sqrt(n / (n - 1))."""
    return [1.0 if i % 2 else -1.0 for i in range(n)]


# Two-sided 95% Student-t quantiles to 4 decimals, as printed in t tables (3-decimal tables:
# 2.023 at 39 df; 1.984 at 100 df and 1.980 at 120 df bracket 119 df). Beyond 30 df the old
# hand table fell back to 1.96, 3.1% and 1.0% too narrow here.
T95_39_DF = 2.0227
T95_119_DF = 1.9801


@pytest.mark.parametrize(("n", "t95"), [(40, T95_39_DF), (120, T95_119_DF)])
def test_mean_ci_uses_the_t_quantile_beyond_30_df(n: int, t95: float) -> None:
    mean, half = mean_ci(_plus_minus(n))
    assert mean == 0.0
    assert half == pytest.approx(t95 * math.sqrt(n / (n - 1)) / math.sqrt(n), rel=5e-5)


def test_mean_ci_small_n_and_edges() -> None:
    mean, half = mean_ci([1.0, 2.0, 3.0])  # sd 1, t(0.975, 2 df) = 4.303
    assert mean == 2.0 and half == pytest.approx(4.303 / math.sqrt(3), rel=1e-4)
    mean, half = mean_ci([0.0, 1.0])  # sd sqrt(0.5), t(0.975, 1 df) = 12.706
    assert half == pytest.approx(12.706 * math.sqrt(0.5) / math.sqrt(2), rel=1e-4)
    assert mean_ci([0.5]) == (0.5, 0.0)
    assert all(math.isnan(x) for x in mean_ci([]))


def test_paired_difference_interval_at_40_pairs() -> None:
    diffs = _plus_minus(40)
    d = paired_difference([1.0 + x for x in diffs], [1.0] * 40)
    assert d["n"] == 40 and (d["wins"], d["losses"], d["ties"]) == (20, 20, 0)
    assert d["half"] == pytest.approx(T95_39_DF * math.sqrt(40 / 39) / math.sqrt(40), rel=5e-5)
    assert d["p_sign"] == 1.0


@pytest.mark.parametrize(
    ("better", "worse", "p"),
    [
        (8, 0, 2 / 256),  # both 8-0 tails of Binomial(8, 1/2)
        (7, 1, 2 * (1 + 8) / 256),
        (1, 7, 18 / 256),
        (10, 2, 2 * (1 + 12 + 66) / 4096),
        (3, 0, 0.25),
        (5, 5, 1.0),
        (4, 3, 1.0),  # twice the smaller tail exceeds 1
        (0, 0, 1.0),
        (0, 1, 1.0),
    ],
)
def test_sign_test_by_hand(better: int, worse: int, p: float) -> None:
    assert sign_test(better, worse) == pytest.approx(p, rel=1e-12)


def test_sign_test_is_twice_the_smaller_tail_up_to_40_pairs() -> None:
    for n in range(1, 41):
        for better in range(n + 1):
            tail = sum(math.comb(n, k) for k in range(min(better, n - better) + 1)) / 2**n
            assert sign_test(better, n - better) == pytest.approx(min(1.0, 2 * tail), rel=1e-12)


def test_wilson_interval_by_hand() -> None:
    def near(x: float) -> object:
        return pytest.approx(x, abs=1e-4)

    assert wilson_interval(0, 12) == (0.0, near(0.2425))
    assert wilson_interval(6, 12) == (near(0.2538), near(0.7462))
    assert wilson_interval(12, 12) == (near(0.7575), 1.0)
    # a fractional count (the suite table's share of wins per task): p 0.625 of 12
    assert wilson_interval(7.5, 12) == (near(0.3544), near(0.8350))
    # z = 1: with no successes the upper end is z^2 / (n + z^2) = 1/13
    assert wilson_interval(0, 12, z=1.0) == (0.0, pytest.approx(1 / 13, abs=1e-12))
    assert all(math.isnan(x) for x in wilson_interval(0, 0))


def test_wilson_interval_matches_scipy_for_whole_counts() -> None:
    """The closed form stays (scipy takes whole successes only); scipy checks it."""
    for z in (Z95, 1.0):
        level = norm.cdf(z) - norm.sf(z)
        for trials in range(1, 41):
            for successes in range(trials + 1):
                ci = binomtest(successes, trials).proportion_ci(level, method="wilson")
                low, high = wilson_interval(successes, trials, z=z)
                assert low == pytest.approx(ci.low, abs=1e-12)
                assert high == pytest.approx(ci.high, abs=1e-12)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: sign_test(-1, 3), "better"),
        (lambda: sign_test(2, -1), "worse"),
        (lambda: sign_test(1.5, 2), "better"),
        (lambda: wilson_interval(5, 4), "successes"),
        (lambda: wilson_interval(-1, 4), "successes"),
        (lambda: wilson_interval(math.nan, 4), "successes"),
        (lambda: wilson_interval(0, -1), "trials"),
        (lambda: wilson_interval(1, 2.5), "trials"),
        (lambda: wilson_interval(1, 4, z=0.0), "z"),
        (lambda: wilson_interval(1, 4, z=math.inf), "z"),
    ],
)
def test_bad_counts_name_the_argument(call, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        call()


def test_scipy_is_not_imported_with_the_record_files() -> None:
    """The OpenRLHF workers import training.record_files (for step_group_summary); scipy
    costs about 0.5 s to import and must wait for the first interval."""
    code = "import sys, training.record_files; print('scipy' in sys.modules)"
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root
    )
    assert out.stdout.strip() == "False"
