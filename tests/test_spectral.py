"""The spectral stepper (steppers/spectral.py) against the single-run oracle (model.reference_train)
and the reference stepper: identical stop iterations and reasons, parameters within 1e-10
relative, with runs in and out of the singular basis in one batch, runs stopping at the loss
target inside a chunk, and runs whose certification fails (exact check, hand-over to the fallback)."""

from __future__ import annotations

import benchmark_scripts
import pytest
import torch
from oracle import assert_matches_reference

from shallowrelu import kernels
from shallowrelu.bench import light_batch
from shallowrelu.datasets import make_trial
from shallowrelu.engine import RunSpec, TrainConfig, train
from shallowrelu.steppers import grouped, spectral
from shallowrelu.steppers.base import StepRule
from shallowrelu.steppers.reference import ReferenceStepper
from shallowrelu.steppers.select import SPECTRAL_ENV, make_stepper, spectral_choice
from shallowrelu.steppers.spectral import SpectralStepper, classify

pytestmark = pytest.mark.usefixtures("one_thread")
RULE = StepRule(2.0, 0.01, 1e-9)  # the authors' convention


@pytest.fixture(params=["numba", "torch"])
def compiled(request):
    if request.param == "numba" and not kernels.use_numba():
        pytest.skip("numba not importable")
    return request.param == "numba"


@pytest.fixture
def counters(monkeypatch):
    c: dict[str, int] = {}
    monkeypatch.setattr(spectral, "COUNTERS", c)
    return c


@pytest.fixture
def small_sizes(monkeypatch):
    """The tests' d = 16 would otherwise stay with the fallback (MIN_POINTS_X_DIM, MIN_STEPS)."""
    monkeypatch.setattr(spectral, "MIN_POINTS_X_DIM", 0)
    monkeypatch.setattr(spectral, "MIN_STEPS", 64)
    monkeypatch.setattr(grouped, "MIN_POINTS_X_DIM", 0)


@pytest.fixture(scope="module")
def late_state():
    """Rich and lazy runs on two datasets (d = 16, m = 25) after 3000 steps: the rich
    uncentred runs have one group on all points (eligible), others not."""
    specs = [RunSpec(make_trial(s, 16, 25, k), 4.0**e, f"{s}{e}") for s, k in (("uncentred", 0), ("centred", 1))
             for e in (1, -4, -7, -9)]
    b = light_batch(specs, torch.device("cpu"))
    make_stepper("fast", RULE, "cpu", False).advance(b, 0, 3000)
    return b


def _rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float(((x - ref).abs() / ref.abs().max()).max())


@pytest.mark.parametrize("target", [1e-9, "mid"])
def test_spectral_matches_the_reference_stepper(late_state, compiled, counters, small_sizes, target):
    """Some runs eligible, some not (the fallback), 4000 steps; ``mid``: a loss target met inside
    the chunk by some eligible runs (identical stop iterations)."""
    b0 = late_state
    small = spectral.small_points(b0.X.shape[1]) if compiled else 0
    ok = torch.cat([classify(b0.W[idx], b0.X[t], small)[0] for t, idx in
                    enumerate(torch.tensor(g) for g in b0.trial_groups())])
    assert 0 < int(ok.sum()) < b0.n_runs
    rule = RULE
    if target == "mid":  # between the eligible runs' objectives now and after 4000 steps
        probe = b0.take(torch.arange(b0.n_runs))
        ReferenceStepper(RULE).advance(probe, 3000, 4000)
        from shallowrelu.model import batched_objective
        lo = batched_objective(probe.W, probe.a, probe.run_X(), probe.run_y(), 2.0)[ok].min()
        hi = batched_objective(b0.W, b0.a, b0.run_X(), b0.run_y(), 2.0)[ok].max()
        rule = StepRule(2.0, 0.01, float((lo * hi) ** 0.5))
    ref = b0.take(torch.arange(b0.n_runs))
    ReferenceStepper(rule).advance(ref, 3000, 4000)
    got = b0.take(torch.arange(b0.n_runs))
    SpectralStepper(rule, ReferenceStepper(rule), compiled=compiled).advance(got, 3000, 4000)
    assert torch.equal(got.stop_iter, ref.stop_iter) and torch.equal(got.running, ref.running)
    if target == "mid":
        assert int((ref.stop_iter >= 3000).sum()) > 0
    assert _rel(got.W, ref.W) < 1e-12 and _rel(got.a, ref.a) < 1e-12
    assert counters["spectral_runs"] == int(ok.sum()) and counters["spectral_steps"] > 0
    assert (counters.get("few_point", 0) > 0) == compiled  # neurons on ≤ 2 points (compiled path)


