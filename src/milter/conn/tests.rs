//! The connection loop over an in-memory stream: a whole conversation, and every bad
//! packet ending the connection with its own error and no answer (Postfix then applies
//! `milter_default_action`).

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{Conn, ConnError};
use crate::milter::events;
use crate::milter::session::Context;
use crate::policy::AllowAll;
use crate::postfix::milter::{
    actions, next_packet, steps, write_packet, MilterError, Wanted, VERSION,
};

/// Every event answered but header fields and body chunks, as for limits at every stage.
const EVERY_EVENT: Wanted<'static> = Wanted {
    needed_actions: 0,
    optional_actions: actions::ADD_HEADERS | actions::QUARANTINE | actions::SET_MACRO_LIST,
    steps: events::ALWAYS,
    macros: events::MACROS,
};

fn ctx() -> Context {
    ctx_wanting(EVERY_EVENT)
}

fn ctx_wanting(wanted: Wanted<'static>) -> Context {
    Context {
        policy: Arc::new(AllowAll),
        identity: Default::default(),
        max_message_size: 1 << 20,
        name: "test".into(),
        postfix: None,
        wanted,
    }
}

/// Postfix 3.7's offer: version 6, every action, every step.
fn offer() -> Vec<u8> {
    let mut data = Vec::new();
    for n in [VERSION, 0x1ff, 0x1f_ffff] {
        data.extend_from_slice(&n.to_be_bytes());
    }
    let mut out = Vec::new();
    write_packet(&mut out, b'O', &[&data]);
    out
}

/// Runs a connection on `input` (then end of input); returns how it ended and what it
/// answered, packet by packet (code, data).
async fn converse(input: Vec<u8>) -> (Result<(), ConnError>, Vec<(u8, Vec<u8>)>) {
    converse_with(ctx(), input).await
}

/// As [`converse`], with `ctx`.
async fn converse_with(
    ctx: Context,
    input: Vec<u8>,
) -> (Result<(), ConnError>, Vec<(u8, Vec<u8>)>) {
    let (mut postfix, floodgate) = tokio::io::duplex(1 << 16);
    let task = tokio::spawn(Conn::new(floodgate, ctx).run());
    postfix.write_all(&input).await.unwrap();
    postfix.shutdown().await.unwrap();
    let mut got = Vec::new();
    postfix.read_to_end(&mut got).await.unwrap();
    let ended = task.await.unwrap();
    let mut answers = Vec::new();
    let mut at = 0;
    while let Some((p, used)) = next_packet(&got[at..]).unwrap() {
        answers.push((p.code, p.data.to_vec()));
        at += used;
    }
    assert_eq!(at, got.len(), "a partial answer");
    (ended, answers)
}

fn packet(code: u8, parts: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    write_packet(&mut out, code, &[&parts.concat()]);
    out
}

/// The connect event of a client named `name` at IPv4 `address`, port `port`.
fn connect(name: &str, port: u16, address: &str) -> Vec<u8> {
    packet(
        b'C',
        &[
            format!("{name}\0").as_bytes(),
            b"4",
            &port.to_be_bytes(),
            format!("{address}\0").as_bytes(),
        ],
    )
}

/// One message of an authenticated session, as Postfix sends it with every event.
fn whole_message() -> Vec<u8> {
    let mut input = offer();
    input.extend(packet(b'D', &[b"C", b"j\0mx.example\0"]));
    input.extend(connect("client.example", 25, "192.0.2.7"));
    input.extend(packet(b'H', &[b"client.example\0"]));
    input.extend(packet(b'D', &[b"M", b"{auth_authen}\0Alice\0i\0ABC123\0"]));
    input.extend(packet(b'M', &[b"<a@client.example>\0"]));
    input.extend(packet(b'R', &[b"<b@dest.example>\0"]));
    input.extend(packet(b'T', &[]));
    input.extend(packet(b'L', &[b"Subject\0", b" hi\0"]));
    input.extend(packet(b'N', &[]));
    input.extend(packet(b'B', &[b"hello\r\n"]));
    input.extend(packet(b'E', &[]));
    input.extend(packet(b'Q', &[]));
    input
}

#[tokio::test]
async fn a_whole_message_is_answered_where_postfix_waits() {
    let (ended, answers) = converse(whole_message()).await;
    ended.unwrap();
    let codes: Vec<u8> = answers.iter().map(|a| a.0).collect();
    // Options; connect, HELO, MAIL, RCPT, DATA; nothing for the header, end of headers and
    // body (no-reply steps); end of message.
    assert_eq!(codes, b"Occcccc");
    let agreed = &answers[0].1;
    let steps_agreed = u32::from_be_bytes(agreed[8..12].try_into().unwrap());
    assert_eq!(steps_agreed, EVERY_EVENT.steps);
    assert!(steps_agreed & steps::NO_REPLY_BODY != 0);
    // The macro lists follow: MAIL's asks for the login.
    assert!(agreed.windows(13).any(|w| w == b"{auth_authen}"));
}

