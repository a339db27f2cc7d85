"""The loop a local-backend worker process runs."""

import os
import signal

from dislib_nn.runtime import _channel, _execute, _serialize


def main(sock, threads):
    """Serve tasks from the master on ``sock`` until told to stop."""
    # Ctrl-C reaches the whole process group: the master decides.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _execute.in_worker = True
    import torch
    torch.set_num_threads(threads)
    os.environ["DISLIB_NN_IN_WORKER"] = "1"
    while True:
        message = _channel.recv(sock)
        if message is None:
            break
        if message[0].data == STOP.data:
            break
        result = _execute.run(message)
        _channel.send(sock, result)
        for payload in message + result:
            payload.close()
    sock.close()


STOP = _serialize.Payload(b"stop")
