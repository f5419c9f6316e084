#!/usr/bin/env python3
"""One message through a floodgate, for .ci/package.sh (loopback only, bounded in time).

  smtp-once.py upstream PORTFILE   a smart host on 127.0.0.1 (free port written to PORTFILE)
                                   that offers XCLIENT and queues what it gets; it serves at
                                   most 5 sessions and exits after 60 s in any case
  smtp-once.py send PORT           sends one message to floodgate on 127.0.0.1:PORT
"""
import os
import smtplib
import socket
import sys
import time


def upstream(portfile):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)
    with open(portfile + ".tmp", "w") as f:
        f.write(str(srv.getsockname()[1]))
    # Renamed into place so the reader never sees a partial number.
    os.rename(portfile + ".tmp", portfile)
    deadline = time.monotonic() + 60
    for _ in range(5):
        left = deadline - time.monotonic()
        if left <= 0:
            return
        srv.settimeout(left)
        try:
            conn, _ = srv.accept()
        except socket.timeout:
            return
        conn.settimeout(max(1.0, deadline - time.monotonic()))
        try:
            session(conn)
        except (OSError, socket.timeout):
            pass
        finally:
            conn.close()


def session(conn):
    f = conn.makefile("rb")

    def say(text):
        conn.sendall(text.encode() + b"\r\n")

    say("220 upstream.test ESMTP")
    while True:
        line = f.readline()
        if not line:
            return
        verb = line.split(b" ", 1)[0].strip().upper()
        if verb == b"EHLO":
            say("250-upstream.test")
            say("250 XCLIENT ADDR NAME PROTO HELO LOGIN")
        elif verb == b"XCLIENT":
            say("220 upstream.test ESMTP")
        elif verb == b"DATA":
            say("354 go on")
            while f.readline() not in (b".\r\n", b""):
                pass
            say("250 2.0.0 Ok: queued as 4ABCDEF0123")
        elif verb == b"QUIT":
            say("221 bye")
            return
        else:
            say("250 ok")


def send(port):
    with smtplib.SMTP("127.0.0.1", int(port), timeout=20) as s:
        s.ehlo("client.test")
        s.sendmail(
            "sender@example.org",
            ["rcpt@example.org"],
            "From: sender@example.org\r\nSubject: package check\r\n\r\nhello\r\n",
        )


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "upstream":
        upstream(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "send":
        send(sys.argv[2])
    else:
        sys.exit(__doc__)
