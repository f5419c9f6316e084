//! Fuzz target: `when` conditions, templates and list entries.
//!
//! Checks that parsing never panics, that an accepted condition evaluates without panicking
//! and that its negation evaluates to the opposite (a comparison of two subjects also
//! reads the same both ways round), that an accepted template expands
//! without panicking and that escaped literal text expands to itself, and that list text
//! either loads or names a line inside it.
#![no_main]

use floodgate::policy::condition::Condition;
use floodgate::policy::lists::{Lists, NamedList};
use floodgate::policy::template::Template;
use floodgate::policy::Facts;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut lists = Lists::default();
    lists.insert(
        "trusted",
        NamedList::from_text("10.0.0.0/8 5\n::1\nalice\npostmaster@\nexample.org 7\n")
            .expect("seed list"),
    );
    let facts = Facts {
        client_ip: Some("10.1.2.3".parse().expect("ip")),
        listener: "submission".into(),
        user: Some(text.chars().take(20).collect()),
        sender: Some(String::new()),
        recipient: Some(format!("{}@example.org", text.len())),
        ..Facts::default()
    };
    // A second session where sender and login both come from the input, so that subject
    // comparisons (`sender != user`) meet equal, unequal and domain-less values.
    let half: String = text.chars().take(12).collect();
    let compared = Facts {
        user: Some(half.to_uppercase()),
        sender: Some(format!("{half}@{}", text.len() % 3)),
        header_from: Some(half.clone()),
        ..facts.clone()
    };
    if let Ok(c) = Condition::parse(text, &|n| lists.contains(n)) {
        let a = c.eval(&facts, &lists);
        let b = c.eval(&compared, &lists);
        // Wrapping may only fail on the nesting cap.
        match Condition::parse(&format!("!({text})"), &|n| lists.contains(n)) {
            Ok(neg) => {
                assert_eq!(neg.eval(&facts, &lists), !a, "{text}");
                assert_eq!(neg.eval(&compared, &lists), !b, "{text}");
            }
            Err(e) => assert!(e.message.contains("nested too deeply"), "{text}: {e}"),
        }
        // A comparison of two subjects reads the same both ways round.
        if let Condition::Compare(x, y, equal) = c {
            let swapped = Condition::Compare(y, x, equal);
            assert_eq!(swapped.eval(&facts, &lists), a, "{text}");
            assert_eq!(swapped.eval(&compared, &lists), b, "{text}");
        }
    }
    if let Ok(t) = Template::parse(text) {
        let out = t.expand(|v, out| out.push_str(&format!("<{v:?}>")));
        if t.vars().next().is_none() {
            assert_eq!(out, text.replace("$$", "$"));
        }
    }
    match NamedList::from_text(text) {
        Ok(l) => {
            let _ = l.lookup_address(text);
            let _ = l.lookup_ip("192.0.2.1".parse().expect("ip"));
        }
        Err(e) => assert!(e.line >= 1 && e.line <= text.lines().count().max(1)),
    }
});