def test_failed_certification_hands_runs_to_the_fallback(late_state, compiled, counters, small_sizes, monkeypatch):
    """Margins shrunk a million-fold: bounds reach them within blocks, the exact check at the
    run's current state renews them, and a run whose bound reaches them again within
    MIN_REFRESH_STEPS leaves for the fallback there; the iterates stay the reference's."""
    real = spectral.classify

    def tight(W, Xt, limit=0):
        *rest, margin = real(W, Xt, limit)
        return (*rest, margin * 1e-6)

    monkeypatch.setattr(spectral, "classify", tight)
    b0 = late_state
    ref = b0.take(torch.arange(b0.n_runs))
    ReferenceStepper(RULE).advance(ref, 3000, 3000)
    got = b0.take(torch.arange(b0.n_runs))
    SpectralStepper(RULE, ReferenceStepper(RULE), compiled=compiled).advance(got, 3000, 3000)
    assert torch.equal(got.stop_iter, ref.stop_iter) and torch.equal(got.running, ref.running)
    assert _rel(got.W, ref.W) < 1e-12 and _rel(got.a, ref.a) < 1e-12
    assert counters["relaid"] > 0 and counters["left"] > 0


def test_unchanged_weights_keep_their_bits(late_state, compiled, small_sizes):
    """A run with a zero learning rate: W comes back bit for bit (W₀ + (Ω − Ω₀)·U with Ω = Ω₀), so
    the authors' "frozen" rule still sees unchanged weights."""
    b = late_state.take(torch.arange(late_state.n_runs))
    W0 = b.W.clone()
    still = StepRule(2.0, 0.0, 1e-9)
    SpectralStepper(still, ReferenceStepper(still), compiled=compiled).advance(b, 0, 500)
    assert torch.equal(b.W, W0)


def test_classify_main_few_point_and_dead_neurons():
    X = torch.eye(3, dtype=torch.float64) + 0.1
    W = torch.tensor([[[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]],  # main, dead: eligible
                      [[1.0, 1.0, 1.0], [1.0, -5.0, -5.0]],  # main, one on one point only: few-point
                      [[-1.0, -1.0, -1.0], [-2.0, -1.0, -1.0]]], dtype=torch.float64)  # all dead: not
    ok, main, small, cand, margin = classify(W, X)
    assert ok.tolist() == [True, False, False]
    assert main[0].tolist() == [True, False] and margin[0, 1] == float("inf") and 0 < margin[0, 0] < 1.3
    ok, main, small, cand, margin = classify(W, X, limit=1)
    assert ok.tolist() == [True, True, False] and small[1].tolist() == [False, True]
    assert cand[1, 1].tolist() == [True, False, False]
    # its margin: over its other points, min (-w·x_i - rounding)/|x_i| (w·x_1 = w·x_2 = -5.9)
    assert margin[1, 1] == pytest.approx(5.9 / float(torch.linalg.vector_norm(X[1])), rel=1e-9)


@pytest.mark.parametrize("scheme", ["centred", "uncentred"])
def test_engine_with_spectral_matches_the_oracle(compiled, counters, small_sizes, monkeypatch, scheme):
    """engine.train with the default stack (spectral in front of the grouped stepper) against
    model.reference_train: stop iterations and reasons, W, a, logged losses."""
    monkeypatch.setenv(kernels.ENV, "numba" if compiled else "torch")
    tr = make_trial(scheme, 16, 25, 5)
    specs = [RunSpec(tr, 4.0**e, f"{scheme}{e}") for e in (0, -5, -8)]
    cfg = TrainConfig(max_iters=8000, n_log=12, device="cpu", stable_phase="on")
    for spec, res in zip(specs, train(specs, cfg, progress=False)):
        assert_matches_reference(res, spec.trial, spec.lam, 8000, 12)
    assert counters.get("spectral_steps", 0) > 0


