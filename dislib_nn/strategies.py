"""Write your own averaging strategy: ``from dislib_nn.strategies import
Strategy``.

Subclass :class:`Strategy`, write its decisions (where each replica's
round starts, which tasks merge a :class:`Round`, what the model is and
what carries into the next fit), and give the class to any estimator as
``strategy=``; ``strategy__name=value`` sets its parameters. The
library runs the epochs, the training tasks, the optimizer states, the
futures' lifetimes, checkpoints and ``history_``.
docs/writing_a_strategy.md writes FedBuff in a script this way.
"""

from dislib_nn.training.strategies._template import Round, Strategy
from dislib_nn.training.tasks._report import TrainStats

__all__ = ["Strategy", "Round", "TrainStats"]
