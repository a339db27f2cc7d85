#!/usr/bin/env bash
# Submit an example to SLURM with COMPSs: 4 nodes x 4 GPUs, 16 training
# tasks at once (one per GPU), requeued by SLURM if a node fails or the
# job is preempted, and resumed from dislib_nn's own checkpoints: the
# script checkpoints every fit after each merged epoch in CHECKPOINTS
# (on the shared file system) and calls fit(..., resume=True), so the
# requeued job goes on from the last epoch written. Run it from the
# repository root on a login node, in the environment that has COMPSs
# and dislib_nn:
#
#   module load COMPSs/3.3 && source $HOME/venvs/dnn/bin/activate
#   bash examples/slurm/enqueue_4x4_gpus.sh
#
# Every flag is explained in examples/slurm/README.md. Adjust the node
# size (cores, memory) to your site's GPU nodes.
set -euo pipefail

APP=${APP:-examples/classification_cnn.py}
CHECKPOINTS=${CHECKPOINTS:-$PWD/checkpoints}
APP_ARGS=${APP_ARGS:---workers 16 --epochs 50 --out $PWD --checkpoint-dir $CHECKPOINTS}
mkdir -p "$CHECKPOINTS"

# Each training task asks COMPSs for 18 cores and 1 GPU: 4 tasks fill a
# node of 80 cores and 4 GPUs (the runtime reads these on the master).
export ComputingUnits=18
export ComputingUnitsGPUs=1
export CUDA_DEVICE_ORDER=PCI_BUS_ID

site_flags=()
[ -n "${QUEUE:-}" ] && site_flags+=("--queue=$QUEUE")
[ -n "${QOS:-}" ] && site_flags+=("--qos=$QOS")
[ -n "${ACCOUNT:-}" ] && site_flags+=("--project_name=$ACCOUNT")

# COMPSs's own task checkpointing, off by default: it saves every
# finished task's outputs (each replica's weights and optimizer state
# after every training task, every merged model), about 6 times what
# dislib_nn's checkpoint writes per epoch at 16 replicas (see
# examples/slurm/README.md). COMPSS_TASK_CHECKPOINTS=1 turns it on.
task_checkpoints=()
if [ "${COMPSS_TASK_CHECKPOINTS:-0}" = 1 ]; then
  mkdir -p "$PWD/compss_checkpoints"
  task_checkpoints=(
    --checkpoint=es.bsc.compss.checkpoint.policies.CheckpointPolicyFinishedTasks
    --checkpoint_params=finished.tasks:1
    "--checkpoint_folder=$PWD/compss_checkpoints"
  )
fi

enqueue_compss \
  --job_name=dislib_nn \
  --num_nodes=4 \
  --cpus_per_node=80 \
  --gpus_per_node=4 \
  --node_memory=480000 \
  --worker_in_master_cpus=76 \
  --worker_in_master_memory=400000 \
  --exec_time=120 \
  --extra_submit_flag=--requeue \
  ${site_flags[@]+"${site_flags[@]}"} \
  --lang=python \
  --python_interpreter="$(which python3)" \
  --pythonpath="$PWD/examples" \
  --worker_working_dir=local_disk \
  --log_level=off \
  ${task_checkpoints[@]+"${task_checkpoints[@]}"} \
  "$APP" $APP_ARGS
