"""Test double of the PyCOMPSs API: see tests/_pycompss_double/README.md."""
