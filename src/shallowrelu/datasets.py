"""Datasets and initialisations of the paper's experiments (Sec. 8, App. I; SPEC §2).

Conventions used throughout the package: training inputs are the *rows* of ``X`` with
shape ``(n, d)`` (the paper's columns of X ∈ R^{d×n}); the hidden weights are the rows of
``W`` with shape ``(m, d)``. A *trial* is fixed by ``(scheme, d, m, seed)``: it owns the
dataset, the teacher, the evaluation sets and the unscaled initialisation ``z, s``. The
initialisation scale λ only rescales ``z`` (the authors' paired design), so all λ values of
one trial share everything else.

Random streams: the dataset and its evaluation sets are drawn from a stream keyed by
``(scheme, d, seed)`` and the initialisation from one keyed by ``(scheme, d, m, seed)``,
so the trials of different widths at one ``(scheme, d, seed)`` share their dataset.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

SCHEMES: tuple[str, ...] = ("centred", "uncentred", "two-teacher-centred", "two-teacher-uncentred")
"""Dataset schemes: Sec. 8's two, and Appendix I's two-teacher variants of each."""

DEFAULT_RHO: dict[str, float] = {
    "centred": 1.0,
    "uncentred": math.sqrt(2.0) - 1.0,
    "two-teacher-centred": 1.0,
    "two-teacher-uncentred": math.sqrt(2.0) - 1.0,
}
"""The noise multiplier ρ of each scheme (points ~ N(μ, (ρ/d) I_d))."""

_SCHEME_CODE = {name: i for i, name in enumerate(SCHEMES)}
_MAX_REJECTIONS = 10_000


def check_scheme(scheme: str) -> str:
    """Return ``scheme`` if known, else raise a ValueError naming the allowed values."""
    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}; allowed: {', '.join(SCHEMES)}")
    return scheme


def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0)


@dataclass(frozen=True)
class Teacher:
    """A sum of signed teacher neurons: f(x) = Σ_k sign_k · relu(v_k · x).

    The single-teacher schemes have one neuron ``v*`` with sign +1; Appendix I has two.
    """

    vectors: np.ndarray  # (k, d)
    signs: np.ndarray  # (k,)

    def __call__(self, X: np.ndarray) -> np.ndarray:
        return relu(X @ self.vectors.T) @ self.signs

    @property
    def primary(self) -> np.ndarray:
        """v* (the first, positive teacher neuron): the target of the positive bundle."""
        return self.vectors[0]


@dataclass
class Trial:
    """One trial: dataset, teacher, evaluation sets and unscaled initialisation.

    ``z`` has rows z_j ~ N(0, I_d/(d m)) and ``s`` entries uniform on {−1, +1}; at scale λ
    the network starts at w_j = λ z_j, a_j = s_j ‖w_j‖ (balanced, SPEC §1).
    """

    scheme: str
    d: int
    m: int
    seed: int
    rho: float
    X: np.ndarray  # (n, d) training inputs (rows)
    y: np.ndarray  # (n,)
    teacher: Teacher
    mu: np.ndarray  # (d,) the centre of the input distribution
    z: np.ndarray  # (m, d)
    s: np.ndarray  # (m,) in {−1, +1}
    eval_sets: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return self.X.shape[0]

    def init(self, lam: float) -> tuple[np.ndarray, np.ndarray]:
        """Balanced initialisation at scale λ: returns (W, a) with W = λ z, a_j = s_j ‖w_j‖."""
        check_lambda(lam)
        W = lam * self.z
        with np.errstate(over="ignore"):  # a huge λ overflows to inf: the engine stops that run as diverged
            a = self.s * np.linalg.norm(W, axis=1)
        return W, a

    # -- portable storage -------------------------------------------------------------
    def to_arrays(self) -> dict[str, np.ndarray]:
        """Named arrays of the trial (the documented ``trial.npz`` format, see io.py)."""
        arrays: dict[str, np.ndarray] = {
            "X": self.X,
            "y": self.y,
            "teacher_vectors": self.teacher.vectors,
            "teacher_signs": self.teacher.signs,
            "mu": self.mu,
            "z": self.z,
            "s": self.s,
            "meta_scheme": np.array(self.scheme),
            "meta_d": np.array(self.d),
            "meta_m": np.array(self.m),
            "meta_seed": np.array(self.seed),
            "meta_rho": np.array(self.rho),
        }
        for name, (Xe, ye) in self.eval_sets.items():
            arrays[f"eval_{name}_X"] = Xe
            arrays[f"eval_{name}_y"] = ye
        return arrays

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> Trial:
        names = sorted({k[5:-2] for k in arrays if k.startswith("eval_") and k.endswith("_X")})
        return cls(
            scheme=str(arrays["meta_scheme"]),
            d=int(arrays["meta_d"]),
            m=int(arrays["meta_m"]),
            seed=int(arrays["meta_seed"]),
            rho=float(arrays["meta_rho"]),
            X=np.asarray(arrays["X"]),
            y=np.asarray(arrays["y"]),
            teacher=Teacher(np.asarray(arrays["teacher_vectors"]), np.asarray(arrays["teacher_signs"])),
            mu=np.asarray(arrays["mu"]),
            z=np.asarray(arrays["z"]),
            s=np.asarray(arrays["s"]),
            eval_sets={nm: (np.asarray(arrays[f"eval_{nm}_X"]), np.asarray(arrays[f"eval_{nm}_y"])) for nm in names},
        )

    def save(self, path: str | Path) -> None:
        from .io import atomic_save_npz

        atomic_save_npz(path, self.to_arrays())

    @classmethod
    def load(cls, path: str | Path) -> Trial:
        with np.load(path, allow_pickle=False) as f:
            return cls.from_arrays({k: f[k] for k in f.files})


def check_lambda(lam: float) -> float:
    if not (isinstance(lam, (int, float, np.floating)) and math.isfinite(lam) and lam > 0):
        raise ValueError(f"initialisation scale λ must be a finite number > 0, got {lam!r}")
    return float(lam)


def check_sizes(d: int, m: int) -> None:
    if not isinstance(d, (int, np.integer)) or d < 2:
        raise ValueError(f"input dimension d must be an integer >= 2, got {d!r}")
    if not isinstance(m, (int, np.integer)) or m < 1:
        raise ValueError(f"network width m must be an integer >= 1, got {m!r}")


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def _max_angle_ok(X: np.ndarray, v: np.ndarray) -> bool:
    """True when every angle between v and a row of X is at most π/2 (i.e. X v >= 0)."""
    return bool(np.all(X @ v >= 0.0))


def _draw_single(rng: np.random.Generator, scheme: str, d: int, rho: float):
    """One draw of a single-teacher dataset, before the rejection test (SPEC §2)."""
    sd = math.sqrt(rho / d)
    mu = _unit(rng.standard_normal(d))
    X = mu + sd * rng.standard_normal((d, d))
    if scheme == "centred":
        v = mu.copy()
    else:  # uncentred: the teacher is the direction of one extra point x_0
        v = _unit(mu + sd * rng.standard_normal(d))
    return mu, X, Teacher(v[None, :], np.array([1.0]))


def _draw_two_teacher(rng: np.random.Generator, scheme: str, d: int, rho: float):
    """One draw of Appendix I's dataset: n = d points around μ and n around −μ."""
    sd = math.sqrt(rho / d)
    mu = _unit(rng.standard_normal(d))
    X = np.concatenate([mu + sd * rng.standard_normal((d, d)), -mu + sd * rng.standard_normal((d, d))])
    if scheme == "two-teacher-centred":
        v1, v2 = mu.copy(), -3.0 * mu
    else:
        v1 = _unit(mu + sd * rng.standard_normal(d))
        v2 = 3.0 * _unit(-mu + sd * rng.standard_normal(d))
    return mu, X, Teacher(np.stack([v1, v2]), np.array([1.0, -1.0]))


