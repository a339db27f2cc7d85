"""Integer inputs and a user's torch Dataset under COMPSs's own rules.

``apps/inputs_app.py`` runs (with the session, see ``_emulator.AHEAD``)
with plain ``python`` and under the emulated runcompss: an embedding
model trained on ids that float32 cannot tell apart, and the same fit
from a Dataset class of the script that reads its rows from files on
the workers. Both runs must train the same weights to the bit.
"""

from tests.compss._emulator import needs_emulator, report

pytestmark = needs_emulator


def test_ids_and_a_scripts_dataset_train_alike_under_compss():
    local = report(("inputs_app.py", "python"))
    compss = report(("inputs_app.py", "compss"))
    assert (local.pop("backend"), compss.pop("backend")) == ("local",
                                                             "compss")
    assert compss == local
    # The Dataset trains the model the arrays train, and the exact ids
    # are told apart.
    assert compss["dataset"] == compss["arrays"]
    assert compss["predict"] == compss["predict_dataset"] == [0, 1, 0, 1]
