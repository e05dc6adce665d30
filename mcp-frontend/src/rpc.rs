//! JSON-RPC 2.0 messages and the HTTP responses that carry them.

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use serde::Serialize;
use serde_json::{Map, Value, json};

pub(crate) const PARSE_ERROR: i64 = -32700;
pub(crate) const INVALID_REQUEST: i64 = -32600;
pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
pub(crate) const INVALID_PARAMS: i64 = -32602;
pub(crate) const INTERNAL_ERROR: i64 = -32603;
pub(crate) const REQUEST_CANCELLED: i64 = -32800;
/// Transport-level rejections (TS SDK practice; not in the JSON-RPC spec).
pub(crate) const SERVER_ERROR: i64 = -32000;
/// MCP 2025-06-18 "Resource not found" (the legacy surface's `resources/read`).
pub(crate) const RESOURCE_NOT_FOUND: i64 = -32002;
pub(crate) const HEADER_MISMATCH: i64 = -32020;
pub(crate) const UNSUPPORTED_VERSION: i64 = -32022;

/// The kernel's first route snapshot has not arrived (the runtime is still starting, or the
/// frontend lost the kernel): nothing can be listed or called yet.
pub(crate) fn routes_not_ready() -> RpcError {
    RpcError::new(
        INTERNAL_ERROR,
        "[MCP_UNAVAILABLE] connector: the runtime has not sent its tool routes yet; retry in a few seconds, and run `tutti status` if it persists",
    )
    .with_data(json!({"tutti": {"reason": "unavailable"}}))
}

/// A JSON-RPC error object.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RpcError {
    pub(crate) code: i64,
    pub(crate) message: String,
    pub(crate) data: Option<Value>,
}

impl RpcError {
    pub(crate) fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub(crate) fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    pub(crate) fn to_json(&self) -> Value {
        let mut error = Map::new();
        error.insert("code".into(), json!(self.code));
        error.insert("message".into(), Value::String(self.message.clone()));
        if let Some(data) = &self.data {
            error.insert("data".into(), data.clone());
        }
        Value::Object(error)
    }
}

/// One parsed client message.
#[derive(Debug)]
pub(crate) enum Message {
    Request {
        id: Value,
        method: String,
        params: Option<Value>,
    },
    Notification {
        method: String,
        params: Option<Value>,
    },
    /// A response to a request the frontend sent to the client: its id and the
    /// `result` or `error` member.
    Response {
        id: Value,
        answer: Result<Value, Value>,
    },
}

impl Message {
    pub(crate) fn params(&self) -> Option<&Value> {
        match self {
            Self::Request { params, .. } | Self::Notification { params, .. } => params.as_ref(),
            Self::Response { .. } => None,
        }
    }
}

/// Classifies one JSON object; an invalid one yields the id to answer with (or null). Takes
/// the object by value so `params` (up to 4 MiB of arguments) moves instead of being copied.
pub(crate) fn classify(mut object: Map<String, Value>) -> Result<Message, (Value, RpcError)> {
    let id = object.remove("id");
    let id_ok = matches!(id, Some(Value::String(_)))
        || matches!(&id, Some(Value::Number(n)) if n.is_i64() || n.is_u64());
    let has_id = id.is_some();
    let echo = match id {
        Some(id) if id_ok => id,
        _ => Value::Null,
    };
    let invalid = |why: &str| {
        (
            echo.clone(),
            RpcError::new(INVALID_REQUEST, format!("Invalid Request: {why}")),
        )
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid("jsonrpc must be \"2.0\""));
    }
    let params = object.remove("params");
    if params
        .as_ref()
        .is_some_and(|p| !p.is_object() && !p.is_array())
    {
        return Err(invalid("params must be an object"));
    }
    match object.remove("method") {
        Some(Value::String(method)) if !has_id => Ok(Message::Notification { method, params }),
        Some(Value::String(method)) if id_ok => Ok(Message::Request {
            id: echo,
            method,
            params,
        }),
        Some(Value::String(_)) => Err(invalid("id must be a string or an integer")),
        Some(_) => Err(invalid("method must be a string")),
        None if has_id && (object.contains_key("result") || object.contains_key("error")) => {
            if !id_ok {
                return Err(invalid("id must be a string or an integer"));
            }
            let answer = match object.remove("result") {
                Some(result) => Ok(result),
                None => Err(object.remove("error").unwrap_or(Value::Null)),
            };
            Ok(Message::Response { id: echo, answer })
        }
        None => Err(invalid("method is required")),
    }
}

pub(crate) fn result_body(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

pub(crate) fn error_body(id: &Value, error: &RpcError) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": error.to_json()})
}

/// An `application/json` response.
pub(crate) fn json_response(status: StatusCode, body: &Value) -> Response {
    match serde_json::to_vec(body) {
        Ok(bytes) => bytes_response(status, bytes),
        Err(e) => unserializable(&e),
    }
}

pub(crate) fn bytes_response(status: StatusCode, bytes: Vec<u8>) -> Response {
    let mut response = Response::new(Body::from(bytes));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// Only a type with a failing `Serialize` impl gets here (never a `Value`).
pub(crate) fn unserializable(e: &serde_json::Error) -> Response {
    tracing::error!(error = %e, "cannot serialize a response");
    reject(
        StatusCode::INTERNAL_SERVER_ERROR,
        "Internal Server Error: the response cannot be serialized",
    )
}

/// A JSON-RPC success envelope around any serializable result.
#[derive(Serialize)]
struct Envelope<'a, R> {
    jsonrpc: &'static str,
    id: &'a Value,
    result: &'a R,
}

