//! `non_smtpd_milters = floodgate`: a web application's loop, mail handed to `sendmail`
//! by one local user, is limited, restricted and held per local user; another local user's
//! mail flows.

use crate::common;
use crate::support::{free_port, start_milter, wait_queue};

use common::postfix::{local_user, token, Postfix, PostfixConfig};

const LIMITS: &str = r#"
[[limit]]
name = "per-local-user"
when = "authenticated"
count = "messages"
key = "${authenticated_id}"
rate = "3 / 1h"
burst = "3"
action = "restrict"
while_restricted = "hold"
"#;

#[test]
fn a_local_users_loop_is_held_while_another_users_mail_flows() {
    let port = free_port();
    let milter = format!("inet:127.0.0.1:{port}");
    let pf = Postfix::start(&PostfixConfig::default().milters("", &milter, "tempfail"));
    let _log = pf.log_on_panic();
    let fg = start_milter(&pf, port, LIMITS);
    let tok = token("milter-local");
    let (web, other) = (local_user("nobody"), local_user("daemon"));
    for i in 0..3 {
        pf.sendmail_as(&web, "www@site.test", &format!("r{i}-{tok}@dest.test"), &format!("{tok}-web-{i}"));
    }
    assert_eq!(pf.wait_messages(&format!("{tok}-web"), 3).len(), 3, "{}", fg.stderr());
    for i in 3..6 {
        pf.sendmail_as(&web, "www@site.test", &format!("r{i}-{tok}@dest.test"), &format!("{tok}-web-{i}"));
    }
    for i in 0..2 {
        pf.sendmail_as(&other, "cron@site.test", &format!("o{i}-{tok}@dest.test"), &format!("{tok}-other-{i}"));
    }
    assert_eq!(pf.wait_messages(&format!("{tok}-other"), 2).len(), 2, "{}", fg.stderr());
    let q = wait_queue(&pf, "held the loop's later messages", |q| {
        q.iter().filter(|m| m.queue_name == "hold").count() >= 2
    });
    eprintln!("{q:?}\n{}", fg.stderr());
    assert!(q.iter().filter(|m| m.queue_name == "hold").all(|m| m.sender == "www@site.test"), "{q:?}");
    assert_eq!(pf.messages_with(&format!("{tok}-web")).len(), 3);
    let err = fg.stderr();
    assert!(err.contains("user=nobody") || err.contains("user=\"nobody\""), "{err}");
}
