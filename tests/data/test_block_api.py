"""The public block API: ``DsTensor.blocks`` to run tasks of one's own
on a tensor's blocks, and ``DsTensor(..., owned=True)`` to wrap what
they return."""

import numpy as np
import pytest
import torch

import dislib_nn as dnn
from dislib_nn import runtime
from dislib_nn.data import DsTensor
from dislib_nn.exceptions import InvalidParameterError
from tests.runtime import tasks


@runtime.task(returns=1)
def _clamped(block, low, high):
    return block.clamp(low, high)


def test_tasks_on_the_blocks_give_what_torch_gives(backend):
    data = torch.linspace(-3, 3, 60, dtype=torch.float64).reshape(20, 3)
    x = dnn.from_array(data, block_size=[7, 7, 6])
    blocks = x.blocks
    assert len(blocks) == x.n_blocks == 3
    y = DsTensor([_clamped(b, -1.0, 1.0) for b in blocks], x.block_sizes,
                 x.sample_shape, x.dtype, owned=True)
    assert y.block_sizes == (7, 7, 6) and y.dtype == torch.float64
    torch.testing.assert_close(y.collect(), data.clamp(-1.0, 1.0),
                               rtol=0, atol=0)
    # x is untouched, and its blocks are still usable.
    torch.testing.assert_close(x.collect(), data, rtol=0, atol=0)
    assert runtime.wait_on(tasks.total(x.blocks)) == pytest.approx(
        float(data.sum()))


def test_the_list_is_a_copy():
    x = dnn.from_array(np.arange(10.0), n_blocks=2)
    x.blocks.clear()
    assert len(x.blocks) == 2
    np.testing.assert_array_equal(x.collect().numpy(), np.arange(10.0))


@pytest.mark.parametrize("owned", ["yes", 1, None])
def test_owned_must_be_a_bool(owned):
    with pytest.raises(InvalidParameterError, match=r"'owned'.*DsTensor"):
        DsTensor([torch.zeros(2)], (2,), (), torch.float32, owned=owned)


def test_training_reads_ds_tensors_through_the_public_api():
    """No module outside dislib_nn.data reaches into a DsTensor's
    private blocks or builds one behind its constructor."""
    import pathlib
    import re
    root = pathlib.Path(dnn.__file__).parent
    # `x._blocks`, not the module `tasks._blocks`.
    private = re.compile(r"(?<=\w)(?<!tasks)\._blocks\b|\b_from_blocks\b")
    found = [f"{path.relative_to(root)}:{n}"
             for path in root.rglob("*.py")
             if path.relative_to(root).parts[0] != "data"
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if private.search(line)]
    assert found == []
