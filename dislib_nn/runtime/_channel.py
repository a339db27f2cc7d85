"""Framed messages with attached file descriptors over a Unix socket.

A message is a list of :class:`Payload` objects. On the wire: a fixed
header (byte count, descriptor count, payload count), the descriptors in
chunks of at most ``_FDS_PER_CHUNK`` (each chunk rides on one byte), then
the pickled payload table. The kernel duplicates the descriptors in
flight, so the sender keeps its own.
"""

import pickle
import socket
import struct

from dislib_nn.runtime._serialize import Payload

_HEADER = struct.Struct("!QII")
_FDS_PER_CHUNK = 250


def send(sock, payloads):
    """Send a list of payloads as one message."""
    fds = [fd for p in payloads for fd in p.fds]
    table = pickle.dumps([(p.data, len(p.fds)) for p in payloads],
                         protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_HEADER.pack(len(table), len(fds), len(payloads)))
    for start in range(0, len(fds), _FDS_PER_CHUNK):
        socket.send_fds(sock, [b"\0"], fds[start:start + _FDS_PER_CHUNK])
    sock.sendall(table)


def recv(sock):
    """Receive one message; ``None`` when the peer closed the socket."""
    header = _recv_exact(sock, _HEADER.size)
    if header is None:
        return None
    table_size, n_fds, _ = _HEADER.unpack(header)
    fds = []
    while len(fds) < n_fds:
        _, chunk, _, _ = socket.recv_fds(sock, 1, _FDS_PER_CHUNK)
        if not chunk and len(fds) < n_fds:
            # Peer died mid-message.
            Payload(b"", fds).close()
            return None
        fds.extend(chunk)
    table = _recv_exact(sock, table_size)
    if table is None:
        Payload(b"", fds).close()
        return None
    payloads = []
    start = 0
    for data, count in pickle.loads(table):
        payloads.append(Payload(data, fds[start:start + count]))
        start += count
    return payloads


def _recv_exact(sock, size):
    view = memoryview(bytearray(size))
    got = 0
    while got < size:
        n = sock.recv_into(view[got:])
        if n == 0:
            return None
        got += n
    return view.tobytes()
