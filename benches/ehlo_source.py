#!/usr/bin/env python3
"""An SMTP load client that says EHLO, as mail clients do (Postfix's smtp-source says HELO).

    benches/ehlo_source.py -t HOST:PORT [-s SESSIONS] [-m MESSAGES] [-r RCPTS] [-l BYTES] [-d]
                           [-T SECONDS]

Like smtp-source: SESSIONS processes share MESSAGES messages, each of RCPTS recipients and
about BYTES octets of body; -d reuses each session's connection for its messages, otherwise
every message has a connection of its own (greeting, EHLO, transaction, QUIT). Commands
are sent one at a time, each after the reply to the one before (no pipelining), and the
message goes with DATA. A reply other than the expected one stops the run with an error.
Prints one line as ../shared/bench/load.sh does:

    target=... sessions=... msgs=... rcpts=... bytes=... reuse=... rc=0 sent=N elapsed_s=...
    msgs_per_s=... rcpts_per_s=...

Loopback only; every session ends within -T seconds (default 600), or the run fails.
"""

import argparse
import os
import socket
import sys
import time


def reply(sock, buf):
    """Reads one whole (possibly multi-line) reply; returns (code, rest of the buffer)."""
    while True:
        start = 0
        while True:
            end = buf.find(b"\r\n", start)
            if end < 0:
                break
            line = buf[start:end]
            if len(line) < 3:
                raise RuntimeError("short reply line %r" % line)
            if len(line) == 3 or line[3:4] == b" ":
                return int(line[:3]), buf[end + 2 :]
            start = end + 2
        more = sock.recv(65536)
        if not more:
            raise RuntimeError("server closed the connection")
        buf += more


def expect(sock, buf, code, what):
    got, buf = reply(sock, buf)
    if got != code:
        raise RuntimeError("%s: %d, expected %d" % (what, got, code))
    return buf


def message(n, size):
    head = (
        "From: <source@ehlo.test>\r\nTo: <rcpt@ehlo.test>\r\nSubject: load %d\r\n"
        "Message-Id: <%d.%d@ehlo.test>\r\n\r\n" % (n, os.getpid(), n)
    ).encode()
    line = b"La de da de da 1.\r\n"
    body = line * (size // len(line) + 1)
    return head + body[:size].rsplit(b"\r\n", 1)[0] + b"\r\n.\r\n"


def session(host, port, count, rcpts, size, reuse, deadline):
    sock = None
    buf = b""

    def connect():
        s = socket.create_connection((host, port), timeout=30)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        b = expect(s, b"", 220, "greeting")
        s.sendall(b"EHLO ehlo.test\r\n")
        return s, expect(s, b, 250, "EHLO")

    for n in range(count):
        if time.monotonic() > deadline:
            raise RuntimeError("time is up after %d messages" % n)
        if sock is None:
            sock, buf = connect()
        sock.sendall(b"MAIL FROM:<source@ehlo.test>\r\n")
        buf = expect(sock, buf, 250, "MAIL")
        for r in range(rcpts):
            sock.sendall(b"RCPT TO:<%d.rcpt@ehlo.test>\r\n" % r)
            buf = expect(sock, buf, 250, "RCPT")
        sock.sendall(b"DATA\r\n")
        buf = expect(sock, buf, 354, "DATA")
        sock.sendall(message(n, size))
        buf = expect(sock, buf, 250, "end of data")
        if not reuse:
            sock.sendall(b"QUIT\r\n")
            expect(sock, buf, 221, "QUIT")
            sock.close()
            sock, buf = None, b""
    if sock is not None:
        sock.sendall(b"QUIT\r\n")
        expect(sock, buf, 221, "QUIT")
        sock.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-t", default="127.0.0.1:26250")
    ap.add_argument("-s", type=int, default=10)
    ap.add_argument("-m", type=int, default=20000)
    ap.add_argument("-r", type=int, default=1)
    ap.add_argument("-l", type=int, default=1024)
    ap.add_argument("-d", action="store_true")
    ap.add_argument("-T", type=float, default=600)
    a = ap.parse_args()
    host, _, port = a.t.rpartition(":")
    if host not in ("127.0.0.1", "::1", "[::1]", "localhost"):
        sys.exit("loopback targets only")
    host = host.strip("[]")
    deadline = time.monotonic() + a.T
    shares = [a.m // a.s + (1 if i < a.m % a.s else 0) for i in range(a.s)]
    start = time.monotonic()
    pids = []
    for share in shares:
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                session(host, int(port), share, a.r, a.l, a.d, deadline)
            except Exception as e:  # noqa: BLE001 - reported, and the run fails
                print("ehlo_source: %s" % e, file=sys.stderr)
                code = 1
            os._exit(code)
        pids.append(pid)
    rc = 0
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        rc = rc or os.waitstatus_to_exitcode(status)
    elapsed = time.monotonic() - start
    sent = a.m if rc == 0 else 0
    print(
        "target=%s sessions=%d msgs=%d rcpts=%d bytes=%d reuse=%d rc=%d sent=%d elapsed_s=%.3f "
        "msgs_per_s=%.1f rcpts_per_s=%.1f"
        % (a.t, a.s, a.m, a.r, a.l, int(a.d), rc, sent, elapsed, sent / elapsed,
           sent * a.r / elapsed)
    )
    sys.exit(rc)


if __name__ == "__main__":
    main()
