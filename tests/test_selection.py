"""Property tests of the selection math (selection.py): exact counts, scopes, ties, omega."""

import math
from fractions import Fraction

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from selection import (ets_nonzero_omega_scores, ets_scores, gmts_omega, gmts_scores, kept_count,
                                   select_top_fraction, selection_stats, smallest_fraction_at_least,
                                   top_answer_weight_share, top_answers, update_cosine)

RATIOS = st.sampled_from([0.05, 0.1, 0.2, 0.25, 1 / 3, 0.5, 0.8, 1.0])


@st.composite
def batches(draw, max_rows=12, max_cols=20):
    rows, cols = draw(st.integers(1, max_rows)), draw(st.integers(1, max_cols))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    # few distinct values, so ties are common
    scores = torch.randint(0, draw(st.integers(1, 50)), (rows, cols), generator=g).float()
    lengths = torch.randint(0, cols + 1, (rows,), generator=g)
    mask = torch.arange(cols).unsqueeze(0) < lengths.unsqueeze(1)  # right padding, like completions
    return scores, mask


@settings(max_examples=300, deadline=None)
@given(batches(), RATIOS)
def test_batch_scope_keeps_exact_count_of_the_highest_scores(batch, ratio):
    scores, mask = batch
    keep = select_top_fraction(scores, mask, ratio)
    n = int(mask.sum())
    assert int(keep.sum()) == kept_count(n, ratio) == math.ceil(round(ratio * n, 9))
    assert not (keep & ~mask).any(), "a padding position was kept"
    if keep.any() and (mask & ~keep).any():
        assert scores[keep].min() >= scores[mask & ~keep].max(), "a kept token scores below a dropped one"


@settings(max_examples=200, deadline=None)
@given(batches(), RATIOS, st.sampled_from([1, 2, 3, 4]))
def test_group_scope_applies_the_rule_within_every_group(batch, ratio, group_size):
    scores, mask = batch
    rows = scores.size(0) - scores.size(0) % group_size
    if rows == 0:
        return
    scores, mask = scores[:rows], mask[:rows]
    keep = select_top_fraction(scores, mask, ratio, group_size=group_size)
    for g in range(rows // group_size):  # every group, including the last (the authors' loop skipped most)
        sl = slice(g * group_size, (g + 1) * group_size)
        assert torch.equal(keep[sl], select_top_fraction(scores[sl], mask[sl], ratio))


def test_ties_go_to_the_lower_row_major_index_and_are_deterministic():
    scores = torch.ones(3, 4)
    mask = torch.ones(3, 4, dtype=torch.bool)
    keep = select_top_fraction(scores, mask, 0.5)
    assert keep.flatten().tolist() == [True] * 6 + [False] * 6
    assert torch.equal(keep, select_top_fraction(scores, mask, 0.5))


def test_threshold_is_over_the_batch_not_per_row():
    scores = torch.tensor([[9.0, 8.0, 7.0, 6.0], [1.0, 2.0, 3.0, 4.0]])
    keep = select_top_fraction(scores, torch.ones_like(scores, dtype=torch.bool), 0.5)
    assert keep[0].all() and not keep[1].any()


def test_ratio_is_read_as_the_decimal_written():
    assert kept_count(15, 0.2) == 3  # 0.2 * 15 == 3.0000000000000004 in binary floating point
    assert kept_count(10, 0.2) == 2 and kept_count(11, 0.2) == 3 and kept_count(0, 0.2) == 0


# Ratios whose decimal has a 16-17 digit numerator (1/3, 2/7, 0.1 + 0.2) or a huge denominator (1e-300): n x numerator
# overflows int64 from a few thousand tokens on.
LONG_DECIMAL_RATIOS = [1 / 3, 2 / 7, 0.1 + 0.2, 0.2, 2 / 3, 0.999999999999999, 1e-300, 5e-324, 1.0]


def exact_ceil(ratio, n):
    return math.ceil(Fraction(repr(ratio)) * n)  # the ratio read as the decimal written (module docstring)


@pytest.mark.parametrize("ratio, n, kept", [(1 / 3, 3000, 1000), (1 / 3, 100_000, 33_334), (2 / 7, 10**6, 285_715),
                                            (0.1 + 0.2, 3000, 901), (1e-300, 10**6, 1)])
def test_kept_count_of_a_long_decimal_ratio_does_not_overflow(ratio, n, kept):
    mask = torch.ones(1, n, dtype=torch.bool)
    assert kept_count(n, ratio) == exact_ceil(ratio, n) == kept
    assert int(select_top_fraction(torch.rand(1, n, generator=torch.Generator().manual_seed(n)), mask, ratio).sum()) \
        == kept


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.sampled_from(LONG_DECIMAL_RATIOS), st.floats(0.0, 1.0, exclude_min=True)),
       st.integers(0, 10**6), st.integers(0, 10**5), st.sampled_from([None, 2]))
