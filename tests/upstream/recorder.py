#!/usr/bin/env python3
"""Recording SMTP server: the test upstream that floodgate's integration tests sit behind.

A real, strict SMTP server (Python 3.11 standard library only: asyncio + ssl) that
writes one JSON line per event to --record FILE, so a test can read exactly what
upstream saw: sessions, commands, XCLIENT attributes, AUTH results and every
accepted message with its raw bytes.

usage: recorder.py [--host 127.0.0.1] [--port 0] [--record FILE]
                   [--cert CRT --key KEY [--implicit-tls]]
                   [--user NAME:PASSWORD ...] [--reject-rcpt SUB ...] [--defer-rcpt SUB ...]
                   [--fault none|refuse|die-mid-data|garbage|slow|reset-after-data-cmd]
                   (die-mid-data and reset-after-data-cmd apply to BDAT chunks too)
                   [--fault-after N] [--delay S] [--idle-timeout S] [--hostname NAME]
                   [--proxy-protocol [--proxy-timeout S]
                    [--proxy-missing-reply "CODE TEXT" | --proxy-missing-503]]
                   [--xclient-attrs "NAME ADDR ..."] [--xclient-reply "CODE TEXT"]
                   [--xclient-ipv4-only] [--xclient-after-ehlo] [--no-chunking] [--no-ehlo]

--xclient-attrs is what EHLO lists after XCLIENT (default: Postfix 3.7's list; "" lists no
XCLIENT at all, as Postfix does for a client not in smtpd_authorized_xclient_hosts).
--xclient-reply answers every XCLIENT with that reply (e.g. "550 5.7.0 Error: insufficient
authorization"); --xclient-ipv4-only answers an IPv6 ADDR as an IPv4-only Postfix does
(501 5.5.4 Bad ADDR syntax). --xclient-after-ehlo refuses an XCLIENT that does not follow an
EHLO (550 5.7.0), as Exim does for an XCLIENT it has not advertised yet. --proxy-missing-reply: with --proxy-protocol, when no PROXY
header came within --proxy-timeout seconds, send this reply and close (Exim: "503 Command
refused, required Proxy negotiation failed"; Postfix: "421 4.3.0 <host> Server local error").
--proxy-missing-503 instead greets and answers every command but QUIT with "503 Command
refused, required Proxy negotiation failed", as Exim 4.96 does for a host in hosts_proxy.

On start it prints `READY <port>` on stdout (flushed). SIGTERM/SIGINT: clean exit 0.
Loopback addresses only.

Record lines (all have "event", "session" (int, 0 for server events) and "time"):
  session_start  peer, tls (true when implicit TLS)
  proxy          (--proxy-protocol only) the PROXY v2 header read before the greeting:
                 command (PROXY | LOCAL), family (TCP4 | TCP6 | UNSPEC), src and dst
                 ("ip:port", IPv6 as "[ip]:port"; null for LOCAL/UNSPEC), tlv_len;
                 or error (the session then ends with reason proxy-header)
  command        verb, line (AUTH lines and SASL responses are never recorded)
  tls            STARTTLS handshake done; injected: base64 of bytes that were
                 pipelined after STARTTLS and discarded ("" when none)
  xclient        attrs {NAME: value, ...} (xtext-decoded)
  xclient_refused attrs, reply (--xclient-reply / --xclient-ipv4-only /
                 --xclient-after-ehlo refused it)
  auth           mechanism, user, ok
  message        id, mail_from, mail_params, rcpts, data_b64 (wire bytes between the
                 354 and the final CRLF.CRLF, dot-stuffed, incl. the last line's CRLF),
                 size, sha256 (of those bytes), content_sha256 (after dot-unstuffing),
                 bare_lf, bare_cr, helo, esmtp (the session began with EHLO), auth_user,
                 xclient, tls, bdat
  session_end    reason (quit, eof, timeout, fault, errors, shutdown, tls-failed,
                 proxy-header), messages
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import hashlib
import hmac
import ipaddress
import itertools
import json
import os
import signal
import socket
import ssl
import struct
import sys
import time

# Limits of this server. The command limit is generous on purpose: floodgate is the
# one expected to enforce the 512/2048 limits, the recorder only has to stay bounded.
MAX_COMMAND = 4096
MAX_AUTH_LINE = 12288
MAX_SIZE = 52428800
MAX_RCPTS = 1000
MAX_ERRORS = 20

XCLIENT_ATTRS = (
    "NAME", "ADDR", "PORT", "PROTO", "HELO", "LOGIN", "DESTADDR", "DESTPORT", "REVERSE_NAME",
)
# What Postfix 3.7 lists after XCLIENT for an authorized client.
POSTFIX_XCLIENT = "NAME ADDR PROTO HELO REVERSE_NAME PORT LOGIN DESTADDR DESTPORT"

PROXY_V2_SIG = b"\r\n\r\n\x00\r\nQUIT\n"


def parse_proxy_v2(header: bytes) -> dict:
    """Parses one complete PROXY v2 header (signature, 4 fixed octets, payload).

    Returns the fields of the `proxy` record; raises ValueError when it is malformed.
    """
    if len(header) < 16 or header[:12] != PROXY_V2_SIG:
        raise ValueError("no PROXY v2 signature")
    ver_cmd, fam = header[12], header[13]
    length = struct.unpack("!H", header[14:16])[0]
    payload = header[16:]
    if len(payload) != length:
        raise ValueError("length field says %d, got %d" % (length, len(payload)))
    if ver_cmd >> 4 != 2:
        raise ValueError("version %d" % (ver_cmd >> 4))
    cmd = ver_cmd & 0x0F
    if cmd not in (0, 1):
        raise ValueError("command %d" % cmd)
    command = "PROXY" if cmd == 1 else "LOCAL"
    families = {0x11: ("TCP4", 4), 0x21: ("TCP6", 16), 0x00: ("UNSPEC", 0)}
    if fam not in families:
        raise ValueError("family/protocol 0x%02x" % fam)
    family, alen = families[fam]
    src = dst = None
    used = 0
    if command == "PROXY" and alen:
        used = 2 * alen + 4
        if length < used:
            raise ValueError("address block too short for %s" % family)
        ips = [ipaddress.ip_address(payload[i * alen : (i + 1) * alen]) for i in range(2)]
        sport, dport = struct.unpack("!HH", payload[2 * alen : used])
        fmt = "%s:%d" if alen == 4 else "[%s]:%d"
        src, dst = fmt % (ips[0], sport), fmt % (ips[1], dport)
    return {"command": command, "family": family, "src": src, "dst": dst, "tlv_len": length - used}


class Closed(Exception):
    """The session is over (peer gone, timeout, fault); carries the reason."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class Recorder:
    """Appends JSON lines to the record file, flushed per line."""

    def __init__(self, path: str | None):
        self._f = open(path, "a", encoding="utf-8") if path else None

    def write(self, session: int, event: str, **fields) -> None:
        if self._f is None:
            return
        rec = {"event": event, "session": session, "time": round(time.time(), 6)}
        rec.update(fields)
        self._f.write(json.dumps(rec, separators=(",", ":")) + "\n")
        self._f.flush()

    def close(self) -> None:
        if self._f is not None:
            self._f.close()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def xtext_decode(value: str) -> str:
    """RFC 3461 xtext: `+XX` is a hex-encoded octet; anything else stands for itself."""
    raw = value.encode("utf-8", "surrogateescape")
    out = bytearray()
    i = 0
    while i < len(raw):
        hexpair = raw[i + 1 : i + 3]
        if raw[i] == 0x2B and len(hexpair) == 2 and all(c in b"0123456789ABCDEFabcdef" for c in hexpair):
            out.append(int(hexpair, 16))
            i += 3
        else:
            out.append(raw[i])
            i += 1
    return out.decode("utf-8", "replace")


