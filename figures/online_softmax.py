"""Theory 01's figure: the online-softmax state (m, l) and the rescale factor, from
minimodel.online_softmax over a seeded stream of logits."""

import math
import random

import matplotlib.pyplot as plt

from figures.core import svg
from minimodel.online_softmax import SoftmaxState, rescale_factor

SEED, N = 27, 32
MASKED = 10  # this element is -inf, as a masked score would be


def stream() -> list[float]:
    """N logits drifting upward (so the maximum moves several times), one of them masked."""
    rng = random.Random(SEED)
    xs = [0.12 * i + rng.gauss(0.0, 1.3) for i in range(N)]
    xs[MASKED - 1] = -math.inf
    return xs


def trace(xs: list[float]) -> tuple[list[SoftmaxState], list[float]]:
    """The states (m^(j), l^(j)) after each element j, and the factors e^(m^(j-1) - m^(j))."""
    states = [SoftmaxState()]  # (m^(0), l^(0)) = (-inf, 0)
    for x in xs:
        states.append(states[-1].push(x))
    alphas = [rescale_factor(old.m, new.m) for old, new in zip(states, states[1:], strict=False)]
    return states[1:], alphas


def outputs() -> dict[str, str | bytes]:
    xs = stream()
    states, alphas = trace(xs)
    final = states[-1]
    idx = list(range(1, N + 1))
    moved = [j for j, a in zip(idx, alphas, strict=True) if a < 1.0]  # a new maximum arrived

    size = {"figsize": (7.5, 7.6), "height_ratios": [1.2, 1.0, 0.8]}
    fig, (ax_m, ax_l, ax_a) = plt.subplots(3, 1, sharex=True, **size)
    # Panel 1: the logits and the running maximum m^(j).
    shown = [(j, x) for j, x in zip(idx, xs, strict=True) if x > -math.inf]
    ax_m.plot(*zip(*shown, strict=True), "o", color="0.55", markersize=4, label=r"logit $x_j$")
    ax_m.step(idx, [s.m for s in states], where="post", color="C0", label=r"running max $m^{(j)}$")
    low = min(x for _, x in shown) - 0.8
    masked = r"masked, $x_j = -\infty$ (state unchanged)"
    ax_m.plot([MASKED], [low], "x", color="C3", markersize=7, label=masked)
    ax_m.set_ylabel("logit")
    ax_m.set_title(f"Online softmax over a stream of {N} logits (seed {SEED})", fontsize=10)
    # Panel 2: the running sum l^(j), kept relative to m^(j), and the same sum relative to m^(N).
    running = r"running sum $l^{(j)} = \sum_{j' \leq j} e^{x_{j'} - m^{(j)}}$"
    ax_l.plot(idx, [s.l for s in states], "o-", color="C1", markersize=3.5, label=running)
    final_sum = r"the same prefix sum relative to the final max, $l^{(j)}\, e^{m^{(j)} - m^{(N)}}$"
    relative = [s.l * math.exp(s.m - final.m) for s in states]
    ax_l.plot(idx, relative, "--", color="C2", label=final_sum)
    rescaled = r"a new maximum: $l$ is rescaled by $\alpha^{(j)} < 1$"
    for k, j in enumerate(moved[1:]):
        ax_l.axvline(j, color="C0", alpha=0.15, linewidth=4, label=rescaled if k == 0 else None)
    ax_l.set_ylabel(r"$l$")
    # Panel 3: the rescale factor applied to l (and to acc) at each step.
    ax_a.vlines(idx, 0.0, alphas, color="C0", linewidth=2)
    alpha = r"$\alpha^{(j)} = e^{m^{(j-1)} - m^{(j)}}$: 1 unless the max moves; 0 at $j = 1$"
    ax_a.plot(idx, alphas, "o", color="C0", markersize=3.5, label=alpha)
    ax_a.set(ylim=(-0.05, 1.45), yticks=[0.0, 0.25, 0.5, 0.75, 1.0], ylabel=r"$\alpha^{(j)}$")
    ax_a.set_xlabel(r"element $j$ of the stream")
    for ax in (ax_m, ax_l, ax_a):
        ax.legend(fontsize=8, loc="upper left")
        ax.grid(True, alpha=0.3)
    return {"figures/online-softmax-state.svg": svg(fig)}