def test_kept_count_is_exact_for_every_ratio_and_size(ratio, n, padding, group_size):
    """One row of n valid tokens (then padding) per group: each keeps exactly ceil(ratio x n), up to 10^6 tokens."""
    rows = group_size or 1
    mask = (torch.arange(n + padding) < n).unsqueeze(0).expand(rows, -1)
    keep = select_top_fraction(torch.zeros(mask.shape), mask, ratio, group_size=1 if group_size else None)
    assert keep.sum(dim=1).tolist() == [exact_ceil(ratio, n)] * rows
    assert not (keep & ~mask).any()


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.sampled_from(LONG_DECIMAL_RATIOS), st.floats(0.0, 1.0, exclude_min=True)),
       st.integers(1, 400))
def test_smallest_fraction_at_least_has_the_ceilings_of_the_ratio_up_to_its_bound(ratio, bound):
    f = Fraction(repr(ratio))
    g = smallest_fraction_at_least(f, bound)
    assert g >= f and g.denominator <= bound
    assert all(math.ceil(g * n) == math.ceil(f * n) for n in range(bound + 1))
    # the smallest: no fraction of denominator <= bound lies in [f, g)
    assert all(Fraction(math.ceil(f * d), d) >= g for d in range(1, bound + 1))


@pytest.mark.parametrize("bad", [0, 0.0, -0.1, 1.5, float("nan"), "0.2", None, True])
def test_bad_ratio_is_a_clear_value_error(bad):
    with pytest.raises(ValueError, match="ratio of kept tokens"):
        select_top_fraction(torch.ones(1, 2), torch.ones(1, 2), bad)


def test_nan_score_at_a_valid_position_is_refused_but_ignored_in_padding():
    scores = torch.tensor([[1.0, float("nan")]])
    assert select_top_fraction(scores, torch.tensor([[1, 0]]), 1.0).tolist() == [[True, False]]
    with pytest.raises(ValueError, match="NaN"):
        select_top_fraction(scores, torch.tensor([[1, 1]]), 1.0)


def test_ten_million_valid_tokens():
    g = torch.Generator().manual_seed(0)
    scores = torch.rand(1000, 10_001, generator=g)  # 10^7 valid positions plus padding
    mask = torch.ones_like(scores, dtype=torch.bool)
    mask[:, -1] = False
    keep = select_top_fraction(scores, mask, 0.2)
    assert int(keep.sum()) == 2_000_000
    assert scores[keep].min() >= scores[mask & ~keep].max()


def test_omega_on_policy_beta_zero_is_the_advantage_on_every_token():
    adv = torch.tensor([1.5, -0.5, 0.0])
    omega = gmts_omega(adv, ratio=torch.ones(3, 5))
    assert torch.equal(omega, adv.unsqueeze(1).expand(3, 5))
    assert torch.equal(gmts_omega(adv), adv.unsqueeze(1))


def test_omega_is_zero_exactly_where_the_clipped_branch_is_active():
    adv = torch.tensor([[1.0], [1.0], [-1.0], [-1.0]])
    ratio = torch.tensor([[1.3, 1.1], [0.7, 1.0], [0.7, 0.9], [1.3, 1.0]])
    omega = gmts_omega(adv, ratio, epsilon_low=0.2, epsilon_high=0.2)
    expected = torch.tensor([[0.0, 1.1], [0.7, 1.0], [0.0, -0.9], [-1.3, -1.0]])
    assert torch.allclose(omega, expected)


def test_omega_kl_term_is_the_gradient_coefficient_of_k3():
    # d/dlogp of -beta * (e^(ref-logp) - (ref-logp) - 1) = beta * (e^(ref-logp) - 1)
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0]])
    beta = 0.1
    objective = -beta * (torch.exp(ref - logp) - (ref - logp) - 1)
    objective.sum().backward()
    omega = gmts_omega(torch.zeros(1), None, beta=beta, ref_ratio=torch.exp(ref - logp.detach()))
    assert torch.allclose(omega, logp.grad)
    with pytest.raises(ValueError):
        gmts_omega(torch.zeros(1), beta=0.1)