def parse_path(arg: str, keyword: str):
    """Parses `FROM:<addr> params` / `TO:<addr> params`; returns (addr, params) or None."""
    if not arg[: len(keyword) + 1].upper() == keyword + ":":
        return None
    rest = arg[len(keyword) + 1 :].lstrip(" ")
    if not rest.startswith("<"):
        return None
    end = rest.find(">")
    if end < 0:
        return None
    addr = rest[1:end]
    tail = rest[end + 1 :]
    if tail and not tail.startswith(" "):
        return None
    params = tail.split()
    if any(c in addr for c in " <>") or any(ord(c) < 0x20 for c in addr):
        return None
    return addr, params


def stuffing_removed(data: bytes) -> bytes:
    """Removes SMTP dot-stuffing from CRLF-framed DATA bytes."""
    lines = data.split(b"\r\n")
    return b"\r\n".join(line[1:] if line.startswith(b".") else line for line in lines)


def bare_endings(data: bytes) -> tuple[bool, bool]:
    """Whether data holds an LF not after CR (bare LF) or a CR not before LF (bare CR)."""
    bare_lf = any(i == 0 or data[i - 1] != 0x0D for i in _indexes(data, 0x0A))
    bare_cr = any(i + 1 >= len(data) or data[i + 1] != 0x0A for i in _indexes(data, 0x0D))
    return bare_lf, bare_cr


def _indexes(data: bytes, byte: int):
    i = data.find(byte)
    while i >= 0:
        yield i
        i = data.find(byte, i + 1)


