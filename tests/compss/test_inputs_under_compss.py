"""Integer inputs and a user's torch Dataset under COMPSs's own rules.

``apps/inputs_app.py`` runs (with the session, see ``_emulator.AHEAD``)
with plain ``python`` and under the emulated runcompss: an embedding
model trained on ids that float32 cannot tell apart, and the same fit
from a Dataset class of the script that reads its rows from files on
the workers; a module of two inputs given a dict X, and one whose
forward returns a dict, trained on the loss of both outputs. Both runs
must train the same weights to the bit.
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
    # Two inputs: the ids' embedding learns the classes they decide.
    assert compss["several_score"] > 0.9
    assert set(compss["outputs_predict"]) <= {0, 1}
    # By keyword or by position, the same inputs train the same model.
    assert compss["positional"] == compss["several"]
    assert set(compss["tuple_output_predict"]) <= {0, 1}
