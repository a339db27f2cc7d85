"""The SLURM example's resume, under the emulated runcompss.

``tests/compss/apps/resume_example.py`` (run with the session, see
``_emulator.AHEAD``) kills ``classification_cnn.py --checkpoint-dir``
mid-fit under the emulated runcompss, as a lost node would, and runs the
same command again, as a requeued SLURM job does. The second run resumes
every strategy from its checkpoint; the synchronous strategies end on
the accuracies of an uninterrupted run (the local backend gives the same
model for a seed).
"""

import re

from tests.compss._emulator import needs_emulator, report

pytestmark = needs_emulator

SYNC = ("sync, global shuffle", "sync, local shuffle")


def _final_accuracies(stdout):
    """``{strategy: test accuracy}`` from the example's closing table."""
    return {name: float(score) for name, score in re.findall(
        r"^(\S.*?)\s{2,}(\d\.\d{4})\s+[\d.]+s$", stdout, re.MULTILINE)}


def test_the_slurm_example_killed_mid_fit_resumes_where_it_stopped():
    runs = report(("resume_example.py", "python"))
    assert runs["killed_mid_fit"], runs["killed_tail"]
    resumed, plain = runs["resumed"], runs["plain"]
    assert resumed["code"] == 0, resumed["stderr_tail"]
    assert plain["code"] == 0, plain["stderr_tail"]
    assert re.search(r"resuming from \S+sync-global-shuffle\S+: [12] of 3 "
                     r"epochs done", resumed["stdout"]), resumed["stdout"]
    got = _final_accuracies(resumed["stdout"])
    expected = _final_accuracies(plain["stdout"])
    assert set(got) == set(expected) >= set(SYNC) | {"async"}
    assert {k: got[k] for k in SYNC} == {k: expected[k] for k in SYNC}
    # Every strategy ended its third epoch in the resumed run, the
    # asynchronous one included.
    assert len(re.findall(r"^epoch   3/3 ", resumed["stdout"],
                          re.MULTILINE)) == 3
