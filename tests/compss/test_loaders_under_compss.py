"""load_hdf5, load_zarr and load_shards under COMPSs's own rules.

``apps/loaders_app.py`` runs (with the session, see ``_emulator.AHEAD``)
with plain ``python`` and under the emulated runcompss: it writes an
HDF5 file, a Zarr store and folders of ``.npy`` and ``.pt`` shards,
loads each (every block read by a task, h5py and zarr imported on the
worker) and fits a model on what it loaded. Both runs must gather the
numpy data to the byte and predict as the fit on the arrays does.
"""

import os

from tests._modules import load_file
from tests.compss._emulator import APPS, needs_emulator, report

pytestmark = needs_emulator


def _app():
    return load_file(os.path.join(APPS, "loaders_app.py"))


def test_the_loaders_read_the_data_alike_under_compss():
    local = report(("loaders_app.py", "python"))
    compss = report(("loaders_app.py", "compss"))
    assert (local.pop("backend"), compss.pop("backend")) == ("local",
                                                             "compss")
    assert compss == local
    app = _app()
    arrays = app.data()
    expected = app.digest(arrays[name] for name in arrays)
    for loader in ("hdf5", "zarr", "shards"):
        assert compss[loader]["sha256"] == expected, loader
        assert compss[loader]["blocks"] == [[45, 45]] * len(arrays)
        assert compss[loader]["predict"] == compss["arrays"], loader
