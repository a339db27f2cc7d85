#!/usr/bin/env bash
# Train on SLURM without COMPSs: dislib_nn's dask backend on a scheduler
# and one dask worker per GPU, 4 nodes x 4 GPUs, all started inside this
# job. Submit it from the repository root, in the environment that has
# dislib_nn with the dask extra (pip install -e ".[dask]"):
#
#   sbatch examples/slurm/dask_4x4_gpus.sh
#
# The batch step (on the job's first node) runs the scheduler and the
# script; `srun` starts 16 workers, one per GPU, each with the cores of
# its share of the node. The scheduler writes its address to a file on
# the shared file system, where the workers and the script read it.
# Every flag is explained in examples/slurm/README.md; the dask options
# are checked against `dask scheduler --help` and `dask worker --help`
# by tests/examples/test_slurm.py. Adjust the node size to your site.
#SBATCH --job-name=dislib_nn_dask
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=18
#SBATCH --time=02:00:00
#SBATCH --requeue
set -euo pipefail

APP=${APP:-examples/classification_cnn.py}
APP_ARGS=${APP_ARGS:---workers 16 --epochs 50 --out $PWD}
SCHEDULER_FILE=${SCHEDULER_FILE:-$PWD/dask-scheduler-$SLURM_JOB_ID.json}
N_WORKERS=$((SLURM_JOB_NUM_NODES * SLURM_NTASKS_PER_NODE))
rm -f "$SCHEDULER_FILE"

cleanup() {
  kill "${workers_pid:-}" "${scheduler_pid:-}" 2>/dev/null || true
  rm -f "$SCHEDULER_FILE"
}
trap cleanup EXIT

# The scheduler leaves a task where dislib_nn placed it: work stealing
# would move it, and its rows, at a bandwidth it assumes (docs/hpc.md,
# "Work stealing").
DASK_DISTRIBUTED__SCHEDULER__WORK_STEALING=False dask scheduler \
  --scheduler-file "$SCHEDULER_FILE" \
  --no-dashboard &
scheduler_pid=$!

# The workers keep glibc's own malloc thresholds: by default a dask
# nanny sets MALLOC_TRIM_THRESHOLD_, which can double a training step's
# time (docs/hpc.md, "Workers' malloc").
export DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON="{'MALLOC_TRIM_THRESHOLD_': None}"

# One worker per GPU: SLURM gives each task its own GPU and cores, and
# the worker advertises the GPU, so dislib_nn's training tasks ask for it.
srun --ntasks="$N_WORKERS" --gpus-per-task=1 --cpus-per-task=18 \
  dask worker \
    --scheduler-file "$SCHEDULER_FILE" \
    --nthreads 1 \
    --resources GPU=1 \
    --local-directory "${TMPDIR:-/tmp}" \
    --no-dashboard &
workers_pid=$!

# Tasks start once every worker has joined.
python3 -c "
import sys
from distributed import Client
Client(scheduler_file=sys.argv[1], timeout='300s').wait_for_workers(
    int(sys.argv[2]), timeout=600)" "$SCHEDULER_FILE" "$N_WORKERS"

# Torch threads per task: the cores SLURM gave each worker.
DISLIB_NN_BACKEND=dask \
DISLIB_NN_DASK_SCHEDULER_FILE="$SCHEDULER_FILE" \
DISLIB_NN_THREADS=18 \
CUDA_DEVICE_ORDER=PCI_BUS_ID \
  python3 "$APP" $APP_ARGS
