"""gtcontrol.experiments: Gaussianity diagnostics, exact extraction, surrogate, regimes, report."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys

import numpy as np
import pytest
from helpers import wishart_spd
from scipy import integrate, stats
from scipy.special import hyp1f1, ndtr

from gtcontrol import Gaussian, InvalidParametersError, Layer, Result, Status
from gtcontrol._status import Budget
from gtcontrol.experiments import (
    STATISTICS,
    feedforward_closeness,
    gaussianity,
    mardia,
    prescribed_attention_regimes,
    sliced_wasserstein,
)
from gtcontrol.experiments.sample_statistics import _expected_distance, _pair_means, whiten
from gtcontrol.interop import (
    AttentionWeights,
    ExtractedLayer,
    FeedForwardWeights,
    LayerNormWeights,
    activation_statistics,
    extract,
)
from gtcontrol.model.tokens import simulate_tokens


# ---------------------------------------------------------------------------- gaussianity
@pytest.mark.parametrize("seed", [0, 1])
def test_gaussianity_accepts_gaussian_samples(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    x = rng.multivariate_normal(rng.standard_normal(16), wishart_spd(rng, 16), size=4000)
    res = gaussianity(x)
    assert not res.rejected
    assert res.rank == 16
    assert [s.name for s in res.statistics] == list(STATISTICS)
    # Each statistic sits inside its null (|z| < 4 at this size with overwhelming probability).
    assert all(abs(s.z) < 4 for s in res.statistics)


def test_gaussianity_rejects_two_component_mixture() -> None:
    rng = np.random.default_rng(7)
    n, d = 4000, 16
    u = rng.standard_normal(d)
    u /= np.linalg.norm(u)
    # Equal weights, means ±3u, identity covariances: bimodal along one oblique direction.
    # (Mardia's statistics are nearly blind to it; the energy statistic is not.)
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    x = rng.standard_normal((n, d)) + 3.0 * sign[:, None] * u
    res = gaussianity(x)
    assert res.rejected
    assert res.p_value < 1e-4


def test_gaussianity_rejects_laplace_sample() -> None:
    x = np.random.default_rng(8).laplace(size=(4000, 16))
    res = gaussianity(x)
    assert res.rejected
    assert res.statistic("mardia_kurtosis").z > 10
    assert res.statistic("coordinate_rejections").value > 0.9


def test_mardia_blocked_equals_naive_gram() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((701, 9)) @ rng.standard_normal((9, 9))
    z = whiten(x, 1e-9)
    g = z @ z.T
    naive_b1 = float(np.mean(g**3))
    d = np.sqrt(np.maximum(np.diag(g)[:, None] + np.diag(g)[None, :] - 2 * g, 0))
    np.fill_diagonal(d, 0.0)
    for block in (1, 64, 700, 701, 5000):
        b1, dist = _pair_means(z, block)
        assert b1 == pytest.approx(naive_b1, rel=1e-12)
        assert dist == pytest.approx(float(d.mean()), rel=1e-12)
    m = mardia(x, block_size=100)
    assert m.skewness == pytest.approx(naive_b1, rel=1e-12)
    assert m.kurtosis == pytest.approx(float(np.mean(np.diag(g) ** 2)), rel=1e-12)


def test_mardia_kurtosis_null_mean_is_exact() -> None:
    # Mardia (1970): for Gaussian samples E b2 = r(r+2)(N-1)/(N+1) exactly.
    rng = np.random.default_rng(11)
    n, r, reps = 60, 4, 3000
    b2 = np.array([mardia(rng.standard_normal((n, r))).kurtosis for _ in range(reps)])
    exact = r * (r + 2) * (n - 1) / (n + 1)
    assert abs(b2.mean() - exact) < 4 * b2.std() / math.sqrt(reps)


def test_invariant_statistics_are_affine_invariant() -> None:
    rng = np.random.default_rng(4)
    x = rng.laplace(size=(500, 5))
    a = rng.standard_normal((5, 5)) + 3 * np.eye(5)
    y = x @ a.T + rng.standard_normal(5)
    r1, r2 = gaussianity(x, n_null=8), gaussianity(y, n_null=8)
    for name in ("mardia_skewness", "mardia_kurtosis", "energy"):
        assert r2.statistic(name).value == pytest.approx(r1.statistic(name).value, rel=1e-8)
    # Whitening is unique up to a rotation, and a finite set of directions is not rotation
    # invariant: the sliced distance is invariant in distribution only (its null is exact).
    sw1, sw2 = (r.statistic("sliced_wasserstein").value for r in (r1, r2))
    assert sw2 == pytest.approx(sw1, rel=0.1)


def test_expected_distance_matches_hypergeometric_closed_form() -> None:
    # E|a - G| = sqrt(2) Γ((r+1)/2)/Γ(r/2) 1F1(-1/2; r/2; -|a|²/2); scipy's 1F1 is fine here.
    for r in (1, 2, 5, 16):
        sq = np.array([0.0, 0.3, float(r), 4.0 * r])
        c = math.sqrt(2) * math.exp(math.lgamma((r + 1) / 2) - math.lgamma(r / 2))
        ref = c * hyp1f1(-0.5, r / 2, -sq / 2)
        np.testing.assert_allclose(_expected_distance(sq, r), ref, rtol=1e-12)


def test_sliced_wasserstein_one_dimensional_closed_form_matches_quadrature() -> None:
    rng = np.random.default_rng(5)
    y = np.sort(rng.standard_normal(9) * 2 + 1)
    mu, sd = 0.3, 1.7

    def integrand(u: float) -> float:
        return float((y[min(int(u * 9), 8)] - (mu + sd * stats.norm.ppf(u))) ** 2)

    cuts = np.linspace(0, 1, 10)
    ref = sum(integrate.quad(integrand, a, b, limit=200)[0] for a, b in itertools.pairwise(cuts))
    got = sliced_wasserstein(y[:, None], Gaussian([mu], [[sd * sd]]), n_projections=1)
    assert got**2 == pytest.approx(ref, rel=1e-10)


def test_gaussianity_handles_a_layernorm_hyperplane() -> None:
    # Gaussian samples projected on {x : Σ x_i = 0}: rank d − 1, still Gaussian there.
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1000, 12))
    x -= x.mean(axis=1, keepdims=True)
    res = gaussianity(x)
    assert res.rank == 11
    assert not res.rejected


def test_gaussianity_validates_input() -> None:
    x = np.random.default_rng(0).standard_normal((100, 4))
    with pytest.raises(InvalidParametersError, match="samples"):
        gaussianity(x[:5])
    with pytest.raises(InvalidParametersError, match="level"):
        gaussianity(x, level=1.5)
    with pytest.raises(InvalidParametersError, match="n_null"):
        gaussianity(x, n_null=3)
    with pytest.raises(InvalidParametersError, match="samples"):
        gaussianity(np.full((100, 4), np.nan))


def test_import_does_not_load_torch() -> None:
    code = "import sys, gtcontrol, gtcontrol.interop, gtcontrol.experiments\n"
    code += "print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------------------- activation statistics
_ACTIVATION_FUNCTIONS = {
    "gelu": (lambda a: a * ndtr(a), lambda a: ndtr(a) + a * stats.norm.pdf(a)),
    "gelu_tanh": (
        lambda a: 0.5 * a * (1 + math.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a**3))),
        None,
    ),
    "relu": (lambda a: max(a, 0.0), lambda a: float(a > 0)),
    "silu": (lambda a: a / (1 + math.exp(-a)), None),
}


@pytest.mark.parametrize("kind", sorted(_ACTIVATION_FUNCTIONS))
def test_activation_statistics_match_adaptive_quadrature(kind: str) -> None:
    # scipy's adaptive quadrature, independent of the 80-point Gauss–Hermite rule and the closed
    # forms; the derivative by a central difference where no closed form is written here
    f, df = _ACTIVATION_FUNCTIONS[kind]
    if df is None:
        df = lambda a, f=f: (f(a + 1e-5) - f(a - 1e-5)) / 2e-5  # noqa: E731
    for mu, s2 in ((-2.0, 0.3), (0.0, 1.0), (1.5, 4.0), (0.7, 1e-6)):
        lo, hi = mu - 12 * math.sqrt(s2), mu + 12 * math.sqrt(s2)

        def expect(g, mu=mu, s2=s2, lo=lo, hi=hi):  # type: ignore[no-untyped-def]
            dens = stats.norm(mu, math.sqrt(s2)).pdf
            pts = [0.0] if lo < 0.0 < hi else None
            return integrate.quad(lambda a: g(a) * dens(a), lo, hi, epsabs=1e-14, points=pts)[0]

        e_g, e_dg, e_g2 = expect(f), expect(df), expect(lambda a: f(a) ** 2)
        got = activation_statistics(np.array([mu]), np.array([s2]), kind=kind)
        # the central difference leaves ~1e-10 in E σ'
        assert got[0][0] == pytest.approx(e_g, rel=1e-9, abs=1e-12)
        assert got[1][0] == pytest.approx(e_dg, rel=1e-8, abs=1e-10)
        assert got[2][0] == pytest.approx(e_g2 - e_g**2, rel=1e-7, abs=1e-12)


# ---------------------------------------------------------------------------- extraction
def _random_extracted(rng: np.random.Generator, d: int, heads: int, k: int) -> ExtractedLayer:
    # Dense random heads written as projections of width d_head = d: W_Q,h = B_h, W_K,h = I,
    # b_Q,h = u_h, W_V,h = I, W_O,h = V_h and scale 1 give B_h, u_h and V_h exactly.
    eye = np.eye(d)
    att = AttentionWeights(
        np.vstack([0.2 * rng.standard_normal((d, d)) for _ in range(heads)]),
        np.vstack([eye] * heads),
        np.vstack([eye] * heads),
        np.hstack([0.3 * rng.standard_normal((d, d)) for _ in range(heads)]),
        b_Q=0.3 * rng.standard_normal(heads * d),
        b_O=0.1 * rng.standard_normal(d),
        n_heads=heads,
        scale=1.0,
    )
    ln = LayerNormWeights(1 + 0.1 * rng.standard_normal(d), 0.1 * rng.standard_normal(d), 1e-12)
    ffn = FeedForwardWeights(
        rng.standard_normal((k, d)) / math.sqrt(d),
        rng.standard_normal((d, k)) / math.sqrt(k),
        b_in=0.1 * rng.standard_normal(k),
        b_out=0.1 * rng.standard_normal(d),
    )
    return ExtractedLayer(att, ffn, ln, ln, "post-LN")


def test_surrogate_at_a_point_mass_equals_the_token_layer() -> None:
    # With Σ = 0 every approximation of the surrogate is exact (LayerNorm scale, GELU moments,
    # attention of identical tokens), so it must reproduce the token-level layer on one token.
    rng = np.random.default_rng(12)
    ex = _random_extracted(rng, 6, 2, 10)
    m = rng.standard_normal(6)
    pm, ps = ex.propagate(m, np.zeros((6, 6)))
    out = ex.forward(np.tile(m, (3, 1)))["out"][0]
    np.testing.assert_allclose(pm, out, rtol=1e-12, atol=1e-12)
    # Σ stays zero up to the roundoff of the quadrature variance of GELU at s = 0 (~1e-17).
    assert np.max(np.abs(ps)) < 1e-15


def test_attention_moment_step_matches_tokens_in_the_mean_field() -> None:
    # The affine-coordinate trick for the key bias: token-level attention on many Gaussian
    # tokens has the moments that the surrogate's exact Gaussian step predicts, up to O(N^-1/2).
    rng = np.random.default_rng(13)
    d, n = 4, 6000
    ex = _random_extracted(rng, d, 2, 8)
    g = Gaussian(0.3 * rng.standard_normal(d), 0.5 * wishart_spd(rng, d))
    x = g.sample(n, seed=rng)
    y = x + ex.attention(x)
    emp = Gaussian.from_samples(x)
    from gtcontrol import simulate_discrete

    aug_m = np.append(emp.mean, 1.0)
    aug_s = np.zeros((d + 1, d + 1))
    aug_s[:d, :d] = emp.cov
    step = simulate_discrete(ex.attention_layer, Gaussian(aug_m, aug_s), T=1.0)
    pred_m, pred_s = step.mean[-1, :d], step.cov[-1, :d, :d]
    got = Gaussian.from_samples(y)
    scale = math.sqrt(float(np.trace(pred_s)))
    # Sampling error of moments at N = 6000 is ~1/sqrt(N) ≈ 0.013 relative; allow 5x.
    assert np.linalg.norm(got.mean - pred_m) / scale < 0.065
    assert np.linalg.norm(got.cov - pred_s) / np.linalg.norm(pred_s) < 0.065
    assert step.cov[-1, d, :].max() == 0.0  # the affine coordinate never moves


@pytest.fixture(scope="module")
def tiny_bert():  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from _families import random_model

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        net = random_model("bert").double()  # d = 32, two layers, exact GELU
        with torch.no_grad():  # non-zero biases and LayerNorm parameters: every term counts
            for p in net.parameters():
                p.add_(0.3 * torch.randn_like(p))
    return net


def test_extraction_is_exact_on_a_tiny_random_bert(tiny_bert) -> None:  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(14).standard_normal((50, 32))
    h = torch.tensor(x)[None]
    extracted = extract(tiny_bert).layers
    assert len(extracted) == 2
    for lay, ex in zip(tiny_bert.encoder.layer, extracted, strict=True):
        cap: dict[str, object] = {}
        hook = lay.attention.output.dense.register_forward_hook(
            lambda mod, inp, out, cap=cap: cap.__setitem__("att", out)
        )
        with torch.inference_mode():
            res = lay(h)
        hook.remove()
        out = (res[0] if isinstance(res, tuple) else res)[0].numpy()
        mine = ex.forward(h[0].numpy())
        att_err = np.max(np.abs(mine["attention"] - cap["att"][0].numpy()))
        # The contract is 1e-5; in float64 the agreement is at roundoff (~1e-14).
        assert att_err < 1e-11
        assert np.max(np.abs(mine["out"] - out)) < 1e-11
        assert np.abs(ex.key_tilt).max() > 0.01  # the query bias really enters
        h = res[0] if isinstance(res, tuple) else res
        h = h.detach()


def test_stabilize_model_tabulates_a_tiny_random_bert(tiny_bert) -> None:  # type: ignore[no-untyped-def]
    """Every layer of a random-init BERT (d = 33 with the affine coordinate) stabilized around
    ``N(e, I ⊕ 0)`` with 128 tokens: each row is its result's figures, design rate included,
    and the Markdown table has one line per row."""
    from gtcontrol.experiments import stabilize_model

    table = stabilize_model(tiny_bert, targets=["identity"], token_check=128)
    assert table.success, table.message
    assert len(table.rows) == len(table.results) == 2
    for row, res in zip(table.rows, table.results, strict=True):
        assert res.success and row.status is res.status
        assert row.c == res.c and row.design_rate == res.stats["design_rate"] >= 1.0
        assert row.abscissa == res.spectrum.abscissa <= -1.0
        tc = res.token_certificate
        assert tc is not None and row.token_w2 == tc.w2 <= 2.0 * tc.floor
        assert row.row()["design_rate"] == row.design_rate
    lines = table.markdown().splitlines()
    assert "| design rate |" in lines[0] and len(lines) == 2 + len(table.rows)
    assert lines[2].startswith(f"| 0 | identity | head | {table.rows[0].change:.5g} | ")


def test_stabilize_model_cut_by_its_time_limit_says_so(tiny_bert, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A table cut by its time limit ends within ``max(1 s, 10 %)`` of it (plus 0.5 s of
    scheduling noise), is ``BUDGET_EXHAUSTED``, not ``FAILED`` (nothing contradicted a
    certificate), and keeps every row it finished with its result; how many rows fit in the
    limit is the machine's business (none, on a busy one). (The data tokens, computed within
    the same limit, are computed beforehand here, so that the limit cuts the rows and not the
    forward pass.)"""
    import sys
    import time

    from gtcontrol.experiments import data_tokens, stabilize_model
    from gtcontrol.interop import extract

    em = extract(tiny_bert)
    ready = data_tokens(em)
    module = sys.modules["gtcontrol.experiments.stabilization"]
    monkeypatch.setattr(module, "data_tokens", lambda *args, **kwargs: ready)
    limit = 0.05
    clock = time.perf_counter()
    table = stabilize_model(em, targets=["identity"], token_check=128, time_limit=limit)
    assert time.perf_counter() - clock <= limit + 1.0 + 0.5
    assert table.status is Status.BUDGET_EXHAUSTED, table.message
    assert "the time limit ran out" in table.message
    assert len(table.rows) == len(table.results) <= 2
    for row, res in zip(table.rows, table.results, strict=True):
        assert row.status is res.status is not Status.FAILED


