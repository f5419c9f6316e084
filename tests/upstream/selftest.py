#!/usr/bin/env python3
"""Self-test of recorder.py, driven directly with swaks, smtplib and raw sockets.

usage: python3 tests/upstream/selftest.py [-v]      (from the repository root or anywhere)

Starts recorder.py instances on 127.0.0.1 port 0 (every one stopped with SIGTERM by its
PID), runs one check per behaviour the integration tests rely on and prints
`PASS name` / `FAIL name` lines and `N passed, N failed`; exit 1 on a failure.
Every client call has a timeout; swaks checks are skipped (reported) when swaks is absent.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import shutil
import signal
import smtplib
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CERTS = os.path.join(ROOT, "certs", "dev")
CA = os.path.join(CERTS, "ca.crt")
VERBOSE = "-v" in sys.argv


class Recorder:
    """One recorder.py process with its own record file."""

    def __init__(self, *args: str, tls: bool = True):
        self.dir = tempfile.mkdtemp(prefix="recorder-selftest.")
        self.record = os.path.join(self.dir, "record.jsonl")
        cmd = [sys.executable, os.path.join(HERE, "recorder.py"), "--record", self.record,
               "--user", "alice:s3cret", "--idle-timeout", "10"]
        if tls:
            cmd += ["--cert", os.path.join(CERTS, "upstream.crt"), "--key", os.path.join(CERTS, "upstream.key")]
        self.proc = subprocess.Popen(list(cmd) + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL)
        line = self.proc.stdout.readline().decode()
        if not line.startswith("READY "):
            raise RuntimeError("recorder did not start: %r %s" % (line, self.proc.stderr.read().decode()))
        self.port = int(line.split()[1])

    def events(self, kind: str | None = None) -> list[dict]:
        time.sleep(0.05)  # the server writes its record after replying
        if not os.path.exists(self.record):
            return []
        with open(self.record) as f:
            evs = [json.loads(line) for line in f if line.strip()]
        return [e for e in evs if kind is None or e["event"] == kind]

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = -9
        shutil.rmtree(self.dir, ignore_errors=True)
        return rc


class Raw:
    """Byte-exact client: send bytes, read replies with a timeout."""

    def __init__(self, port: int, tls: bool = False):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        if tls:
            self.sock = tls_ctx().wrap_socket(self.sock, server_hostname="localhost")
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def reply(self) -> bytes:
        """Reads one complete (multi-line) reply."""
        while True:
            lines = self.buf.split(b"\r\n")
            for i, line in enumerate(lines[:-1]):
                if len(line) < 4 or line[3:4] == b" ":
                    n = len(b"\r\n".join(lines[: i + 1])) + 2
                    out, self.buf = self.buf[:n], self.buf[n:]
                    return out
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("closed; have %r" % self.buf)
            self.buf += chunk

    def replies(self, n: int) -> list[bytes]:
        return [self.reply() for _ in range(n)]

    def starttls(self) -> None:
        self.sock = tls_ctx().wrap_socket(self.sock, server_hostname="localhost")

    def closed(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, socket.timeout):
            return True

    def close(self) -> None:
        self.sock.close()


def tls_ctx() -> ssl.SSLContext:
    return ssl.create_default_context(cafile=CA)  # verifies chain and the name "localhost"


RESULTS = {"pass": 0, "fail": 0}


def check(name: str):
    def deco(fn):
        try:
            fn()
            print("PASS  " + name)
            RESULTS["pass"] += 1
        except Exception:
            print("FAIL  " + name)
            RESULTS["fail"] += 1
            traceback.print_exc(limit=3 if not VERBOSE else None)
        return fn

    return deco


def swaks(*args: str) -> tuple[int, str]:
    p = subprocess.run(["timeout", "-k", "5", "30", "swaks", "--timeout", "10", *args],
                       capture_output=True, stdin=subprocess.DEVNULL)
    out = p.stdout.decode(errors="replace") + p.stderr.decode(errors="replace")
    if VERBOSE:
        print(out)
    return p.returncode, out


def main() -> int:
    have_swaks = shutil.which("swaks") is not None
    r = Recorder("--reject-rcpt", "bad", "--defer-rcpt", "later")
    try:
        run_main_checks(r, have_swaks)
    finally:
        rc = r.stop()

    @check("SIGTERM exits cleanly (status 0)")
    def _():
        assert rc == 0, rc

    run_fault_checks()
    print("%d passed, %d failed" % (RESULTS["pass"], RESULTS["fail"]))
    return 1 if RESULTS["fail"] else 0


def run_main_checks(r: Recorder, have_swaks: bool) -> None:
    P = r.port

    @check("EHLO advertises the full capability list incl. STARTTLS, XCLIENT, CHUNKING, X-FOO")
    def _():
        with smtplib.SMTP("127.0.0.1", P, timeout=10) as s:
            s.ehlo("client.test")
            for k in ("pipelining", "size", "8bitmime", "smtputf8", "dsn", "enhancedstatuscodes",
                      "auth", "starttls", "xclient", "chunking", "x-foo"):
                assert s.has_extn(k), k
            assert s.esmtp_features["auth"].split() == ["PLAIN", "LOGIN", "CRAM-MD5", "XOAUTH2"]
            assert s.esmtp_features["size"] == "52428800"
            assert s.esmtp_features["xclient"].split() == [
                "NAME", "ADDR", "PROTO", "HELO", "REVERSE_NAME", "PORT", "LOGIN", "DESTADDR", "DESTPORT"
            ], "Postfix 3.7's list"
            code, _ = s.helo("client.test")
            assert code == 250

    @check("smtplib STARTTLS (verified) + login + send_message is recorded exactly")
    def _():
        body = "line one\n.leading dot\nend\n"
        with smtplib.SMTP("127.0.0.1", P, local_hostname="client.test", timeout=10) as s:
            s.starttls(context=tls_ctx())
            s.ehlo()
            assert not s.has_extn("starttls")
            s.login("alice", "s3cret")
            s.sendmail("from@x.test", ["to1@y.test", "to2@y.test"], "Subject: t\n\n" + body)
        m = r.events("message")[-1]
        raw = base64.b64decode(m["data_b64"])
        assert raw == b"Subject: t\r\n\r\nline one\r\n..leading dot\r\nend\r\n", raw
        assert m["size"] == len(raw) and m["sha256"] == hashlib.sha256(raw).hexdigest()
        assert m["content_sha256"] == hashlib.sha256(raw.replace(b"\r\n..", b"\r\n.")).hexdigest()
        assert m["rcpts"] == ["to1@y.test", "to2@y.test"] and m["mail_from"] == "from@x.test"
        assert m["tls"] is True and m["auth_user"] == "alice" and m["helo"] == "client.test"
        assert not m["bare_lf"] and not m["bare_cr"]
        assert r.events("tls")[-1]["injected"] == ""

    for mech in ("PLAIN", "LOGIN", "CRAM-MD5"):
        @check("smtplib AUTH %s: right password 235, wrong password 535 5.7.8" % mech)
        def _(mech=mech):
            with smtplib.SMTP("127.0.0.1", P, timeout=10) as s:
                s.ehlo()
                s.user, s.password = "alice", "wrong"
                fn = {"PLAIN": s.auth_plain, "LOGIN": s.auth_login, "CRAM-MD5": s.auth_cram_md5}[mech]
                try:
                    s.auth(mech, fn, initial_response_ok=False)
                    raise AssertionError("wrong password accepted")
                except smtplib.SMTPAuthenticationError as e:
                    assert e.smtp_code == 535 and e.smtp_error.startswith(b"5.7.8"), e
                s.password = "s3cret"
                code, _ = s.auth(mech, fn)
                assert code == 235
            a = r.events("auth")[-2:]
            assert [(x["mechanism"], x["user"], x["ok"]) for x in a] == [(mech, "alice", False), (mech, "alice", True)]

    @check("AUTH PLAIN without initial response, `*` cancel -> 501, XOAUTH2 ok and failure round trip")
    def _():
        c = Raw(P)
        c.reply()
        c.send(b"EHLO c\r\n")
        c.reply()
        c.send(b"AUTH PLAIN\r\n")
        assert c.reply() == b"334 \r\n"
        c.send(b"*\r\n")
        assert c.reply().startswith(b"501 ")
        bad = base64.b64encode(b"user=alice\x01auth=Bearer nope\x01\x01")
        c.send(b"AUTH XOAUTH2 " + bad + b"\r\n")
        rep = c.reply()
        assert rep.startswith(b"334 "), rep
        assert json.loads(base64.b64decode(rep[4:].strip()))["status"] == "400"
        c.send(b"\r\n")
        assert c.reply().startswith(b"535 5.7.8")
        good = base64.b64encode(b"user=alice\x01auth=Bearer s3cret\x01\x01")
        c.send(b"AUTH XOAUTH2 " + good + b"\r\n")
        assert c.reply().startswith(b"235 2.7.0")
        c.send(b"AUTH PLAIN " + base64.b64encode(b"\0alice\0s3cret") + b"\r\n")
        assert c.reply().startswith(b"503 5.5.1")
        c.close()

    @check("state errors: 503 5.5.1 for MAIL before EHLO, RCPT before MAIL, nested MAIL; DATA without RCPT")
    def _():
        c = Raw(P)
        c.reply()
        c.send(b"MAIL FROM:<a@x>\r\n")
        assert c.reply().startswith(b"503 5.5.1")
        c.send(b"HELO c\r\nRCPT TO:<b@y>\r\nDATA\r\nMAIL FROM:<a@x>\r\nMAIL FROM:<a@x>\r\nDATA\r\n")
        reps = c.replies(6)
        assert reps[0].startswith(b"250 ") and reps[1].startswith(b"503 5.5.1"), reps
        assert reps[2].startswith(b"503 5.5.1") and reps[3].startswith(b"250 2.1.0")
        assert reps[4].startswith(b"503 5.5.1") and reps[5].startswith(b"554 5.5.1"), reps
        c.send(b"RSET\r\nNOOP\r\nVRFY x\r\nVRFY\r\nFOO\r\nQUIT\r\n")
        reps = c.replies(6)
        assert [x[:3] for x in reps] == [b"250", b"250", b"252", b"501", b"502", b"221"], reps
        assert c.closed()

    @check("--reject-rcpt -> 550 5.1.1, --defer-rcpt -> 450 4.2.1, only accepted rcpts recorded")
    def _():
        with smtplib.SMTP("127.0.0.1", P, timeout=10) as s:
            refused = s.sendmail("a@x.test", ["ok@y.test", "bad@y.test", "later@y.test"], "Subject: r\n\nx\n")
        assert refused["bad@y.test"][0] == 550 and refused["bad@y.test"][1].startswith(b"5.1.1")
        assert refused["later@y.test"][0] == 450 and refused["later@y.test"][1].startswith(b"4.2.1")
        assert r.events("message")[-1]["rcpts"] == ["ok@y.test"]

    @check("XCLIENT: 220 again, session reset, attributes recorded and attached to the message")
    def _():
        c = Raw(P)
        c.reply()
        c.send(b"EHLO proxy.test\r\n")
        c.reply()
        c.send(b"XCLIENT NAME=[UNAVAILABLE] ADDR=127.0.0.1 PORT=4242 PROTO=ESMTP HELO=client+2Etest\r\n")
        assert c.reply().startswith(b"220 ")
        c.send(b"MAIL FROM:<a@x>\r\n")
        assert c.reply().startswith(b"503 5.5.1"), "XCLIENT must reset to the greeting stage"
        c.send(b"EHLO client.test\r\nMAIL FROM:<a@x>\r\nXCLIENT ADDR=1.2.3.4\r\nRCPT TO:<b@y>\r\nDATA\r\n")
        reps = c.replies(5)
        assert reps[2].startswith(b"503 5.5.1") and reps[4].startswith(b"354"), reps
        c.send(b"hi\r\n.\r\nXCLIENT BOGUS=1\r\nQUIT\r\n")
        reps = c.replies(3)
        assert reps[0].startswith(b"250 2.0.0") and reps[1].startswith(b"501"), reps
        x = r.events("xclient")[-1]["attrs"]
        assert x == {"NAME": "[UNAVAILABLE]", "ADDR": "127.0.0.1", "PORT": "4242", "PROTO": "ESMTP",
                     "HELO": "client.test"}, x
        m = r.events("message")[-1]
        assert m["xclient"]["ADDR"] == "127.0.0.1" and m["helo"] == "client.test"

    @check("DATA ends only at CRLF.CRLF: smuggling payloads are content, one message recorded")
    def _():
        payloads = [b"\n.\n", b"\r.\r", b"\r\n.\r", b"\n.\r\n", b".\r\r\n"]
        before = len(r.events("message"))
        for p in payloads:
            c = Raw(P)
            c.reply()
            c.send(b"EHLO c\r\nMAIL FROM:<a@x>\r\nRCPT TO:<b@y>\r\nDATA\r\n")
            c.replies(4)
            c.send(b"Subject: s\r\n\r\nbody" + p + b"MAIL FROM:<evil@x>\r\nRCPT TO:<victim@y>\r\nDATA\r\nsmuggled\r\n.\r\n")
            rep = c.reply()
            assert rep.startswith(b"250 2.0.0"), rep
            c.send(b"QUIT\r\n")
            assert c.reply().startswith(b"221")
            c.close()
        msgs = r.events("message")[before:]
        assert len(msgs) == len(payloads), len(msgs)
        for m, p in zip(msgs, payloads):
            assert m["rcpts"] == ["b@y"], m["rcpts"]
            assert p in base64.b64decode(m["data_b64"])
            assert m["bare_lf"] or m["bare_cr"]

    @check("bare LF / bare CR in a command -> 500 5.5.2 and the session goes on; 4 KiB+ line -> 500 5.5.2")
    def _():
        c = Raw(P)
        c.reply()
        c.send(b"EHLO c\nNOOP\r\nNO\rOP\r\n")
        reps = c.replies(3)
        assert [x[:9] for x in reps] == [b"500 5.5.2", b"250 2.0.0", b"500 5.5.2"], reps
        c.send(b"NOOP " + b"x" * 5000 + b"\r\nNOOP\r\n")
        reps = c.replies(2)
        assert reps[0].startswith(b"500 5.5.2") and reps[1].startswith(b"250"), reps

    @check("STARTTLS injection: bytes after STARTTLS are discarded and recorded, never executed")
    def _():
        c = Raw(P)
        c.reply()
        c.send(b"EHLO c\r\n")
        c.reply()
        c.send(b"STARTTLS\r\nRSET\r\nMAIL FROM:<inject@x>\r\n")
        assert c.reply().startswith(b"220 2.0.0")
        time.sleep(0.1)
        c.starttls()
        c.send(b"EHLO c\r\nMAIL FROM:<a@x>\r\n")
        reps = c.replies(2)
        assert reps[0].startswith(b"250-") and b"STARTTLS" not in reps[0] and reps[1].startswith(b"250 2.1.0"), reps
        c.send(b"STARTTLS\r\n")
        assert c.reply().startswith(b"554 5.5.1")
        t = r.events("tls")[-1]
        assert base64.b64decode(t["injected"]) == b"RSET\r\nMAIL FROM:<inject@x>\r\n", t
        cmds = [e["line"] for e in r.events("command") if e["session"] == t["session"]]
        assert "MAIL FROM:<inject@x>" not in cmds and "RSET" not in cmds, cmds

    @check("BDAT (CHUNKING) message recorded with bdat=true; DATA after BDAT -> 503")
    def _():
        c = Raw(P)
        c.reply()
        c.send(b"EHLO c\r\nMAIL FROM:<a@x>\r\nRCPT TO:<b@y>\r\nBDAT 5\r\nab\r\ncDATA\r\nBDAT 3 LAST\r\nxyz")
        reps = c.replies(6)
        assert reps[3].startswith(b"250 2.0.0 5 octets") and reps[4].startswith(b"503"), reps
        assert reps[5].startswith(b"250 2.0.0 Ok"), reps
        m = r.events("message")[-1]
        assert m["bdat"] and base64.b64decode(m["data_b64"]) == b"ab\r\ncxyz"

    @check("MAIL SIZE= over the limit -> 552 5.3.4; the 100-recipient and 1 MB message are recorded")
    def _():
        with smtplib.SMTP("127.0.0.1", P, timeout=10) as s:
            s.ehlo()
            code, _ = s.mail("a@x", ["SIZE=99999999999"])
            assert code == 552
            s.rset()
            rcpts = ["r%d@y.test" % i for i in range(100)]
            body = ("x" * 990 + "\n") * 1024
            s.sendmail("a@x", rcpts, "Subject: big\n\n" + body)
        m = r.events("message")[-1]
        assert m["rcpts"] == rcpts and m["size"] > 1024 * 991

    if not have_swaks:
        print("SKIP  swaks checks: swaks not installed (.ci/install.sh installs it)")
        return

    common = ["--server", "127.0.0.1:%d" % P, "--from", "s@x.test", "--helo", "swaks.test"]

    @check("swaks STARTTLS (verified with certs/dev/ca.crt) + AUTH PLAIN + --pipeline")
    def _():
        rc, out = swaks(*common, "--to", "a@y.test,b@y.test", "--tls", "--tls-verify", "--tls-ca-path", CA,
                        "-a", "PLAIN", "-au", "alice", "-ap", "s3cret", "--pipeline")
        assert rc == 0 and "<~  250 2.0.0 Ok: queued" in out, out
        m = r.events("message")[-1]
        assert m["rcpts"] == ["a@y.test", "b@y.test"] and m["tls"] and m["auth_user"] == "alice"

    @check("swaks AUTH LOGIN over STARTTLS; wrong password -> exit 28")
    def _():
        rc, out = swaks(*common, "--to", "a@y.test", "--tls", "-a", "LOGIN", "-au", "alice", "-ap", "s3cret")
        assert rc == 0, out
        rc, out = swaks(*common, "--to", "a@y.test", "--tls", "-a", "LOGIN", "-au", "alice", "-ap", "bad")
        assert rc == 28 and "535 5.7.8" in out, out

    @check("swaks --quit-after RCPT leaves no message")
    def _():
        before = len(r.events("message"))
        rc, out = swaks(*common, "--to", "a@y.test", "--quit-after", "RCPT")
        assert rc == 0 and len(r.events("message")) == before, out


def run_fault_checks() -> None:
    @check("--xclient-attrs '': no XCLIENT listed; --xclient-reply / --xclient-ipv4-only refuse it")
    def _():
        r = Recorder("--xclient-attrs", "")
        try:
            with smtplib.SMTP("127.0.0.1", r.port, timeout=10) as s:
                s.ehlo("client.test")
                assert not s.has_extn("xclient")
        finally:
            r.stop()
        r = Recorder("--xclient-reply", "550 5.7.0 Error: insufficient authorization")
        try:
            c = Raw(r.port)
            c.reply()
            c.send(b"EHLO proxy.test\r\n")
            c.reply()
            c.send(b"XCLIENT ADDR=192.0.2.1\r\n")
            assert c.reply().startswith(b"550 5.7.0 Error: insufficient"), "refused"
            assert r.events("xclient_refused")[-1]["attrs"] == {"ADDR": "192.0.2.1"}
            assert not r.events("xclient")
        finally:
            r.stop()
        r = Recorder("--xclient-ipv4-only")
        try:
            c = Raw(r.port)
            c.reply()
            c.send(b"EHLO proxy.test\r\nXCLIENT ADDR=IPV6:2001:db8::1\r\nXCLIENT ADDR=192.0.2.1\r\n")
            reps = c.replies(3)
            assert reps[1].startswith(b"501 5.5.4 Bad ADDR syntax: IPV6:2001:db8::1"), reps
            assert reps[2].startswith(b"220 "), reps
        finally:
            r.stop()

    @check("--proxy-protocol --proxy-missing-reply: no header in time gets that reply, then close")
    def _():
        r = Recorder("--proxy-protocol", "--proxy-timeout", "0.2", "--proxy-missing-reply",
                     "503 Command refused, required Proxy negotiation failed")
        try:
            c = Raw(r.port)
            assert c.reply().startswith(b"503 Command refused"), "missing-header reply"
            assert c.closed()
            assert r.events("proxy")[-1]["error"] == "no header"
        finally:
            r.stop()
        r = Recorder("--proxy-protocol", "--proxy-timeout", "0.2", "--proxy-missing-503")
        try:
            c = Raw(r.port)
            assert c.reply().startswith(b"220 "), "greets after the wait"
            c.send(b"EHLO c\r\nNOOP\r\nQUIT\r\n")
            reps = c.replies(3)
            assert [x[:3] for x in reps] == [b"503", b"503", b"221"], reps
        finally:
            r.stop()

    @check("--implicit-tls: TLS first, no STARTTLS advertised, message recorded with tls=true")
    def _():
        r = Recorder("--implicit-tls")
        try:
            with smtplib.SMTP_SSL("127.0.0.1", r.port, timeout=10, context=tls_ctx()) as s:
                s.ehlo()
                assert not s.has_extn("starttls")
                s.sendmail("a@x", ["b@y"], "Subject: i\n\nx\n")
            assert r.events("session_start")[-1]["tls"] and r.events("message")[-1]["tls"]
        finally:
            r.stop()

    @check("--fault refuse: 554 greeting, 503 to everything, 221 to QUIT")
    def _():
        r = Recorder("--fault", "refuse")
        try:
            c = Raw(r.port)
            assert c.reply().startswith(b"554 ")
            c.send(b"EHLO c\r\nMAIL FROM:<a@x>\r\nQUIT\r\n")
            reps = c.replies(3)
            assert [x[:3] for x in reps] == [b"503", b"503", b"221"], reps
        finally:
            r.stop()

    @check("--fault garbage: EHLO gets non-SMTP bytes")
    def _():
        r = Recorder("--fault", "garbage")
        try:
            c = Raw(r.port)
            c.reply()
            c.send(b"EHLO c\r\n")
            assert c.sock.recv(100).startswith(b"\x00\xff")
        finally:
            r.stop()

    @check("--fault slow --delay 0.2: replies still arrive complete and in order")
    def _():
        r = Recorder("--fault", "slow", "--delay", "0.2")
        try:
            c = Raw(r.port)
            assert c.reply().startswith(b"220 ")
            c.send(b"EHLO c\r\nNOOP\r\nQUIT\r\n")
            reps = c.replies(3)
            assert [x[:4] for x in reps] == [b"250-", b"250 ", b"221 "], reps
        finally:
            r.stop()

    @check("--fault die-mid-data --fault-after 1000: connection closes in DATA, no message recorded")
    def _():
        r = Recorder("--fault", "die-mid-data", "--fault-after", "1000")
        try:
            try:
                with smtplib.SMTP("127.0.0.1", r.port, timeout=10) as s:
                    s.sendmail("a@x", ["b@y"], "Subject: d\n\n" + ("y" * 100 + "\n") * 100)
                raise AssertionError("message accepted")
            except (smtplib.SMTPServerDisconnected, ConnectionError):
                pass
            assert r.events("message") == [] and r.events("session_end")[-1]["reason"] == "fault"
        finally:
            r.stop()

    @check("--fault reset-after-data-cmd: DATA gets a reset connection, no message recorded")
    def _():
        r = Recorder("--fault", "reset-after-data-cmd")
        try:
            c = Raw(r.port)
            c.reply()
            c.send(b"EHLO c\r\nMAIL FROM:<a@x>\r\nRCPT TO:<b@y>\r\nDATA\r\n")
            c.replies(3)
            assert c.closed()
            assert r.events("message") == []
        finally:
            r.stop()

    @check("--no-chunking: no CHUNKING in EHLO, BDAT read whole and refused 502, DATA still works")
    def _():
        r = Recorder("--no-chunking", tls=False)
        try:
            c = Raw(r.port)
            c.reply()
            c.send(b"EHLO c\r\n")
            assert b"CHUNKING" not in c.reply()
            c.send(b"MAIL FROM:<a@x>\r\nRCPT TO:<b@y>\r\nBDAT 6 LAST\r\nNOOP\r\nDATA\r\n")
            reps = c.replies(4)
            assert reps[2].startswith(b"502 5.5.1") and reps[3].startswith(b"354"), reps
            c.send(b"Subject: d\r\n\r\nx\r\n.\r\n")
            assert c.reply().startswith(b"250 2.0.0 Ok")
            m = r.events("message")[-1]
            assert not m["bdat"] and base64.b64decode(m["data_b64"]) == b"Subject: d\r\n\r\nx\r\n"
        finally:
            r.stop()

    @check("--no-ehlo: EHLO answered 502, HELO and DATA work, the message is not ESMTP")
    def _():
        r = Recorder("--no-ehlo", tls=False)
        try:
            c = Raw(r.port)
            c.reply()
            c.send(b"EHLO c\r\n")
            assert c.reply().startswith(b"502 5.5.2"), "EHLO refused"
            c.send(b"HELO c\r\nMAIL FROM:<a@x>\r\nRCPT TO:<b@y>\r\nDATA\r\n")
            reps = c.replies(4)
            assert reps[0].startswith(b"250 ") and reps[3].startswith(b"354"), reps
            c.send(b"Subject: h\r\n\r\nx\r\n.\r\n")
            assert c.reply().startswith(b"250 2.0.0 Ok")
            m = r.events("message")[-1]
            assert not m["esmtp"] and m["helo"] == "c", m
        finally:
            r.stop()

    @check("idle timeout: 421 4.4.2 then close")
    def _():
        r = Recorder("--idle-timeout", "0.5")
        try:
            c = Raw(r.port)
            c.reply()
            assert c.reply().startswith(b"421 4.4.2") and c.closed()
            assert r.events("session_end")[-1]["reason"] == "timeout"
        finally:
            r.stop()

    @check("refuses a non-loopback address")
    def _():
        p = subprocess.run([sys.executable, os.path.join(HERE, "recorder.py"), "--host", "0.0.0.0"],
                           capture_output=True, timeout=10)
        assert p.returncode == 2 and b"non-loopback" in p.stderr


if __name__ == "__main__":
    sys.exit(main())
