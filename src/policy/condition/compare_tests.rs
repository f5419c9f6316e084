//! Comparisons between two subjects (`sender != user`, `sender_domain == user_domain`).

use super::*;
use proptest::prelude::*;

fn parse(t: &str) -> Result<Condition, ConditionError> {
    Condition::parse(t, &|n| n == "trusted")
}

fn facts(user: Option<&str>, sender: Option<&str>) -> Facts {
    Facts {
        client_ip: Some("10.1.1.1".parse().unwrap()),
        listener: "submission".into(),
        user: user.map(str::to_string),
        sender: sender.map(str::to_string),
        ..Facts::default()
    }
}

fn eval(t: &str, f: &Facts) -> bool {
    parse(t).unwrap().eval(f, &Lists::default())
}

#[test]
fn parses_subject_pairs() {
    assert_eq!(
        parse("sender != user").unwrap(),
        Condition::Compare(Subject::Sender, Subject::User, false)
    );
    assert_eq!(
        parse("sender_domain == user_domain").unwrap(),
        Condition::Compare(Subject::SenderDomain, Subject::UserDomain, true)
    );
    // The long Exim-style names work too, and a subject may be compared with itself.
    assert_eq!(
        parse("sender_address != authenticated_id").unwrap(),
        Condition::Compare(Subject::Sender, Subject::User, false)
    );
    assert!(parse("user == user").is_ok());
    assert!(parse("authenticated && !(sender_domain in trusted) && sender != user").is_ok());
    assert!(parse("user_domain == \"example.org\"").is_ok());
    assert!(parse("user_domain in trusted").is_ok());
}

#[test]
fn sender_against_login() {
    let same = facts(Some("Alice@Example.org"), Some("alice@example.ORG"));
    assert!(eval("sender == user", &same));
    assert!(!eval("sender != user", &same));
    let other = facts(Some("alice@example.org"), Some("bob@example.org"));
    assert!(eval("sender != user", &other));
    assert!(!eval("sender == user", &other));
    assert!(eval("sender_domain == user_domain", &other));
    assert!(!eval("sender_domain != user_domain", &other));
    let foreign = facts(Some("alice@example.org"), Some("alice@EXAMPLE.net"));
    assert!(eval("sender_domain != user_domain", &foreign));
    assert!(eval("user_domain == \"Example.Org\"", &foreign));
}

#[test]
fn missing_or_empty_values_compare_false_both_ways() {
    let cases = [
        facts(None, Some("alice@example.org")),
        facts(Some("alice@example.org"), None),
        // The null sender: nothing to compare.
        facts(Some("alice@example.org"), Some("")),
        // A login without a domain has no user_domain.
        facts(Some("alice"), Some("alice@example.org")),
    ];
    for f in &cases {
        assert!(!eval("sender_domain == user_domain", f), "{f:?}");
        assert!(!eval("sender_domain != user_domain", f), "{f:?}");
    }
    for f in &cases[..3] {
        assert!(!eval("sender == user", f), "{f:?}");
        assert!(!eval("sender != user", f), "{f:?}");
        // The negation of the whole comparison is still its negation.
        assert!(eval("!(sender != user)", f), "{f:?}");
    }
    // A bare login is compared whole: it is not the address.
    let bare = &cases[3];
    assert!(eval("sender != user", bare));
    assert!(!eval("user_domain != user_domain", &facts(Some("a"), None)));
}

#[test]
fn bad_comparisons_say_what_is_wrong() {
    let e = parse("sender != usr").unwrap_err();
    assert_eq!(e.at, 10);
    assert!(e.message.contains("`usr` after `!=` is not quoted"), "{e}");
    assert!(e.message.contains("user_domain"), "{e}");
    let e = parse("sendr != user").unwrap_err();
    assert_eq!(e.at, 0);
    assert!(e.message.contains("unknown word `sendr`"), "{e}");
    assert!(e.message.contains("== SUBJECT"), "{e}");
    let e = parse("sender != (user)").unwrap_err();
    assert_eq!(e.at, 10);
    assert!(e.message.contains("\"text\" or a subject"), "{e}");
    let e = parse("sender user").unwrap_err();
    assert!(e.message.contains("after `sender`"), "{e}");
    // A comparison needs two sides, and the right side is one subject.
    assert!(parse("sender !=").is_err());
    assert!(parse("sender != user != helo").is_err());
    assert!(parse("== user").is_err());
}

fn arb_subject() -> impl Strategy<Value = Subject> {
    prop_oneof![
        Just(Subject::ClientIp),
        Just(Subject::User),
        Just(Subject::UserDomain),
        Just(Subject::Sender),
        Just(Subject::SenderDomain),
        Just(Subject::Recipient),
        Just(Subject::RecipientDomain),
        Just(Subject::Helo),
        Just(Subject::HeaderFrom),
        Just(Subject::Listener),
    ]
}

fn arb_value() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        Just(Some(String::new())),
        "[a-cA-C]{1,3}(@[a-cA-C]{1,3})?".prop_map(Some),
    ]
}

fn arb_facts() -> impl Strategy<Value = Facts> {
    (
        arb_value(),
        arb_value(),
        arb_value(),
        arb_value(),
        arb_value(),
    )
        .prop_map(|(user, sender, recipient, helo, header_from)| Facts {
            client_ip: Some("10.1.1.1".parse().unwrap()),
            listener: "submission".into(),
            user,
            sender,
            recipient,
            helo,
            header_from,
            ..Facts::default()
        })
}

proptest! {
    /// `a == b` and `b == a` agree; so do the `!=` forms; with both values present exactly
    /// one of `==` and `!=` holds, otherwise neither.
    #[test]
    fn comparisons_are_symmetric_and_exclusive(
        a in arb_subject(),
        b in arb_subject(),
        f in arb_facts(),
    ) {
        let l = Lists::default();
        let ev = |t: String| parse(&t).unwrap().eval(&f, &l);
        let (x, y) = (a.as_str(), b.as_str());
        let eq = ev(format!("{x} == {y}"));
        let ne = ev(format!("{x} != {y}"));
        prop_assert_eq!(eq, ev(format!("{y} == {x}")));
        prop_assert_eq!(ne, ev(format!("{y} != {x}")));
        let present = |s: Subject| s.value(&f).is_some_and(|v| !v.is_empty());
        if present(a) && present(b) {
            prop_assert!(eq != ne);
            let same = a.value(&f).unwrap().to_lowercase() == b.value(&f).unwrap().to_lowercase();
            prop_assert_eq!(eq, same);
        } else {
            prop_assert!(!eq && !ne);
        }
    }

    /// Changing the case of either value never changes a comparison.
    #[test]
    fn comparisons_ignore_case(f in arb_facts(), upper in any::<bool>()) {
        let l = Lists::default();
        let mut g = f.clone();
        let flip = |v: &Option<String>| v.as_ref().map(|s| if upper {
            s.to_uppercase()
        } else {
            s.to_lowercase()
        });
        g.sender = flip(&f.sender);
        g.user = flip(&f.user);
        for t in ["sender == user", "sender != user", "sender_domain != user_domain"] {
            let c = parse(t).unwrap();
            prop_assert_eq!(c.eval(&f, &l), c.eval(&g, &l), "{}", t);
        }
    }
}