/// `200 OK` with `{"jsonrpc":"2.0","id":…,"result":…}`, serialized straight into one buffer
/// of about `size_hint` bytes (no intermediate `Value`).
pub(crate) fn result_response<R: Serialize>(id: &Value, result: &R, size_hint: usize) -> Response {
    let mut bytes = Vec::with_capacity(size_hint.saturating_add(64));
    let envelope = Envelope {
        jsonrpc: "2.0",
        id,
        result,
    };
    match serde_json::to_writer(&mut bytes, &envelope) {
        Ok(()) => bytes_response(StatusCode::OK, bytes),
        Err(e) => unserializable(&e),
    }
}

/// `200 OK` carrying either a result or a JSON-RPC error (both eras' ordinary answer).
pub(crate) fn answer_response(id: &Value, answer: Result<Value, RpcError>) -> Response {
    let body = match answer {
        Ok(result) => result_body(id, result),
        Err(error) => error_body(id, &error),
    };
    json_response(StatusCode::OK, &body)
}

pub(crate) fn error_response(status: StatusCode, id: &Value, error: &RpcError) -> Response {
    json_response(status, &error_body(id, error))
}

/// A transport-level rejection (no request id known).
pub(crate) fn reject(status: StatusCode, message: &str) -> Response {
    error_response(
        status,
        &Value::Null,
        &RpcError::new(SERVER_ERROR, message.to_owned()),
    )
}

/// One `text/event-stream` event carrying a JSON-RPC message.
pub(crate) fn sse_event(message: &[u8]) -> Bytes {
    let mut frame = Vec::with_capacity(message.len() + 24);
    frame.extend_from_slice(b"event: message\ndata: ");
    frame.extend_from_slice(message);
    frame.extend_from_slice(b"\n\n");
    Bytes::from(frame)
}

/// `200 OK` with a `text/event-stream` body (a listen stream, a call answered with its
/// progress); never cached or buffered by a proxy.
pub(crate) fn event_stream_response(
    events: impl futures_util::Stream<Item = Bytes> + Send + 'static,
) -> Response {
    use futures_util::StreamExt;
    let body = events.map(Ok::<_, std::convert::Infallible>);
    let mut response = Response::new(Body::from_stream(body));
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// 202 Accepted with no body.
pub(crate) fn accepted() -> Response {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::ACCEPTED;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    #[test]
    fn classification() {
        assert!(matches!(
            classify(obj(json!({"jsonrpc":"2.0","id":1,"method":"ping"}))),
            Ok(Message::Request { .. })
        ));
        assert!(matches!(
            classify(obj(
                json!({"jsonrpc":"2.0","method":"notifications/initialized"})
            )),
            Ok(Message::Notification { .. })
        ));
        assert!(matches!(
            classify(obj(json!({"jsonrpc":"2.0","id":"a","result":{}}))),
            Ok(Message::Response { .. })
        ));
        let (id, e) = classify(obj(json!({"jsonrpc":"1.0","id":7,"method":"ping"})))
            .expect_err("bad version");
        assert_eq!((id, e.code), (json!(7), INVALID_REQUEST));
        let (id, e) =
            classify(obj(json!({"jsonrpc":"2.0","id":null,"method":"ping"}))).expect_err("null id");
        assert_eq!((id, e.code), (Value::Null, INVALID_REQUEST));
        let (_, e) =
            classify(obj(json!({"jsonrpc":"2.0","id":1.5,"method":"ping"}))).expect_err("float id");
        assert_eq!(e.code, INVALID_REQUEST);
        let (_, e) = classify(obj(json!({"jsonrpc":"2.0","id":1,"method":"x","params":3})))
            .expect_err("scalar params");
        assert_eq!(e.code, INVALID_REQUEST);
    }

    /// Values an envelope member may have: right, wrong and odd ones.
    fn member_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        prop_oneof![
            Just(Value::Null),
            Just(json!("2.0")),
            Just(json!("1.0")),
            Just(json!("tools/call")),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            any::<bool>().prop_map(Value::from),
            Just(json!({"a": 1})),
            Just(json!([1])),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config { cases: 2048, ..Default::default() })]

        /// Any object is a request, a notification, a response or an error; an error echoes
        /// the id only when it is a string or an integer (never an object, a float or a
        /// bool), a request always has such an id, and nothing without `"jsonrpc":"2.0"`
        /// is accepted.
        #[test]
        fn any_object_is_classified_and_echoes_only_a_valid_id(
            members in proptest::collection::btree_map(
                proptest::sample::select(vec!["jsonrpc", "id", "method", "params", "result", "error", "extra"]),
                member_value(),
                0..7,
            )
        ) {
            use proptest::prelude::*;
            let object: Map<String, Value> =
                members.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
            let valid_id = |id: &Value| id.is_string() || id.is_i64() || id.is_u64();
            let versioned = members.get("jsonrpc") == Some(&json!("2.0"));
            match classify(object) {
                Ok(Message::Request { id, method, .. }) => {
                    prop_assert!(versioned && valid_id(&id));
                    prop_assert_eq!(Some(&Value::String(method)), members.get("method"));
                }
                Ok(Message::Notification { .. }) => {
                    prop_assert!(versioned && !members.contains_key("id"));
                }
                Ok(Message::Response { id, .. }) => {
                    prop_assert!(versioned && valid_id(&id));
                }
                Err((id, error)) => {
                    prop_assert!(id.is_null() || valid_id(&id), "{id}");
                    prop_assert_eq!(error.code, INVALID_REQUEST);
                }
            }
        }
    }
}
