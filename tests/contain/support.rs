//! What the containment tests share: one authenticated session sending numbered messages,
//! and the recorder's dot-stuffed data read back.

use crate::common::*;

/// One session authenticated as [`USER`] sending `n` messages as fast as the replies come,
/// message `i` to `r{i}@example.com` with `body(i)` (dot-stuffed here); the final reply
/// (code, text) of each. The session goes on after any of them.
pub fn send_numbered(
    fg: &Floodgate,
    n: usize,
    body: impl Fn(usize) -> Vec<u8>,
) -> Vec<(u16, String)> {
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    assert_eq!(c.ehlo("laptop.test").code, 250);
    let token = b64_encode(format!("\0{USER}\0{PASSWORD}").as_bytes());
    assert_eq!(c.cmd(&format!("AUTH PLAIN {token}")).code, 235);
    let mut out = Vec::new();
    for i in 0..n {
        assert_eq!(c.cmd("MAIL FROM:<alice@example.org>").code, 250);
        assert_eq!(c.cmd(&format!("RCPT TO:<r{i}@example.com>")).code, 250);
        assert_eq!(c.cmd("DATA").code, 354);
        let mut wire = Vec::new();
        for line in body(i).split_inclusive(|&b| b == b'\n') {
            if line.starts_with(b".") {
                wire.push(b'.');
            }
            wire.extend_from_slice(line);
        }
        wire.extend_from_slice(b".\r\n");
        c.send(&wire);
        let r = c.reply();
        out.push((r.code, r.text()));
    }
    assert_eq!(c.cmd("QUIT").code, 221);
    out
}

/// The message a recorded transaction carried: a BDAT chunk is the message itself; DATA's
/// wire form loses the stuffing dot of each line beginning with '.'.
pub fn content(m: &Message) -> Vec<u8> {
    if m.bdat {
        return m.data.clone();
    }
    let mut out = Vec::new();
    for line in m.data.split_inclusive(|&b| b == b'\n') {
        out.extend_from_slice(line.strip_prefix(b".").unwrap_or(line));
    }
    out
}
