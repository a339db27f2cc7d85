"""A progress line while the master waits for an epoch, on a terminal.

Training tasks run elsewhere (on a COMPSs node, in a worker process) and
report nothing until they end, so the master cannot count batches. What
it knows is how long the epoch it waits for has run and how long the one
before took; on a terminal it shows that on one line, rewritten in place
twice a second and erased when the epoch's record is printed. Off a
terminal (a log file, a notebook's captured output) nothing is shown.
"""

import threading
import time

__all__ = ["Ticker"]


class Ticker:
    """Context manager: a self-rewriting line on ``stream`` while inside.

    Parameters
    ----------
    stream : file-like
        Written to only when ``stream.isatty()``.
    label : str
        What is waited for, say ``"epoch 3/10"``.
    expected_s : float or None
        How long it should take (the previous epoch's duration).
    interval_s : float, default=0.5
    """

    def __init__(self, stream, label, expected_s=None, interval_s=0.5):
        self.stream = stream
        self.label = label
        self.expected_s = expected_s
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = None
        self._start = None

    def __enter__(self):
        if _is_terminal(self.stream):
            self._start = time.perf_counter()
            self._thread = threading.Thread(
                target=self._run, name="dislib_nn-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self.stream.write("\r\033[K")
            self.stream.flush()
        return False

    def line(self, elapsed):
        """The text shown after ``elapsed`` seconds."""
        text = f"{self.label}  running  {elapsed:.1f}s"
        if self.expected_s:
            done = min(0.99, elapsed / self.expected_s)
            width = 20
            bar = "=" * int(done * width)
            text += (f"  [{bar:<{width}}] ~{done:.0%} by the last "
                     f"epoch's {self.expected_s:.1f}s")
        return text

    def _run(self):
        while not self._stop.wait(self.interval_s):
            self.stream.write("\r\033[K" + self.line(
                time.perf_counter() - self._start))
            self.stream.flush()


def _is_terminal(stream):
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
