"""The bookkeeping of one task call: what it reads, writes and returns.

A :class:`_Plan` turns a call's bound arguments into dependencies (slots
for futures, commutative groups, ``COLLECTION_OUT`` placeholders) without
changing any shared state; :meth:`_Plan.commit` applies its effects once
the arguments have been pickled, so a call that fails leaves nothing
behind.
"""

from dislib_nn.exceptions import TaskArgumentError
from dislib_nn.runtime import _serialize
from dislib_nn.runtime._execute import UNSET
from dislib_nn.runtime._future import Future, _Slot
from dislib_nn.runtime._params import (COLLECTION_IN, COLLECTION_OUT,
                                       COMMUTATIVE, IN, INOUT)

# Ints up to this size survive a trip through a float exactly.
_FLOAT_EXACT = 2 ** 53


class _Version:
    """The latest version of an object passed INOUT or COMMUTATIVE."""

    __slots__ = ("obj", "latest")

    def __init__(self, obj, latest):
        self.obj = obj          # kept alive so that its id stays unique
        self.latest = latest    # a Future or an open _Group


class _Group:
    """Consecutive COMMUTATIVE tasks on one object."""

    def __init__(self, engine, name, base):
        self.result = Future(engine, name)
        self.base = base            # Future of the version before, or None
        self.current = None         # payload of the latest value
        self.failure = None
        self.busy = False
        self.members = 0
        self.finished = 0
        self.closed = False
        self.queue = []


class _Node:
    __slots__ = ("name", "task", "header", "args", "deps", "waits",
                 "targets", "groups", "pending", "seq", "priority",
                 "time_out", "home")

    def __init__(self, name, task=None, priority=False):
        self.name = name
        self.task = task     # the TaskFunction (its constraints)
        self.seq = 0         # submission order, set by the engine
        self.priority = priority    # @task(priority=True): starts first
        self.header = None
        self.args = None
        self.deps = []       # slot index -> Future or _Group
        self.waits = []      # every Future this node waits for
        self.targets = []    # output index -> Future or _Group
        self.groups = []
        self.pending = 0
        self.time_out = None    # seconds, set by the engine
        self.home = None     # runtime.placed()'s node index, or None


