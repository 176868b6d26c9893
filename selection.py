"""Token selection for RLVR: ETS (top entropy) and GMTS (top |entropy x omega|), as pure tensor functions.

Paper: Lv, Zhang, Zhang, "Gradient-Magnitude Token Selection" (arXiv 2608.30632).
Baseline: Wang et al., "Beyond the 80/20 Rule" (ETS: train on the top 20% of tokens by entropy).

Where the top 20% is chosen: `select_top_fraction` below. Everything here is a pure function of tensors, so the
trainer (gmts_trainer.py) only decides *which* tensors to pass and over which scope.

The rules themselves are registered here, one `Rule` each (`RULES`, `register_rule`): the name GMTSConfig's
token_selection takes, the score, its tie-break and whether it reads omega. How the experiment names, colours and
compares them (its arms) is gmts_recipe/arms.py. torch is imported inside the functions, so the registry reads
without it (check.py verifies results files with the standard library and numpy).

Notation (shapes are (B, T): B answers/rows, T completion positions):
    entropy  E_t  entropy of the policy's next-token distribution at position t (at the sampling temperature)
    omega    w_t  the scalar in front of grad log pi(o_t) in the gradient of TRL's loss, for a kept token:
                  w_t = A * r_t * 1[the branch min picks passes r] + beta * (pi_ref / pi_theta - 1)  (see gmts_omega)
    score    ETS: E_t            GMTS: |E_t * w_t|   (paper eq. 4)
             control (not in the paper): ETS over tokens with w_t != 0 first (ets_nonzero_omega_scores)

Deviations from the paper, all deliberate:
- Ties are broken by the rule's `tie_break` (GMTS: higher entropy first), then by position (row-major order of the
  scored tensor, lower index first), so the kept count is exactly ceil(ratio * n) on every batch. TRL's
  `get_high_entropy_mask` keeps `>= quantile`, which can keep more.
- `ratio` is read as the decimal the user wrote (0.2 == 1/5, exactly), not as its binary float, so
  ceil(0.2 * 15) is 3, not 4.
- `group_size` (the trainer's "group" scope) covers every prompt group of the batch; the authors' verl code applies
  GMTS per 16-row group but reaches only the first group of each minibatch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import torch

__all__ = [
    "Rule",
    "RULES",
    "register_rule",
    "unregister_rule",
    "rule_named",
    "overlap_partner",
    "ets_scores",
    "gmts_scores",
    "ets_nonzero_omega_scores",
    "gmts_omega",
    "select_top_fraction",
    "kept_count",
    "smallest_fraction_at_least",
    "selection_stats",
    "top_answers",
    "top_answer_weight_share",
    "update_cosine",
]


def ets_scores(entropy: torch.Tensor) -> torch.Tensor:
    """ETS ranks tokens by their entropy alone ("Beyond the 80/20 rule")."""

    return entropy.float()


def gmts_scores(entropy: torch.Tensor, omega: torch.Tensor) -> torch.Tensor:
    """GMTS ranks tokens by |E x omega| (paper eq. 4): an estimate of the token's share of the gradient norm.

    Equal scores are ordered by entropy (the GMTS rule's tie_break), then position. Without it a batch whose
    advantages are all 0 (every score 0) kept the first 20% of tokens by position; now it keeps the highest-entropy
    ones. Such a token has omega 0, so with beta 0 its gradient is 0 either way: the training numbers do not change,
    only the selection metrics (which tokens count as kept) do."""

    return (entropy.float() * omega.float()).abs()


def ets_nonzero_omega_scores(entropy: torch.Tensor, omega: torch.Tensor) -> torch.Tensor:
    """The control arm's ranking: ETS, except that every token with omega != 0 ranks before every token with
    omega == 0 (entropy decides within each of the two sets). With beta 0 on-policy, omega == 0 exactly in answers whose
    advantage is 0 (a group with equal rewards): ETS spends slots there that move nothing, GMTS never does, so under
    TRL's all-token normalizer GMTS takes the larger step at one learning rate. This rule keeps the same count as ETS
    and GMTS but no slot that moves nothing while another is left: GMTS minus it isolates the |advantage| weighting,
    it minus ETS isolates skipping the zero-omega tokens.

    Exact semantics, with `select_top_fraction`: tokens are ordered by (omega != 0 first, entropy descending, lower
    row-major index first). The score is the dense rank of the entropy over the whole tensor (equal entropies get
    equal scores, so their tie goes to the lower index, as in ETS), plus the tensor's size where omega != 0: integers
    below 2 x numel, exact in float64 for any size, so the order among omega != 0 tokens is ETS's order. A NaN entropy
    stays NaN (select_top_fraction refuses it at a valid position). No host sync (sorts and scatters only).

    Args:
        entropy: (B, T) entropy per token.
        omega: (B, T) omega per token (gmts_omega; expand a (B, 1) one), the same omega the GMTS rule uses.

    Returns:
        (B, T) float64 scores for select_top_fraction.
    """
    import torch

    ent = entropy.float()
    if omega.shape != ent.shape:
        raise ValueError(f"entropy and omega must have one shape; got {tuple(ent.shape)} and {tuple(omega.shape)}")
    flat = ent.reshape(-1)
    values, order = torch.sort(flat, stable=True)  # ascending; NaN last
    new_value = torch.ones_like(order)
    new_value[1:] = (values[1:] != values[:-1]).long()
    dense = torch.empty_like(order).scatter_(0, order, new_value.cumsum(0) - 1)  # 0 = lowest entropy
    score = dense.double() + float(flat.numel()) * (omega.reshape(-1) != 0).double()
    score = torch.where(torch.isnan(flat), torch.full_like(score, float("nan")), score)
    return score.reshape(ent.shape)


def gmts_omega(
    advantages: torch.Tensor,
    ratio: torch.Tensor | None = None,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    beta: float = 0.0,
    ref_ratio: torch.Tensor | None = None,
    *,
    delta: float | None = None,
    weight: torch.Tensor | None = None,
    kl_bias_correction: bool = False,
) -> torch.Tensor:
    """Omega per token: the coefficient of grad log pi_theta(o_t) in the gradient of TRL 1.16's clipped-surrogate
    objective, for a kept token (times the loss normalizer, a positive constant per microbatch).

    Policy part, which the selection mask multiplies: TRL's loss is -min(c1 A, c2 A) with c1 = r, or min(r, delta)
    with two-sided clipping (`delta`), and c2 = clip(r, 1-eps_low, 1+eps_high). Its coefficient is r A times the
    derivative of the term torch.min picks (half of each on a tie, as torch.min's backward): 1 where that term's clamp
    passes r through, 0 where it caps it. Without delta that is r A except where the clipped branch is active
    (r > 1+eps_high with A > 0, r < 1-eps_low with A < 0). Where r > delta: with A > 0 min picks the capped c1, so 0
    (also on-policy, r = 1, when delta < 1); with A < 0 it picks the larger factor, and when delta < 1+eps_high that
    is c2, so a token with r inside the clip range still moves by r A (a rule 'r > delta means 0' gave it 0).
    `weight` (the vLLM importance-sampling ratio, (B, T) or (B, 1)) multiplies it.
    KL part, which TRL adds after the mask, so that every valid token receives it, kept or not: the gradient of
    -beta * k3, k3 = pi_ref/pi - log(pi_ref/pi) - 1, is beta * (pi_ref/pi - 1); with `kl_bias_correction`
    (TRL's use_bias_correction_kl: k3 times r) it is beta * r * log(pi_ref/pi).

    Args:
        advantages: (B,) or (B, 1) per-answer advantages, or (B, T) per-token ones.
        ratio: importance ratio pi_theta / pi_old, (B, T) or (B, 1); None means on-policy (r = 1).
        epsilon_low, epsilon_high: PPO clip range.
        beta: KL coefficient; when non-zero `ref_ratio` = pi_ref / pi_theta, (B, T), is required.

    Returns:
        (B, T) float32 omega (or (B, 1) when every input is per-answer). On-policy with beta 0 it equals the advantage.
    """
    import torch

    a = advantages.float()
    if a.dim() == 1:
        a = a.unsqueeze(1)  # (B, 1)
    r = torch.ones_like(a) if ratio is None else ratio.float()
    low, high = 1 - epsilon_low, 1 + epsilon_high
    c2, passes2 = r.clamp(low, high), (r >= low) & (r <= high)  # clamp's gradient: 1 on [min, max], else 0
    c1, passes1 = (r, torch.ones_like(passes2)) if delta is None else (r.clamp(max=delta), r <= delta)
    term1, term2 = c1 * a, c2 * a
    share1 = torch.where(term1 < term2, 1.0, torch.where(term1 == term2, 0.5, 0.0))  # torch.min's backward
    omega = r * a * (share1 * passes1 + (1.0 - share1) * passes2)
    if weight is not None:
        omega = omega * weight.float()
    if beta != 0.0:
        if ref_ratio is None:
            raise ValueError("gmts_omega: beta != 0 needs ref_ratio = pi_ref / pi_theta per token.")
        q = ref_ratio.float()
        omega = omega + (beta * r * torch.log(q) if kl_bias_correction else beta * (q - 1.0))
    return omega


_MAX_SEGMENT = math.isqrt(2**63 - 1) - 1  # n x c + d - 1 <= L^2 + L - 1 stays below 2^63


def _as_fraction(ratio: float) -> Fraction:
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not (0.0 < float(ratio) <= 1.0):
        raise ValueError(f"ratio of kept tokens must be a number in (0, 1], got {ratio!r}")
    return Fraction(repr(float(ratio)))


def kept_count(num_valid: int, ratio: float) -> int:
    """ceil(ratio * num_valid), in exact arithmetic (see module docstring)."""
    f = _as_fraction(ratio)
    return math.ceil(f * int(num_valid))


def smallest_fraction_at_least(f: Fraction, max_denominator: int) -> Fraction:
    """The smallest fraction c/d >= f with d <= max_denominator: for every integer 0 <= n <= max_denominator,
    ceil(n x c/d) == ceil(n x f), since ceil(n x f) = k exactly when (k-1)/n < f <= k/n and no fraction of
    denominator <= max_denominator lies in [f, c/d). So a device tensor of counts n <= L gets the exact
    ceil(ratio x n) in int64 from n x c <= L^2, where f itself (0.1 + 0.2 read as a decimal has a 17-digit
    numerator, 1e-300 a 301-digit denominator) would overflow.

    The upper of f's two neighbours among fractions of denominator <= max_denominator, found as
    `Fraction.limit_denominator` finds them (continued fraction convergents, then the best semiconvergent)."""
    if max_denominator < 1:
        raise ValueError(f"max_denominator must be >= 1, got {max_denominator}")
    if f.denominator <= max_denominator:
        return f
    p0, q0, p1, q1 = 0, 1, 1, 0
    n, d = f.numerator, f.denominator
    while True:
        a = n // d
        q2 = q0 + a * q1
        if q2 > max_denominator:
            break
        p0, q0, p1, q1 = p1, q1, p0 + a * p1, q2
        n, d = d, n - a * d
    k = (max_denominator - q0) // q1
    return max(Fraction(p0 + k * p1, q0 + k * q1), Fraction(p1, q1))  # the neighbours below and above f


def select_top_fraction(
    scores: torch.Tensor,
    mask: torch.Tensor,
    fraction: float,
    group_size: int | None = None,
    tie_break: torch.Tensor | None = None,
) -> torch.Tensor:
    """Keep exactly ceil(fraction x valid tokens) highest-scoring valid positions.

    The threshold is taken over the whole tensor (all rows at once: the paper's batch-wide top 20%), or, with
    `group_size`, within each block of `group_size` consecutive rows (one prompt's group of rollouts, as in the
    authors' per-group code). Padding (mask == 0) is never kept. Equal scores go to the higher `tie_break` value when
    one is given, then to the lower row-major index. Exact for any size: it sorts instead of calling torch.quantile
    (which refuses more than 16M elements).

    Args:
        scores: (B, T) float scores; higher is kept first. NaN at a valid position is an error.
        mask: (B, T) bool/int, 1 on valid completion tokens.
        fraction: the ratio of kept tokens, in (0, 1].
        group_size: None for one threshold over the tensor; else rows per group (B must be a multiple).
        tie_break: None, or (B, T) values that order equal scores (higher first), e.g. entropy for GMTS.

    Returns:
        (B, T) bool mask of kept positions.
    """
    import torch

    f = _as_fraction(fraction)
    if scores.shape != mask.shape or scores.dim() != 2:
        raise ValueError(f"scores and mask must both be (B, T); got {tuple(scores.shape)} and {tuple(mask.shape)}")
    rows, cols = scores.shape
    valid = mask.bool()
    if group_size is None:
        segments = 1
    else:
        if group_size < 1 or rows % group_size != 0:
            raise ValueError(f"group_size={group_size} must divide the number of rows ({rows})")
        segments = rows // group_size
    # float64 scores stay float64 (ets_nonzero_omega_scores' integer ranks are exact there for any size)
    seg_scores = (scores if scores.dtype == torch.float64 else scores.float()).reshape(segments, -1)  # (S, L)
    seg_valid = valid.reshape(segments, -1)  # (S, L)
    nan_at_valid = (torch.isnan(seg_scores) & seg_valid).any()
    if seg_scores.device.type == "cpu":
        if nan_at_valid:
            raise ValueError("select_top_fraction: NaN score at a valid position (entropy or advantage is NaN)")
    else:  # no host sync in the training step: the check fails the next synchronizing call instead
        torch._assert_async(~nan_at_valid, "select_top_fraction: NaN score at a valid position")
    # Rank by (valid first, score descending, tie_break descending, index ascending): stable sorts, the primary key
    # last.
    if tie_break is None:
        by_score = torch.sort(seg_scores, dim=1, descending=True, stable=True).indices  # (S, L)
    else:
        if tie_break.shape != scores.shape:
            raise ValueError(f"tie_break must have the scores' shape {tuple(scores.shape)}, got "
                             f"{tuple(tie_break.shape)}")
        seg_tie = tie_break.double().reshape(segments, -1).nan_to_num(nan=-math.inf)
        by_tie = torch.sort(seg_tie, dim=1, descending=True, stable=True).indices
        by_score = torch.gather(by_tie, 1, torch.sort(torch.gather(seg_scores, 1, by_tie), dim=1, descending=True,
                                                      stable=True).indices)  # (S, L)
    valid_in_score_order = torch.gather(seg_valid, 1, by_score)
    order = torch.gather(by_score, 1, torch.sort(valid_in_score_order.to(torch.uint8), dim=1, descending=True,
                                                 stable=True).indices)  # (S, L) flat positions, best first
    n_valid = seg_valid.sum(dim=1)  # (S,) each <= L
    segment = seg_valid.size(1)
    if segment > _MAX_SEGMENT:
        raise ValueError(f"select_top_fraction: {segment} positions in one scope exceed {_MAX_SEGMENT}, the most "
                         f"whose kept count is exact in int64")
    g = smallest_fraction_at_least(f, max(segment, 1))  # same ceil as f for every count <= L, and n x c <= L^2
    k = (n_valid * g.numerator + g.denominator - 1) // g.denominator  # (S,) exact ceil(ratio * n)
    keep_in_order = torch.arange(order.size(1), device=order.device).unsqueeze(0) < k.unsqueeze(1)  # (S, L)
    keep = torch.zeros_like(seg_valid).scatter_(1, order, keep_in_order)
    return keep.reshape(rows, cols)


def top_answers(advantages: torch.Tensor, group_index: torch.Tensor) -> torch.Tensor:
    """(B,) bool: the largest-|advantage| answer of each prompt group (the first such row where several tie).

    Group ids may be any non-negative integers in any row order (a shuffled microbatch holds a few groups of the
    generation batch, with their global ids): they are renumbered 0..G-1 here, so no bound on them is needed and
    nothing waits for the device.
    """
    import torch

    abs_adv = advantages.float().reshape(-1).abs()  # (B,)
    gid = group_index.reshape(-1).long()
    n = gid.numel()
    sorted_gid, order = torch.sort(gid, stable=True)
    starts = torch.ones_like(sorted_gid, dtype=torch.long)
    starts[1:] = (sorted_gid[1:] != sorted_gid[:-1]).long()
    dense = torch.empty_like(gid).scatter_(0, order, starts.cumsum(0) - 1)  # (B,) ids in [0, n)
    group_max = torch.full((n,), -1.0, device=abs_adv.device).scatter_reduce(0, dense, abs_adv, "amax")
    rows = torch.arange(n, device=gid.device)
    candidate = torch.where(abs_adv == group_max[dense], rows, n)  # rows holding their group's max |A|
    first = torch.full((n,), n, device=gid.device).scatter_reduce(0, dense, candidate, "amin")
    return first[dense] == rows


def top_answer_weight_share(
    kept: torch.Tensor, omega: torch.Tensor, advantages: torch.Tensor, group_index: torch.Tensor
) -> torch.Tensor:
    """Share of the update's weight, sum over kept tokens of |omega|, that comes from the largest-|advantage| answer of
    each group: how much each step depends on a few sequences (1 when only they train, ~1/group size when spread).
    0-dim tensor; 0 when nothing kept carries weight. `omega` is (B, T) or (B, 1)."""
    import torch

    weight = omega.float().abs() * kept.float()  # (B, T)
    total = weight.sum()
    top = top_answers(advantages, group_index).float().unsqueeze(1)  # (B, 1)
    return torch.where(total > 0, (weight * top).sum() / total.clamp(min=torch.finfo(torch.float32).tiny), 0.0)


def update_cosine(previous: torch.Tensor, current: torch.Tensor) -> torch.Tensor:
    """Cosine between two flat gradient vectors (0-dim tensor; 0 when either is zero): near 1, successive updates
    point the same way; near 0, each step's direction is mostly its own batch's noise."""
    import torch

    a, b = previous.float(), current.float()
    norms = a.norm() * b.norm()
    return torch.where(norms > 0, (a @ b) / norms.clamp(min=torch.finfo(torch.float32).tiny), 0.0)


def selection_stats(
    kept: torch.Tensor,
    mask: torch.Tensor,
    entropy: torch.Tensor,
    advantages: torch.Tensor,
    group_index: torch.Tensor,
    other_kept: torch.Tensor | None = None,
    omega: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Diagnostics of one selection, as 0-dim tensors (no host sync: call .item() when logging).

    `group_index` (B,) names each row's prompt group (any ids, rows in any order).

    Returns:
        kept_fraction: kept / valid tokens.
        overlap: share of kept tokens that `other_kept` (the other ranking, same batch) also keeps.
        top_answer_share: share of kept tokens that go to the largest-|advantage| answer of each group (the first such
            row where several tie).
        effective_answers: 1 / sum_i s_i^2, s_i = answer i's share of the kept tokens (B when uniform, 1 when one
            answer takes all; 0 when nothing is kept).
        zero_advantage_kept_share: share of kept tokens in answers whose advantage is exactly 0 (a group whose
            rewards are all equal): with beta 0 their omega is 0, so they take a slot and move nothing. ETS spends
            slots there; GMTS's score is 0 there, so it does only when the batch has too few other tokens. Under
            TRL's all-token normalizer this is a difference in step size, not only in ranking.
        entropy_kept_mean, entropy_all_mean: mean entropy of kept and of all valid tokens.
        top_answer_weight_share (with `omega`): see `top_answer_weight_share`.
    """
    import torch

    kept_f, valid_f = kept.float(), mask.float()
    n_kept = kept_f.sum()
    denom = n_kept.clamp(min=1)
    out = {"kept_fraction": n_kept / valid_f.sum().clamp(min=1)}
    if other_kept is not None:
        out["overlap"] = (kept_f * other_kept.float()).sum() / denom
    per_answer = kept_f.sum(dim=1)  # (B,)
    shares = per_answer / denom
    out["effective_answers"] = torch.where(n_kept > 0, 1.0 / (shares**2).sum().clamp(min=1e-12), 0.0)
    is_top = top_answers(advantages, group_index).float()  # (B,) one answer per group
    out["top_answer_share"] = (per_answer * is_top).sum() / denom
    out["zero_advantage_kept_share"] = (per_answer * (advantages == 0).float()).sum() / denom
    ent = entropy.float()
    out["entropy_kept_mean"] = (ent * kept_f).sum() / denom
    out["entropy_all_mean"] = (ent * valid_f).sum() / valid_f.sum().clamp(min=1)
    if omega is not None:
        out["top_answer_weight_share"] = top_answer_weight_share(kept, omega, advantages, group_index)
    return out


# ---------------------------------------------------------------------------- the rules
Score = Callable[["torch.Tensor", "torch.Tensor"], "torch.Tensor"]  # (entropy, omega) -> (B, T) scores


def _entropy_score(entropy: torch.Tensor, omega: torch.Tensor) -> torch.Tensor:
    return ets_scores(entropy)


def _entropy_tie_break(entropy: torch.Tensor, omega: torch.Tensor) -> torch.Tensor:
    return entropy


@dataclass(frozen=True)
class Rule:
    """One token-selection rule: what the trainer needs to select with it. How the experiment names, colours and
    compares it is its arm's (gmts_recipe/arms.py), so adding a rule is one `register_rule` call here and, to run it
    as an arm of the recipe, one `register_arm` there.

    Attributes:
        name: GMTSConfig.token_selection's spelling.
        score: (entropy, omega) -> (B, T) scores, higher kept first (select_top_fraction); None keeps every valid
            token (plain GRPO).
        needs_omega: whether the score reads omega. Omega carries no 1/length factor, so such rules need a loss whose
            gradient coefficient omega is (a token-level clipped surrogate).
        tie_break: (entropy, omega) -> values that order equal scores (higher first, then the lower position).
        overlap_with: the rule whose kept tokens `selection/overlap` is measured against (another ranking of the same
            batch); None: no overlap is logged.
    """

    name: str
    score: Score | None
    needs_omega: bool
    tie_break: Score | None = None
    overlap_with: str | None = None

    def select(self, entropy: torch.Tensor, omega: torch.Tensor, mask: torch.Tensor, ratio: float,
               group_size: int | None = None) -> torch.Tensor:
        """(B, T) bool mask of the kept tokens: every valid one without a score, else the top `ratio` by the score
        (select_top_fraction), equal scores ordered by `tie_break`, then position."""
        if self.score is None:
            return mask.bool()
        tie = None if self.tie_break is None else self.tie_break(entropy, omega)
        return select_top_fraction(self.score(entropy, omega), mask, ratio, group_size, tie_break=tie)


RULES: dict[str, Rule] = {}  # name -> rule, in registration order


def register_rule(rule: Rule) -> Rule:
    """Add a rule: its name becomes a token_selection. A name taken by another rule is refused (the same rule again
    is a no-op)."""
    other = RULES.get(rule.name)
    if other is not None and other != rule:
        raise ValueError(f"rule {rule.name!r} is taken by another rule")
    RULES[rule.name] = rule
    return rule


def unregister_rule(name: str) -> None:
    """Remove a rule (for tests that register one)."""
    del RULES[name]


def rule_named(name: str) -> Rule:
    """The rule of a token_selection; KeyError naming the known ones otherwise."""
    if name not in RULES:
        raise KeyError(f"unknown rule {name!r}: use one of {', '.join(RULES)}")
    return RULES[name]


def overlap_partner(rule: Rule) -> Rule | None:
    """The other ranking a rule's `selection/overlap` is measured against (Rule.overlap_with); None for a rule without
    a score or without a partner."""
    return None if rule.score is None or rule.overlap_with is None else rule_named(rule.overlap_with)


register_rule(Rule("all", None, needs_omega=False))
register_rule(Rule("entropy", _entropy_score, needs_omega=False, overlap_with="gmts"))
register_rule(Rule("gmts", gmts_scores, needs_omega=True, tie_break=_entropy_tie_break, overlap_with="entropy"))
register_rule(Rule("entropy_nonzero_omega", ets_nonzero_omega_scores, needs_omega=True, overlap_with="entropy"))
