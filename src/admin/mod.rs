//! Operating floodgate: the admin API, the metrics endpoint and the client side of the admin
//! verbs.
//!
//! * [`http`]: the handlers' request and response, converted from and to hyper's, and the
//!   guard that keeps request heads to CRLF and error answers in JSON;
//! * [`held`]: the hold spool's reads for `held list` and `held show`;
//! * [`held_act`]: the API's release and delete of held mail (reason, confirmation, audit);
//! * [`actor`]: who asked (a named token, the user at the admin socket), the `by` of
//!   every action;
//! * [`invoker`]: the person behind a verb run as root or as floodgate's user (sudo,
//!   doas, the login uid), vouched for only by those two users;
//! * [`audit`]: the audit log of admin actions (`[admin] audit`);
//! * [`inspect`]: what a key means for every configured limit (inspect, top);
//! * [`api`]: the endpoints (inspect, reset, top, reload, metrics);
//! * [`restricted`]: the restricted set's endpoints (restricted, release, restrict);
//! * [`campaigns`]: the campaigns of message keys (`restrict_senders` limits over);
//! * [`serve`]: the unix socket, the token-guarded TCP address and the metrics address,
//!   served by hyper;
//! * [`console`]: the web console on the admin TCP address;
//! * [`client`]: the CLI side: one request to the admin socket, tables or JSON;
//! * [`peer`]: whose process is at the other end of the admin socket.

pub mod actor;
pub mod api;
pub mod audit;
pub mod campaigns;
pub mod client;
pub mod console;
pub mod digest;
pub mod held;
pub mod held_act;
pub mod http;
pub mod inspect;
pub mod invoker;
pub mod messages;
pub mod outcome;
pub mod peer;
pub mod restricted;
pub mod serve;

pub use crate::metrics::{Metrics, Side};
