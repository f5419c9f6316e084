//! What floodgate writes about a client from client-controlled text (HELO, PTR name, user):
//! the XCLIENT line stays within 512 octets with CRLF only at its end, and the Received
//! line is CRLF-terminated printable ASCII, folded with tabs, every line within 998 octets.
#![no_main]

use std::net::IpAddr;

use floodgate::smtp::received::{received_header, ReceivedInfo};
use floodgate::smtp::xclient::{xclient_command, ClientName, XclientAttrs, XCLIENT_MAX};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.split('\u{0}');
    let helo = parts.next().unwrap_or("");
    let name = parts.next().unwrap_or("");
    let user = parts.next().unwrap_or("");
    let v6 = data.first().is_some_and(|b| b & 1 == 1);
    let addr: IpAddr = if v6 {
        "2001:db8::9".parse().unwrap()
    } else {
        "192.0.2.9".parse().unwrap()
    };
    let known = ClientName::Known(name.to_string());
    let attrs = XclientAttrs {
        addr,
        port: 4242,
        name: &known,
        reverse_name: &known,
        helo: Some(helo),
        proto: "ESMTP",
        dest: Some((addr, 587).into()),
        login: None,
    };
    let all: Vec<String> = "NAME ADDR PROTO HELO REVERSE_NAME PORT LOGIN DESTADDR DESTPORT"
        .split(' ')
        .map(String::from)
        .collect();
    let line = xclient_command(&attrs, &all);
    assert!(line.len() <= XCLIENT_MAX && line.ends_with(b"\r\n"));
    let body = &line[..line.len() - 2];
    assert!(!body.contains(&b'\r') && !body.contains(&b'\n'));

    let info = ReceivedInfo {
        helo: Some(helo),
        name: Some(name),
        addr,
        by: "floodgate.test",
        ehlo: v6,
        tls: Some(("TLSv1.3", "TLS_AES_128_GCM_SHA256")),
        authenticated: true,
        user: Some(user),
        time: i64::from(data.len() as u32) * 1_000_003,
    };
    let header = received_header(&info);
    assert!(header.starts_with(b"Received: ") && header.ends_with(b"\r\n"));
    let header = String::from_utf8(header).expect("ASCII");
    for (i, l) in header.split_terminator("\r\n").enumerate() {
        assert!(l.len() <= 998);
        assert!(i == 0 || l.starts_with('\t'));
        assert!(l.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b)));
    }
});
