#!/usr/bin/env bash
# Run an example under COMPSs on one workstation: the master and one
# worker on localhost, with the cores and GPUs that resources.xml
# declares. From the repository root, in an environment with COMPSs and
# dislib_nn:
#
#   bash examples/slurm/run_workstation.sh
#
# Every flag is explained in examples/slurm/README.md.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
APP=${APP:-examples/classification_cnn.py}
APP_ARGS=${APP_ARGS:---workers 2 --out $PWD}

# Each training task: 4 cores and 1 GPU of the 8 cores and 2 GPUs in
# resources.xml, so two train at once. Without GPUs, set
# ComputingUnitsGPUs=0 and remove the GPU processor from resources.xml.
export ComputingUnits=4
export ComputingUnitsGPUs=1
export CUDA_DEVICE_ORDER=PCI_BUS_ID

runcompss \
  --lang=python \
  --python_interpreter="$(which python3)" \
  --pythonpath="$PWD/examples" \
  --project="$HERE/project.xml" \
  --resources="$HERE/resources.xml" \
  --log_level=off \
  --summary \
  "$APP" $APP_ARGS
