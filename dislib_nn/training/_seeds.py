"""Named seed streams: every random draw of a fit, from one base seed.

``random_state`` gives one base seed per model (drawn when the model is
created). Each use of randomness takes its own stream, derived from the
base seed and the stream's number by :class:`numpy.random.SeedSequence`,
then keyed by the epoch and the worker where it varies with them. Same
``random_state``, same draws, on every backend and in every task order.
"""

import numpy as np

__all__ = ["MODEL_INIT", "SHUFFLE", "DEAL", "TRAIN", "VALIDATION_SPLIT",
           "EPOCHS", "seed_for", "draw_base", "train_seeds"]

#: the initial weights of the module (keyed by nothing)
MODEL_INIT = 0
#: ``shuffle="global"``: the permutation of rows of an epoch (epoch)
SHUFFLE = 1
#: ``shuffle="local"``: the dealing of blocks to workers (epoch)
DEAL = 2
#: dropout and row order inside a training task (epoch, worker)
TRAIN = 3
#: ``validation_fraction``: the rows held out of each block (block)
VALIDATION_SPLIT = 4
#: the base of the per-epoch streams SHUFFLE, DEAL and TRAIN
EPOCHS = 5


def seed_for(base, *keys):
    """A 31-bit seed derived from a base seed and integer keys."""
    seq = np.random.SeedSequence([int(base)] + [int(k) for k in keys])
    return int(seq.generate_state(1)[0] & 0x7FFFFFFF)


def draw_base(random_state):
    """The base seed of a new model, drawn from ``random_state`` (None,
    an int or a numpy RandomState) as ``fit`` draws it."""
    from sklearn.utils import check_random_state  # the master's only
    return int(check_random_state(random_state).randint(0, 2 ** 31 - 1))


def train_seeds(base, n_epochs, worker):
    """The seeds of ``worker``'s training tasks in epochs ``0`` to
    ``n_epochs - 1`` of a model of base seed ``base`` (what each task
    seeds dropout and its row order with)."""
    epochs = seed_for(base, EPOCHS)
    return tuple(seed_for(epochs, TRAIN, e, worker) for e in range(n_epochs))
