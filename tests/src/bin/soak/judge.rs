//! The verdict on a run, from what the clients saw, what the audit log says and what the
//! chaos did; pure, so each rule is tested on made-up runs below.
//!
//! - **Standard errors** are the answers the contract names (SPEC §5's table, the 401 of a
//!   token that is not live, the 503 of a frontend without a kernel, a refused connection
//!   while the frontend is down); any other answer is counted as *other* and fails the run.
//! - **A hang** is a call unanswered past `callMs` + grace, not counting time the soak kept
//!   the runtime down on purpose.
//! - **An answer from a fenced generation**: the fixture answers `whoami` (and its prompt and
//!   resource) with its pid and its parent's, the worker, whose environment names its
//!   generation. The audit log says when each generation became live (`commit`) and when it
//!   stopped being live (`fence`, or a `commit` that superseded it); a kernel SIGKILL ends
//!   every generation of that kernel. An answer from generation G fails the run when the call
//!   was sent more than [`FENCE_MARGIN_MS`] after G stopped being live (the frontend mirrors
//!   the kernel's table through a stream; the margin is its time to hear the fence), or when
//!   the audit log never shows G committed.
//! - **Audit against calls**: each session is one client making one call at a time, so a
//!   call record (`callTime`, stamped by the frontend when it answered) belongs to the call
//!   of its session and name whose [start, end] holds it. Calls that resolved to a connector
//!   must have exactly one record; calls refused before (unknown name, a token not live, no
//!   frontend) must have none; a call whose connector was fenced between resolution and the
//!   call, and a call whose frontend died after it was sent and less than [`IN_TRANSIT_MS`]
//!   after it was answered (the frontend ships records in batches), may have one. A record that belongs to no call, or
//!   says another outcome than the client got, fails the run.

use std::collections::{BTreeMap, HashMap};

use super::audit::{Audit, CallRecord, RouteRecord};
use super::world::{Answer, CALL_MS, Call, GRACE, Kind, WORKSPACE};

/// How long after the kernel recorded a generation's end a call may still have been routed
/// to it by the frontend.
pub const FENCE_MARGIN_MS: i64 = 250;
/// How long before its frontend died an answered call's record may have been lost with it.
pub const IN_TRANSIT_MS: i64 = 1000;
/// Clock slack between the client's and the frontend's millisecond stamps.
const TOLERANCE_MS: i64 = 2;

/// The standard kind of an answer, or `Err` with its description when it is none.
pub fn kind_of(answer: &Answer) -> Result<String, String> {
    match answer {
        Answer::Result {
            refused: Some((code, message)),
            ..
        } => rpc_kind(*code, message).map(|k| format!("search: {k}")),
        Answer::Result {
            is_error: false, ..
        } => Ok("answered".into()),
        Answer::Result { .. } => Err("an isError result".into()),
        Answer::Rpc { code, message, .. } => rpc_kind(*code, message),
        Answer::Http { status: 401, .. } => Ok("HTTP 401: token not live".into()),
        Answer::Http { status: 503, .. } => Ok("HTTP 503: no kernel to verify the token".into()),
        Answer::Http { status: 404, .. } => Ok("HTTP 404: session ended (token revoked)".into()),
        Answer::Http { status, body } => Err(format!("HTTP {status}: {body}")),
        Answer::Transport(e) if e.starts_with("POST ") => {
            Ok("no connection to the frontend".into())
        }
        Answer::Transport(e) => Err(e.clone()),
        Answer::Hang => Err("no answer (hang)".into()),
    }
}

fn rpc_kind(code: i64, message: &str) -> Result<String, String> {
    let kind = match code {
        -32603 if message.starts_with("[MCP_UNAVAILABLE]") => {
            if message.contains("circuit open") {
                "[MCP_UNAVAILABLE] circuit open"
            } else if message.contains("has not sent its tool routes") {
                "[MCP_UNAVAILABLE] routes not ready"
            } else {
                "[MCP_UNAVAILABLE]"
            }
        }
        -32603 if message.starts_with("[MCP_TIMEOUT]") => "[MCP_TIMEOUT]",
        -32602 if message.contains("is not available now") => "-32602 not available now",
        -32602 if message.starts_with("Unknown tool:") => "-32602 unknown tool",
        -32602 if message.starts_with("Unknown prompt:") => "-32602 unknown prompt",
        _ if message.starts_with("Resource not found:") => "resource not found",
        _ => return Err(format!("JSON-RPC {code} {message}")),
    };
    Ok(kind.to_owned())
}