def test_extraction_rejects_a_non_transformer() -> None:
    pytest.importorskip("torch")
    with pytest.raises(InvalidParametersError, match="expected a transformers model"):
        extract(object())


# ---------------------------------------------------------------------------- regimes, ReLU
def test_prescribed_attention_regimes() -> None:
    res = prescribed_attention_regimes(d=4, n_tokens=600, seed=1, n_layers=40)
    rows = {r.name: r for r in res.rows}
    collapse, conv, blow = rows["opposite"], rows["opposite+A"], rows["same"]
    assert res.status is Status.SUCCESS and res.success
    # The kinds are those of gtcontrol.analyze (Σ → 0 is a collapse, not "bounded").
    assert collapse.predicted == "collapses" and collapse.token_layer is None
    assert conv.predicted == "converges"
    assert collapse.moment_layer is None
    assert collapse.max_cov_error < 0.1 and collapse.agree_until == 40
    assert conv.moment_layer is None
    # The discrete recursion converges to the equilibrium Σ* = B⁻¹ of the ODE (M(Σ*) = 0).
    assert conv.final_trace_moments == pytest.approx(conv.equilibrium_trace, rel=1e-5)
    assert blow.predicted == "blowup"
    assert blow.blowup_layer_theory == pytest.approx(20.0, rel=1e-12)  # T = 2 T*
    # The exact Gaussian recursion of the residual stack crosses tr Σ > 1e3 tr Σ0 a few layers
    # after the continuous-depth T* (a finite step cannot diverge, it grows super-exponentially).
    assert blow.moment_layer is not None
    assert 0 <= blow.moment_layer - blow.blowup_layer_theory <= 6
    assert blow.agree_until >= 5  # tokens follow the moments for the first layers


