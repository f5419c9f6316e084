//! `non_smtpd_milters = floodgate`: a web application's loop, mail handed to `sendmail`
//! by one local user, is limited, restricted and held in Postfix's hold queue; another
//! local user's mail flows. The local user is the envelope sender Postfix's `sendmail`
//! gives mail without `-f`: the login at `$myorigin`.

use crate::common;
use crate::support::{free_port, start_milter, wait_queue};

use common::postfix::local::local_user;
use common::postfix::{token, Postfix, PostfixConfig};

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
    let send = |u, who: &str, i: usize| {
        pf.sendmail_as(
            u,
            None,
            &format!("{who}{i}-{tok}@dest.test"),
            &format!("{tok}-{who}-{i}"),
        )
    };
    for i in 0..3 {
        send(&web, "web", i);
    }
    assert_eq!(
        pf.wait_messages(&format!("{tok}-web"), 3).len(),
        3,
        "{}",
        fg.stderr()
    );
    // The fourth message crosses the limit: the user is restricted and that message and
    // every later one is held.
    for i in 3..6 {
        send(&web, "web", i);
    }
    for i in 0..2 {
        send(&other, "cron", i);
    }
    assert_eq!(
        pf.wait_messages(&format!("{tok}-cron"), 2).len(),
        2,
        "{}",
        fg.stderr()
    );
    let q = wait_queue(&pf, "held the loop's three later messages", |q| {
        q.iter().filter(|m| m.queue_name == "hold").count() == 3
    });
    assert!(
        q.iter()
            .all(|m| m.queue_name == "hold" && m.sender == "nobody@smarthost.test"),
        "{q:?}"
    );
    pf.wait_log("holding on floodgate's word", |l| {
        l.contains("milter triggers HOLD action")
    });
    assert_eq!(pf.messages_with(&format!("{tok}-web")).len(), 3);
    let err = fg.stderr();
    assert!(
        err.contains("key restricted key=nobody@smarthost.test"),
        "{err}"
    );
    assert!(!err.contains("key=daemon@smarthost.test limit"), "{err}");
}

/// floodgate down: Postfix's cleanup tempfails the local message (`milter_default_action
/// = tempfail`), and pickup leaves it in the maildrop queue; once floodgate runs, the next
/// pickup delivers it: nothing lost, nothing passed unfiltered.
#[test]
fn local_mail_waits_in_the_maildrop_while_floodgate_is_down() {
    let port = free_port();
    let milter = format!("inet:127.0.0.1:{port}");
    let pf = Postfix::start(&PostfixConfig::default().milters("", &milter, "tempfail"));
    let _log = pf.log_on_panic();
    let tok = token("milter-local-down");
    let web = local_user("nobody");
    pf.sendmail_as(
        &web,
        None,
        &format!("a-{tok}@dest.test"),
        &format!("{tok}-a"),
    );
    pf.wait_log("refusing it for now", |l| {
        l.contains("milter-reject")
            && l.contains("4.7.1")
            && l.contains("from localhost[127.0.0.1]")
    });
    let q = wait_queue(&pf, "kept the message", |q| {
        q.iter().any(|m| m.queue_name == "maildrop")
    });
    assert!(pf.messages_with(&tok).is_empty(), "{q:?}");

    let fg = start_milter(&pf, port, LIMITS);
    // The next submission wakes pickup, which takes the whole maildrop queue again.
    pf.sendmail_as(
        &web,
        None,
        &format!("b-{tok}@dest.test"),
        &format!("{tok}-b"),
    );
    assert_eq!(pf.wait_messages(&tok, 2).len(), 2, "{}", fg.stderr());
    pf.settle();
    assert_eq!(pf.messages_with(&format!("{tok}-a")).len(), 1);
}