/// When each generation was live: `(committed, ended)`, wall ms.
pub fn lifetimes(routes: &[RouteRecord], kernel_kills: &[i64]) -> HashMap<u64, (i64, Option<i64>)> {
    let mut life: HashMap<u64, (i64, Option<i64>)> = HashMap::new();
    let end = |life: &mut HashMap<u64, (i64, Option<i64>)>, g: u64, at: i64| {
        let e = &mut life.entry(g).or_insert((i64::MAX, None)).1;
        *e = Some(e.map_or(at, |e| e.min(at)));
    };
    for r in routes {
        match r {
            RouteRecord::Commit {
                at_ms,
                generation,
                superseded,
                ..
            } => {
                let c = &mut life.entry(*generation).or_insert((i64::MAX, None)).0;
                *c = (*c).min(*at_ms);
                if let Some(s) = superseded {
                    end(&mut life, *s, *at_ms);
                }
            }
            RouteRecord::Fence {
                at_ms, generation, ..
            } => end(&mut life, *generation, *at_ms),
        }
    }
    let committed: Vec<(u64, i64)> = life.iter().map(|(g, (c, _))| (*g, *c)).collect();
    for (g, c) in committed {
        if let Some(k) = kernel_kills.iter().copied().filter(|k| *k >= c).min() {
            end(&mut life, g, k);
        }
    }
    life
}

/// The routing verdict: answers from a generation that was not live, answers from another
/// connector's worker, the largest lag seen within the margin, and how many answers named no
/// worker the soak could read.
#[derive(Debug, Default)]
pub struct Routing {
    pub fenced: Vec<String>,
    pub misrouted: Vec<String>,
    pub attributed: usize,
    pub unattributed: usize,
    pub lag_within_margin_ms: i64,
}

pub fn routing(calls: &[Call], life: &HashMap<u64, (i64, Option<i64>)>) -> Routing {
    let mut r = Routing::default();
    for c in calls {
        let Some(answerer) = &c.answerer else {
            continue;
        };
        let Some((key, g)) = &answerer.worker else {
            r.unattributed += 1;
            continue;
        };
        r.attributed += 1;
        if key != c.connector {
            r.misrouted.push(format!(
                "{} answered by worker {} of {key}",
                c.target, answerer.worker_pid
            ));
        }
        match life.get(g) {
            Some((committed, _)) if *committed == i64::MAX => r.fenced.push(format!(
                "{} answered by generation {g}, which the audit log never shows committed",
                c.target
            )),
            None => r.fenced.push(format!(
                "{} answered by generation {g}, which the audit log never shows committed",
                c.target
            )),
            Some((_, Some(ended))) if c.start_ms > ended + FENCE_MARGIN_MS => r.fenced.push(format!(
                "{} sent {} ms after generation {g} of {key} stopped being live was answered by it (worker {})",
                c.target,
                c.start_ms - ended,
                answerer.worker_pid
            )),
            Some((_, Some(ended))) if c.start_ms > *ended => {
                r.lag_within_margin_ms = r.lag_within_margin_ms.max(c.start_ms - ended);
            }
            Some(_) => {}
        }
    }
    r
}

/// Answers (not refusals) to calls that carried a token after it was revoked.
pub fn revoked_answers(calls: &[Call], revoked: &HashMap<u64, i64>) -> Vec<String> {
    calls
        .iter()
        .filter(|c| matches!(c.answer, Answer::Result { .. } | Answer::Rpc { .. }))
        .filter_map(|c| {
            let at = revoked.get(&c.token?)?;
            (c.start_ms > *at).then(|| {
                format!(
                    "{} of session {} sent {} ms after its token was revoked got {:?}",
                    c.target,
                    c.session,
                    c.start_ms - at,
                    c.answer
                )
            })
        })
        .collect()
}