def test_spectral_choice(monkeypatch):
    """SHALLOWRELU_SPECTRAL: auto (with the stable phase on the CPU), on, off; a bad value refused
    before training."""
    monkeypatch.delenv(SPECTRAL_ENV, raising=False)
    assert isinstance(make_stepper("fast", RULE, "cpu", True), SpectralStepper)
    assert not isinstance(make_stepper("fast", RULE, "cpu", False), SpectralStepper)
    assert isinstance(make_stepper("fast", RULE, "cpu", True).fallback, grouped.GroupedStepper)
    with spectral_choice("off"):
        assert not isinstance(make_stepper("fast", RULE, "cpu", True), SpectralStepper)
    with spectral_choice("on"):
        from shallowrelu.steppers.select import spectral as decide
        assert decide("cuda", True) and not decide("cuda", False)
    monkeypatch.setenv(SPECTRAL_ENV, "sometimes")
    with pytest.raises(ValueError, match="SHALLOWRELU_SPECTRAL='sometimes'.*auto, on, off"):
        TrainConfig(max_iters=10).validate()


def test_benchmark_script_on_a_checkpoint(late_state, small_sizes, tmp_path, capsys):
    """benchmarks/spectral_vs_grouped.py on a checkpoint file: its on/off record, the states agreeing."""
    import json

    ck = benchmark_scripts.checkpoint(tmp_path / ".checkpoint-test.pkl", late_state,
                                      [f"k{i}" for i in range(late_state.n_runs)], 3000)
    mod = benchmark_scripts.load("spectral_vs_grouped")
    assert mod.main([str(ck), "eligible", "1024", str(tmp_path / "rec.json")]) == 0
    rec = json.loads((tmp_path / "rec.json").read_text())
    assert rec["iteration"] == 3000 and rec["stops_identical"] and rec["max_rel_diff_W"] < 1e-12
    assert [r["spectral"] for r in rec["timings"]] == ["on", "off", "on"]
    assert rec["timings"][0]["counters"]["spectral_steps"] > 0 and rec["timings"][1]["counters"] == {}
    assert mod.main([str(ck), "some"]) == 2 and "Usage" in capsys.readouterr().out


