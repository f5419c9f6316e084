//! Bad requests on the policy socket: each answered `DUNNO` with floodgate's warning, the
//! connection going on with the next request, which is judged as usual.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::common;
use crate::support::*;

/// One recipient per transaction and account: a second in the same transaction is
/// deferred, which shows a good request judged after each bad one.
const ONE: &str = r#"
[[limit]]
name = "one"
when = "authenticated"
count = "recipients"
key = "${authenticated_id}"
rate = "1 / 1h"
burst = "1"
action = "defer"
"#;

fn rcpt(instance: &str, n: usize) -> String {
    format!(
        "request=smtpd_access_policy\nprotocol_state=RCPT\nprotocol_name=ESMTP\n\
         client_address=192.0.2.1\nclient_port=5000\nsasl_username=Carol\n\
         sender=carol@example.org\nrecipient=r{n}@example.net\ninstance={instance}\n\
         x_unknown_attribute=ignored\n\n"
    )
}

fn answer(r: &mut BufReader<UnixStream>) -> String {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let mut empty = String::new();
    r.read_line(&mut empty).unwrap();
    assert_eq!(empty, "\n", "after {line:?}");
    line.trim_end().to_string()
}

#[test]
fn bad_requests_are_answered_dunno_and_the_connection_goes_on() {
    let pf = common::postfix::Postfix::start(&common::postfix::PostfixConfig::default());
    let dir = socket_dir();
    let socket = socket_in(&dir);
    let fg = start_service(&pf, &socket, ONE);
    let s = UnixStream::connect(&socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);

    // Good, with an unknown attribute: judged (the first recipient goes on).
    w.write_all(rcpt("i1", 0).as_bytes()).unwrap();
    assert_eq!(answer(&mut r), "action=DUNNO");
    // A line without '=': the whole request is skipped and answered DUNNO.
    w.write_all(
        b"request=smtpd_access_policy\nthis line has no equals sign\nprotocol_state=RCPT\n\n",
    )
    .unwrap();
    assert_eq!(answer(&mut r), "action=DUNNO");
    // An oversized line (64 KiB): answered DUNNO once its request ends.
    let mut big = b"request=smtpd_access_policy\nccert_subject=".to_vec();
    big.extend(std::iter::repeat_n(b'x', 64 * 1024));
    big.extend_from_slice(b"\nprotocol_state=RCPT\n\n");
    w.write_all(&big).unwrap();
    assert_eq!(answer(&mut r), "action=DUNNO");
    // Too many attributes.
    let mut many = String::from("request=smtpd_access_policy\n");
    for i in 0..200 {
        many.push_str(&format!("a{i}=v\n"));
    }
    many.push('\n');
    w.write_all(many.as_bytes()).unwrap();
    assert_eq!(answer(&mut r), "action=DUNNO");
    // Not an access policy request.
    w.write_all(b"request=something_else\nprotocol_state=RCPT\n\n")
        .unwrap();
    assert_eq!(answer(&mut r), "action=DUNNO");
    // The same transaction's second recipient is judged: deferred with the limit's text.
    w.write_all(rcpt("i1", 1).as_bytes()).unwrap();
    let a = answer(&mut r);
    assert!(a.starts_with("action=DEFER_IF_PERMIT 4.7.1 "), "{a}");

    let err = fg.stderr();
    for why in [
        "policy request line without '='",
        "policy request line longer than 8192 octets",
        "policy request with more than 128 attributes",
        "not request=smtpd_access_policy",
    ] {
        assert!(err.contains(why), "no {why:?} in\n{err}");
    }
}