def test_omega_kl_term_with_bias_correction_is_the_gradient_coefficient_of_k3_times_ratio():
    # TRL's use_bias_correction_kl (its default): the loss is beta * k3 * r, r = pi / pi_old with gradient
    logp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    old, ref = torch.tensor([[-1.2, -1.9, -0.5]]), torch.tensor([[-1.5, -1.0, -0.7]])
    beta = 0.1
    k3 = torch.exp(ref - logp) - (ref - logp) - 1
    (-beta * k3 * torch.exp(logp - old)).sum().backward()
    with torch.no_grad():
        omega = gmts_omega(torch.zeros(1), torch.exp(logp - old), beta=beta, ref_ratio=torch.exp(ref - logp),
                           kl_bias_correction=True)
    assert torch.allclose(omega, logp.grad)


def test_omega_with_two_sided_clip_and_weight():
    adv = torch.tensor([[1.0], [-1.0]])
    ratio = torch.tensor([[1.1, 1.6, 0.9], [1.1, 1.6, 0.7]])
    weight = torch.tensor([[2.0], [0.5]])
    omega = gmts_omega(adv, ratio, 0.2, 0.2, delta=1.5, weight=weight)
    # A > 0: r = 1.6 is clipped by 1 + eps already; A < 0: r = 1.6 > delta is clipped by delta, r = 0.7 by 1 - eps
    assert torch.allclose(omega, torch.tensor([[2.2, 0.0, 1.8], [-0.55, 0.0, 0.0]]))


def trl_clipped_surrogate(r, a, epsilon_low, epsilon_high, delta):
    """TRL 1.16 GRPOTrainer._compute_loss, loss_type grpo/bnpo/dapo, token level, its lines verbatim (coef_1 = r)."""
    coef_1 = r
    coef_2 = torch.clamp(coef_1, 1 - epsilon_low, 1 + epsilon_high)
    if delta is not None:
        coef_1 = torch.clamp(coef_1, max=delta)
    per_token_loss1 = coef_1 * a
    per_token_loss2 = coef_2 * a
    return -torch.min(per_token_loss1, per_token_loss2)


BOUNDS = [0.8, 1.2, 1.0, 0.9, 1.1, 0.5, 1.25, 3.0]  # the clip range's ends, 1 and the deltas: hit exactly


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(BOUNDS), st.floats(0.01, 5.0)), min_size=1, max_size=16),
       st.lists(st.one_of(st.sampled_from([0.0, 1.0, -1.0]), st.floats(-3.0, 3.0)), min_size=1, max_size=16),
       st.one_of(st.none(), st.sampled_from(BOUNDS), st.floats(0.05, 4.0)),
       st.sampled_from([(0.2, 0.2), (0.2, 0.28), (0.1, 0.3)]))
def test_omega_is_the_autograd_coefficient_of_trls_surrogate_for_every_delta(rs, advantages, delta, epsilons):
    """-d loss / d log pi = -r d loss / d r, over a grid of (A, r) with r on both sides of every bound and delta
    below, at and above 1 + epsilon_high (delta 0.9: TRL's min picks the unclipped term for A < 0, not 0)."""
    a = torch.tensor(advantages).unsqueeze(1)  # (B, 1)
    r = torch.tensor(rs).expand(a.size(0), -1).clone().requires_grad_(True)  # (B, T): every (A, r) pair
    trl_clipped_surrogate(r, a, *epsilons, delta).sum().backward()
    omega = gmts_omega(a, r.detach(), *epsilons, delta=delta)
    # atol: float32 underflow; an advantage near 1e-45 (subnormal) rounds differently along the two paths
    torch.testing.assert_close(omega, -r.grad * r.detach(), rtol=1e-6, atol=1e-30)


def test_omega_under_a_two_sided_clip_below_the_clip_range_by_hand():
    """delta 0.9 with the clip range [0.8, 1.2]: for A < 0, min(c1 A, c2 A) takes c2 A when c1 = min(r, 0.9) < c2,
    so a token with 0.8 <= r <= 1.2 moves by r A (the old rule gave 0 for every r > delta); for A > 0 at r = 1 min
    takes c1 = 0.9, a constant: 0."""
    adv = torch.tensor([[-1.0], [1.0]])
    ratio = torch.tensor([[0.7, 0.85, 1.0, 1.1, 1.3], [0.7, 0.85, 1.0, 1.1, 1.3]])
    omega = gmts_omega(adv, ratio, 0.2, 0.2, delta=0.9)
    assert torch.allclose(omega, torch.tensor([[0.0, -0.85, -1.0, -1.1, 0.0], [0.7, 0.85, 0.0, 0.0, 0.0]]))
    assert torch.equal(gmts_omega(adv, None, delta=0.9), torch.tensor([[-1.0], [0.0]]))  # on-policy


