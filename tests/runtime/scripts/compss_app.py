"""Runs under the pycompss test double 'inside COMPSs' and reports what
dislib_nn handed to pycompss."""

import json

from dislib_nn import runtime
from dislib_nn.runtime import (COLLECTION_IN, COMMUTATIVE, Depth, Type,
                               constraint, task, wait_on)

GPU = [{"processorType": "CPU", "computingUnits": "${ComputingUnits}"},
       {"processorType": "GPU", "computingUnits": "${ComputingUnitsGPUs}"}]


@constraint(processors=GPU)
@task(returns=2, blocks={Type: COLLECTION_IN, Depth: 1}, acc=COMMUTATIVE)
def train(blocks, acc):
    acc.append(sum(blocks))
    return len(blocks), sum(blocks)


if __name__ == "__main__":
    import pycompss.api.api as api
    import pycompss.api.constraint as pc
    import pycompss.api.parameter as pp
    import pycompss.api.task as pt

    acc = []
    n, total = train([1, 2, 3], acc)
    recorded_task = dict(pt.RECORDED).get("train", {})
    recorded_constraint = dict(pc.RECORDED).get("train")
    runtime.barrier()
    print(json.dumps({
        "backend": runtime.backend_name(),
        "n_workers": runtime.n_workers(),
        "task_is_pycompss": runtime.task is pt.task,
        "constraint_is_pycompss": runtime.constraint is pc.constraint,
        "directions_are_pycompss": COLLECTION_IN is pp.COLLECTION_IN
        and COMMUTATIVE is pp.COMMUTATIVE,
        "blocks_passed": recorded_task.get("blocks") == {
            pp.Type: pp.COLLECTION_IN, pp.Depth: 1},
        "blocks_same_objects": recorded_task.get("blocks", {}).get(Type)
        is pp.COLLECTION_IN and Depth == pp.Depth,
        "acc_passed": recorded_task.get("acc") is pp.COMMUTATIVE,
        "returns": recorded_task.get("returns"),
        "constraint": recorded_constraint,
        "result": wait_on([n, total]),
        "acc": acc,
        "barriers": len(api.BARRIERS),
    }))