@pytest.mark.parametrize(("d", "seed"), [(2, 0), (4, 1), (6, 2)])
def test_predicted_regimes_are_what_analyze_returns(d: int, seed: int) -> None:
    """Issue 13.5: the experiment's regime names are gtcontrol.analyze's kinds, for its layers."""
    from gtcontrol import analyze
    from gtcontrol.analysis.regimes import REGIME_KINDS as ANALYZE_KINDS
    from gtcontrol.experiments import regimes
    from gtcontrol.experiments._common import random_spd
    from gtcontrol.experiments.report_tables import regime_table

    assert set(regimes.PRESCRIBED_KINDS) <= set(ANALYZE_KINDS)
    rng = np.random.default_rng(seed)
    b_mat = random_spd(rng, d, 0.5, 1.5)
    g0 = Gaussian(0.2 * rng.standard_normal(d), random_spd(rng, d, 0.5, 1.5))
    root = g0.factor()
    t_star = 1.0 / float(np.linalg.eigvalsh(root @ (2.0 * b_mat) @ root)[-1])
    configs = regimes._configs(b_mat, t_star)
    assert [c.kind for c in configs] == list(regimes.PRESCRIBED_KINDS)
    for cfg in configs:
        reg = analyze(cfg.layer, g0)
        assert reg.success and reg.certificate in ("exact", "global"), (cfg.name, reg.message)
        assert reg.kind == cfg.kind, (cfg.name, reg.kind, reg.message)
        if cfg.kind == "blowup":  # the experiment's T* is analyze's
            assert reg.blowup_time == pytest.approx(t_star, rel=1e-9)
    # ... and the report's table prints exactly those kinds in its "predicted" column.
    _, head, rows = regime_table(
        prescribed_attention_regimes(d=d, n_tokens=10 * d + 20, seed=seed, n_layers=4)
    )
    col = head.index("predicted")
    assert [row[col] for row in rows] == list(regimes.PRESCRIBED_KINDS)


