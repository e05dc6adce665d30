//! Who may call: the phases of a worker's life, the generation check done on every call, and
//! the errors a call is answered with when it is refused, interrupted or the upstream is gone.

use tutti_proto::worker::CallError;

/// Where the worker is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Registered or registering; the upstream is not ready yet.
    Starting,
    /// Calls are served.
    Serving,
    /// `Shutdown` received: no new calls, in-flight calls may finish.
    Draining,
    /// `Fence` received: nothing new, in-flight calls are answered `[MCP_UNAVAILABLE]`.
    Fenced,
    /// The upstream is gone or being stopped: calls are answered `[MCP_UNAVAILABLE]`.
    Stopped,
    /// `Shutdown` drained: new calls are refused, left-over calls answered `[MCP_UNAVAILABLE]`.
    Closed,
}

/// What the main loop must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// The kernel fenced this generation.
    Fenced,
    /// The kernel asked for a shutdown and draining is over.
    ShutDown,
    /// A call hit HTTP 401/403 (the status line).
    AuthFailed(String),
}

/// Whether a call may proceed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    Admit,
    /// Wrong generation, fenced or shutting down: the caller must list tools again.
    Refuse,
    /// Our generation, but the upstream is not ready (starting) or gone.
    Unavailable,
}

/// The generation check, done on every call: equality with our own generation, and a phase
/// that still takes new calls.
pub(crate) fn admit(own: u64, requested: u64, phase: Phase) -> Admission {
    if requested != own {
        return Admission::Refuse;
    }
    match phase {
        Phase::Serving => Admission::Admit,
        Phase::Starting | Phase::Stopped => Admission::Unavailable,
        Phase::Draining | Phase::Fenced | Phase::Closed => Admission::Refuse,
    }
}

/// The refusal for a call that names another or a fenced generation (SPEC §5, -32602).
pub(crate) fn refusal(key: &str, generation: u64) -> CallError {
    CallError {
        code: -32602,
        message: format!(
            "tool is not available now (generation {generation} of {key} is fenced); list tools again"
        ),
        data_json: String::new(),
        reason: "fenced".to_owned(),
    }
}

pub(super) fn unavailable(key: &str, what: &str, reason: &str) -> CallError {
    CallError {
        code: -32603,
        message: format!("[MCP_UNAVAILABLE] {key}: {what}"),
        data_json: String::new(),
        reason: reason.to_owned(),
    }
}

pub(super) fn timed_out(key: &str, what: &str, ms: u32) -> CallError {
    CallError {
        code: -32603,
        message: format!("[MCP_TIMEOUT] {key}: {what} exceeded {ms} ms"),
        data_json: String::new(),
        reason: "timeout".to_owned(),
    }
}

/// -32021 MissingRequiredClientCapability (2026-07-28) for an upstream request `method`.
pub(super) fn missing_capability(method: &str) -> CallError {
    let capability = match method {
        "elicitation/create" => "elicitation",
        "sampling/createMessage" => "sampling",
        "roots/list" => "roots",
        _ => "unknown",
    };
    CallError {
        code: -32021,
        message: format!(
            "Missing required client capability: the tool's upstream sent {method} and the \
             request did not declare the {capability} capability"
        ),
        data_json: serde_json::json!({"requiredCapabilities": {capability: {}}}).to_string(),
        reason: "missing_capability".to_owned(),
    }
}

pub(super) fn cancelled() -> CallError {
    CallError {
        code: -32800,
        message: "Request cancelled".to_owned(),
        data_json: String::new(),
        reason: "cancelled".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GEN: u64 = (3 << 32) | 7;

    #[test]
    fn generation_check() {
        assert_eq!(admit(GEN, GEN, Phase::Serving), Admission::Admit);
        assert_eq!(admit(GEN, GEN + 1, Phase::Serving), Admission::Refuse);
        assert_eq!(admit(GEN, GEN - 1, Phase::Serving), Admission::Refuse);
        assert_eq!(admit(GEN, 0, Phase::Serving), Admission::Refuse);
        assert_eq!(admit(GEN, GEN, Phase::Fenced), Admission::Refuse);
        assert_eq!(admit(GEN, GEN, Phase::Draining), Admission::Refuse);
        assert_eq!(admit(GEN, GEN, Phase::Closed), Admission::Refuse);
        assert_eq!(admit(GEN, GEN, Phase::Starting), Admission::Unavailable);
        assert_eq!(admit(GEN, GEN, Phase::Stopped), Admission::Unavailable);
        assert_eq!(admit(GEN, GEN + 1, Phase::Starting), Admission::Refuse);
    }

    #[test]
    fn refusal_names_generation_and_key() {
        let e = refusal("github", 42);
        assert_eq!(e.code, -32602);
        assert_eq!(e.reason, "fenced");
        assert_eq!(
            e.message,
            "tool is not available now (generation 42 of github is fenced); list tools again"
        );
    }
}