#[tokio::test]
async fn without_limits_only_the_end_of_the_message_is_answered() {
    let wanted = events::wanted(&crate::policy::model::PolicyModel::default(), false);
    let (ended, answers) = converse_with(ctx_wanting(wanted), whole_message()).await;
    ended.unwrap();
    let codes: Vec<u8> = answers.iter().map(|a| a.0).collect();
    // Options; end of message. Connect, HELO, MAIL, RCPT and DATA are not waited for.
    assert_eq!(codes, b"Oc");
    let agreed = &answers[0].1;
    let steps_agreed = u32::from_be_bytes(agreed[8..12].try_into().unwrap());
    assert_eq!(steps_agreed, wanted.steps);
    for s in [
        steps::NO_REPLY_CONNECT,
        steps::NO_REPLY_MAIL,
        steps::NO_DATA,
        steps::NO_HEADERS,
        steps::NO_BODY,
    ] {
        assert_ne!(steps_agreed & s, 0, "step 0x{s:x}");
    }
    // Only the macros read are asked: the three lists of events::MACROS, nothing else.
    let lists: usize = events::MACROS.iter().map(|(_, l)| 4 + l.len() + 1).sum();
    assert_eq!(agreed.len(), 12 + lists);
}

#[tokio::test]
async fn abort_and_next_connection_keep_the_connection() {
    let mut input = offer();
    input.extend(packet(b'M', &[b"<a@x.example>\0"]));
    input.extend(packet(b'A', &[]));
    input.extend(packet(b'K', &[]));
    input.extend(connect("c", 1, "192.0.2.1"));
    let (ended, answers) = converse(input).await;
    ended.unwrap();
    let codes: Vec<u8> = answers.iter().map(|a| a.0).collect();
    assert_eq!(codes, b"Occ");
}

#[tokio::test]
async fn a_packet_of_length_zero_ends_the_connection() {
    let mut input = offer();
    input.extend_from_slice(&0u32.to_be_bytes());
    let (ended, answers) = converse(input).await;
    let e = ended.unwrap_err();
    assert!(
        matches!(e, ConnError::Protocol(MilterError::EmptyPacket)),
        "{e}"
    );
    assert_eq!(e.to_string(), "milter packet of length 0");
    assert_eq!(answers.len(), 1, "only the options were answered");
}

#[tokio::test]
async fn a_packet_too_long_is_refused_from_its_length() {
    let mut input = offer();
    input.extend_from_slice(&(64u32 << 20).to_be_bytes());
    input.push(b'B');
    let (ended, _) = converse(input).await;
    let e = ended.unwrap_err();
    assert!(
        matches!(e, ConnError::Protocol(MilterError::TooLong(_))),
        "{e}"
    );
    assert!(e.to_string().contains("over the limit"), "{e}");
}

#[tokio::test]
async fn an_unknown_command_ends_the_connection() {
    let mut input = offer();
    input.extend(packet(b'Z', &[]));
    let (ended, _) = converse(input).await;
    let e = ended.unwrap_err();
    assert_eq!(e.to_string(), "unknown milter command 'Z'");
}

#[tokio::test]
async fn a_command_before_the_negotiation_is_refused() {
    let (ended, answers) = converse(packet(b'H', &[b"x\0"])).await;
    let e = ended.unwrap_err();
    assert_eq!(
        e.to_string(),
        "milter command 'H' before the option negotiation"
    );
    assert!(answers.is_empty());
}

#[tokio::test]
async fn an_old_version_is_refused() {
    let mut data = Vec::new();
    for n in [1u32, 0x1ff, 0] {
        data.extend_from_slice(&n.to_be_bytes());
    }
    let (ended, answers) = converse(packet(b'O', &[&data])).await;
    let e = ended.unwrap_err();
    assert!(e.to_string().contains("version 1"), "{e}");
    assert!(answers.is_empty());
}

#[tokio::test]
async fn a_malformed_connect_ends_the_connection() {
    let mut input = offer();
    input.extend(connect("c", 1, "not-an-address"));
    let (ended, answers) = converse(input).await;
    let e = ended.unwrap_err();
    assert!(
        e.to_string().contains("malformed milter connect command"),
        "{e}"
    );
    assert_eq!(answers.len(), 1);
}

#[tokio::test]
async fn a_cut_packet_at_the_end_is_no_error() {
    let mut input = offer();
    input.extend_from_slice(&packet(b'H', &[b"client\0"])[..6]);
    let (ended, answers) = converse(input).await;
    ended.unwrap();
    assert_eq!(answers.len(), 1);
}