class Session:
    """One SMTP session: strict command loop, AUTH, XCLIENT, DATA/BDAT, faults."""

    def __init__(self, server: "Server", sid: int, reader, writer, implicit_tls: bool):
        self.srv = server
        self.cfg = server.cfg
        self.sid = sid
        self.reader = reader
        self.writer = writer
        self.buf = bytearray()
        self.tls = implicit_tls
        self.errors = 0
        self.messages = 0
        self.xclient: dict[str, str] = {}
        self.refuse_all = False
        self.reset_session()

    # ----- state -------------------------------------------------------------------

    def reset_session(self) -> None:
        """Back to the greeting stage (new session, after STARTTLS or XCLIENT)."""
        self.helo: str | None = None
        self.esmtp = False
        self.auth_user: str | None = None
        self.reset_transaction()

    def reset_transaction(self) -> None:
        self.mail_from: str | None = None
        self.mail_params: list[str] = []
        self.rcpts: list[str] = []
        self.bdat = bytearray()
        self.in_bdat = False

    def reset_connection(self) -> None:
        """Abortive close (SO_LINGER 0 makes the kernel send RST instead of FIN); ends the session."""
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()
        raise Closed("fault")

    def record(self, event: str, **fields) -> None:
        self.srv.rec.write(self.sid, event, **fields)

    # ----- I/O ---------------------------------------------------------------------

    async def fill(self) -> None:
        """Reads more bytes into self.buf; raises Closed on EOF or idle timeout."""
        try:
            chunk = await asyncio.wait_for(self.reader.read(65536), self.cfg.idle_timeout)
        except asyncio.TimeoutError:
            await self.reply("421 4.4.2 %s Error: timeout exceeded" % self.cfg.hostname)
            raise Closed("timeout")
        except (ConnectionError, ssl.SSLError, OSError):
            raise Closed("eof")
        if not chunk:
            raise Closed("eof")
        self.buf += chunk

    async def readline(self, limit: int) -> tuple[bytes, bool]:
        """Returns (line incl. LF, too_long). An over-long line is consumed to its LF."""
        too_long = False
        while True:
            nl = self.buf.find(b"\n")
            if nl >= 0:
                if too_long or nl + 1 > limit:
                    del self.buf[: nl + 1]
                    return b"", True
                line = bytes(self.buf[: nl + 1])
                del self.buf[: nl + 1]
                return line, False
            if len(self.buf) > limit:
                # Keep the memory bounded: drop what we have and remember it was too long.
                self.buf.clear()
                too_long = True
            await self.fill()

    async def send_raw(self, data: bytes) -> None:
        if self.cfg.fault == "slow":
            await asyncio.sleep(self.cfg.delay)
        try:
            self.writer.write(data)
            await self.writer.drain()
        except (ConnectionError, OSError):
            raise Closed("eof")

    async def reply(self, *lines: str) -> None:
        """Sends a (multi-line) reply; each argument is `CODE text`."""
        out = []
        for i, line in enumerate(lines):
            sep = " " if i == len(lines) - 1 else "-"
            out.append(line[:3] + sep + line[4:] + "\r\n")
        await self.send_raw("".join(out).encode("utf-8"))

    async def error(self, line: str) -> None:
        self.errors += 1
        if self.errors > MAX_ERRORS:
            await self.reply("421 4.7.0 %s Error: too many errors" % self.cfg.hostname)
            raise Closed("errors")
        await self.reply(line)

    # ----- main loop ---------------------------------------------------------------

    async def run(self) -> None:
        peer = self.writer.get_extra_info("peername")
        self.record("session_start", peer="%s:%s" % (peer[0], peer[1]) if peer else "", tls=self.tls)
        reason = "eof"
        try:
            if self.cfg.proxy_protocol:
                await self.read_proxy_header()
            if self.cfg.fault == "refuse":
                await self.reply("554 5.3.2 %s no SMTP service here" % self.cfg.hostname)
                await self.refused_loop()
            else:
                await self.greet()
                while True:
                    await self.one_command()
        except Closed as c:
            reason = c.reason
        except asyncio.CancelledError:
            reason = "shutdown"
            raise
        finally:
            self.record("session_end", reason=reason, messages=self.messages)
            await self.close()

    async def read_proxy_header(self) -> None:
        """Reads a PROXY v2 header before the greeting and records it (plain listeners)."""
        if self.cfg.proxy_missing_reply or self.cfg.proxy_missing_503:
            try:
                await asyncio.wait_for(self._fill_to(16), self.cfg.proxy_timeout)
            except asyncio.TimeoutError:
                self.record("proxy", error="no header", raw_b64=b64(bytes(self.buf[:64])))
                if self.cfg.proxy_missing_503:
                    self.refuse_all = True
                    return
                await self.send_raw((self.cfg.proxy_missing_reply + "\r\n").encode("utf-8"))
                raise Closed("proxy-header")
        while len(self.buf) < 16:
            await self.fill()
        length = struct.unpack("!H", bytes(self.buf[14:16]))[0]
        while len(self.buf) < 16 + length:
            await self.fill()
        header = bytes(self.buf[: 16 + length])
        del self.buf[: 16 + length]
        try:
            fields = parse_proxy_v2(header)
        except ValueError as e:
            self.record("proxy", error=str(e), raw_b64=b64(header[:64]))
            raise Closed("proxy-header")
        self.record("proxy", **fields)

    async def _fill_to(self, n: int) -> None:
        while len(self.buf) < n:
            await self.fill()

    async def greet(self) -> None:
        await self.reply("220 %s ESMTP recorder" % self.cfg.hostname)

    async def close(self) -> None:
        try:
            self.writer.close()
            await asyncio.wait_for(self.writer.wait_closed(), 2)
        except Exception:
            pass

    async def refused_loop(self) -> None:
        """RFC 5321 3.1: after a 554 greeting, answer 503 to everything until QUIT."""
        while True:
            line, _ = await self.readline(MAX_COMMAND)
            if line.rstrip(b"\r\n").upper() == b"QUIT":
                await self.reply("221 2.0.0 Bye")
                raise Closed("quit")
            await self.error("503 5.5.1 Error: no SMTP service here")

    async def one_command(self) -> None:
        line, too_long = await self.readline(MAX_COMMAND)
        if too_long:
            await self.error("500 5.5.2 Error: line too long")
            return
        if not line.endswith(b"\r\n") or b"\r" in line[:-2] or b"\n" in line[:-1]:
            self.record("command", verb="", line=line.decode("utf-8", "replace"), bare=True)
            await self.error("500 5.5.2 Error: bare <LF> or <CR> received")
            return
        text = line[:-2].decode("utf-8", "replace")
        verb, _, arg = text.partition(" ")
        verb = verb.upper()
        self.record("command", verb=verb, line=text if verb != "AUTH" else "AUTH " + arg.split(" ")[0])
        if self.refuse_all and verb != "QUIT":
            await self.reply("503 Command refused, required Proxy negotiation failed")
            return
        handler = getattr(self, "cmd_" + verb.replace("-", "_"), None)
        if not verb or handler is None or not verb.isalpha():
            await self.error("502 5.5.2 Error: command not recognized")
            return
        await handler(arg)

    # ----- commands ----------------------------------------------------------------

    async def cmd_HELO(self, arg: str) -> None:
        if not arg.strip():
            await self.error("501 5.5.4 Syntax: HELO hostname")
            return
        if self.cfg.fault == "garbage":
            await self.send_raw(b"\x00\xffHTTP/1.1 400 Bad Request\r\n\x1b[garbage]\n")
            return
        self.reset_transaction()
        self.helo, self.esmtp = arg.strip(), False
        await self.reply("250 %s" % self.cfg.hostname)

    async def cmd_EHLO(self, arg: str) -> None:
        if self.cfg.no_ehlo:
            await self.error("502 5.5.2 Error: command not recognized")
            return
        if not arg.strip():
            await self.error("501 5.5.4 Syntax: EHLO hostname")
            return
        if self.cfg.fault == "garbage":
            await self.send_raw(b"\x00\xffHTTP/1.1 400 Bad Request\r\n\x1b[garbage]\n")
            return
        self.reset_transaction()
        self.helo, self.esmtp = arg.strip(), True
        caps = [
            "250 %s" % self.cfg.hostname,
            "250 PIPELINING",
            "250 SIZE %d" % MAX_SIZE,
            "250 8BITMIME",
            "250 SMTPUTF8",
            "250 DSN",
            "250 ENHANCEDSTATUSCODES",
            "250 AUTH PLAIN LOGIN CRAM-MD5 XOAUTH2",
        ]
        if self.srv.tls_ctx is not None and not self.tls:
            caps.append("250 STARTTLS")
        if self.cfg.xclient_attrs.strip():
            caps.append("250 XCLIENT " + self.cfg.xclient_attrs.strip())
        if not self.cfg.no_chunking:
            caps.append("250 CHUNKING")
        caps.append("250 X-FOO")
        await self.reply(*caps)

    async def cmd_NOOP(self, arg: str) -> None:
        await self.reply("250 2.0.0 Ok")

    async def cmd_RSET(self, arg: str) -> None:
        if arg.strip():
            await self.error("501 5.5.4 Syntax: RSET")
            return
        self.reset_transaction()
        await self.reply("250 2.0.0 Ok")

    async def cmd_QUIT(self, arg: str) -> None:
        await self.reply("221 2.0.0 Bye")
        raise Closed("quit")

    async def cmd_VRFY(self, arg: str) -> None:
        if not arg.strip():
            await self.error("501 5.5.4 Syntax: VRFY address")
            return
        await self.reply("252 2.0.0 Cannot VRFY user, but will accept message")

    async def cmd_STARTTLS(self, arg: str) -> None:
        if self.srv.tls_ctx is None:
            await self.error("502 5.5.1 Error: command not implemented")
            return
        if self.tls:
            await self.error("554 5.5.1 Error: TLS already active")
            return
        if arg.strip():
            await self.error("501 5.5.4 Syntax: STARTTLS")
            return
        await self.reply("220 2.0.0 Ready to start TLS")
        # CVE-2011-0411: bytes pipelined after STARTTLS are plaintext injection; drop them.
        injected = bytes(self.buf) + bytes(getattr(self.reader, "_buffer", b""))
        self.buf.clear()
        if hasattr(self.reader, "_buffer"):
            self.reader._buffer.clear()
        try:
            await asyncio.wait_for(
                self.writer.start_tls(self.srv.tls_ctx), max(self.cfg.idle_timeout, 1)
            )
        except (ssl.SSLError, ConnectionError, OSError, asyncio.TimeoutError) as e:
            self.record("tls", ok=False, error=str(e), injected=b64(injected))
            raise Closed("tls-failed")
        self.tls = True
        self.reset_session()
        self.record("tls", ok=True, injected=b64(injected))

    async def cmd_XCLIENT(self, arg: str) -> None:
        if self.mail_from is not None:
            await self.error("503 5.5.1 Error: MAIL transaction in progress")
            return
        attrs = {}
        for item in arg.split():
            name, eq, value = item.partition("=")
            name = name.upper()
            if not eq or name not in XCLIENT_ATTRS:
                await self.error("501 5.5.4 Bad XCLIENT attribute name: %s" % name)
                return
            attrs[name] = xtext_decode(value)
        if not attrs:
            await self.error("501 5.5.4 Syntax: XCLIENT attribute=value [attribute=value ...]")
            return
        if self.cfg.xclient_after_ehlo and not self.esmtp:
            reply = "550 5.7.0 XCLIENT not advertised: send EHLO first"
            self.record("xclient_refused", attrs=attrs, reply=reply)
            await self.error(reply)
            return
        if self.cfg.xclient_reply:
            self.record("xclient_refused", attrs=attrs, reply=self.cfg.xclient_reply)
            await self.error(self.cfg.xclient_reply)
            return
        if self.cfg.xclient_ipv4_only and attrs.get("ADDR", "").upper().startswith("IPV6:"):
            self.record("xclient_refused", attrs=attrs, reply="501")
            await self.error("501 5.5.4 Bad ADDR syntax: %s" % attrs["ADDR"])
            return
        self.xclient.update(attrs)
        self.record("xclient", attrs=attrs)
        self.reset_session()
        if "LOGIN" in attrs and attrs["LOGIN"] not in ("[UNAVAILABLE]", "[TEMPUNAVAIL]"):
            self.auth_user = attrs["LOGIN"]
        await self.greet()

    async def cmd_MAIL(self, arg: str) -> None:
        if self.helo is None:
            await self.error("503 5.5.1 Error: send HELO/EHLO first")
            return
        if self.mail_from is not None:
            await self.error("503 5.5.1 Error: nested MAIL command")
            return
        parsed = parse_path(arg, "FROM")
        if parsed is None:
            await self.error("501 5.5.4 Syntax: MAIL FROM:<address>")
            return
        addr, params = parsed
        for p in params:
            key, _, value = p.partition("=")
            if key.upper() == "SIZE":
                if not value.isdigit():
                    await self.error("501 5.5.4 Bad SIZE parameter")
                    return
                if int(value) > MAX_SIZE:
                    await self.error("552 5.3.4 Message size exceeds fixed limit")
                    return
        self.mail_from, self.mail_params = addr, params
        await self.reply("250 2.1.0 Ok")

    async def cmd_RCPT(self, arg: str) -> None:
        if self.mail_from is None:
            await self.error("503 5.5.1 Error: need MAIL command")
            return
        parsed = parse_path(arg, "TO")
        if parsed is None or not parsed[0]:
            await self.error("501 5.5.4 Syntax: RCPT TO:<address>")
            return
        addr = parsed[0]
        if len(self.rcpts) >= MAX_RCPTS:
            await self.reply("452 4.5.3 Error: too many recipients")
            return
        if any(s in addr for s in self.cfg.reject_rcpt):
            await self.reply("550 5.1.1 <%s>: Recipient address rejected: User unknown" % addr)
            return
        if any(s in addr for s in self.cfg.defer_rcpt):
            await self.reply("450 4.2.1 <%s>: Recipient address rejected: try again later" % addr)
            return
        self.rcpts.append(addr)
        await self.reply("250 2.1.5 Ok")

    async def cmd_DATA(self, arg: str) -> None:
        if self.in_bdat:
            await self.error("503 5.5.1 Error: DATA after BDAT")
            return
        if arg.strip():
            await self.error("501 5.5.4 Syntax: DATA")
            return
        if self.mail_from is None:
            await self.error("503 5.5.1 Error: need MAIL command")
            return
        if not self.rcpts:
            await self.error("554 5.5.1 Error: no valid recipients")
            return
        if self.cfg.fault == "reset-after-data-cmd":
            self.reset_connection()
        await self.reply("354 End data with <CR><LF>.<CR><LF>")
        data = await self.read_data()
        if len(data) > MAX_SIZE:
            self.reset_transaction()
            await self.reply("552 5.3.4 Error: message file too big")
            return
        await self.accept_message(data, bdat=False)

    async def read_data(self) -> bytes:
        """Reads DATA up to the strict CRLF.CRLF; returns the bytes before the final `.CRLF`.

        A line is only "end of data" when it is exactly `.CRLF` and the line before it
        ended in CRLF (the DATA command's own CRLF counts for the first line). So `\\n.\\n`,
        `\\r.\\r`, `\\n.\\r\\n`, `.\\r\\r\\n` and friends are message content here.
        """
        data = bytearray()
        prev_crlf = True
        while True:
            nl = self.buf.find(b"\n")
            if nl < 0:
                if self.cfg.fault == "die-mid-data" and len(data) + len(self.buf) >= self.cfg.fault_after:
                    self.writer.transport.abort()
                    raise Closed("fault")
                await self.fill()
                continue
            line = bytes(self.buf[: nl + 1])
            del self.buf[: nl + 1]
            if prev_crlf and line == b".\r\n":
                return bytes(data)
            if len(data) <= MAX_SIZE + 65536:
                data += line
            if self.cfg.fault == "die-mid-data" and len(data) >= self.cfg.fault_after:
                self.writer.transport.abort()
                raise Closed("fault")
            prev_crlf = line.endswith(b"\r\n")

    async def cmd_BDAT(self, arg: str) -> None:
        parts = arg.split()
        if not parts or len(parts) > 2 or not parts[0].isdigit() or (
            len(parts) == 2 and parts[1].upper() != "LAST"
        ):
            await self.error("501 5.5.4 Syntax: BDAT size [LAST]")
            return
        size, last = int(parts[0]), len(parts) == 2
        if self.cfg.fault == "reset-after-data-cmd" and self.mail_from is not None and self.rcpts:
            # As after DATA: before any of the chunk is read.
            self.reset_connection()
        # The chunk is on the wire whatever we answer: read it first.
        while len(self.buf) < size:
            if self.cfg.fault == "die-mid-data" and len(self.bdat) + len(self.buf) >= self.cfg.fault_after:
                self.writer.transport.abort()
                raise Closed("fault")
            await self.fill()
        if self.cfg.fault == "die-mid-data" and len(self.bdat) + size >= self.cfg.fault_after:
            self.writer.transport.abort()
            raise Closed("fault")
        chunk = bytes(self.buf[:size])
        del self.buf[:size]
        if self.cfg.no_chunking:
            await self.error("502 5.5.1 Error: command not implemented")
            return
        if self.mail_from is None:
            await self.error("503 5.5.1 Error: need MAIL command")
            return
        if not self.rcpts:
            await self.error("554 5.5.1 Error: no valid recipients")
            return
        self.in_bdat = True
        self.bdat += chunk
        if len(self.bdat) > MAX_SIZE:
            # RFC 3030: a refused chunk ends the transaction.
            self.reset_transaction()
            await self.reply("552 5.3.4 Error: message file too big")
            return
        if not last:
            await self.reply("250 2.0.0 %d octets received" % size)
            return
        await self.accept_message(bytes(self.bdat), bdat=True)

    async def accept_message(self, data: bytes, bdat: bool) -> None:
        qid = "R%06d%04d" % (self.sid, self.messages + 1)
        content = data if bdat else stuffing_removed(data)
        bare_lf, bare_cr = bare_endings(data)
        self.record(
            "message",
            id=qid,
            mail_from=self.mail_from,
            mail_params=self.mail_params,
            rcpts=self.rcpts,
            data_b64=b64(data),
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            content_sha256=hashlib.sha256(content).hexdigest(),
            bare_lf=bare_lf,
            bare_cr=bare_cr,
            helo=self.helo,
            esmtp=self.esmtp,
            auth_user=self.auth_user,
            xclient=self.xclient,
            tls=self.tls,
            bdat=bdat,
        )
        self.messages += 1
        self.reset_transaction()
        await self.reply("250 2.0.0 Ok: queued as %s" % qid)

    async def cmd_AUTH(self, arg: str) -> None:
        if not self.esmtp:
            await self.error("503 5.5.1 Error: send EHLO first")
            return
        if self.auth_user is not None:
            await self.error("503 5.5.1 Error: already authenticated")
            return
        if self.mail_from is not None:
            await self.error("503 5.5.1 Error: MAIL transaction in progress")
            return
        parts = arg.split(" ")
        mech = parts[0].upper()
        if len(parts) > 2 or not mech:
            await self.error("501 5.5.4 Syntax: AUTH mechanism [initial-response]")
            return
        ir = parts[1] if len(parts) == 2 else None
        handler = {
            "PLAIN": self.auth_plain,
            "LOGIN": self.auth_login,
            "CRAM-MD5": self.auth_cram_md5,
            "XOAUTH2": self.auth_xoauth2,
        }.get(mech)
        if handler is None:
            await self.error("504 5.5.4 Unsupported authentication mechanism")
            return
        if ir is not None and mech == "CRAM-MD5":
            await self.error("501 5.5.4 CRAM-MD5 takes no initial response")
            return
        try:
            user, ok = await handler(ir)
        except _AuthAbort as a:
            self.record("auth", mechanism=mech, user=None, ok=False, aborted=True)
            await self.error(a.reply)
            return
        self.record("auth", mechanism=mech, user=user, ok=ok)
        if ok:
            self.auth_user = user
            await self.reply("235 2.7.0 Authentication successful")
        else:
            await self.error("535 5.7.8 Error: authentication failed")

    async def sasl_response(self, challenge: bytes) -> bytes:
        """Sends `334 <b64 challenge>`, reads one client line; `*` aborts, bad b64 aborts."""
        await self.reply("334 " + b64(challenge))
        line, too_long = await self.readline(MAX_AUTH_LINE)
        if too_long:
            raise _AuthAbort("500 5.5.6 Error: authentication line too long")
        if not line.endswith(b"\r\n"):
            raise _AuthAbort("500 5.5.2 Error: bare <LF> received")
        return self.decode_response(line[:-2])

    def decode_response(self, raw) -> bytes:
        if isinstance(raw, str):
            raw = raw.encode("ascii", "replace")
        if raw == b"*":
            raise _AuthAbort("501 5.7.0 Error: authentication aborted")
        if raw == b"=":
            return b""
        try:
            return base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise _AuthAbort("501 5.5.2 Error: cannot decode response")

    def password_ok(self, user: str, password: str) -> bool:
        want = self.cfg.users.get(user)
        return want is not None and hmac.compare_digest(want.encode(), password.encode())

    async def auth_plain(self, ir):
        resp = self.decode_response(ir) if ir is not None else await self.sasl_response(b"")
        parts = resp.split(b"\0")
        if len(parts) != 3:
            return None, False
        user = parts[1].decode("utf-8", "replace")
        return user, self.password_ok(user, parts[2].decode("utf-8", "replace"))

    async def auth_login(self, ir):
        user_b = self.decode_response(ir) if ir is not None else await self.sasl_response(b"Username:")
        pw_b = await self.sasl_response(b"Password:")
        user = user_b.decode("utf-8", "replace")
        return user, self.password_ok(user, pw_b.decode("utf-8", "replace"))

    async def auth_cram_md5(self, ir):
        challenge = ("<%d.%d@%s>" % (os.getpid(), time.time_ns(), self.cfg.hostname)).encode()
        resp = (await self.sasl_response(challenge)).decode("utf-8", "replace")
        user, _, digest = resp.rpartition(" ")
        want = self.cfg.users.get(user)
        if want is None:
            return user, False
        expect = hmac.new(want.encode(), challenge, hashlib.md5).hexdigest()
        return user, hmac.compare_digest(expect, digest.lower())

    async def auth_xoauth2(self, ir):
        resp = self.decode_response(ir) if ir is not None else await self.sasl_response(b"")
        fields = dict(
            f.split("=", 1) for f in resp.decode("utf-8", "replace").split("\x01") if "=" in f
        )
        user = fields.get("user")
        token = fields.get("auth", "")
        ok = (
            user is not None
            and token.startswith("Bearer ")
            and self.password_ok(user, token[len("Bearer ") :])
        )
        if not ok:
            # Google's failure round trip: 334 <b64 JSON>, the client answers an empty
            # line, then the final 535.
            err = json.dumps({"status": "400", "schemes": "Bearer", "scope": "https://mail.google.com/"})
            await self.reply("334 " + b64(err.encode()))
            line, _ = await self.readline(MAX_AUTH_LINE)
            if line.rstrip(b"\r\n") == b"*":
                raise _AuthAbort("501 5.7.0 Error: authentication aborted")
        return user, ok