def test_gmts_scores_move_slots_toward_large_advantage_answers():
    entropy = torch.full((2, 4), 1.0)
    omega = gmts_omega(torch.tensor([2.0, 0.5])).expand(2, 4)
    mask = torch.ones(2, 4, dtype=torch.bool)
    keep_gmts = select_top_fraction(gmts_scores(entropy, omega), mask, 0.5)
    assert keep_gmts[0].all() and not keep_gmts[1].any()
    assert torch.equal(ets_scores(entropy), entropy)


def test_selection_stats_with_nothing_kept_are_zero_not_nan():
    none = torch.zeros(2, 3, dtype=torch.bool)
    s = selection_stats(none, torch.ones(2, 3), torch.ones(2, 3), torch.zeros(2), torch.tensor([0, 0]))
    assert {k: v.item() for k, v in s.items()} == {"kept_fraction": 0.0, "effective_answers": 0.0,
                                                   "top_answer_share": 0.0, "zero_advantage_kept_share": 0.0,
                                                   "entropy_kept_mean": 0.0, "entropy_all_mean": 1.0}


def test_selection_stats_by_hand():
    kept = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0], [1, 0, 0]], dtype=torch.bool)
    mask = torch.ones(4, 3, dtype=torch.bool)
    entropy = torch.arange(12.0).reshape(4, 3)
    adv = torch.tensor([1.0, -2.0, 0.5, 0.5])  # groups {0,1} and {2,3}; top answers: row 1 and row 2 (first tie)
    other = torch.tensor([[1, 0, 0], [0, 0, 0], [0, 0, 0], [1, 0, 0]], dtype=torch.bool)
    s = selection_stats(kept, mask, entropy, adv, torch.tensor([0, 0, 1, 1]), other_kept=other)
    perm = torch.tensor([2, 0, 3, 1])  # shuffled rows with global group ids (a microbatch of a larger batch)
    shuffled = selection_stats(kept[perm], mask[perm], entropy[perm], adv[perm], torch.tensor([7, 7, 31, 31])[perm],
                               other_kept=other[perm])
    assert all(torch.allclose(s[k], shuffled[k]) for k in s)
    s = {k: v.item() for k, v in s.items()}
    assert s["kept_fraction"] == pytest.approx(4 / 12)
    assert s["overlap"] == pytest.approx(2 / 4)
    assert s["top_answer_share"] == pytest.approx(1 / 4)  # row 1 keeps 1, row 2 keeps 0
    assert s["effective_answers"] == pytest.approx(1 / (0.5**2 + 0.25**2 + 0.25**2))
    assert s["entropy_kept_mean"] == pytest.approx((0 + 1 + 3 + 9) / 4)
    assert s["entropy_all_mean"] == pytest.approx(5.5)
    assert s["zero_advantage_kept_share"] == 0.0  # no answer has advantage 0 here
    equal_rewards = selection_stats(kept, mask, entropy, torch.tensor([1.0, -2.0, 0.0, 0.0]), torch.tensor([0, 0, 1, 1]))
    assert equal_rewards["zero_advantage_kept_share"].item() == pytest.approx(1 / 4)  # row 3 keeps 1 of the 4


def test_ets_spends_slots_on_zero_advantage_answers_and_gmts_does_not():
    """Two groups, one with equal rewards (advantage 0) and higher entropy: ETS keeps its tokens, GMTS none."""
    entropy = torch.tensor([[1.0, 1.0], [1.0, 1.0], [3.0, 3.0], [3.0, 3.0]])
    adv = torch.tensor([1.0, -1.0, 0.0, 0.0])
    mask, gid = torch.ones(4, 2, dtype=torch.bool), torch.tensor([0, 0, 1, 1])
    ets = select_top_fraction(ets_scores(entropy), mask, 0.5)
    gmts = select_top_fraction(gmts_scores(entropy, adv[:, None].expand_as(entropy)), mask, 0.5)
    assert selection_stats(ets, mask, entropy, adv, gid)["zero_advantage_kept_share"].item() == 1.0
    assert selection_stats(gmts, mask, entropy, adv, gid)["zero_advantage_kept_share"].item() == 0.0


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 24), st.integers(0, 2**31 - 1))
def test_top_answers_is_the_first_largest_abs_advantage_row_of_every_group(rows, seed):
    g = torch.Generator().manual_seed(seed)
    gid = torch.randint(0, 1000, (rows,), generator=g) * torch.randint(0, 2, (rows,), generator=g)  # sparse, large
    adv = torch.randint(-2, 3, (rows,), generator=g).float()  # ties are common
    top = top_answers(adv, gid).tolist()
    for group in set(gid.tolist()):
        members = [i for i in range(rows) if gid[i] == group]
        best = max(abs(adv[i].item()) for i in members)
        assert [i for i in members if top[i]] == [next(i for i in members if abs(adv[i].item()) == best)]