def test_feedforward_closeness_identity_stays_relu_departs() -> None:
    res = feedforward_closeness(d=4, n_tokens=600, seed=1, T=2.0, n_points=3, n_projections=32)
    ident, relu = res.curves
    assert ident.moment_gap[0] < 1e-12 and relu.moment_gap[0] < 1e-12  # same start
    assert relu.moment_gap[-1] > 5 * ident.moment_gap[-1]
    # ReLU tokens leave the Gaussian family; identity tokens stay at the sampling floor.
    # (This seed's identity cloud does not expand; when it does, the finite-N softmax can make
    # the identity case drift too, e.g. seed 2.)
    assert relu.to_own[-1] > 2 * relu.to_own[0]
    assert ident.to_own[-1] < 1.5 * ident.to_own[0]


def test_simulate_tokens_is_used_with_discrete_layers() -> None:
    # Guard for the dependency: a one-layer discrete stack moves tokens by x + h v(x).
    x = np.random.default_rng(0).standard_normal((20, 2))
    tr = simulate_tokens(Layer(A=np.eye(2)), x, 1.0, method="discrete", steps_per_layer=1)
    np.testing.assert_allclose(tr.final_tokens, 2 * x, rtol=1e-14)


# ---------------------------------------------------------------------------- result protocol
def _assert_protocol(res: object, status: Status) -> None:
    assert isinstance(res, Result), type(res).__name__
    assert res.status is status, (res.status, res.message)
    assert res.success is (status is Status.SUCCESS)
    assert isinstance(res.message, str) and res.message
    assert isinstance(res.stats, dict)