def test_step_floor_script(late_state, tmp_path, capsys):
    """benchmarks/step_floor.py on a checkpoint: a hand-made run's layout (every neuron but one
    active on every point with one direction, the last certainly dead) counted exactly; the
    formulations' operations ordered as their definitions make them (dense ≥ dense masks ≥ point
    lists, spectral only where spectral.classify admits the run); the job floor scaled to the job's
    trials and the steps left; bad arguments refused by name before any work."""
    import json

    b = late_state.take(torch.arange(late_state.n_runs))
    h = b.n_runs - 1  # the hand-made run
    Xt = b.X[int(b.trial[h])]
    v = torch.linalg.solve(Xt, torch.ones(Xt.shape[0], dtype=Xt.dtype))  # X v = 1: active on every point
    b.W[h] = v
    b.W[h, -1] = -v  # pre-activations -1: certainly dead
    ck = benchmark_scripts.checkpoint(tmp_path / ".checkpoint-test.pkl", b, [f"k{i}" for i in range(b.n_runs)], 3000)
    mod = benchmark_scripts.load("step_floor")
    assert mod.main([str(ck), "--job-trials", "4", "--cap", "5000", "--time-steps", "64",
                     "--out", str(tmp_path / "floor.json")]) == 0
    rec = json.loads((tmp_path / "floor.json").read_text())
    (c,) = rec["checkpoints"]
    n, d, m = c["n"], c["d"], c["m"]
    assert (c["iteration"], c["trials"], c["runs_training"]) == (3000, len(b.trial_groups()), int(b.running.sum()))
    first = next(r for r in c["runs"] if r["key"] == b.keys[h])
    assert (first["live"], first["patterns"], first["pattern_points"], first["all_points"]) == (m - 1, 1, n, m - 1)
    assert first["spectral_eligible"] and first["few_point_candidates"] == 0
    assert first["flops_per_step"]["spectral"] == 6.0 * min(n, d) * (m - 1)
    limit = spectral.small_points(n)
    for r in c["runs"]:
        f = r["flops_per_step"]
        assert f["dense"] >= f["grouped_masks"] >= f["grouped_lists"] and f["best"] <= f["grouped_lists"]
        assert (f["spectral"] is not None) == r["spectral_eligible"]
        idx = b.keys.index(r["key"])
        assert r["spectral_eligible"] == bool(classify(b.W[idx:idx + 1], b.X[int(b.trial[idx])], limit)[0])
    ops = 4 / c["trials"] * sum(r["flops_per_step"]["dense"] for r in c["runs"])
    fl = c["floor"]["dense"]
    assert fl["flops_per_step"] == pytest.approx(ops)
    assert fl["step_s"] == pytest.approx(max(ops / 67e12, fl["bytes_per_step"] / 4.8e12))
    assert fl["job_to_cap_s"] == pytest.approx(2000 * fl["step_s"])
    eligible = [r["spectral_eligible"] for r in c["runs"]]
    assert not all(eligible) and "spectral" not in c["floor"]  # a formulation of the whole batch only
    assert c["cpu"]["seconds_per_step"] > 0 and c["cpu"]["share_of_dgemm"] > 0 and rec["cpu_dgemm_gflops"] > 0
    assert "FLOOR" in capsys.readouterr().out
    assert (rec["gpu"], rec["peaks_of"]) == (None, "H200")
    assert mod.peak_rates("NVIDIA H100 80GB HBM3") == (67.0, 3.35, "H100")  # the SXM part
    assert mod.peak_rates("NVIDIA H100 PCIe")[:2] == (51.0, 2.0) and mod.peak_rates("NVIDIA H200")[2] == "H200"
    assert mod.main([str(ck), "--gpu", "NVIDIA H100 PCIe", "--tbps", "1.5", "--out", str(tmp_path / "f2.json")]) == 0
    rec2 = json.loads((tmp_path / "f2.json").read_text())
    assert (rec2["peak_tflops"], rec2["peak_tbps"], rec2["peaks_of"]) == (51.0, 1.5, "H100 PCIe")
    assert mod.main([str(ck), "--gpu", "Tesla T4", "--out", str(tmp_path / "f3.json")]) == 0
    assert "no data-sheet peaks for --gpu 'Tesla T4'" in capsys.readouterr().err
    for bad, why in ((["--tflops", "0"], "--tflops must be > 0"), (["--time-steps", "-1"], "--time-steps"),
                     ([], "no such checkpoint")):
        with pytest.raises(SystemExit):
            mod.main([str(tmp_path / "nonexistent.pkl") if not bad else str(ck)] + bad)
        assert why in capsys.readouterr().err


def test_few_point_limit():
    """small_points(n): n/8 candidate points per run, at most SMALL_POINTS (64 from n = 512)."""
    assert [spectral.small_points(n) for n in (16, 256, 1024, 4096)] == [2, 32, 64, 64]


def test_layout_weights_of_any_rows(late_state):
    """_State.weights(rows) is weights(all)[rows] for any subset: main neurons from Ω, few-point
    ones as stepped (here: moved by hand, differently per run), dead ones untouched."""
    r = next(r for r in range(late_state.n_runs)  # a run with a few-point neuron
             if bool(classify(late_state.W[r:r + 1], late_state.X[late_state.trial[r]], 2)[2].any()))
    Xt, E = late_state.X[late_state.trial[r]], 4
    W = late_state.W[r:r + 1].repeat(E, 1, 1) * torch.linspace(1.0, 1.001, E, dtype=torch.float64)[:, None, None]
    a = late_state.a[r:r + 1].repeat(E, 1)
    bs = spectral._Basis(Xt, late_state.y[late_state.trial[r]])
    t = torch.zeros(E, dtype=torch.long)
    st = spectral._State(W.clone(), a, torch.ones(E, dtype=torch.bool), torch.full((E,), -1, dtype=torch.long),
                         t, t, bs, classify(W, Xt, 2)[1:], True)
    assert st.sm_e.tolist() == sorted(st.sm_e.tolist()) and set(st.sm_e.tolist()) == set(range(E))
    st.Ws += torch.arange(1, st.Ws.shape[0] + 1, dtype=torch.float64)[:, None]
    st.Om += 0.5 * st.mainf[..., None]  # as the steps do: main neurons only
    every = st.weights(torch.ones(E, dtype=torch.bool))
    for rows in ([0, 2], [1], [1, 3], [3]):
        mask = torch.zeros(E, dtype=torch.bool)
        mask[rows] = True
        assert torch.equal(st.weights(mask), every[mask])
    assert torch.equal(every[st.sm_e, st.sm_j], st.Ws)
    other = ~st.main
    other[st.sm_e, st.sm_j] = False
    assert bool(other.any()) and torch.equal(every[other], W[other])  # dead neurons keep their bits


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
def test_spectral_stack_on_device_matches_the_cpu_reference(late_state, counters, small_sizes, device):
    """SHALLOWRELU_SPECTRAL=on with the device's whole stack (on CUDA: the spectral torch path in front
    of the grouped stepper's CUDA graphs and the dense step) from the same state as the CPU reference
    stepper: identical stops, W and a within 1e-12 (benchmarks/gpu_check.sh runs the cuda case)."""
    from shallowrelu.batch import Batch

    ref = late_state.take(torch.arange(late_state.n_runs))
    ReferenceStepper(RULE).advance(ref, 3000, 4000)
    got = Batch.from_state(late_state.state(), torch.device(device))
    with spectral_choice("on"):
        stack = make_stepper("fast", RULE, device, True)
    assert isinstance(stack, SpectralStepper)
    stack.advance(got, 3000, 4000)
    assert torch.equal(got.stop_iter.cpu(), ref.stop_iter) and torch.equal(got.running.cpu(), ref.running)
    assert _rel(got.W.cpu(), ref.W) < 1e-12 and _rel(got.a.cpu(), ref.a) < 1e-12
    assert counters["spectral_steps"] > 0