class _AuthAbort(Exception):
    def __init__(self, reply: str):
        super().__init__(reply)
        self.reply = reply


class Server:
    """Accepts sessions, owns the TLS context, the record file and the shutdown."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.rec = Recorder(cfg.record)
        self.tls_ctx = None
        if cfg.cert:
            self.tls_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self.tls_ctx.load_cert_chain(cfg.cert, cfg.key)
        self.ids = itertools.count(1)
        self.tasks: set[asyncio.Task] = set()

    async def handle(self, reader, writer) -> None:
        task = asyncio.current_task()
        self.tasks.add(task)
        try:
            await Session(self, next(self.ids), reader, writer, self.cfg.implicit_tls).run()
        except asyncio.CancelledError:
            pass
        except Exception as e:  # a bug here must not kill the server; make it visible
            print("recorder: session error: %r" % (e,), file=sys.stderr, flush=True)
        finally:
            self.tasks.discard(task)

    async def main(self) -> None:
        server = await asyncio.start_server(
            self.handle,
            self.cfg.host,
            self.cfg.port,
            ssl=self.tls_ctx if self.cfg.implicit_tls else None,
            ssl_handshake_timeout=10 if self.cfg.implicit_tls else None,
            limit=1 << 20,
        )
        port = server.sockets[0].getsockname()[1]
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        print("READY %d" % port, flush=True)
        await stop.wait()
        server.close()
        for t in list(self.tasks):
            t.cancel()
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=5)
        self.rec.close()


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--hostname", default="upstream.test", help="name in greeting and replies")
    ap.add_argument("--record", help="append one JSON line per event to this file")
    ap.add_argument("--cert", help="PEM certificate: enables STARTTLS")
    ap.add_argument("--key", help="PEM private key for --cert")
    ap.add_argument("--implicit-tls", action="store_true", help="TLS from the first byte")
    ap.add_argument("--user", action="append", default=[], metavar="NAME:PASSWORD")
    ap.add_argument("--reject-rcpt", action="append", default=[], metavar="SUBSTRING")
    ap.add_argument("--defer-rcpt", action="append", default=[], metavar="SUBSTRING")
    ap.add_argument(
        "--fault",
        default="none",
        choices=["none", "refuse", "die-mid-data", "garbage", "slow", "reset-after-data-cmd"],
    )
    ap.add_argument("--fault-after", type=int, default=1024, help="die-mid-data: bytes of DATA")
    ap.add_argument("--delay", type=float, default=1.0, help="slow: seconds before every reply")
    ap.add_argument("--idle-timeout", type=float, default=60.0, help="seconds per read")
    ap.add_argument(
        "--proxy-protocol", action="store_true", help="read a PROXY v2 header before the greeting"
    )
    ap.add_argument(
        "--no-chunking", action="store_true", help="leave CHUNKING out of EHLO and refuse BDAT (502)"
    )
    ap.add_argument(
        "--no-ehlo", action="store_true", help="answer EHLO 502, as a server that knows only HELO"
    )
    ap.add_argument("--proxy-timeout", type=float, default=3.0, help="seconds to wait for it")
    ap.add_argument("--proxy-missing-reply", default="", help="reply when no header came in time")
    ap.add_argument(
        "--proxy-missing-503",
        action="store_true",
        help="no header in time: greet, then 503 to every command but QUIT (Exim hosts_proxy)",
    )
    ap.add_argument("--xclient-attrs", default=POSTFIX_XCLIENT, help="listed after XCLIENT")
    ap.add_argument("--xclient-reply", default="", help="answer every XCLIENT with this")
    ap.add_argument("--xclient-ipv4-only", action="store_true", help="501 to an IPv6 ADDR")
    ap.add_argument("--xclient-after-ehlo", action="store_true",
                    help="550 to an XCLIENT that does not follow an EHLO")
    a = ap.parse_args(argv)
    if not ipaddress.ip_address(a.host).is_loopback:
        ap.error("refusing non-loopback address %s" % a.host)
    if bool(a.cert) != bool(a.key):
        ap.error("--cert and --key go together")
    if a.implicit_tls and not a.cert:
        ap.error("--implicit-tls needs --cert and --key")
    if a.proxy_protocol and a.implicit_tls:
        ap.error("--proxy-protocol is for plain listeners only")
    users = {}
    for u in a.user:
        name, sep, pw = u.partition(":")
        if not sep or not name:
            ap.error("--user wants NAME:PASSWORD, got %r" % u)
        users[name] = pw
    a.users = users
    return a


def main() -> int:
    cfg = parse_args()
    asyncio.run(Server(cfg).main())
    return 0


if __name__ == "__main__":
    sys.exit(main())