class _OneUnit(Budget):
    """A Budget whose loop check lets exactly one unit of work start (deterministic cut-off);
    its ticks never run out."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(None)
        self.checks = 0

    @property
    def exhausted(self) -> bool:
        self.checks += 1
        return self.checks > 1

    def tick(self, n: int = 1) -> None:
        self.count += n

    def reason(self) -> str:
        return "the test budget was reached"


def test_gaussianity_follows_the_protocol() -> None:
    x = np.random.default_rng(20).standard_normal((300, 3))
    res = gaussianity(x, n_null=8)
    _assert_protocol(res, Status.SUCCESS)
    assert "not rejected" in res.message
    assert res.stats["n_null"] == res.stats["n_null_done"] == 8


def test_gaussianity_time_limit_returns_the_sample_statistics_quickly() -> None:
    """The promise, not how much fitted (it holds beside two CPU hogs): a tiny limit ends
    within ``max(1 s, 10 %)`` with ``BUDGET_EXHAUSTED`` and no replicate; the sample's own
    statistics are kept when their wrap-up fitted in the grace, else the message says so."""
    # A (N, rank) whose null is not cached yet: a tiny limit stops before the first replicate.
    x = np.random.default_rng(21).standard_normal((1237, 24))
    res = gaussianity(x, n_null=32, time_limit=1e-6)
    _assert_protocol(res, Status.BUDGET_EXHAUSTED)
    assert "the time limit of 1e-06 s" in res.message and res.stats["n_null_done"] == 0
    assert res.stats["seconds"] < 1.0
    own = [s.value for s in res.statistics[:4]]  # the invariant statistics, computed together
    if not all(np.isfinite(own)):  # their wrap-up did not fit: none is given, and it is said
        assert all(math.isnan(v) for v in own)
        assert "before the sample's own statistics were all computed" in res.message
    assert math.isnan(res.p_value) and not res.rejected
    # The cut-short null was not cached: a run without a limit completes.
    full = gaussianity(x[:300, :4], n_null=8)
    assert full.status is Status.SUCCESS


def test_gaussianity_validates_time_limit() -> None:
    x = np.random.default_rng(0).standard_normal((100, 4))
    for bad in (0.0, -1.0, "1", float("nan")):
        with pytest.raises(InvalidParametersError, match="time_limit"):
            gaussianity(x, time_limit=bad)
    with pytest.raises(InvalidParametersError, match="n_null"):
        gaussianity(x, n_null=10**6)
    with pytest.raises(TypeError):
        gaussianity(x, 0.01)  # type: ignore[misc]  # options are keyword-only


def test_prescribed_attention_regimes_time_limit() -> None:
    res = prescribed_attention_regimes(d=4, n_tokens=600, seed=1, n_layers=40, time_limit=1e-6)
    _assert_protocol(res, Status.BUDGET_EXHAUSTED)
    assert res.rows == () and res.traces == {}
    assert "0 of 3" in res.message and res.stats["seconds"] < 5


def test_prescribed_attention_regimes_keeps_the_configurations_done(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from gtcontrol.experiments import regimes

    monkeypatch.setattr(regimes, "Budget", _OneUnit)
    res = prescribed_attention_regimes(d=4, n_tokens=300, seed=1, n_layers=20)
    _assert_protocol(res, Status.BUDGET_EXHAUSTED)
    assert [r.name for r in res.rows] == ["opposite"] and list(res.traces) == ["opposite"]
    assert res.rows[0].predicted == "collapses"
    assert "1 of 3" in res.message


def test_feedforward_closeness_follows_the_protocol_and_time_limit(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    res = feedforward_closeness(d=2, n_tokens=200, seed=0, T=0.5, n_points=2, n_projections=8)
    _assert_protocol(res, Status.SUCCESS)
    for c in res.curves:
        _assert_protocol(c, Status.SUCCESS)
    cut = feedforward_closeness(
        d=2, n_tokens=200, seed=0, T=0.5, n_points=2, n_projections=8, time_limit=1e-6
    )
    _assert_protocol(cut, Status.BUDGET_EXHAUSTED)
    assert cut.curves == ()

    from gtcontrol.experiments import closure

    monkeypatch.setattr(closure, "Budget", _OneUnit)
    one = closure.feedforward_closeness(
        d=2, n_tokens=200, seed=0, T=0.5, n_points=2, n_projections=8
    )
    assert one.status is Status.BUDGET_EXHAUSTED
    assert [c.activation for c in one.curves] == ["identity"]
