"""The grouped stepper: certified activation-pattern groups, one gradient direction per group.

Late in training almost every live neuron keeps its activation pattern (the set of training
points with w_j·x_i > 0): in the rich regime the J+ neurons form one group active on every
point, and the surviving J− neurons are each active on one or a few points. While the pattern
s_k ∈ {0, 1}^n of a group k holds, SPEC §1's gradients of its neurons j share one vector:

    g_k = Xᵀ(s_k ∘ r) = Σ_{i ∈ P_k} r_i x_i,           coef = lr·κ/n,
    w_j ← w_j + coef·a_j·g_k,    a_j ← a_j + coef·(w_j·g_k)     (old w_j, a_j on the right),
    h(x_i) = Σ_k s_ki · x_i·u_k + (the other neurons' terms),    u_k = Σ_{j ∈ k} a_j w_j,

so a step costs O(|P_k|·d) per group (P_k its points) plus one pass over the group neurons'
weights, instead of O(n·d) per neuron: at d = n = 1024, m = 200 with one J+ group and a few
one-point J− groups, ~100× fewer operations than the dense step. The same algorithm runs
batched over all runs with torch operations (CPU and CUDA, no host synchronisation inside a
block; patterns as dense masks, one matrix product per trial and block of groups, or Gram groups
(steppers/gram.py); on CUDA the ~42 kernels of each step, ~83 with three classes of Gram groups,
replayed BLOCK_STEPS steps at a time from one CUDA graph) and, on the CPU with numba, in
compiled loops over each group's points (kernels._groups_step).

**Mixed step.** Every live neuron of a training run is in a group (any size, every certified
pattern), on the compiled path in a one-neuron group with a few *uncertain* points (its margin
fails only there: their pre-activations are computed exactly at every step, the rest of its
pattern is certified), or *exact*: exact neurons (too close to a boundary to be certified, or demoted) are
stepped by the dense layout (steppers.dense.FastStepper), which also forms r, the objective and
the stop test. Each step: the groups' share of h is formed from the state at t, the dense step
subtracts it from y, forms r and updates its neurons, and the groups are updated with the same r.

**Certification, not assumption.** At a *refresh* the group neurons' pre-activations are
computed exactly and each gets a margin μ_j = min_i (|w_j·x_i| − rounding bound)/‖x_i‖ (a sign
that disagrees with the group's pattern, or a pre-activation within rounding of 0, makes the
neuron exact). A step maps z_j = (w_j, a_j) to (I + coef·K) z_j with ‖K‖ = ‖g_k‖, so since the
refresh ‖w_j(t) − w_j(t₀)‖ ≤ ‖z_j(t₀)‖·(exp(coef·Σ_s ‖g_k(s)‖) − 1) (GroupSet.movement); every
step adds ‖g_k‖ to the group's sum. A block of steps stands only if that bound plus a rounding
allowance stays below μ_j for every group neuron, so no group neuron's pre-activation changed
sign at any step of it; otherwise the block is undone, the failing neurons leave their groups
(exact, or on the compiled path one-neuron groups with uncertain points; exact if they fail
again) and the layout is rebuilt. Margins are refreshed when the bound reaches REFRESH_AT of them (late in
training, when ‖g‖ is small, after many blocks): those of the groups where some neuron's bound has
reached REFRESH_GROUPS_AT of its margin, each group's bound running from its own last refresh.
The layout is chosen afresh every SUBCHUNK_STEPS steps from the state alone, so a resumed job
repeats the same decisions. On the compiled path the batch's runs are stepped in parts that fit
the L2 cache (GroupedStepper.parts), each with its own blocks, refreshes and rebuilds.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from .. import kernels, step_kernel
from . import gram as gram_groups
from .base import StepRule
from .capture import capture_graph
from .dense import FastStepper, certainly_dead
from .group_choice import choose_groups
from .group_set import GroupSet, torch_gram_layout

MIN_STEPS = 64  # chunks shorter than this take the fallback stepper
MIN_POINTS_X_DIM = 256  # n·d below this: the dense step is cheap enough (d = 4 ran slower grouped)
SUBCHUNK_STEPS = 8192  # the layout is chosen afresh at least this often
MAX_UNCERTAIN = 8  # compiled path: a neuron with at most max_uncertain(n) uncertain points is a one-neuron group ...
UNCERTAIN_FRACTION = 8  # ... max(MAX_UNCERTAIN, n // UNCERTAIN_FRACTION) (see max_uncertain)
BLOCK_STEPS = 32  # steps between certification checks (and undo granularity) at the start of a piece
MAX_BLOCK_STEPS = 8192  # blocks grow up to this while the bound grows slowly (see _Piece.next_block)
REFRESH_AT = 0.5  # refresh the margins once a neuron's bound reaches this share of its margin ...
REFRESH_GROUPS_AT = 0.25  # ... those of the groups where some neuron's bound has reached this share
GRAPHS = True  # torch path on CUDA: full blocks of BLOCK_STEPS steps replayed from one CUDA graph ...
GRAPH_AFTER_BLOCKS = 4  # ... captured once a layout has stepped this many BLOCK_STEPS (blocks of any length)
CPU_GRAPHS = False  # the same capture/replay logic on the CPU, replaying eagerly (tests switch this on)
PARTS = True  # compiled path: runs stepped in parts of the batch (GroupedStepper.parts)
TORCH_GRAM = True  # torch path: groups with few points step in pre-activation coordinates (steppers/gram.py)


def max_uncertain(n: int) -> int:
    """The most uncertain points of a one-neuron group (compiled path) on a dataset of n points:
    max(MAX_UNCERTAIN, n // UNCERTAIN_FRACTION). Such a group costs O((|P_j| + |U_j|)·d) per step
    (O((|P_j| + |U_j|)²) as a Gram group), an exact neuron two n·d products and the batch's
    groups-only loop; at d = n = 1024 the J− neurons of the lazy uncentred runs late in training
    had 12–64 points within their margin, and a cap of 8 left them all exact (a whole uncentred
    m = 25 batch ran 1.50× faster with them grouped; benchmarks/checkpoint_ab.py)."""
    return max(MAX_UNCERTAIN, n // UNCERTAIN_FRACTION)


COUNTERS: dict[str, int] = {}  # diagnostics since import (see _count)


def _count(**kw: int) -> None:
    for k, v in kw.items():
        COUNTERS[k] = COUNTERS.get(k, 0) + v


class _Piece:
    """One piece of a chunk: groups (GroupSet) plus the exact neurons in a FastStepper, sharing
    each run's residual. Torch path: blocks of BLOCK_STEPS steps without per-step stop tests,
    redone step by step if a run met the target inside; compiled path: the stop test every step."""

    def __init__(self, b: Any, rule: StepRule, compiled: bool, graphs: bool = False):
        self.b, self.rule, self.compiled = b, rule, compiled
        self.graphs = graphs and not compiled  # torch path: capture full blocks (see _unchecked)
        self.captures = self.replays = 0
        self.coef = rule.lr * rule.kappa / b.X.shape[1]
        self.exclude = torch.zeros(b.W.shape[:2], dtype=torch.bool, device=b.W.device)  # demoted
        self.twice = torch.zeros_like(self.exclude)  # demoted again (as one-neuron groups): exact for the piece
        self.rebuilds = self.demoted = self.redone = self.refreshes = self.readmitted = 0
        self.refreshed_members = 0

    def _build(self, t: int) -> None:
        b = self.b
        n, d = b.X.shape[1], b.X.shape[2]
        # one-neuron groups with uncertain points: the compiled path's, and the torch path's Gram groups'
        singles = self.compiled or (TORCH_GRAM and gram_groups.applies(n, d))
        layout, exact = choose_groups(b, self.exclude, self.coef, max_uncertain(n) if singles else 0,
                                      ~self.twice if singles else None)
        use_gram = False
        if singles and not self.compiled:  # Gram groups where they pay; singles that no Gram group takes: exact
            layout, exact, use_gram = torch_gram_layout(layout, exact, n, d, b.W.device.type)
        # h of the exact neurons: index_add on the CPU (the compiled loops' layout); CUDA's deterministic
        # selector product there
        fs = FastStepper(b, self.rule, use_graphs=False, blocks=False, dead=~exact,
                         selector=False if self.compiled else None)
        fs.load(b, t)
        self.groups = GroupSet(fs, layout, self.coef, products=self.compiled, gram=use_gram)
        self.groups.load(b.W, b.a)
        self.fs = fs
        self.y0 = fs.y.clone()
        self.hg = torch.empty_like(fs.y)
        fs.lbuf = torch.empty(BLOCK_STEPS, fs.y.shape[0], dtype=fs.dtype, device=fs.dev)
        self.cm = torch.empty(self.groups.N, dtype=fs.dtype, device=fs.dev)  # per-member coef of a block
        self.hit = torch.zeros(fs.y.shape[0], dtype=torch.bool, device=fs.dev)  # met the target in a block
        self.graph: Any = None  # the layout's buffers changed: capture again
        self.stepped = 0  # steps of this layout (its graph is captured from GRAPH_AFTER_BLOCKS sub-blocks on)
        self.kernel = step_kernel.StepKernel(fs, self.groups, self.y0) if self.compiled else None
        self.group_neurons = self.groups.N
        self.product_groups = int((self.groups.dpos >= 0).sum())
        self.gram_groups = self.kernel.n_gram if self.kernel is not None else 0
        self.gram_uncertain = self.kernel.n_gram_uncertain if self.kernel is not None else 0
        self.torch_gram = 0 if self.groups.gram is None else self.groups.gram.size
        self.uncertain_neurons = int((self.groups.unc_ptr[1:] > self.groups.unc_ptr[:-1]).sum())
        self.exact_neurons = int(exact.sum())
        runs, neurons = self.groups.neurons(torch.ones(self.groups.N, dtype=torch.bool, device=b.W.device))
        self.readmitted += int(self.exclude[runs, neurons].sum())  # demoted, now one-neuron groups
        self.fresh = True
        self.refresh_groups: torch.Tensor | None = None  # at a build: all

    def _store(self) -> None:
        self.fs.store(self.b)
        self.groups.store(self.b.W, self.b.a)

    def _coef_member(self) -> torch.Tensor:
        """(N,) coef for the members of running runs, 0 for the others."""
        gr = self.groups
        return self.fs.running.to(self.fs.dtype)[gr.slot[gr.gid]] * self.coef

    def _step(self, k: int | None, coef_member: torch.Tensor | None) -> None:
        fs, gr = self.fs, self.groups
        gr.h(self.hg)
        torch.sub(self.y0, self.hg, out=fs.y)  # the dense step sees y − (the groups' share of h)
        fs._step(k)
        gr.update(fs.r, self._coef_member() if k is None else coef_member)

    def _snapshot(self) -> None:
        fs, gr = self.fs, self.groups
        self._bak = (fs.W.clone(), fs.a.clone(), fs.running.clone(), fs.stop.clone(), fs.t.clone(), gr.gsum.clone())
        gr.W_bak.copy_(gr.W)
        gr.a_bak.copy_(gr.a)

    def _undo(self) -> None:
        fs, gr = self.fs, self.groups
        for dst, src in zip((fs.W, fs.a, fs.running, fs.stop, fs.t, gr.gsum), self._bak):
            dst.copy_(src)
        gr.W.copy_(gr.W_bak)
        gr.a.copy_(gr.a_bak)
        gr.resume()

    def _demote(self, mask: torch.Tensor, t: int) -> None:
        """Take the members in ``mask`` (N,) out of their groups and rebuild the layout at t: once
        demoted, a neuron may still be a one-neuron group with uncertain points (compiled path);
        demoted again, it is exact for the rest of the piece (every demotion marks a new neuron,
        so a piece cannot undo the same block for ever)."""
        runs, neurons = self.groups.neurons(mask)
        again = self.exclude[runs, neurons]
        self.twice[runs[again], neurons[again]] = True
        self.exclude[runs, neurons] = True
        self.demoted += int(runs.numel())
        self._store()
        self._build(t)
        self.rebuilds += 1

    def _block(self, steps: int) -> None:
        self._snapshot()
        if self.kernel is not None:
            fs = self.fs
            fs.t.add_(self.kernel.steps(steps, int(fs.t), self.rule.kappa, self.rule.lr, self.rule.target))
        else:
            self._unchecked(steps)
            if bool((self.hit & self.fs.running).any()):
                self._undo()
                self.redone += 1
                for _ in range(steps):
                    self._step(None, None)
            self.groups.sync()  # W current at every block's end (refresh, undo, store read it)
        self.groups.steps_since_refresh += steps

    def _unchecked(self, steps: int) -> None:
        """Torch path: ``steps`` steps without stop tests, in sub-blocks of BLOCK_STEPS (the last
        one shorter); ``hit`` marks the run slots whose objective fell below the target at some
        step. Full sub-blocks are replayed from a CUDA graph, captured once the layout has
        stepped GRAPH_AFTER_BLOCKS sub-blocks, in blocks of any length (a layout rebuilt after a
        few steps is not worth a capture; one whose blocks stay short, refreshed often, is); the
        graph's arithmetic is the eager step's."""
        self.fs._set_go()
        self.cm.copy_(self._coef_member())
        if (self.graphs and self.graph is None and steps >= BLOCK_STEPS
                and self.stepped >= GRAPH_AFTER_BLOCKS * BLOCK_STEPS):
            self._capture()
        self.stepped += steps
        self.hit.zero_()
        full, rest = divmod(steps, BLOCK_STEPS)
        for _ in range(full):
            if self.graph is not None:
                self.graph.replay()
                self.replays += 1
            else:
                self._sub_block(BLOCK_STEPS)
        if rest:
            self._sub_block(rest)

    def _sub_block(self, k: int) -> None:
        """k ≤ BLOCK_STEPS unchecked steps, their losses into ``fs.lbuf[:k]`` and folded into ``hit``
        (the checked step's arithmetic: κ·Σr²/(2n) < target)."""
        fs = self.fs
        for i in range(k):
            self._step(i, self.cm)
        loss = fs.lbuf[:k] * (self.rule.kappa / (2 * fs.n))
        torch.logical_or(self.hit, (loss < self.rule.target).any(0), out=self.hit)

    def _capture(self) -> None:
        """Capture one full sub-block into a CUDA graph (CPU_GRAPHS on the CPU: a stand-in that
        replays it eagerly and whose capture checks that the sub-block has no host
        synchronisation, capture.py). Called inside a block, after its snapshot: the warm-up
        (and the CPU's checked) steps are undone. A failed capture warns and leaves graphs off."""
        fs = self.fs
        try:
            self.graph = capture_graph(lambda: self._sub_block(BLOCK_STEPS), lambda: self._sub_block(2), fs.dev)
            self.captures += 1
        except RuntimeError as exc:  # pragma: no cover - depends on the CUDA stack
            warnings.warn(f"CUDA graph capture of the grouped step failed ({exc}); stepping without graphs",
                          stacklevel=2)
            self.graphs, self.graph = False, None
        finally:
            self._undo()

    def next_block(self, ratio: float, growth: float, steps: int) -> int:
        """Length of the next block: doubled (up to MAX_BLOCK_STEPS) while the largest bound/margin
        ratio, growing by ``growth`` over the last block of ``steps`` steps, stays well below
        REFRESH_AT after twice as many; halved (down to BLOCK_STEPS) otherwise."""
        if growth <= 0 or ratio + growth * 4 < REFRESH_AT:
            return min(MAX_BLOCK_STEPS, 2 * steps)
        return max(BLOCK_STEPS, steps // 2)

    def _rest_dense(self, t: int, count: int, check_every: int) -> None:
        """``count`` steps with no group left: the dense layout alone."""
        if self.kernel is not None:
            self.fs.t.add_(self.kernel.steps(count, t, self.rule.kappa, self.rule.lr, self.rule.target,
                                             bool(check_every)))
        else:
            self.fs.steps(count, check_every)

    def run(self, t0: int, count: int, check_every: int, built: bool = False) -> None:
        """``count`` steps from t0 in certified blocks (module docstring)."""
        if not built:
            self._build(t0)
        done, block = 0, BLOCK_STEPS
        while done < count:
            gr = self.groups
            if gr.G == 0:  # nothing in groups (any more)
                self._rest_dense(t0 + done, count - done, check_every)
                break
            if self.fresh:
                self.fresh = False
                self.refreshes += 1
                bad = gr.refresh(self.refresh_groups)
                self.refreshed_members += gr.N if self.refresh_groups is None else int(
                    (self.refresh_groups[gr.gid]).sum())
                if bool(bad.any()):
                    self._demote(bad, t0 + done)
                    block = BLOCK_STEPS
                    continue
            before = float((gr.movement() / gr.margin).max())
            steps = min(block, count - done)
            self._block(steps)
            ratio = gr.movement() / gr.margin
            if bool((ratio >= 1.0).any()):
                self._undo()
                gr.steps_since_refresh -= steps
                self._demote(ratio >= 1.0, t0 + done)
                block = BLOCK_STEPS
                continue
            done += steps
            worst = float(ratio.max())
            self.fresh = worst >= REFRESH_AT
            if self.fresh:  # the groups whose bound has used up REFRESH_GROUPS_AT of some member's margin
                most = torch.zeros(gr.G, dtype=ratio.dtype, device=ratio.device)
                most.scatter_reduce_(0, gr.gid, ratio, "amax")
                self.refresh_groups = most >= REFRESH_GROUPS_AT
            block = BLOCK_STEPS if self.fresh else self.next_block(worst, worst - before, steps)
            if check_every and not bool(self.fs.running.any()):
                break
        self._store()
        _count(pieces=1, group_neurons=self.group_neurons, product_groups=self.product_groups,
               gram_groups=self.gram_groups, gram_uncertain=self.gram_uncertain, torch_gram_groups=self.torch_gram,
               uncertain_neurons=self.uncertain_neurons,
               exact_neurons=self.exact_neurons, rebuilds=self.rebuilds,
               demoted=self.demoted, redone_blocks=self.redone, refreshes=self.refreshes,
               refreshed_members=self.refreshed_members,
               readmitted=self.readmitted, demoted_twice=int(self.twice.sum()),
               graph_captures=self.captures, graph_replays=self.replays)


class GroupedStepper:
    """Stepper interface (base.py) over pieces of at most SUBCHUNK_STEPS steps, each with a fresh
    layout; chunks too short, or sizes too small for it to pay (MIN_POINTS_X_DIM), go to
    ``fallback`` (the compiled or dense stepper). On the compiled path the runs are stepped in
    *parts* (:meth:`parts`), each with its own pieces: the runs are independent, so each part's
    certification (blocks, refreshes, rebuilds after a demotion) follows its own groups, not the
    fastest-moving group of the whole batch."""

    name = "grouped"

    def __init__(self, rule: StepRule, fallback: Any, check_every: int = 1, compiled: bool | None = None,
                 graphs: bool | None = None):
        self.rule, self.fallback, self.check_every = rule, fallback, check_every
        self.compiled = compiled
        self.graphs = graphs  # torch path: CUDA graphs of full blocks (None: GRAPHS on CUDA, CPU_GRAPHS on the CPU)

    def pays(self, b: Any, count: int) -> bool:
        return count >= MIN_STEPS and b.X.shape[1] * b.X.shape[2] >= MIN_POINTS_X_DIM

    def parts(self, b: Any) -> list[torch.Tensor]:
        """Run positions stepped together: consecutive runs whose live neurons' weights and their
        trials' X fit in step_kernel.CHUNK_L2_FRACTION of the L2 cache (the compiled step's chunks,
        step_kernel.StepKernel._chunk_layout; small trials share a part, so that runs of one-run
        trials are not stepped one by one); each trial whole where X alone takes half of that
        (the product groups of its runs then share each pass over X); one part if L2 is unknown.
        Runs that have stopped are left out (their state cannot change) when stops are checked."""
        n, d = b.X.shape[1], b.X.shape[2]
        budget = step_kernel.CHUNK_L2_FRACTION * step_kernel.L2_BYTES
        x_bytes = 8 * n * d
        fits = bool(budget) and x_bytes <= budget / 2  # else whole trials (or one part): no sizes needed
        live = (~certainly_dead(b.W, b.X, b.trial)).sum(1).tolist() if fits else [0] * b.n_runs
        running, trial = b.running.tolist(), b.trial.tolist()
        out: list[list[int]] = [[]]
        trials: set[int] = set()
        weights = 0
        for runs in b.trial_groups():
            if budget and not fits and out[-1]:
                out.append([])
            for r in (r for r in runs if running[r] or not self.check_every):
                need = x_bytes * len(trials | {trial[r]}) + 8 * d * (weights + live[r])
                if fits and out[-1] and need > budget:
                    out.append([])
                    trials, weights = set(), 0
                out[-1].append(r)
                trials.add(trial[r])
                weights += live[r]
        return [torch.tensor(p, dtype=torch.long, device=b.W.device) for p in out if p]

    def advance(self, b: Any, t0: int, count: int) -> int:
        if not self.pays(b, count):
            return self.fallback.advance(b, t0, count)
        compiled = (b.W.device.type == "cpu" and kernels.use_numba()) if self.compiled is None else self.compiled
        b.__dict__.pop("_dense", None)  # the dense layout is rebuilt after a grouped chunk
        if not (compiled and PARTS):
            self._advance(b, t0, count, compiled)
            return count
        for idx in self.parts(b):
            part = b.take(idx)
            self._advance(part, t0, count, compiled)
            b.put(idx, part)
        return count

    def _advance(self, b: Any, t0: int, count: int, compiled: bool) -> None:
        done = 0
        graphs = self.graphs
        if graphs is None:
            graphs = GRAPHS if b.W.device.type == "cuda" else CPU_GRAPHS
        while done < count:
            pc = _Piece(b, self.rule, compiled, graphs)
            pc._build(t0 + done)
            # a fresh layout lets settled exact neurons join groups: worth it only while there are some
            piece = min(SUBCHUNK_STEPS, count - done) if pc.exact_neurons else count - done
            if count - done - piece < MIN_STEPS:
                piece = count - done  # no short tail piece
            pc.run(t0 + done, piece, self.check_every, built=True)
            if graphs and not pc.graphs:  # a capture failed: not again for this stepper
                self.graphs = graphs = False
            done += piece
            if self.check_every and not bool(b.running.any()):
                break