/// A policy that refuses every event at one stage (`451 4.7.1 …`), as a restricted key's
/// mail or a store failure is refused.
struct RefuseAt(crate::policy::Stage);

impl crate::policy::Policy for RefuseAt {
    fn session(&self) -> Box<dyn crate::policy::SessionPolicy> {
        Box::new(RefuseAt(self.0))
    }
}

impl crate::policy::SessionPolicy for RefuseAt {
    fn check<'a>(
        &'a mut self,
        stage: crate::policy::Stage,
        _facts: &'a crate::policy::Facts,
    ) -> crate::policy::BoxFuture<'a, crate::policy::Verdict> {
        let refuse = stage == self.0;
        Box::pin(async move {
            if refuse {
                crate::policy::Verdict::Reply(crate::smtp::reply::Reply::new(
                    451,
                    "4.7.1 alice is restricted",
                ))
            } else {
                crate::policy::Verdict::Continue
            }
        })
    }
}

/// A context refusing at `stage`, with `wanted`'s events.
fn refusing(stage: crate::policy::Stage, wanted: Wanted<'static>) -> Context {
    Context {
        policy: Arc::new(RefuseAt(stage)),
        ..ctx_wanting(wanted)
    }
}

/// The answers' codes and the reply-code answers' texts.
fn codes_and_replies(answers: &[(u8, Vec<u8>)]) -> (Vec<u8>, Vec<String>) {
    let codes = answers.iter().map(|a| a.0).collect();
    let replies = answers
        .iter()
        .filter(|a| a.0 == b'y')
        .map(|a| {
            String::from_utf8_lossy(&a.1)
                .trim_end_matches('\0')
                .to_string()
        })
        .collect();
    (codes, replies)
}

#[tokio::test]
async fn a_refusal_at_mail_postfix_did_not_wait_for_is_given_at_the_end() {
    let wanted = events::wanted(&crate::policy::model::PolicyModel::default(), false);
    assert_ne!(wanted.steps & steps::NO_REPLY_MAIL, 0);
    let ctx = refusing(crate::policy::Stage::Mail, wanted);
    let (ended, answers) = converse_with(ctx, whole_message()).await;
    ended.unwrap();
    let (codes, replies) = codes_and_replies(&answers);
    // Options; nothing at MAIL, RCPT or DATA; the refusal at the end of the message.
    assert_eq!(codes, b"Oy");
    assert_eq!(replies, ["451 4.7.1 alice is restricted"]);
}

#[tokio::test]
async fn a_refusal_owed_goes_to_the_next_event_postfix_waits_for_and_ends_with_it() {
    // RCPT waited for, MAIL not: the refusal at MAIL answers each RCPT, the message is not
    // judged; after the abort the next transaction is judged afresh.
    let wanted = Wanted {
        steps: events::ALWAYS
            | steps::NO_REPLY_CONNECT
            | steps::NO_REPLY_HELO
            | steps::NO_REPLY_MAIL
            | steps::NO_REPLY_DATA,
        ..EVERY_EVENT
    };
    let ctx = refusing(crate::policy::Stage::Mail, wanted);
    let mut input = whole_message();
    input.truncate(input.len() - packet(b'Q', &[]).len());
    let cut = input.len() - packet(b'E', &[]).len();
    input.truncate(cut);
    input.extend(packet(b'R', &[b"<c@dest.example>\0"]));
    input.extend(packet(b'A', &[]));
    input.extend(packet(b'K', &[]));
    input.extend(connect("c", 1, "192.0.2.1"));
    input.extend(packet(b'R', &[b"<d@dest.example>\0"]));
    let (ended, answers) = converse_with(ctx, input).await;
    ended.unwrap();
    let (codes, replies) = codes_and_replies(&answers);
    // Two RCPTs refused; the RCPT of the next SMTP session (no MAIL refused there) goes on.
    assert_eq!(codes, b"Oyyc");
    assert_eq!(replies.len(), 2);
}

#[tokio::test]
async fn a_refusal_at_connect_lasts_the_smtp_session() {
    let wanted = events::wanted(&crate::policy::model::PolicyModel::default(), false);
    let ctx = refusing(crate::policy::Stage::Connect, wanted);
    let mut input = whole_message();
    input.truncate(input.len() - packet(b'Q', &[]).len());
    // A second transaction in the same SMTP session: refused at its end too.
    input.extend(packet(b'M', &[b"<a@client.example>\0"]));
    input.extend(packet(b'R', &[b"<b@dest.example>\0"]));
    input.extend(packet(b'E', &[]));
    let (ended, answers) = converse_with(ctx, input).await;
    ended.unwrap();
    let (codes, _) = codes_and_replies(&answers);
    assert_eq!(codes, b"Oyy");
}
