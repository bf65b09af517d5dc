"""Measurements of a network (SPEC §3), batched over runs: angles, norms, the bundle vector.

All functions take torch tensors with a leading run dimension R: ``W`` (R, m, d), ``a``
(R, m), group masks (R, m). Angles are returned in degrees.

Accurate angles. ``arccos`` of a float64 cosine cannot resolve angles below ~1e-8 rad
(cos θ = 1 − θ²/2 rounds to 1). We use instead θ = 2·atan2(‖û − v̂‖, ‖û + v̂‖) for unit
vectors û, v̂, which is accurate to rounding of the inputs at every angle in [0, π]. For the
pairwise angles within a group we subtract the group's mean direction c from every unit
vector before forming a Gram matrix, so ‖û_i − û_j‖² = ‖e_i‖² + ‖e_j‖² − 2 e_i·e_j with
e = û − c is computed without the catastrophic cancellation of 2 − 2 û_i·û_j. The authors'
``arccos`` form (diagonal included in the mean's sum, divided by k(k−1)) is kept alongside.
"""

from __future__ import annotations

import math

import torch

RAD2DEG = 180.0 / math.pi


def unit_rows(V: torch.Tensor) -> torch.Tensor:
    """Rows scaled to unit length (zero rows stay zero)."""
    norm = torch.linalg.vector_norm(V, dim=-1, keepdim=True)
    return V / torch.where(norm > 0, norm, torch.ones_like(norm))