class _Plan:
    """The effects of one task call, applied only once nothing can fail."""

    def __init__(self, engine, spec, task=None):
        self.engine = engine
        self.spec = spec
        self.slots = {}
        self.node = _Node(spec.name, task, spec.priority)
        self.outputs = []
        self.effects = []
        self.returned = None
        self._placeholder_ids = {}

    def _dep(self, fut):
        if id(fut) not in self.slots:
            if fut._deleted:
                raise TaskArgumentError(
                    f"task {self.spec.name}() got {fut!r}, which was "
                    f"deleted with delete_object().")
            if fut._synced:
                raise TaskArgumentError(
                    f"task {self.spec.name}() got {fut!r}, which wait_on "
                    f"already resolved. Under COMPSs, wait_on ends the "
                    f"futures it resolves (their data is deleted), so the "
                    f"task would receive an empty Future object: pass the "
                    f"value wait_on returned, or wait on a task that "
                    f"copies what you need and keep the future.")
            self.slots[id(fut)] = len(self.node.deps)
            self.node.deps.append(fut)
            self.node.waits.append(fut)
        return fut

    def _read(self, value):
        fut = self.engine.latest(value)
        return value if fut is None else self._dep(fut)

    def argument(self, name, value):
        direction, depth = self.spec.direction(name)
        if direction is IN:
            self._check_int(name, value)
            return self._read(value)
        if direction is COLLECTION_IN:
            return self._collection(name, value, depth, self._read_element)
        if direction is INOUT:
            current = self._read(value)
            fut = Future(self.engine, self.spec.name)
            self.outputs.append(("param", name, ()))
            self.node.targets.append(fut)
            self.effects.append(("version", value, fut))
            return current
        if direction is COMMUTATIVE:
            return self._commutative(name, value)
        if direction is COLLECTION_OUT:
            return self._collection_out(name, value, depth)
        raise TaskArgumentError(
            f"task {self.spec.name}(): direction {direction!r} of "
            f"'{name}' is not supported by the {self.engine.name} backend.")

    def _read_element(self, value, name):
        self._check_int(name, value, element=True)
        return self._read(value)

    def _check_int(self, name, value, element=False):
        """An int COMPSs would change on its way to the worker.

        PyCOMPSs sends an int beyond 32 bits as a Java long, which its
        Python worker parses with ``float()``: above 2**53 it arrives
        changed, silently (a seed drawn as 64 bits, say). Beyond 64 bits
        it is pickled and arrives intact.
        """
        if type(value) is int and _FLOAT_EXACT < abs(value) < 2 ** 63:
            where = (f"an element of argument '{name}'" if element
                     else f"argument '{name}'")
            raise TaskArgumentError(
                f"{where} of task {self.spec.name}() is the int {value}. "
                f"COMPSs passes ints of this size as a Java long that its "
                f"Python worker reads through a float: it would arrive as "
                f"{int(float(value))}. Keep ints below 2**53 (a 31- or "
                f"32-bit seed), or pass a numpy integer, which is pickled.")

    def _collection(self, name, value, depth, leaf):
        if not isinstance(value, (list, tuple)):
            raise TaskArgumentError(
                f"task {self.spec.name}(): '{name}' is declared a "
                f"collection and must be a list. Got "
                f"{type(value).__name__} instead.")
        items = [self._collection(name, v, depth - 1, leaf)
                 if depth > 1 and isinstance(v, (list, tuple))
                 else leaf(v, name) for v in value]
        return type(value)(items)

    def _commutative(self, name, value):
        record = self.engine._versions.get(id(value))
        open_group = (record is not None and record.obj is value
                      and isinstance(record.latest, _Group))
        if open_group:
            group, new = record.latest, False
        else:
            base = self.engine.latest(value)
            group, new = _Group(self.engine, self.spec.name, base), True
            if base is None:
                group.current = _dump_one(self.spec, name, value,
                                          share=self.engine.shares_memory)
        if group.base is not None:
            # Every member waits for the version the group starts from.
            self.node.waits.append(group.base)
        slot = _Slot()
        self.slots[id(slot)] = len(self.node.deps)
        self.node.deps.append(group)
        self.node.groups.append(group)
        self.node.targets.append(group)
        self.outputs.append(("param", name, ()))
        self.effects.append(("group", value, group, new, slot))
        return slot

    def _collection_out(self, name, value, depth):
        if not isinstance(value, list):
            raise TaskArgumentError(
                f"task {self.spec.name}(): COLLECTION_OUT '{name}' must be "
                f"a list, pre-filled to its final length. Got "
                f"{type(value).__name__} instead.")

        return self._placeholders(name, value, depth, ())

    def _placeholders(self, name, items, level, path):
        # A method, not a recursive closure: a closure's cell would form
        # a cycle keeping this plan, and so its outputs' futures and
        # shared memory, alive until the cyclic GC ran.
        out = []
        for i, item in enumerate(items):
            if level > 1 and isinstance(item, list):
                out.append(self._placeholders(name, item, level - 1,
                                              path + (i,)))
            else:
                self._check_placeholder(name, item, path + (i,))
                out.append(UNSET)
                fut = Future(self.engine, self.spec.name)
                self.outputs.append(("element", name, path + (i,)))
                self.node.targets.append(fut)
                self.effects.append(("element", items, i, fut))
        return out

    def _check_placeholder(self, name, item, path):
        """COMPSs's rules for a COLLECTION_OUT element, checked at the call.

        COMPSs tracks objects by ``id()`` and rebuilds every element on
        the worker from its type: ``None`` cannot be rebuilt, and a value
        that appears twice (or a cached small int, or any basic value)
        would be one datum for several outputs.
        """
        where = (f"element {list(path)} of COLLECTION_OUT '{name}' of task "
                 f"{self.spec.name}()")
        hint = ("Fill the list with distinct placeholder objects, e.g. "
                "[object() for _ in range(n)], as dislib does.")
        if item is None or isinstance(item, (bool, int, float, complex,
                                             str, bytes)):
            raise TaskArgumentError(
                f"{where} is {item!r}. COMPSs rebuilds each element on the "
                f"worker from its type and tracks it by id(), which fails "
                f"for None and cannot tell basic values apart. {hint}")
        if id(item) in self._placeholder_ids:
            raise TaskArgumentError(
                f"{where} is the same object as an earlier element. COMPSs "
                f"tracks objects by id(), so both would be one datum. "
                f"{hint}")
        self._placeholder_ids[id(item)] = item

    def commit(self, header, args_payload):
        node = self.node
        node.header, node.args = header, args_payload
        returns = self.spec.returns
        results = [Future(self.engine, self.spec.name)
                   for _ in range(returns)]
        node.targets[:0] = results
        self.returned = (None if returns == 0 else results[0]
                         if returns == 1 else results)
        for dep in node.deps:
            if isinstance(dep, Future):
                dep._consumers += 1
        versions = self.engine._versions
        for effect in self.effects:
            if effect[0] == "version":
                versions[id(effect[1])] = _Version(effect[1], effect[2])
            elif effect[0] == "group":
                _, value, group, new, _slot = effect
                group.members += 1
                if new:
                    versions[id(value)] = _Version(value, group)
            else:
                _, items, i, fut = effect
                items[i] = fut
        return node