/// Whether a call must, may or must not have an audit record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    Must,
    May,
    MustNot,
}

pub fn expect(c: &Call, frontend_deaths: &[(i64, i64)]) -> Expect {
    let base = match &c.answer {
        Answer::Result {
            refused: Some(_), ..
        } => Expect::MustNot,
        Answer::Result { .. } if c.kind == Kind::Search => Expect::MustNot,
        Answer::Result { .. } => Expect::Must,
        Answer::Rpc {
            code: -32603,
            bound: true,
            ..
        } => Expect::Must,
        // Fenced at resolution (no record) or between resolution and the call (a record).
        Answer::Rpc {
            code: -32602,
            bound: true,
            ..
        } => Expect::May,
        Answer::Rpc { .. } | Answer::Http { .. } => Expect::MustNot,
        Answer::Transport(_) | Answer::Hang => Expect::May,
    };
    // The frontend died (between the stamp before the signal and the one after it was
    // seen gone) after the call was sent and at most IN_TRANSIT_MS after its answer.
    let in_transit = frontend_deaths
        .iter()
        .any(|(from, to)| *to >= c.start_ms && *from <= c.end_ms + IN_TRANSIT_MS);
    if base == Expect::Must && in_transit {
        Expect::May
    } else {
        base
    }
}

/// Whether an audit outcome fits what the client got.
fn fits(outcome: &str, answer: &Answer) -> bool {
    match answer {
        Answer::Result {
            is_error: false, ..
        } => outcome == "ok",
        Answer::Result { .. } => matches!(outcome, "tool_error" | "invalid_arguments"),
        Answer::Rpc { message, .. } if message.starts_with("[MCP_TIMEOUT]") => outcome == "timeout",
        Answer::Rpc { message, .. } if message.starts_with("[MCP_UNAVAILABLE]") => {
            outcome == "unavailable"
        }
        Answer::Rpc { .. } => outcome == "rpc_error",
        Answer::Http { .. } => false,
        Answer::Transport(_) | Answer::Hang => true,
    }
}

/// The audit verdict.
#[derive(Debug, Default)]
pub struct AuditVerdict {
    /// Call records of the soak's sessions.
    pub records: usize,
    /// Records that belong to a call.
    pub matched: usize,
    pub must: usize,
    pub may: usize,
    pub may_recorded: usize,
    pub missing: Vec<String>,
    pub extra: Vec<String>,
}

/// The call of `calls` (one session's, by start) that `r` belongs to, if one fits.
fn owner(calls: &[&Call], taken: &[bool], r: &CallRecord) -> Option<usize> {
    let late = |c: &Call| match c.answer {
        Answer::Hang => CALL_MS as i64 + GRACE.as_millis() as i64,
        _ => TOLERANCE_MS,
    };
    let upto = calls.partition_point(|c| c.start_ms - TOLERANCE_MS <= r.at_ms);
    (upto.saturating_sub(3)..upto).find(|&i| {
        let c = calls[i];
        !taken[i] && c.target == r.tool && r.at_ms <= c.end_ms + late(c)
    })
}

pub fn audit(calls: &[Call], audit: &Audit, frontend_deaths: &[(i64, i64)]) -> AuditVerdict {
    let mut v = AuditVerdict::default();
    let mut by_session: BTreeMap<&str, Vec<&Call>> = BTreeMap::new();
    for c in calls {
        by_session.entry(c.session).or_default().push(c);
    }
    for list in by_session.values_mut() {
        list.sort_by_key(|c| c.start_ms);
    }
    let mut taken: BTreeMap<&str, Vec<bool>> = by_session
        .iter()
        .map(|(s, l)| (*s, vec![false; l.len()]))
        .collect();
    for r in audit.calls.iter().filter(|r| r.workspace == WORKSPACE) {
        v.records += 1;
        let (Some(list), Some(t)) = (
            by_session.get(r.session.as_str()),
            taken.get_mut(r.session.as_str()),
        ) else {
            v.extra
                .push(format!("a record of unknown session {}: {r:?}", r.session));
            continue;
        };
        match owner(list, t, r) {
            Some(i) if fits(&r.outcome, &list[i].answer) => {
                t[i] = true;
                v.matched += 1;
            }
            Some(i) => v.extra.push(format!(
                "{} of {}: the audit says {} but the client got {:?}",
                r.tool, r.session, r.outcome, list[i].answer
            )),
            None => v
                .extra
                .push(format!("a record that belongs to no call: {r:?}")),
        }
    }
    judge_calls(&mut v, &by_session, &taken, frontend_deaths);
    v
}

