//! The admin endpoint that feeds an outcome of a queued message from any source:
//!
//! | method | path | answer |
//! |---|---|---|
//! | POST | `/v1/outcome?queue_id=ID&recipient=ADDR&result=bounced\|deferred\|sent` | `{"queue_id","recipient","result","counted"}`; `counted` is `charged`, `duplicate`, `unknown_queue_id`, `not_charged` or `not_a_recipient` (the message was not accepted for that address) |

use serde_json::json;

use super::api::AdminState;
use super::http::{Request, Response};
use crate::outcomes::index::Noted;
use crate::outcomes::logline::Kind;

impl AdminState {
    /// `POST /v1/outcome`.
    pub(super) async fn outcome(&self, req: &Request) -> Response {
        let (Some(id), Some(rcpt), Some(result)) = (
            req.param("queue_id").filter(|s| !s.is_empty()),
            req.param("recipient").filter(|s| !s.is_empty()),
            req.param("result"),
        ) else {
            return Response::error(
                400,
                "outcome needs ?queue_id=ID&recipient=ADDRESS&result=bounced|deferred|sent",
            );
        };
        let Some(kind) = Kind::parse(result) else {
            return Response::error(
                400,
                &format!("result {result:?}: use bounced, deferred or sent"),
            );
        };
        let Some(policy) = &self.policy else {
            return Response::error(503, "no policy is running");
        };
        let counted = match crate::policy::outcomes::report(policy, id, rcpt, None, kind).await {
            Ok(Noted::Charge(_)) => "charged",
            Ok(Noted::Duplicate) => "duplicate",
            Ok(Noted::UnknownQueueId) => "unknown_queue_id",
            Ok(Noted::NotRecipient) => "not_a_recipient",
            Ok(Noted::Nothing) => "not_charged",
            Err(e) => return Response::error(503, &e.to_string()),
        };
        Response::json(
            200,
            &json!({"queue_id": id, "recipient": rcpt, "result": kind.as_str(), "counted": counted}),
        )
    }
}
