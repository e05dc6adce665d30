//! A 2026-07-28 client's `subscriptions/listen` request, held open across a kernel restart.
//! The frontend ends a listen stream with its final result when the runtime stops (and when
//! the token is revoked). The bridge keeps that answer back, waits for the runtime, and sends
//! the same request (same id, same params) with the new token: the client's stream goes on
//! with the new stream's acknowledgement and its notifications. The client gets the held
//! answer only when the same kernel refuses the token (revoked) or no runtime comes back; a
//! `notifications/cancelled` naming the request ends it at once, unanswered.

use std::sync::Arc;
use std::time::Duration;

use hyper::StatusCode;
use serde_json::Value;
use tokio::sync::mpsc::{self, UnboundedSender};

use super::conn::Answer;
use super::http::{self, Peek};
use super::link::{Current, Link, Renewal};

/// The pause before asking the same kernel's frontend again for a stream that ended.
const AGAIN_PAUSE: Duration = Duration::from_millis(300);

/// What is done after another message's call took a new token: the bridge's other streams.
pub(super) type OnRenewed = fn(&Arc<Link>, &Current, &UnboundedSender<String>);

/// How one POST of the listen request ended.
enum Attempt {
    /// Answered without a stream (an error): relayed, nothing to hold open.
    Answered,
    /// The stream ended; its final answer when one came (held back).
    Ended(Option<String>),
    /// 401: the token is not (or no longer) valid.
    Refused(Answer),
    /// No frontend answered.
    Unreachable,
}

/// Relays the listen request `line` until it is answered for good or cancelled. `Some`
/// reason when no runtime came back and nothing answers the request yet.
pub(super) async fn hold_open(
    link: &Arc<Link>,
    line: &str,
    peek: &Peek,
    out: &UnboundedSender<String>,
    on_renewed: OnRenewed,
) -> Option<String> {
    let id = peek.id.as_ref()?;
    let cancelled = link.listens.open(id);
    let gone = tokio::select! {
        gone = keep(link, line, peek, id, out, on_renewed) => gone,
        () = cancelled.notified() => None,
    };
    link.listens.close(id);
    gone
}

async fn keep(
    link: &Arc<Link>,
    line: &str,
    peek: &Peek,
    id: &Value,
    out: &UnboundedSender<String>,
    on_renewed: OnRenewed,
) -> Option<String> {
    let mut current = link.current().await;
    let mut held: Option<String> = None;
    loop {
        let refused = match attempt(link, &current, line, peek, id, out).await {
            Attempt::Answered => return None,
            Attempt::Ended(end) => {
                held = end.or(held);
                None
            }
            Attempt::Refused(response) => Some(response),
            Attempt::Unreachable => None,
        };
        match link.renew(&current).await {
            Renewal::Renewed(next) => {
                on_renewed(link, &next, out);
                current = next;
            }
            Renewal::Current(next) if next.epoch != current.epoch => current = next,
            // The same kernel: a refused token stays refused (the held answer, or the
            // refusal, is the end); a stream that ended is asked for again.
            Renewal::Current(_) => match refused {
                Some(refusal) => {
                    match held {
                        Some(end) => drop(out.send(end)),
                        None => drop(http::relay(refusal, peek, out).await),
                    }
                    return None;
                }
                None => tokio::time::sleep(AGAIN_PAUSE).await,
            },
            Renewal::Gone(reason) => {
                return match held {
                    Some(end) => {
                        let _ = out.send(end);
                        None
                    }
                    None => Some(reason),
                };
            }
        }
    }
}

/// POSTs the request once and relays its stream, all but the final answer.
async fn attempt(
    link: &Link,
    current: &Current,
    line: &str,
    peek: &Peek,
    id: &Value,
    out: &UnboundedSender<String>,
) -> Attempt {
    let headers = http::headers(&current.target, peek);
    let response = match http::post(&link.http, &current.target, headers, line.to_owned()).await {
        Ok(response) => response,
        Err(_) => return Attempt::Unreachable,
    };
    if response.response.status() == StatusCode::UNAUTHORIZED {
        return Attempt::Refused(response);
    }
    if !http::is_event_stream(&response) {
        http::relay(response, peek, out).await;
        return Attempt::Answered;
    }
    let (lines, mut relayed) = mpsc::unbounded_channel();
    let relaying = async move {
        http::relay(response, peek, &lines).await;
    };
    let passing = async {
        let mut end = None;
        while let Some(line) = relayed.recv().await {
            if answers(&line, id) {
                end = Some(line);
            } else {
                let _ = out.send(line);
            }
        }
        end
    };
    let ((), end) = tokio::join!(relaying, passing);
    Attempt::Ended(end)
}

/// Whether `line` is the answer to request `id` (not a notification on its stream).
fn answers(line: &str, id: &Value) -> bool {
    let Ok(message) = serde_json::from_str::<Value>(line) else {
        return false;
    };
    message.get("method").is_none() && message.get("id") == Some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_requests_own_answer_is_held_back() {
        let id = serde_json::json!("listen-1");
        let end = r#"{"jsonrpc":"2.0","id":"listen-1","result":{"resultType":"complete"}}"#;
        assert!(answers(end, &id));
        let note = r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"listen-1"}}}"#;
        assert!(!answers(note, &id));
        assert!(!answers(
            r#"{"jsonrpc":"2.0","id":"listen-2","result":{}}"#,
            &id
        ));
        assert!(!answers("not json", &id));
    }
}
