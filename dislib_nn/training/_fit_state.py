"""What an estimator holds before ``fit``, kept to put back if it fails."""

__all__ = ["FitState"]


class FitState:
    """A copy of an estimator's fitted state, taken before ``fit``.

    A failed or interrupted fit (KeyboardInterrupt included) calls
    :meth:`restore`, which leaves the estimator as it was: unfitted after
    a first fit, with its earlier model, history and optimizer states
    after a warm start or ``partial_fit``.
    """

    def __init__(self, est):
        self.est = est
        self.attributes = dict(vars(est))
        history = self.attributes.get("history_")
        self.history = list(history) if history is not None else None
        module = self.attributes.get("module_")
        self.weights = None if module is None else {
            k: v.detach().clone() for k, v in module.state_dict().items()}

    def restore(self):
        vars(self.est).clear()
        vars(self.est).update(self.attributes)
        if self.history is not None:
            self.est.history_[:] = self.history
        if self.weights is not None:
            self.est.module_.load_state_dict(self.weights)