def test_float32_batches_stay_with_the_fallback(late_state, counters, small_sizes):
    """The movement bound's slack covers float64 rounding only: a float32 batch is not taken."""
    b = late_state.take(torch.arange(late_state.n_runs))
    b.W, b.a, b.X, b.y = b.W.float(), b.a.float(), b.X.float(), b.y.float()
    seen = []

    class Fallback:
        def advance(self, batch, t0, count):
            seen.append(batch.n_runs)
            return count

    SpectralStepper(RULE, Fallback()).advance(b, 3000, 2000)
    assert seen == [b.n_runs] and "spectral_runs" not in counters


def test_svd_cache_is_shared_and_bounded(monkeypatch):
    """Steppers made anew find a trial's SVD cached (the same object); above BASIS_CACHE_BYTES the
    oldest bases are dropped, the newest kept even if it alone is larger."""
    monkeypatch.setattr(spectral, "_BASES", {})
    Xs = [torch.randn(32, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(s)) for s in range(3)]
    y = torch.ones(32, dtype=torch.float64)
    one = SpectralStepper(RULE, None).basis(Xs[0], y)
    assert SpectralStepper(RULE, None).basis(Xs[0].clone(), y.clone()) is one
    assert torch.allclose(one.V @ torch.diag(one.S) @ one.Uh, Xs[0], atol=1e-12)
    monkeypatch.setattr(spectral, "BASIS_CACHE_BYTES", 2 * one.nbytes)
    s = SpectralStepper(RULE, None)
    s.basis(Xs[1], y)
    assert len(spectral._BASES) == 2
    newest = s.basis(Xs[2], y)
    assert list(spectral._BASES.values())[-1] is newest and len(spectral._BASES) == 2
    assert s.basis(Xs[0], y) is not one  # dropped, computed again
    monkeypatch.setattr(spectral, "BASIS_CACHE_BYTES", 0)
    assert s.basis(Xs[1], y) is list(spectral._BASES.values())[0] and len(spectral._BASES) == 1


def test_svd_cache_under_threads(monkeypatch):
    """train-jobs steps jobs in threads of one process: concurrent lookups, inserts and evictions
    (a bound of one basis) raise nothing, and every basis returned is its own X's."""
    import threading

    monkeypatch.setattr(spectral, "_BASES", {})
    monkeypatch.setattr(spectral, "BASIS_CACHE_BYTES", 0)
    Xs = [torch.randn(24, 24, dtype=torch.float64, generator=torch.Generator().manual_seed(s)) for s in range(4)]
    y = torch.ones(24, dtype=torch.float64)
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for k in range(40):
                X = Xs[(i + k) % 4]
                bs = SpectralStepper(RULE, None).basis(X, y)
                assert torch.allclose(bs.V @ torch.diag(bs.S) @ bs.Uh, X, atol=1e-12)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(spectral._BASES) == 1