def test_top_answer_weight_share_by_hand():
    kept = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0], [1, 0, 0]], dtype=torch.bool)
    omega = torch.tensor([[2.0, -1.0, 5.0], [3.0, 0.0, 0.0], [1.0, 1.0, 1.0], [-4.0, 0.0, 0.0]])
    adv = torch.tensor([1.0, -2.0, 0.5, 0.5])  # top answers: row 1 (|-2|) and row 2 (first of a tie, keeps nothing)
    share = top_answer_weight_share(kept, omega, adv, torch.tensor([0, 0, 1, 1]))
    assert share.item() == pytest.approx(3 / 10)  # kept |omega|: 3 + 3 + 0 + 4; the top rows carry 3
    stats = selection_stats(kept, torch.ones(4, 3), torch.ones(4, 3), adv, torch.tensor([0, 0, 1, 1]), omega=omega)
    assert stats["top_answer_weight_share"].item() == pytest.approx(0.3)
    assert top_answer_weight_share(kept, torch.zeros(4, 3), adv, torch.tensor([0, 0, 1, 1])).item() == 0.0


@settings(max_examples=200, deadline=None)
@given(batches(max_rows=12), st.sampled_from([1, 2, 3, 4]), st.integers(0, 2**31 - 1))
def test_top_answer_weight_share_properties(batch, group_size, seed):
    scores, mask = batch
    rows = scores.size(0) - scores.size(0) % group_size
    if rows == 0:
        return
    g = torch.Generator().manual_seed(seed)
    kept, gid = mask[:rows], torch.arange(rows) // group_size
    adv = torch.randn(rows, generator=g)
    omega = adv.unsqueeze(1) * torch.rand(rows, kept.size(1), generator=g)
    share = top_answer_weight_share(kept, omega, adv, gid).item()
    assert 0.0 <= share <= 1.0 + 1e-6
    assert top_answer_weight_share(kept, 7.5 * omega, adv, gid).item() == pytest.approx(share, abs=1e-5)
    perm = torch.randperm(rows, generator=g)
    assert top_answer_weight_share(kept[perm], omega[perm], adv[perm], gid[perm] * 10 + 3).item() == pytest.approx(
        share, abs=1e-5)  # row order and group labels do not matter
    if group_size == 1 and (kept & (omega != 0)).any():
        assert share == pytest.approx(1.0)  # every answer is its group's top answer
    uniform = top_answer_weight_share(kept, torch.ones_like(omega), adv, gid)
    counts = selection_stats(kept, mask[:rows], torch.zeros_like(omega), adv, gid)["top_answer_share"]
    assert uniform.item() == pytest.approx(counts.item(), abs=1e-6)  # |omega| uniform: the share of kept tokens


def test_update_cosine_by_hand():
    assert update_cosine(torch.tensor([1.0, 0.0]), torch.tensor([1.0, 1.0])).item() == pytest.approx(2**-0.5)
    assert update_cosine(torch.tensor([1.0, 2.0]), torch.tensor([-2.0, 1.0])).item() == 0.0
    assert update_cosine(torch.tensor([1.0, 2.0]), torch.tensor([-3.0, -6.0])).item() == pytest.approx(-1.0)
    assert update_cosine(torch.zeros(2), torch.tensor([1.0, 1.0])).item() == 0.0


# ---------------------------------------------------------------- the control arm: ETS over tokens with omega != 0
@st.composite
def entropy_omega_batches(draw, group_size=None):
    """(entropy, omega, mask): entropies with ties and magnitudes from 1e-30 to 50 (so a score that adds an offset
    in float32 merges distinct entropies), omega per answer or per token with many exact zeros, padding with a huge
    entropy and nonzero omega (the most tempting tokens to keep)."""
    scores, mask = draw(batches())
    if group_size is not None:
        rows = scores.size(0) - scores.size(0) % group_size
        if rows == 0:
            rows = group_size
            scores, mask = scores.repeat(group_size, 1)[:rows], mask.repeat(group_size, 1)[:rows]
        scores, mask = scores[:rows], mask[:rows]
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    scale = 10.0 ** torch.randint(-30, 1, scores.shape, generator=g).float() if draw(st.booleans()) else 1.0
    entropy = scores * scale
    choices = torch.tensor([0.0, 0.0, 1.0, -0.5, 2.0])
    per_token = draw(st.booleans())
    shape = scores.shape if per_token else (scores.size(0), 1)
    omega = choices[torch.randint(0, len(choices), shape, generator=g)].expand_as(entropy).clone()
    entropy = torch.where(mask, entropy, torch.full_like(entropy, 1e6))
    omega = torch.where(mask, omega, torch.ones_like(omega))
    return entropy, omega, mask


