"""A TEST DOUBLE of the PyCOMPSs API, not PyCOMPSs.

Same import paths and names as pycompss 3.x, with the semantics of a
PyCOMPSs script run without the runtime (decorators run the function
inline, ``compss_wait_on`` returns its argument), plus a record of every
decorator's arguments so that tests can check what dislib_nn passed. It
exists because the COMPSs runtime cannot be installed from a package
registry; real COMPSs runs are documented in ``docs/hpc.md``. See
``tests/_pycompss_double/README.md``.
"""
