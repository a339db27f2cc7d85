"""A state dict cut into shards (the arithmetic of ``merge="sharded"``,
no tasks)."""

import collections
import pickle

import pytest
import torch

from dislib_nn.training.merge import _shards, _sums


def _state(seed=0):
    g = torch.Generator().manual_seed(seed)
    return collections.OrderedDict([
        ("fc.weight", torch.randn(7, 5, generator=g)),
        ("fc.bias", torch.randn(7, generator=g)),
        ("scale", torch.randn((), generator=g)),          # 0-d
        ("half", torch.randn(3, 3, generator=g).to(torch.bfloat16)),
        ("bn.num_batches_tracked", torch.tensor(seed + 3)),
        ("mask", torch.tensor([True, False])),
    ])


@pytest.mark.parametrize("n", [1, 2, 3, 4, 9])
def test_split_then_join_gives_the_state_dict_back(n):
    state = _state()
    shards = _shards.split(state, n)
    joined = _shards.join(reversed(shards))         # any order
    assert list(joined) == list(state)
    for key, value in state.items():
        assert joined[key].dtype == value.dtype
        assert torch.equal(joined[key], value), key


def test_floating_entries_are_cut_evenly_and_the_rest_rides_in_shard_0():
    shards = _shards.split(_state(), 3)
    assert [s.entries["fc.weight"].numel() for s in shards] == [11, 12, 12]
    for key in ("bn.num_batches_tracked", "mask"):
        assert key in shards[0].entries
        assert all(key not in s.entries for s in shards[1:])


def test_a_shard_pickles_its_slice_not_the_whole_tensor():
    state = {"w": torch.randn(1000, 100)}
    whole = len(pickle.dumps(state))
    one = len(pickle.dumps(_shards.piece(state, 1, 4)))
    assert one < whole / 3


def test_piece_is_the_shard_split_returns():
    state = _state()
    for j, shard in enumerate(_shards.split(state, 4)):
        other = _shards.piece(state, j, 4)
        assert other.index == shard.index == j
        assert other.layout == shard.layout
        assert all(torch.equal(a, b) for a, b in
                   zip(other.entries.values(), shard.entries.values()))
    with pytest.raises(ValueError, match="shard index 4 is out of range "
                                         "for 4 shards"):
        _shards.piece(state, 4, 4)


def test_a_model_missing_a_shard_is_refused():
    shards = _shards.split(_state(), 3)
    with pytest.raises(ValueError, match=r"each of its shards once.*"
                                         r"\[\(0, 3\), \(2, 3\)\]"):
        _shards.join([shards[0], shards[2]])


def test_model_from_takes_a_whole_state_or_its_shards():
    state = _state()
    assert _shards.model_from([state]) is state
    joined = _shards.model_from(_shards.split(state, 2))
    assert all(torch.equal(joined[k], state[k]) for k in state)


def _tree_mean(states, weights, finite, previous):
    """What the tree of merge tasks computes: finite replicas summed
    pairwise, divided once (or ``previous``)."""
    sums = [_sums.weighted(s, w) if ok
            else _sums.WeightedSum(collections.OrderedDict())
            for s, w, ok in zip(states, weights, finite)]
    total = _sums.tree_reduce(sums, lambda a, b, root: _sums.combine(a, b))
    return _sums.mean_or_previous(total, previous)[0]


@pytest.mark.parametrize("finite", [
    [True, True, True, True, True],
    [True, False, True, True, False],
    [False, False, False, False, False]])
def test_merging_shard_by_shard_is_the_whole_merge_bit_for_bit(finite):
    states = [_state(seed) for seed in range(5)]
    weights = [10, 31, 7, 12, 40]
    previous = _state(99)
    expected = _tree_mean(states, weights, finite, previous)
    n = 3
    merged = [_shards.merge_pieces(
        [_shards.piece(s, j, n) for s in states], weights, finite,
        _shards.piece(previous, j, n)) for j in range(n)]
    got = _shards.join(merged)
    assert list(got) == list(expected)
    for key, value in expected.items():
        assert got[key].dtype == value.dtype
        assert torch.equal(got[key], value), key
    # The weighted mean is not any replica's (the test compares something).
    assert not torch.equal(got["fc.weight"], states[0]["fc.weight"])