def angle_between(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Accurate angle in radians between vectors along the last dimension (broadcasts).

    θ = 2·atan2(‖û − v̂‖, ‖û + v̂‖); NaN where either vector is zero.
    """
    uu, vv = unit_rows(u), unit_rows(v)
    ang = 2.0 * torch.atan2(torch.linalg.vector_norm(uu - vv, dim=-1), torch.linalg.vector_norm(uu + vv, dim=-1))
    zero = (torch.linalg.vector_norm(u, dim=-1) == 0) | (torch.linalg.vector_norm(v, dim=-1) == 0)
    return torch.where(zero, torch.full_like(ang, float("nan")), ang)


def pairwise_angle_stats(W: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Max and mean pairwise angle (degrees) between the rows of W selected by ``mask``.

    Returns per run: ``max``, ``mean`` (accurate, over pairs j ≠ j'), ``max_arccos``,
    ``mean_arccos`` (the authors' form: arccos of the clipped cosine, the mean's sum over all
    ordered pairs including j = j' divided by k(k−1)), and ``count`` k. Runs with k < 2 get NaN.
    """
    # only the selected rows matter: move them to the front (in order) and drop the columns
    # beyond the largest group, so the pair arrays are (k_max × k_max) instead of (m × m)
    kmax = max(2, int(mask.sum(1).max())) if mask.numel() else 2
    if kmax < mask.shape[1]:
        order = torch.sort((~mask).to(torch.int8), dim=1, stable=True).indices[:, :kmax]
        W = torch.gather(W, 1, order.unsqueeze(-1).expand(-1, -1, W.shape[-1]))
        mask = torch.gather(mask, 1, order)
    R, m, _ = W.shape
    maskf = mask.to(W.dtype)
    k = maskf.sum(1)
    U = unit_rows(W) * maskf.unsqueeze(-1)
    centre = U.sum(1) / k.clamp_min(1).unsqueeze(-1)
    E = (U - centre.unsqueeze(1)) * maskf.unsqueeze(-1)
    G = torch.bmm(E, E.transpose(1, 2))
    g = torch.diagonal(G, dim1=1, dim2=2)
    D2 = (g.unsqueeze(2) + g.unsqueeze(1) - 2.0 * G).clamp(0.0, 4.0)
    ang = 2.0 * torch.atan2(D2.sqrt(), (4.0 - D2).sqrt()) * RAD2DEG
    pair = mask.unsqueeze(2) & mask.unsqueeze(1)
    eye = torch.eye(m, dtype=torch.bool, device=W.device).unsqueeze(0)
    off = pair & ~eye
    npairs = k * (k - 1)
    nan = torch.full_like(k, float("nan"))
    ok = k >= 2
    max_acc = torch.where(off, ang, torch.zeros_like(ang)).amax(dim=(1, 2))
    mean_acc = torch.where(off, ang, torch.zeros_like(ang)).sum(dim=(1, 2)) / npairs.clamp_min(1)

    C = torch.bmm(U, U.transpose(1, 2)).clamp(-1.0, 1.0)
    acos = torch.arccos(C) * RAD2DEG
    max_acos = torch.where(pair, acos, torch.zeros_like(acos)).amax(dim=(1, 2))
    mean_acos = torch.where(pair, acos, torch.zeros_like(acos)).sum(dim=(1, 2)) / npairs.clamp_min(1)
    return {
        "max": torch.where(ok, max_acc, nan),
        "mean": torch.where(ok, mean_acc, nan),
        "max_arccos": torch.where(ok, max_acos, nan),
        "mean_arccos": torch.where(ok, mean_acos, nan),
        "count": k,
    }


def nuclear_norm(W: torch.Tensor) -> torch.Tensor:
    """Σ of singular values of each W (R, m, d), on the host in float64.

    The singular values of W are those of the triangular factor R of a QR decomposition of
    Wᵀ (m ≤ d) or of W (m > d), a min(m, d)-square matrix, so the SVD runs on that (backward
    stable: errors ~u·σ_max per singular value, unlike the ~√u·σ_max of the Gram matrix's
    eigenvalues). On the CPU this is ~2.5× faster than the SVD of W at m = 200, d = 1024; CUDA
    tensors are copied to the host (cuSOLVER's batched SVD of such shapes is slow). Runs with a
    non-finite weight get NaN.
    """
    Wh = W.detach().to("cpu", torch.float64)
    out = torch.full(Wh.shape[:1], float("nan"), dtype=torch.float64)
    ok = torch.isfinite(Wh).flatten(1).all(1)
    if bool(ok.any()):
        A = Wh[ok]
        if A.shape[1] <= A.shape[2]:
            A = A.transpose(1, 2)
        R = torch.linalg.qr(A, mode="r")[1] if A.shape[1] > A.shape[2] else A
        out[ok] = torch.linalg.svdvals(R).sum(-1)
    return out.to(device=W.device, dtype=W.dtype)


def eigenbasis(X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eigenvalues η_1 ≥ … ≥ η_d (T, d) and eigenvectors u_k as columns (T, d, d) of (1/n) XᵀX for
    X (T, n, d) (SPEC §3, Example 31's basis), each u_k signed so that its largest-magnitude
    entry is positive (eigh's signs are arbitrary). torch's eigh: ~4× numpy's at d = 1024 here."""
    evals, evecs = torch.linalg.eigh(X.transpose(1, 2) @ X / X.shape[1])
    evals, evecs = evals.flip(-1), evecs.flip(-1)
    idx = evecs.abs().argmax(dim=1, keepdim=True)  # (T, 1, d): the row of each column's largest entry
    sign = torch.sign(torch.gather(evecs, 1, idx))
    return evals.contiguous(), (evecs * torch.where(sign == 0, torch.ones_like(sign), sign)).contiguous()


def init_activity_counts(z: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """How many training points each neuron is active on at initialisation, #{i : z_j · x_i > 0},
    (T, m) for z (T, m, d) and X (T, n, d). A J+ neuron active on few points grows slowly and ends
    as the bundle's straggler, which sets the small-λ max angle (docs/reproduction.md)."""
    return (torch.bmm(z, X.transpose(1, 2)) > 0).sum(-1)


def init_groups(z: torch.Tensor, s: torch.Tensor, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """J+ and J− fixed at initialisation (SPEC §3): sign s_j = ±1 and some z_j · x_i > 0."""
    live = init_activity_counts(z, X) > 0
    return live & (s > 0), live & (s < 0)


def straggler_count(z: torch.Tensor, s: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """Per trial (T,): the fewest training points a J+ neuron is active on at initialisation, the
    trial's straggler, whose angle sets the small-λ max angle (docs/reproduction.md); −1 where J+ is
    empty."""
    counts, pos = init_activity_counts(z, X), init_groups(z, s, X)[0]
    fewest = torch.where(pos, counts, torch.full_like(counts, torch.iinfo(counts.dtype).max)).min(-1).values
    return torch.where(pos.any(-1), fewest, torch.full_like(fewest, -1))


def end_groups(W: torch.Tensor, a: torch.Tensor, X: torch.Tensor,
               trial: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """J+ and J− re-evaluated on the current weights: sign of a_j and some w_j · x_i > 0.

    X is (R, n, d) per run, or (T, n, d) per trial with ``trial`` (R,) the trial of each run."""
    if trial is None:
        live = (torch.bmm(W, X.transpose(1, 2)) > 0).any(-1)
    else:
        live = torch.zeros(W.shape[:2], dtype=torch.bool, device=W.device)
        for t in torch.unique(trial).tolist():
            idx = torch.nonzero(trial == t).flatten()
            live[idx] = (torch.matmul(W[idx], X[t].T) > 0).any(-1)
    return live & (a > 0), live & (a < 0)
