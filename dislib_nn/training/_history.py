"""Per-epoch records: early stopping on them, and the verbose line."""

__all__ = ["Stopper", "format_record"]


class Stopper:
    """Early stopping on the validation loss (else the training loss)."""

    def __init__(self, patience):
        self.patience = patience
        self.best_loss = None
        self.best = None
        self.bad = 0

    def update(self, record, merged):
        loss = record["valid_loss"]
        if loss is None:
            loss = record["train_loss"]
        if self.best_loss is None or loss < self.best_loss:
            self.best_loss, self.best, self.bad = loss, merged, 0
            return False
        self.bad += 1
        return self.bad >= self.patience


def format_record(record, total):
    parts = [f"epoch {record['epoch']:>3}/{total}",
             f"train_loss {record['train_loss']:.4f}"]
    if record["valid_loss"] is not None:
        parts.append(f"valid_loss {record['valid_loss']:.4f}")
    if record["valid_score"] is not None:
        parts.append(f"valid_score {record['valid_score']:.4f}")
    parts.append(f"lr {record['lr']:.3g}")
    parts.append(f"{record['dur_s']:.2f}s")
    return "  ".join(parts)
