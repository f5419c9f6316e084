//! Operating floodgate: metrics, the admin API and the client side of the admin verbs.
//!
//! * [`counter`]: sharded relaxed-atomic counters, a gauge and a fixed-bucket histogram;
//! * [`metrics`]: the registry every part reports to, and its Prometheus text;
//! * [`metered`]: a store wrapper that counts and times decisions;
//! * [`http`]: a strict, sans-I/O HTTP/1.1 request parser and response writer;
//! * [`held`]: the hold spool's verbs (list, show, release, delete) and its expiry;
//! * [`inspect`]: what a key means for every configured limit (inspect, top);
//! * [`api`]: the endpoints (inspect, reset, top, reload, metrics);
//! * [`restricted`]: the restricted set's endpoints (restricted, release, restrict);
//! * [`serve`]: the unix socket, the token-guarded TCP address and the metrics address;
//! * [`console`]: the web console on the admin TCP address;
//! * [`client`]: the CLI side: one request to the admin socket, tables or JSON;
//! * [`peer`]: whose process is at the other end of the admin socket.

pub mod api;
pub mod client;
pub mod console;
pub mod counter;
pub mod held;
pub mod http;
pub mod inspect;
pub mod metered;
pub mod metrics;
pub mod outcome;
pub mod paced;
pub mod peer;
pub mod restricted;
pub mod serve;

pub use metered::MeteredStore;
pub use metrics::{Metrics, Side};
