"""The module, criterion and optimizer: the recipe tasks build them from.

As in skorch, components are given as classes (or, for ``module`` and
``criterion``, instances that are deep-copied) and their arguments as
prefixed keywords (:mod:`._component_args` routes and checks them).
:class:`Components` is the picklable recipe a training or merge task
builds them from; :func:`check_step` tries one step of them on the
master before any task runs.
"""

import copy

import torch

from dislib_nn.runtime import by_value
from dislib_nn.training._skeleton import Skeleton, flesh_out, skeleton

__all__ = ["Components", "check_step", "materialize", "first_float_dtype",
           "name_of"]


class Components:
    """A picklable recipe for the module, the criterion and the optimizer.

    Parameters
    ----------
    module : type or torch.nn.Module
        A module class, built with ``module_kwargs``, or an instance that
        is deep-copied.
    module_kwargs : dict
    criterion : type or torch.nn.Module
    criterion_kwargs : dict
    optimizer : callable
        ``optimizer(params, lr=lr, **optimizer_kwargs)`` returns a
        ``torch.optim.Optimizer``.
    optimizer_kwargs : dict
    outer_optimizer : callable or None, default=None
        ``outer_optimizer(params, **outer_optimizer_kwargs)`` returns the
        ``torch.optim.Optimizer`` of the outer step on the averaged
        update (see :mod:`dislib_nn.training.merge._outer`).
    outer_optimizer_kwargs : dict, default=None
    """

    def __init__(self, module, module_kwargs, criterion, criterion_kwargs,
                 optimizer, optimizer_kwargs, outer_optimizer=None,
                 outer_optimizer_kwargs=None):
        self.module = module
        self.module_kwargs = dict(module_kwargs)
        self.criterion = criterion
        self.criterion_kwargs = dict(criterion_kwargs)
        self.optimizer = optimizer
        self.optimizer_kwargs = dict(optimizer_kwargs)
        self.outer_optimizer = outer_optimizer
        self.outer_optimizer_kwargs = dict(outer_optimizer_kwargs or {})

    def __reduce__(self):
        # A class (or instance, or optimizer factory) from the user's
        # script or notebook cannot be imported by name on a worker:
        # such a recipe travels by value. Decided once per recipe.
        if "_wire" not in self.__dict__:
            state = {k: v for k, v in self.__dict__.items() if k != "_wire"}
            self.__dict__["_wire"] = by_value(state)
        return (_rebuild, (self.__dict__["_wire"],))

    def for_tasks(self):
        """This recipe as tasks receive it, which load a model state into
        the module they build: a module instance travels as a
        :class:`~._skeleton.Skeleton`, without the weights the state
        brings (a few KB where the instance is MBs)."""
        if not isinstance(self.module, torch.nn.Module):
            return self
        return Components(skeleton(self.module), {}, self.criterion,
                          self.criterion_kwargs, self.optimizer,
                          self.optimizer_kwargs, self.outer_optimizer,
                          self.outer_optimizer_kwargs)

    def build_module(self, state=None):
        """A new module: random weights, or a copy of the given instance;
        with ``state`` (a state dict) loaded when given, which a recipe
        from :meth:`for_tasks` needs."""
        if isinstance(self.module, Skeleton):
            if state is None:
                raise RuntimeError(
                    "a task's recipe holds the module without its weights "
                    "(Components.for_tasks): build_module needs the model "
                    "state to load.")
            module = flesh_out(self.module)
        else:
            module = _build("module", self.module, self.module_kwargs)
        if state is not None:
            module.load_state_dict(state)
        return module

    def build_criterion(self):
        return _build("criterion", self.criterion, self.criterion_kwargs)

    def build_optimizer(self, params, lr):
        try:
            return self.optimizer(params, lr=lr, **self.optimizer_kwargs)
        except TypeError as exc:
            raise TypeError(
                f"optimizer {name_of(self.optimizer)} could not be built with "
                f"lr={lr!r}{_describe('optimizer', self.optimizer_kwargs)}: "
                f"{exc}") from exc

    def build_outer_optimizer(self, params):
        """The outer optimizer on the global parameters ``params``."""
        try:
            return self.outer_optimizer(params,
                                        **self.outer_optimizer_kwargs)
        except TypeError as exc:
            given = _describe("outer_optimizer",
                              self.outer_optimizer_kwargs, first=True)
            raise TypeError(
                f"outer_optimizer {name_of(self.outer_optimizer)} could not "
                f"be built{given}: {exc}") from exc


def _rebuild(state):
    recipe = Components.__new__(Components)
    recipe.__dict__.update(state)
    return recipe