def _reference_nonzero_omega_keep(entropy, omega, mask, ratio):
    """The rule by hand: valid tokens sorted by (omega != 0 first, entropy descending, row-major index), the first
    ceil(ratio x valid) kept."""
    e, w, m = entropy.flatten().tolist(), omega.flatten().tolist(), mask.flatten().tolist()
    valid = [i for i in range(len(e)) if m[i]]
    order = sorted(valid, key=lambda i: (w[i] == 0, -e[i], i))
    keep = torch.zeros(len(e), dtype=torch.bool)
    keep[order[: kept_count(len(valid), ratio)]] = True
    return keep.reshape(entropy.shape)


def scoped(batch, group_size):
    """The batch cut to whole groups of group_size rows, and each scope's row slice (one: the batch scope); None when
    not one whole group fits."""
    entropy, omega, mask = batch
    size = group_size or entropy.size(0)
    rows = entropy.size(0) - entropy.size(0) % size
    if rows == 0:
        return None
    return entropy[:rows], omega[:rows], mask[:rows], [slice(g, g + size) for g in range(0, rows, size)]


@settings(max_examples=300, deadline=None)
@given(entropy_omega_batches(), RATIOS)
def test_nonzero_omega_rule_is_the_rule_written_by_hand(batch, ratio):
    entropy, omega, mask = batch
    keep = select_top_fraction(ets_nonzero_omega_scores(entropy, omega), mask, ratio)
    assert torch.equal(keep, _reference_nonzero_omega_keep(entropy, omega, mask, ratio))


@settings(max_examples=300, deadline=None)
@given(entropy_omega_batches(), RATIOS, st.sampled_from([None, 1, 2, 3]))
def test_nonzero_omega_rule_is_ets_when_no_omega_is_zero(batch, ratio, group_size):
    """(a) Every valid token has omega != 0: the control keeps exactly what ETS keeps (batch and group scope)."""
    if (cut := scoped(batch, group_size)) is None:
        return
    entropy, omega, mask, _ = cut
    omega = torch.where(omega == 0, torch.full_like(omega, -0.25), omega)
    assert torch.equal(select_top_fraction(ets_nonzero_omega_scores(entropy, omega), mask, ratio, group_size),
                       select_top_fraction(ets_scores(entropy), mask, ratio, group_size))


@settings(max_examples=300, deadline=None)
@given(entropy_omega_batches(), RATIOS, st.sampled_from([None, 1, 2, 4]))
def test_nonzero_omega_rule_never_keeps_a_zero_omega_token_while_a_nonzero_one_is_left(batch, ratio, group_size):
    """(b) Within a scope, a valid token with omega == 0 is kept only once every valid token with omega != 0 is."""
    if (cut := scoped(batch, group_size)) is None:
        return
    entropy, omega, mask, scopes = cut
    keep = select_top_fraction(ets_nonzero_omega_scores(entropy, omega), mask, ratio, group_size)
    for sl in scopes:
        kept_zero = (keep[sl] & mask[sl] & (omega[sl] == 0)).any()
        left_nonzero = (~keep[sl] & mask[sl] & (omega[sl] != 0)).any()
        assert not (kept_zero and left_nonzero)


@settings(max_examples=300, deadline=None)
@given(entropy_omega_batches(), RATIOS, st.sampled_from([None, 1, 2, 4]))
def test_nonzero_omega_rule_keeps_as_many_tokens_as_ets_and_gmts_and_no_padding(batch, ratio, group_size):
    """(c) The same kept count as ETS and GMTS for the same mask, scope and ratio; (d) never a padding position
    (padding here has the largest entropy and omega != 0)."""
    if (cut := scoped(batch, group_size)) is None:
        return
    entropy, omega, mask, scopes = cut
    keep, ets, gmts = (select_top_fraction(scores, mask, ratio, group_size) for scores in (
        ets_nonzero_omega_scores(entropy, omega), ets_scores(entropy), gmts_scores(entropy, omega)))
    for sl in scopes:
        n = int(keep[sl].sum())
        assert n == int(ets[sl].sum()) == int(gmts[sl].sum()) == kept_count(int(mask[sl].sum()), ratio)
    assert not (keep & ~mask).any(), "a padding position was kept"


