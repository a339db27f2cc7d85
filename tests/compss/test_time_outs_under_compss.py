"""Task time-outs on every backend against the real binding's.

``tests/runtime/scripts/time_out_app.py`` runs (with the session, see
``_emulator.AHEAD``) under the emulated runcompss, whose PyCOMPSs worker
arms SIGALRM, and on each local backend: a run that finishes had every
time-out enforced (each hang lasts minutes), the ``runtime.time_out``
block's through PyCOMPSs's own declarations, and an estimator's
``task_timeout`` too; the reports must be the same.
"""

from tests.compss._emulator import TIME_OUT_BACKENDS, needs_emulator, report

pytestmark = needs_emulator


def test_time_outs_as_pycompss_enforces_them():
    expected = report(("time_out_app.py", "compss"))
    assert expected.pop("backend") == "compss"
    for name in TIME_OUT_BACKENDS:
        got = report(("time_out_app.py", name))
        assert got.pop("backend") == name
        assert got == expected, name
    assert expected["calls"]["retry"] == expected["calls"]["block"] == 2
    assert expected["ignore"] == -1 and expected["cancel_reader"] is None
    assert expected["fit_as_if_nothing_hung"] and expected["fit_hung"]
    assert expected["fit_retried"] == [[], []]