fn judge_calls(
    v: &mut AuditVerdict,
    by_session: &BTreeMap<&str, Vec<&Call>>,
    taken: &BTreeMap<&str, Vec<bool>>,
    frontend_deaths: &[(i64, i64)],
) {
    for (session, list) in by_session {
        for (i, c) in list.iter().enumerate() {
            let recorded = taken.get(session).is_some_and(|t| t[i]);
            match expect(c, frontend_deaths) {
                Expect::Must => {
                    v.must += 1;
                    if !recorded {
                        v.missing.push(format!(
                            "{} of {} at {} ({:?}) has no audit record",
                            c.target, c.session, c.end_ms, c.answer
                        ));
                    }
                }
                Expect::May => {
                    v.may += 1;
                    v.may_recorded += usize::from(recorded);
                }
                Expect::MustNot if recorded => v.extra.push(format!(
                    "{} of {} ({:?}) was refused before any connector, yet audited",
                    c.target, c.session, c.answer
                )),
                Expect::MustNot => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::world::Answerer;
    use super::*;

    fn call(session: &'static str, target: &str, start: i64, end: i64, answer: Answer) -> Call {
        Call {
            client: session,
            session,
            kind: Kind::Tool,
            target: target.into(),
            connector: "fa",
            token: Some(1),
            start_ms: start,
            end_ms: end,
            answer,
            answerer: None,
            wrong_echo: None,
        }
    }

    fn ok() -> Answer {
        Answer::Result {
            is_error: false,
            refused: None,
        }
    }

    fn record(session: &str, tool: &str, at: i64, outcome: &str) -> CallRecord {
        CallRecord {
            at_ms: at,
            workspace: WORKSPACE.into(),
            session: session.into(),
            tool: tool.into(),
            connector: "fa".into(),
            generation: 1,
            outcome: outcome.into(),
        }
    }

    #[test]
    fn a_generation_ends_when_fenced_superseded_or_its_kernel_is_killed() {
        let routes = [
            RouteRecord::Commit {
                at_ms: 10,
                connector: "fa".into(),
                generation: 1,
                superseded: None,
            },
            RouteRecord::Commit {
                at_ms: 20,
                connector: "fa".into(),
                generation: 2,
                superseded: Some(1),
            },
            RouteRecord::Commit {
                at_ms: 25,
                connector: "fb".into(),
                generation: 3,
                superseded: None,
            },
            RouteRecord::Fence {
                at_ms: 30,
                connector: "fb".into(),
                generation: 3,
            },
        ];
        let life = lifetimes(&routes, &[40]);
        assert_eq!(life[&1], (10, Some(20)));
        assert_eq!(life[&2], (20, Some(40)));
        assert_eq!(life[&3], (25, Some(30)));
    }

    #[test]
    fn an_answer_sent_after_its_generation_ended_is_caught() {
        let life = HashMap::from([(1, (0, Some(1000))), (2, (1000, None))]);
        let mut c = call("s", "fa_whoami", 1000 + FENCE_MARGIN_MS + 1, 1300, ok());
        c.answerer = Some(Answerer {
            upstream_pid: 9,
            worker_pid: 8,
            worker: Some(("fa".into(), 1)),
        });
        let r = routing(std::slice::from_ref(&c), &life);
        assert_eq!(r.fenced.len(), 1, "{r:?}");
        // Within the margin it is only measured; from the live generation it is fine.
        c.start_ms = 1100;
        assert!(routing(std::slice::from_ref(&c), &life).fenced.is_empty());
        c.answerer = Some(Answerer {
            upstream_pid: 9,
            worker_pid: 8,
            worker: Some(("fb".into(), 2)),
        });
        let r = routing(std::slice::from_ref(&c), &life);
        assert!(r.fenced.is_empty());
        assert_eq!(r.misrouted.len(), 1);
        // A generation never committed.
        c.answerer = Some(Answerer {
            upstream_pid: 9,
            worker_pid: 8,
            worker: Some(("fa".into(), 5)),
        });
        assert_eq!(routing(&[c], &life).fenced.len(), 1);
    }

    #[test]
    fn a_revoked_token_must_be_refused() {
        let revoked = HashMap::from([(1, 100)]);
        let refused = call(
            "s",
            "t",
            150,
            160,
            Answer::Http {
                status: 401,
                body: String::new(),
            },
        );
        let before = call("s", "t", 90, 110, ok());
        assert!(revoked_answers(&[refused, before], &revoked).is_empty());
        assert_eq!(
            revoked_answers(&[call("s", "t", 101, 120, ok())], &revoked).len(),
            1
        );
    }

    #[test]
    fn every_answered_call_has_one_record_and_every_record_one_call() {
        let calls = [
            call("s", "fa_echo", 100, 110, ok()),
            call("s", "fa_whoami", 110, 120, ok()),
            call(
                "s",
                "fa_echo",
                130,
                140,
                Answer::Http {
                    status: 401,
                    body: String::new(),
                },
            ),
        ];
        let mut a = Audit {
            calls: vec![
                record("s", "fa_echo", 109, "ok"),
                record("s", "fa_whoami", 110, "ok"),
            ],
            ..Audit::default()
        };
        let v = audit(&calls, &a, &[]);
        assert!(v.missing.is_empty() && v.extra.is_empty(), "{v:?}");
        assert_eq!((v.records, v.matched, v.must), (2, 2, 2));

        // A lost record is missing, unless its frontend died right after the answer.
        a.calls.pop();
        assert_eq!(audit(&calls, &a, &[]).missing.len(), 1);
        assert!(audit(&calls, &a, &[(500, 510)]).missing.is_empty());
        // A death that may have come after the call was sent counts too; one over before it
        // was sent does not.
        assert!(audit(&calls, &a, &[(105, 112)]).missing.is_empty());
        assert_eq!(audit(&calls, &a, &[(100, 108)]).missing.len(), 1);

        // A record of a refused call, a second record, or a wrong outcome is extra.
        for extra in [
            record("s", "fa_echo", 135, "ok"),
            record("s", "fa_echo", 105, "ok"),
            record("s", "fa_whoami", 115, "timeout"),
        ] {
            let mut b = Audit {
                calls: vec![
                    record("s", "fa_echo", 109, "ok"),
                    record("s", "fa_whoami", 111, "ok"),
                ],
                ..Audit::default()
            };
            b.calls.push(extra);
            let v = audit(&calls, &b, &[]);
            assert_eq!(v.extra.len(), 1, "{v:?}");
        }
    }

    #[test]
    fn standard_errors_are_named_and_others_are_not() {
        let rpc = |code, message: &str| Answer::Rpc {
            status: 200,
            code,
            message: message.into(),
            bound: true,
        };
        assert_eq!(
            kind_of(&rpc(-32603, "[MCP_TIMEOUT] fa: call exceeded 2000 ms")),
            Ok("[MCP_TIMEOUT]".into())
        );
        assert_eq!(
            kind_of(&rpc(
                -32603,
                "[MCP_UNAVAILABLE] fa: circuit open after 5 failures; retry in 3 s"
            )),
            Ok("[MCP_UNAVAILABLE] circuit open".into())
        );
        assert!(kind_of(&rpc(-32000, "bridge trouble")).is_err());
        assert!(
            kind_of(&Answer::Http {
                status: 500,
                body: String::new()
            })
            .is_err()
        );
        assert!(kind_of(&Answer::Hang).is_err());
    }
}