def _dump_arguments(spec, arguments, slots, share=True):
    try:
        return _serialize.dumps(arguments, slots, share=share)
    except BaseException:  # noqa: B902 - find and name the culprit
        for name, value in arguments.items():
            _dump_one(spec, name, value, slots, share)
        raise


def _dump_one(spec, name, value, slots=None, share=True):
    try:
        return _serialize.dumps(value, slots, share=share)
    except _serialize.HiddenFuture as exc:
        raise TaskArgumentError(
            f"argument '{name}' of task {spec.name}() holds "
            f"{exc.future!r} inside a container that is not a declared "
            f"collection. COMPSs would pass a placeholder, not the value: "
            f"declare it, e.g. @task({name}={{Type: COLLECTION_IN, Depth: "
            f"1}}), or call wait_on() first.") from None
    except _serialize.MainReference as exc:
        raise TaskArgumentError(
            f"argument '{name}' of task {spec.name}() refers to "
            f"{_describe_global(exc.obj)}, defined in the script being run "
            f"(__main__). It would travel by reference, and COMPSs workers "
            f"import only the task's own module, never your script as "
            f"__main__ (nor can anyone import a notebook): unpickling it "
            f"would fail there. Move it to a module the workers can "
            f"import, or send it by value: "
            f"dislib_nn.runtime.by_value({name}).") from None
    except Exception as exc:  # noqa: BLE001 - pickling can raise anything
        hint = _pickling_hint(value)
        raise TaskArgumentError(
            f"argument '{name}' of task {spec.name}() cannot be sent to a "
            f"worker: {exc}. {hint}") from exc


def _describe_global(obj):
    kind = "class" if isinstance(obj, type) else "function"
    return f"the {kind} {obj.__qualname__}"


def _pickling_hint(value):
    qualname = getattr(value, "__qualname__", "")
    if "<lambda>" in qualname:
        return ("It is a lambda: COMPSs pickles task arguments with plain "
                "pickle, which cannot carry lambdas. Pass a function "
                "defined at module level (functools.partial of one works).")
    if "<locals>" in qualname:
        return ("It is defined inside a function (a closure): COMPSs "
                "pickles task arguments with plain pickle, which carries "
                "only module-level functions and classes. Move it to "
                "module level.")
    return ("Task arguments are pickled, as under COMPSs: every object "
            "in them must be picklable.")