def test_nonzero_omega_rule_by_hand_and_its_refusals():
    entropy = torch.tensor([[9.0, 1e-30, 2e-30], [5.0, 4.0, 0.5]])
    adv = torch.tensor([0.0, 1.0])  # row 0: a group with equal rewards
    omega = gmts_omega(adv).expand_as(entropy)
    mask = torch.ones(2, 3, dtype=torch.bool)
    keep = select_top_fraction(ets_nonzero_omega_scores(entropy, omega), mask, 0.5)
    assert keep.tolist() == [[False, False, False], [True, True, True]]  # ETS would keep 9.0 of row 0 instead of 0.5
    assert select_top_fraction(ets_scores(entropy), mask, 0.5).tolist() == [[True, False, False], [True, True, False]]
    keep = select_top_fraction(ets_nonzero_omega_scores(entropy, omega), mask, 0.8)  # 5 of 6
    assert keep.tolist() == [[True, False, True], [True, True, True]]  # 2e-30 before 1e-30: entropy, not position
    nan = torch.tensor([[1.0, float("nan")]])
    assert select_top_fraction(ets_nonzero_omega_scores(nan, torch.ones(1, 2)), torch.tensor([[1, 0]]),
                               1.0).tolist() == [[True, False]]
    with pytest.raises(ValueError, match="NaN"):
        select_top_fraction(ets_nonzero_omega_scores(nan, torch.ones(1, 2)), torch.tensor([[1, 1]]), 1.0)
    with pytest.raises(ValueError, match="one shape"):
        ets_nonzero_omega_scores(entropy, omega[:, :1])
    assert selection_stats(keep, mask, entropy, adv, torch.tensor([0, 1]))["zero_advantage_kept_share"].item() == pytest.approx(0.4)


def test_a_scope_too_long_for_an_exact_int64_count_is_refused(monkeypatch):
    import selection

    monkeypatch.setattr(selection, "_MAX_SEGMENT", 5)
    assert int(select_top_fraction(torch.ones(1, 5), torch.ones(1, 5), 1 / 3).sum()) == 2
    with pytest.raises(ValueError, match="6 positions in one scope exceed 5"):
        select_top_fraction(torch.ones(1, 6), torch.ones(1, 6), 1 / 3)


# ---------------------------------------------------------------- the rule registry and the GMTS tie-break
from selection import RULES, Rule, overlap_partner, register_rule, rule_named, unregister_rule  # noqa: E402


