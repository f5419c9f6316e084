//! What the demo prints once its scenario has played: the summary, and how to go on.

/// Prints what the scenario showed: what each user met, what floodgate holds (as
/// `floodgate restricted` and `floodgate held list` say), and the postmaster's alerts.
pub fn print(
    p: &super::scenario::Played,
    s: &super::scenario::Standing,
    alerts: &[serde_json::Value],
) {
    use super::scenario::{NORMAL_USER, STOLEN_USER};
    say!("\n== What happened ({} s) ==", p.took.as_secs());
    say!(
        "{NORMAL_USER} (normal user): {} messages relayed{}",
        p.normal.relayed,
        if p.normal.other.is_empty() {
            String::new()
        } else {
            format!(", {} not: {:?}", p.normal.other.len(), p.normal.other)
        }
    );
    say!(
        "{STOLEN_USER} (stolen account): {} messages relayed to {} recipients before it was restricted, \
         {} attempts deferred{}",
        p.spray.relayed,
        p.spray.recipients,
        p.spray.refused,
        p.spray
            .first_refusal
            .as_ref()
            .map(|r| format!(" (first: {r})"))
            .unwrap_or_default()
    );
    say!(
        "restricted account: {}; held messages: {}",
        if s.restricted.is_empty() {
            "none".to_string()
        } else {
            s.restricted.join(", ")
        },
        s.held
    );
    say!("\n$ floodgate restricted\n{}", s.restricted_text.trim_end());
    say!(
        "\n$ floodgate held list --key {STOLEN_USER}\n{}",
        s.held_text.trim_end()
    );
    // Every alert was printed as it came; the restriction's, with its evidence, again in full.
    let restrictions: Vec<&serde_json::Value> = alerts
        .iter()
        .filter(|a| a["event"] == "floodgate.restricted")
        .collect();
    say!(
        "\nThe postmaster got {} alerts, {} of them a restriction:",
        alerts.len(),
        restrictions.len()
    );
    for a in restrictions {
        say!("{}", serde_json::to_string_pretty(a).unwrap_or_default());
    }
}

/// Prints how to go on by hand: the addresses, a swaks line, the release commands.
pub fn print_try(config: &super::setup::DemoConfig, submission: std::net::SocketAddr) {
    use super::scenario::STOLEN_USER;
    let socket = config.socket.display();
    say!("\nfloodgate, the stand-in smart host and the alert receiver keep running; Ctrl-C stops them.");
    for (name, addr, _) in &config.listeners {
        say!("  listener {name} {addr}");
    }
    say!("  admin socket {socket}");
    say!(
        "  web console http://{}/console/ (token {})",
        config.console.0,
        config.console.1
    );
    say!("Send a message yourself (any user, password demo):");
    say!(
        "  swaks --server {submission} --tls-on-connect --auth PLAIN --auth-user dave \
         --auth-password demo --from dave@example.org --to friend@example.net"
    );
    // This very binary, so that the lines work from a `cargo run` without an installed one.
    let me = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "floodgate".into());
    say!("Release the stolen account and its held mail:");
    say!("  {me} release {STOLEN_USER} --reason 'password changed' --socket {socket}");
    say!("  {me} held release --key {STOLEN_USER} --reason 'checked' --socket {socket}");
}
