"""The pure state-dict arithmetic of merges (no runtime involved)."""

import itertools

import pytest
import torch
from torch import nn

from dislib_nn.training.merge import _outer, _sums


def _net(seed):
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Conv2d(1, 3, 3, bias=False), nn.BatchNorm2d(3),
                        nn.Flatten(), nn.Linear(3 * 4 * 4, 2))
    # Give BatchNorm running statistics and a batch counter of their own.
    net.train()
    for _ in range(seed + 1):
        net(torch.randn(4, 1, 6, 6))
    return net.state_dict()


def _assert_states_close(a, b, atol=1e-6):
    assert list(a) == list(b)
    for key in a:
        assert a[key].dtype == b[key].dtype, key
        torch.testing.assert_close(a[key], b[key], atol=atol, rtol=0)


def test_identical_replicas_are_unchanged():
    state = _net(0)
    merged = _sums.weighted_mean([state] * 5, [3, 1, 4, 1, 5])
    _assert_states_close(merged, state)


def test_two_replicas_merge_with_sample_weights():
    a, b = _net(0), _net(1)
    merged = _sums.weighted_mean([a, b], [30, 10])
    for key, value in merged.items():
        if value.is_floating_point():
            expected = (30 * a[key] + 10 * b[key]) / 40
            torch.testing.assert_close(value, expected, atol=1e-6, rtol=0)


def test_batchnorm_statistics_are_averaged_and_counters_take_max():
    a, b = _net(0), _net(2)
    merged = _sums.weighted_mean([a, b], [1, 1])
    torch.testing.assert_close(merged["1.running_mean"],
                               (a["1.running_mean"] + b["1.running_mean"]) / 2)
    torch.testing.assert_close(merged["1.running_var"],
                               (a["1.running_var"] + b["1.running_var"]) / 2)
    assert a["1.num_batches_tracked"] == 1
    assert b["1.num_batches_tracked"] == 3
    assert merged["1.num_batches_tracked"] == 3
    assert merged["1.num_batches_tracked"].dtype == torch.int64


def test_merge_order_and_tree_shape_do_not_matter():
    states = [_net(i) for i in range(5)]
    weights = [5, 1, 7, 2, 3]
    parts = [_sums.weighted(s, w) for s, w in zip(states, weights)]
    reference = _sums.mean(_sums.tree_reduce(
        parts, lambda a, b, root: _sums.combine(a, b)))
    for order in itertools.islice(itertools.permutations(range(5)), 0,
                                  120, 7):
        left_fold = parts[order[0]]
        for i in order[1:]:
            left_fold = _sums.combine(left_fold, parts[i])
        _assert_states_close(_sums.mean(left_fold), reference, atol=1e-5)


def test_half_precision_and_nested_modules_merge():
    class Inner(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(3, dtype=torch.float16))

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()
            self.register_buffer("steps", torch.tensor([2, 5]))

    a, b = Outer().state_dict(), Outer().state_dict()
    b["inner.w"] = b["inner.w"] * 3
    b["steps"] = torch.tensor([4, 1])
    merged = _sums.weighted_mean([a, b], [1, 1])
    assert merged["inner.w"].dtype == torch.float16
    torch.testing.assert_close(merged["inner.w"],
                               torch.full((3,), 2.0, dtype=torch.float16))
    assert merged["steps"].tolist() == [4, 5]


def test_tree_reduce_depth_is_ceil_log2():
    def pair(a, b, root):
        return max(a, b) + 1

    for n in range(1, 18):
        assert _sums.tree_reduce([0] * n, pair) == _sums.tree_depth(n)
        assert _sums.tree_depth(n) == (n - 1).bit_length()


def test_tree_reduce_marks_only_the_last_pair_as_root():
    roots = []
    _sums.tree_reduce(list(range(7)),
                       lambda a, b, root: roots.append(root) or a)
    assert roots.count(True) == 1 and roots[-1] is True


@pytest.mark.parametrize("weight", [-1, float("nan"), float("inf")])
def test_bad_weights_raise(weight):
    with pytest.raises(ValueError, match="weight must be finite and >= 0"):
        _sums.weighted({"w": torch.ones(2)}, weight)


def test_zero_total_weight_raises():
    with pytest.raises(ValueError, match="total weight is 0"):
        _sums.mean(_sums.weighted({"w": torch.ones(2)}, 0))


def test_mismatched_shapes_raise_naming_the_entry():
    a = _sums.weighted({"fc.weight": torch.ones(2, 3)}, 1)
    b = _sums.weighted({"fc.weight": torch.ones(3, 2)}, 1)
    with pytest.raises(ValueError, match="'fc.weight'.*shape"):
        _sums.combine(a, b)


def test_outer_step_defaults_are_plain_averaging():
    prev, avg = _net(0), _net(1)
    keys = [k for k, v in prev.items() if v.is_floating_point()
            and "running" not in k]
    state, velocity = _outer.momentum_step(prev, avg, None, 1.0, 0.0, keys)
    _assert_states_close(state, avg)
    assert velocity is None


def test_outer_step_heavy_ball_momentum():
    prev = {"w": torch.tensor([0.0]), "bn.running_var": torch.tensor([1.0])}
    avg = {"w": torch.tensor([1.0]), "bn.running_var": torch.tensor([0.5])}
    state, v = _outer.momentum_step(prev, avg, None, 2.0, 0.5, ["w"])
    assert state["w"].item() == 2.0          # 0 + 2 * (1 - 0)
    assert state["bn.running_var"].item() == 0.5   # buffers: plain mean
    state2, v2 = _outer.momentum_step(
        state, {"w": torch.tensor([2.5]),
                "bn.running_var": avg["bn.running_var"]},
        v, 2.0, 0.5, ["w"])
    # v = 0.5 * 1 + (2.5 - 2) = 1.0; w = 2 + 2 * 1.0
    assert v2["w"].item() == 1.0
    assert state2["w"].item() == 4.0


def test_optimizer_states_flatten_and_average():
    params = [nn.Parameter(torch.ones(2)), nn.Parameter(torch.ones(3))]
    states = []
    for scale in (1.0, 3.0):
        opt = torch.optim.Adam(params, lr=0.1)
        for p in params:
            p.grad = torch.full_like(p, scale)
        opt.step()
        states.append(opt.state_dict())
    flats = [_sums.flatten_optimizer_state(s) for s in states]
    merged = _sums.mean(_sums.combine(_sums.weighted(flats[0][0], 1),
                                        _sums.weighted(flats[1][0], 3)))
    back = _sums.unflatten_optimizer_state(merged, flats[0][1])
    expected = (states[0]["state"][1]["exp_avg"]
                + 3 * states[1]["state"][1]["exp_avg"]) / 4
    torch.testing.assert_close(back["state"][1]["exp_avg"], expected)
    assert back["param_groups"] == states[0]["param_groups"]
    opt = torch.optim.Adam(params, lr=0.1)
    opt.load_state_dict(back)