@settings(max_examples=300, deadline=None)
@given(entropy_omega_batches(), RATIOS, st.sampled_from([None, 1, 2, 4]))
def test_gmts_orders_equal_scores_by_entropy_then_position_with_an_exact_count(batch, ratio, group_size):
    entropy, omega, mask = batch
    rows = entropy.size(0) - entropy.size(0) % (group_size or 1)
    if rows == 0:
        return
    entropy, omega, mask = entropy[:rows], omega[:rows], mask[:rows]
    keep = RULES["gmts"].select(entropy, omega, mask, ratio, group_size)
    size = entropy.numel() if group_size is None else group_size * entropy.size(1)
    score = gmts_scores(entropy, omega)
    for seg in range(rows * entropy.size(1) // size):
        sl = slice(seg * size, (seg + 1) * size)
        k, m = keep.reshape(-1)[sl], mask.reshape(-1)[sl]
        s, e = score.reshape(-1)[sl].tolist(), entropy.reshape(-1)[sl].float().tolist()
        assert int(k.sum()) == kept_count(int(m.sum()), ratio) and not (k & ~m).any()
        # the kept set is the first ones in (score descending, entropy descending, position ascending) order
        order = sorted((i for i in range(len(s)) if m[i]), key=lambda i: (-s[i], -e[i], i))
        assert sorted(order[: int(k.sum())]) == k.nonzero().flatten().tolist()


@settings(max_examples=200, deadline=None)
@given(entropy_omega_batches(), RATIOS)
def test_gmts_with_every_advantage_zero_keeps_the_highest_entropy_tokens_as_ets_does(batch, ratio):
    """Every score ties at 0: GMTS then keeps what ETS keeps, not the first tokens by position. With beta 0 those
    tokens have omega 0, so their gradient is 0 either way."""
    entropy, _, mask = batch
    zero = torch.zeros_like(entropy)
    keep = RULES["gmts"].select(entropy, zero, mask, ratio)
    assert torch.equal(keep, RULES["entropy"].select(entropy, zero, mask, ratio))
    assert int(keep.sum()) == kept_count(int(mask.sum()), ratio)


def test_all_zero_advantages_by_hand_keep_the_high_entropy_tokens_not_the_first():
    entropy = torch.tensor([[0.1, 0.2, 0.3, 0.4, 0.5], [0.9, 0.8, 0.7, 0.6, 0.05]])
    keep = RULES["gmts"].select(entropy, torch.zeros_like(entropy), torch.ones_like(entropy, dtype=torch.bool), 0.2)
    assert keep.nonzero().tolist() == [[1, 0], [1, 1]]  # ceil(0.2 x 10) = 2: entropies 0.9 and 0.8


def test_tie_break_must_match_the_scores_shape():
    with pytest.raises(ValueError, match="tie_break must have the scores' shape"):
        select_top_fraction(torch.zeros(2, 3), torch.ones(2, 3), 0.5, tie_break=torch.zeros(3, 2))


@pytest.fixture(params=[False, True], ids=["registry", "registry-with-a-fifth-rule"])
def registry(request):
    """The registry as shipped, and with a fifth rule registered: the properties below hold for both, so a new rule
    breaks none of them."""
    if not request.param:
        yield RULES
        return
    register_rule(Rule("abs_omega", lambda entropy, omega: omega.abs(), needs_omega=True, overlap_with="gmts"))
    try:
        yield RULES
    finally:
        unregister_rule("abs_omega")


def test_each_rule_is_registered_under_its_name_and_named_in_refusals(registry):
    assert all(name == rule.name for name, rule in registry.items())
    for rule in registry.values():
        assert rule_named(rule.name) is rule
    with pytest.raises(KeyError, match="unknown rule 'etz': use one of " + ", ".join(registry)):
        rule_named("etz")


def test_each_rule_measures_its_overlap_against_another_scored_rule(registry):
    for rule in registry.values():
        partner = overlap_partner(rule)
        if rule.score is None:
            assert partner is None  # every valid token kept: nothing to compare
        elif partner is not None:
            assert partner is not rule and partner.score is not None and partner.name in registry
    assert any(overlap_partner(r) is not None for r in registry.values())


@settings(max_examples=60, deadline=None)
@given(entropy_omega_batches(), RATIOS)
def test_every_scored_rule_keeps_the_exact_count_and_the_plain_one_every_valid_token(batch, ratio):
    entropy, omega, mask = batch
    for with_fifth in (False, True):
        if with_fifth:
            register_rule(Rule("abs_omega", lambda entropy, omega: omega.abs(), needs_omega=True))
        try:
            for rule in RULES.values():
                keep = rule.select(entropy, omega, mask, ratio)
                assert not (keep & ~mask.bool()).any()
                expected = int(mask.sum()) if rule.score is None else kept_count(int(mask.sum()), ratio)
                assert int(keep.sum()) == expected, rule.name
        finally:
            if with_fifth:
                unregister_rule("abs_omega")


def test_the_rules_the_method_names_are_registered_with_what_they_read():
    """The paper's rules and the control (a subset: more may be registered)."""
    assert {"all", "entropy", "gmts", "entropy_nonzero_omega"} <= set(RULES)
    assert not RULES["entropy"].needs_omega and RULES["gmts"].needs_omega and RULES["entropy_nonzero_omega"].needs_omega
    assert RULES["all"].score is None and RULES["gmts"].tie_break is not None


def test_a_registered_rule_selects_and_a_taken_name_is_refused():
    rule = Rule("abs_omega", lambda entropy, omega: omega.abs(), needs_omega=True, overlap_with="entropy")
    register_rule(rule)
    try:
        assert register_rule(rule) is rule  # the same rule again: nothing changes
        assert overlap_partner(rule) is RULES["entropy"]
        keep = rule.select(torch.ones(1, 4), torch.tensor([[0.1, -3.0, 2.0, 0.0]]), torch.ones(1, 4), 0.5)
        assert keep.tolist() == [[False, True, True, False]]
        with pytest.raises(ValueError, match="rule 'gmts' is taken by another rule"):
            register_rule(Rule("gmts", None, needs_omega=False))
    finally:
        unregister_rule("abs_omega")
    assert "abs_omega" not in RULES