def check_step(components, module, adapter, sample_shape, target_shape,
               lr):
    """One training step's pieces, tried on the master before any task.

    Builds the optimizer and the criterion, runs one zero sample of
    ``sample_shape`` through ``module`` (in eval mode, without gradients:
    nothing changes) and the output check, and computes the loss against
    a zero target of ``target_shape``. Mistakes (an optimizer that is not
    one, a module that does not take X's rows, a criterion that does not
    reduce) raise here, naming what is wrong.
    """
    optimizer = components.build_optimizer(list(module.parameters()), lr)
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(
            f"optimizer {name_of(components.optimizer)} must build a "
            f"torch.optim.Optimizer from (params, lr=...). It returned "
            f"{name_of(optimizer)} instead.")
    criterion = components.build_criterion()
    training = module.training
    module.eval()
    try:
        with torch.no_grad():
            x = torch.zeros((1,) + tuple(sample_shape),
                            dtype=adapter.x_dtype)
            target = torch.zeros(tuple(target_shape),
                                 dtype=adapter.y_dtype())
            try:
                output = adapter.forward(module, x)
            except Exception as exc:
                _note(exc, f"raised by the forward of module "
                           f"{type(module).__name__} on one sample "
                           f"{_sample_words(adapter, sample_shape)}, "
                           f"which fit tries before any task runs")
                raise
            try:
                loss = adapter.loss(output, criterion, target)
            except Exception as exc:
                if adapter.loss_input == "all":
                    _note(exc, f"raised by criterion "
                               f"{name_of(components.criterion)} given all "
                               f"the module's forward returns "
                               f"({type(output).__name__}) and the "
                               f"targets, as loss_input='all' asks")
                raise
    finally:
        module.train(training)
    if not torch.is_tensor(loss) or loss.dim() != 0:
        got = (f"a tensor of shape {tuple(loss.shape)}"
               if torch.is_tensor(loss) else f"a {type(loss).__name__}")
        raise ValueError(
            f"criterion {name_of(components.criterion)} must return a scalar "
            f"(a 0-d tensor: the batch's mean loss). It returned {got} for "
            f"a batch of one sample; reduce it (reduction='mean').")


def materialize(module, sample_shape, dtype=None):
    """Run one forward pass (on one zero sample of ``dtype``, the
    module's floating dtype by default) when the module has lazy layers
    to shape."""
    if not any(isinstance(t, torch.nn.parameter.UninitializedTensorMixin)
               for t in list(module.parameters()) + list(module.buffers())):
        return
    training = module.training
    module.eval()
    with torch.no_grad():
        module(torch.zeros((1,) + tuple(sample_shape), dtype=dtype))
    module.train(training)


def first_float_dtype(module):
    """The dtype of the module's first floating-point parameter or buffer."""
    for tensor in list(module.parameters()) + list(module.buffers()):
        if tensor.is_floating_point():
            return tensor.dtype
    return torch.get_default_dtype()


def _build(role, spec, kwargs):
    if isinstance(spec, torch.nn.Module):
        if kwargs:
            raise TypeError(_instance_message(role, spec, kwargs))
        try:
            return copy.deepcopy(spec)
        except Exception as exc:
            raise TypeError(_uncopyable_message(role, spec, exc)) from exc
    try:
        return spec(**kwargs)
    except TypeError as exc:
        raise TypeError(
            f"{role} {name_of(spec)} could not be built"
            f"{_describe(role, kwargs, first=True)}: {exc}") from exc
    except Exception as exc:
        _note(exc, f"raised while building {role} {name_of(spec)}"
                   f"{_describe(role, kwargs, first=True)}")
        raise


def _uncopyable_message(role, instance, exc):
    """Why an instance given as ``role`` cannot be copied, naming the
    attribute at fault when one is found."""
    where = _uncopyable_attribute(instance)
    culprit = ""
    if where is not None:
        path, value = where
        culprit = (f" Its attribute {path!r} (a {type(value).__module__}."
                   f"{type(value).__qualname__}) cannot be copied.")
    name = type(instance).__name__
    return (f"{role} is an instance ({name}), which fit copies, once for "
            f"the model it learns and once for every worker (by "
            f"pickling, as COMPSs sends task arguments), and it cannot be "
            f"copied: {type(exc).__name__}: {exc}.{culprit} Pass the "
            f"class instead ({role}={name}, with {role}__ arguments), or "
            f"keep such objects out of the {role}: make them in forward, "
            f"or hold them outside it.")


def _uncopyable_attribute(obj, path="", depth=0, seen=None):
    """``(dotted path, value)`` of the innermost attribute of ``obj``
    that ``copy.deepcopy`` refuses, or None."""
    seen = set() if seen is None else seen
    if id(obj) in seen or depth > 20:
        return None
    seen.add(id(obj))
    attributes = dict(getattr(obj, "__dict__", {}))
    # A module's children, parameters and buffers by their own names.
    for holder in ("_modules", "_parameters", "_buffers"):
        attributes.update(attributes.pop(holder, None) or {})
    for name, value in attributes.items():
        try:
            copy.deepcopy(value)
        except Exception:  # noqa: BLE001 - any refusal is the answer
            inner = f"{path}{name}"
            deeper = _uncopyable_attribute(value, inner + ".", depth + 1,
                                           seen)
            return deeper or (inner, value)
    return None


def _sample_words(adapter, sample_shape):
    """The trial's sample, as the module receives it, for its note."""
    if adapter.layout is not None:
        return (f"of the inputs {{{adapter.layout.describe()}}} (floating "
                f"inputs in the module's dtype, integer ones as "
                f"torch.int64, by keyword from a dict X, by position from "
                f"a tuple)")
    return (f"of shape {tuple(sample_shape)} and dtype {adapter.x_dtype} "
            f"(X's rows as the module receives them: floating-point X in "
            f"the module's dtype, integer X as torch.int64)")


def _note(exc, text):
    """``exc.add_note(text)`` where Python has it (3.11 and later)."""
    if hasattr(exc, "add_note"):
        exc.add_note(text)


def name_of(obj):
    return getattr(obj, "__qualname__", None) or type(obj).__name__


def _describe(role, kwargs, first=False):
    if not kwargs:
        return " with no arguments" if first else ""
    args = ", ".join(f"{role}__{k}={v!r}" for k, v in kwargs.items())
    return f" with {args}" if first else f", {args}"
