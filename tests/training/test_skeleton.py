"""The recipe tasks receive carries a module instance without its weights.

Each task loads a model state into the module it builds, so a module
instance's parameters and persistent buffers travel as shapes only
(:mod:`dislib_nn.training._skeleton`); what the state does not hold (a
non-persistent buffer) travels as it is.
"""

import pickle

import cloudpickle
import numpy as np
import pytest
import torch

import dislib_nn.data as dnn
from dislib_nn import SyncEpochAveragingRegressor
from dislib_nn.runtime._engine import Engine
from dislib_nn.training._components import Components
from dislib_nn.training._skeleton import Skeleton, flesh_out, skeleton
from tests.conftest import use_backend
from tests.training import _models, _reference as ref


def _recipe(module):
    return Components(module, {}, torch.nn.MSELoss, {}, torch.optim.SGD, {})


def test_the_tasks_recipe_of_an_instance_does_not_grow_with_its_weights():
    small = _recipe(_models.MLP(4, 1, hidden=8))
    large = _recipe(_models.MLP(4, 1, hidden=100_000))
    full = len(cloudpickle.dumps(large))
    assert full > 4 * 100_000 * 4           # the weights are in the recipe
    sizes = [len(cloudpickle.dumps(r.for_tasks())) for r in (small, large)]
    # Shapes, not data: both tasks' recipes are as small as the little
    # module's, whatever the weights weigh.
    assert sizes[1] < sizes[0] + 200
    assert sizes[1] < full / 100


def test_a_class_recipe_is_left_as_it_is():
    recipe = Components(_models.MLP, {"hidden": 3}, torch.nn.MSELoss, {},
                        torch.optim.SGD, {})
    assert recipe.for_tasks() is recipe


def test_fleshed_out_and_loaded_it_is_the_instance():
    torch.manual_seed(0)
    module = _models.TiedScaled(4, scale=3.0)
    module.shift += 0.5
    bones = skeleton(module)
    assert all(p.is_meta for p in bones.module.parameters())
    assert bones.module.shift.is_meta       # the state dict brings it
    assert not bones.module.scale.is_meta   # it does not
    built = flesh_out(bones)
    assert not any(t.is_meta for t in built.state_dict().values())
    built.load_state_dict(module.state_dict())
    x = torch.randn(5, 4)
    assert torch.equal(built(x), module(x))
    # The tie survives both copies, and the buffer the state dict does
    # not hold keeps the instance's value.
    assert bones.module.up.weight is bones.module.down.weight
    assert built.up.weight is built.down.weight
    assert torch.equal(built.scale, torch.full((4,), 3.0))
    # The instance itself is untouched.
    assert not any(p.is_meta for p in module.parameters())


def test_a_skeleton_survives_pickling_and_builds_a_new_module_each_time():
    module = _models.TiedScaled(4, scale=2.0)
    recipe = pickle.loads(pickle.dumps(_recipe(module).for_tasks()))
    first = recipe.build_module(module.state_dict())
    second = recipe.build_module(module.state_dict())
    assert first is not second
    assert first.down.weight.data_ptr() != second.down.weight.data_ptr()
    x = torch.randn(3, 4)
    assert torch.equal(first(x), module(x))


def test_a_lazy_instance_keeps_its_uninitialised_parameters():
    module = _models.Lazy(n_outputs=2)
    built = flesh_out(skeleton(module))
    built(torch.zeros(1, 5))                 # shaped by its first forward
    assert built.fc.weight.shape == (2, 5)


def test_a_weightless_recipe_refuses_to_build_without_a_state():
    recipe = _recipe(_models.MLP()).for_tasks()
    with pytest.raises(RuntimeError, match="needs the model state"):
        recipe.build_module()


@pytest.mark.parametrize("backend", ["local", "sequential"])
def test_a_fit_of_an_instance_with_a_non_persistent_buffer_and_tied_weights(
        backend):
    # Against plain PyTorch trained the same way: the scale the state
    # dict does not hold must reach the tasks, and the tie must hold.
    use_backend(backend)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(64, 4)).astype(np.float32)
    y = (X.sum(axis=1) / 4).astype(np.float32)
    torch.manual_seed(0)
    init = _models.TiedScaled(4, scale=0.25)
    est = SyncEpochAveragingRegressor(
        module=init, n_workers=2, shuffle="none", n_epochs=3,
        batch_size=8, lr=0.05)
    est.fit(X, y)
    parts = ref.split_like_blocks(torch.from_numpy(X),
                                  torch.from_numpy(y)[:, None], 2)
    expected = ref.epoch_averaging(init, parts, torch.nn.MSELoss(),
                                   epochs=3, batch_size=8, lr=0.05)
    ref.assert_same_model(est.module_, expected, atol=2e-5, rtol=1e-4)
    assert torch.equal(est.module_.scale, torch.full((4,), 0.25))


def test_predict_and_score_send_the_weights_once_however_many_blocks(
        monkeypatch):
    # Each block task takes the weightless recipe and one held state.
    use_backend("local")
    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, 4)).astype(np.float32)
    y = X[:, 0].astype(np.float32)
    est = SyncEpochAveragingRegressor(module=_models.MLP, n_workers=2,
                                      n_epochs=1, batch_size=8)
    est.fit(X, y)
    submitted = []
    submit = Engine.submit

    def record(engine, task_fn, args, kwargs):
        submitted.append((task_fn.__qualname__, args))
        return submit(engine, task_fn, args, kwargs)
    monkeypatch.setattr(Engine, "submit", record)
    x, yd = dnn.from_array(X, n_blocks=4), dnn.from_array(y, n_blocks=4)
    predicted = est.predict(x).collect()
    score = est.score(x, yd)
    monkeypatch.undo()
    names = [name for name, _ in submitted]
    assert names.count("_held") == 2                  # one per call
    blocks = [args for name, args in submitted
              if name in ("_predict_block", "_score_block")]
    assert len(blocks) == 8
    assert all(isinstance(args[0].module, Skeleton) for args in blocks)
    with torch.no_grad():
        expected = est.module_(torch.from_numpy(X))[:, 0]
    torch.testing.assert_close(torch.as_tensor(predicted), expected)
    assert score == pytest.approx(est.score(X, y), abs=1e-6)