def _accept(scheme: str, X: np.ndarray, teacher: Teacher) -> bool:
    if scheme.startswith("two-teacher"):
        half = X.shape[0] // 2
        return _max_angle_ok(X[:half], teacher.vectors[0]) and _max_angle_ok(X[half:], teacher.vectors[1])
    return _max_angle_ok(X, teacher.primary)


def make_trial(scheme: str, d: int, m: int, seed: int, rho: float | None = None) -> Trial:
    """Draw the trial ``(scheme, d, m, seed)``: dataset (with the rejection rule), evaluation
    sets and the unscaled balanced initialisation.

    Evaluation sets: ``test_q`` (n/4 points), ``test_1`` (n) and ``test_4`` (4n) from
    N(0, I_d) (out of distribution, Fig. 2/9) and ``val`` (n fresh points of the training
    scheme), all labelled by the trial's teacher.
    """
    check_scheme(scheme)
    check_sizes(d, m)
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    rho = DEFAULT_RHO[scheme] if rho is None else float(rho)
    if not (math.isfinite(rho) and rho > 0):
        raise ValueError(f"noise multiplier rho must be > 0, got {rho!r}")
    code = _SCHEME_CODE[scheme]
    data_rng = np.random.default_rng(np.random.SeedSequence([int(seed), int(d), code, 0]))
    draw = _draw_two_teacher if scheme.startswith("two-teacher") else _draw_single
    for _ in range(_MAX_REJECTIONS):
        mu, X, teacher = draw(data_rng, scheme, d, rho)
        if _accept(scheme, X, teacher):
            break
    else:  # pragma: no cover - needs an absurd rho
        raise RuntimeError(f"no dataset passed the π/2 rejection rule in {_MAX_REJECTIONS} draws (rho={rho})")
    n = X.shape[0]
    y = teacher(X)

    eval_rng = np.random.default_rng(np.random.SeedSequence([int(seed), int(d), code, 1]))
    eval_sets: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name, size in (("test_q", max(1, n // 4)), ("test_1", n), ("test_4", 4 * n)):
        Xe = eval_rng.standard_normal((size, d))
        eval_sets[name] = (Xe, teacher(Xe))
    # in-distribution validation points around the same centre(s)
    sd = math.sqrt(rho / d)
    if scheme.startswith("two-teacher"):
        half = n // 2
        Xv = np.concatenate([mu + sd * eval_rng.standard_normal((half, d)),
                             -mu + sd * eval_rng.standard_normal((half, d))])
    else:
        Xv = mu + sd * eval_rng.standard_normal((n, d))
    eval_sets["val"] = (Xv, teacher(Xv))

    init_rng = np.random.default_rng(np.random.SeedSequence([int(seed), int(d), code, 2, int(m)]))
    z = init_rng.standard_normal((m, d)) / math.sqrt(d * m)
    s = init_rng.choice(np.array([-1.0, 1.0]), size=m)
    return Trial(scheme, int(d), int(m), int(seed), rho, X, y, teacher, mu, z, s, eval_sets)


def trial_from_data(
    X: np.ndarray,
    teacher: Teacher,
    m: int,
    seed: int,
    name: str = "custom",
) -> Trial:
    """A trial on a given dataset (e.g. the Appendix G families): labels from ``teacher``,
    initialisation z ~ N(0, I/(d m)), s uniform ±1, from ``seed``; no evaluation sets."""
    X = np.asarray(X, dtype=np.float64)
    n, d = X.shape
    check_sizes(d, m)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), int(d), 99, 2, int(m)]))
    z = rng.standard_normal((m, d)) / math.sqrt(d * m)
    s = rng.choice(np.array([-1.0, 1.0]), size=m)
    return Trial(name, d, int(m), int(seed), float("nan"), X, teacher(X), teacher, teacher.primary.copy(), z, s, {})
