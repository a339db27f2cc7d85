"""Imports dislib_nn where pycompss is importable but COMPSs is not running."""

import json

import pycompss

from dislib_nn import runtime

if __name__ == "__main__":
    print(json.dumps({"backend": runtime.backend_name(),
                      "pycompss": pycompss.__file__}))
