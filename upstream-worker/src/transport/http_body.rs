//! Reading a remote upstream's HTTP answers: 401/403, error statuses (of an error body only its
//! length or a one-line preview), whole bodies within a limit, SSE events within a limit.

use futures_util::StreamExt as _;
use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, WWW_AUTHENTICATE};
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, HttpStatusError, InsufficientScopeError, StreamableHttpError,
};

use crate::error::WorkerError;

pub(super) type HttpResult<T> = Result<T, StreamableHttpError<WorkerError>>;

/// How much of an error body goes into a message.
const ERROR_PREVIEW: usize = 256;

/// 401/403: the upstream refused our credentials.
pub(super) fn auth_check(response: &reqwest::Response) -> HttpResult<()> {
    let challenge = || {
        response
            .headers()
            .get(WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    match response.status() {
        StatusCode::UNAUTHORIZED => Err(StreamableHttpError::AuthRequired(AuthRequiredError::new(
            challenge(),
        ))),
        StatusCode::FORBIDDEN => Err(StreamableHttpError::InsufficientScope(
            InsufficientScopeError::new(challenge(), None),
        )),
        _ => Ok(()),
    }
}

/// rmcp's error for an HTTP error status; of the body only its length (an error page may
/// echo the request, token included).
pub(super) fn status_error(
    status: StatusCode,
    body_len: usize,
) -> StreamableHttpError<WorkerError> {
    if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
        return StreamableHttpError::HttpStatus(HttpStatusError::new(status.as_u16(), None));
    }
    StreamableHttpError::UnexpectedServerResponse(
        format!("HTTP {status} ({body_len}-byte body)").into(),
    )
}

pub(super) fn content_type(response: &reqwest::Response) -> Option<String> {
    response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_ascii_lowercase())
}

/// The whole body, refused beyond `max` bytes.
pub(super) async fn read_body(response: reqwest::Response, max: usize) -> HttpResult<Vec<u8>> {
    if response.content_length().is_some_and(|n| n > max as u64) {
        return Err(StreamableHttpError::ResponseBodyTooLarge { max_size: max });
    }
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(client)?;
        if body.len() + chunk.len() > max {
            return Err(StreamableHttpError::ResponseBodyTooLarge { max_size: max });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The start of an error body, on one line.
pub(super) fn preview(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match text.char_indices().nth(ERROR_PREVIEW) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// Ends a byte stream with an error once one SSE event (the bytes between two blank lines)
/// exceeds `max` bytes, before the parser buffers it.
pub(super) fn bounded<S, B>(
    stream: S,
    max: usize,
) -> impl futures_util::Stream<Item = Result<B, std::io::Error>> + Send + 'static
where
    S: futures_util::Stream<Item = Result<B, reqwest::Error>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
{
    let mut event = 0usize;
    let mut at_line_start = true;
    stream.map(move |chunk| {
        let chunk = chunk.map_err(std::io::Error::other)?;
        for &byte in chunk.as_ref() {
            match byte {
                b'\n' if at_line_start => event = 0,
                b'\n' => at_line_start = true,
                b'\r' => {}
                _ => {
                    at_line_start = false;
                    event += 1;
                }
            }
            if event > max {
                return Err(std::io::Error::other(format!(
                    "an event of the upstream's stream exceeds {max} bytes"
                )));
            }
        }
        Ok(chunk)
    })
}

pub(super) fn client(error: reqwest::Error) -> StreamableHttpError<WorkerError> {
    StreamableHttpError::Client(WorkerError::UpstreamHttp(error))
}

pub(super) fn unavailable(detail: String) -> StreamableHttpError<WorkerError> {
    StreamableHttpError::Client(WorkerError::UpstreamUnavailable { detail })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_body_is_previewed_on_one_line_and_cut() {
        assert_eq!(
            preview(b"  <html>\n  <body>oops</body>\n</html> "),
            "<html> <body>oops</body> </html>"
        );
        let long = "é".repeat(ERROR_PREVIEW + 10);
        let shown = preview(long.as_bytes());
        assert_eq!(shown.chars().count(), ERROR_PREVIEW + 1, "{shown}");
        assert!(shown.ends_with('…'));
    }

    #[tokio::test]
    async fn an_event_over_the_bound_ends_the_stream_and_blank_lines_reset_it() {
        let chunks = |parts: &[&'static str]| {
            futures_util::stream::iter(
                parts
                    .iter()
                    .map(|p| Ok::<_, reqwest::Error>(p.as_bytes().to_vec()))
                    .collect::<Vec<_>>(),
            )
        };
        // Two events of 8 bytes each (`data: ab`), a bound of 8: both pass.
        let ok: Vec<_> = bounded(chunks(&["data: ab\n\n", "data: cd\n\n"]), 8)
            .collect()
            .await;
        assert!(ok.iter().all(Result::is_ok), "{ok:?}");
        // One event split over chunks grows past the bound: the stream ends with an error.
        let over: Vec<_> = bounded(chunks(&["data: ab", "cdef\n", "data: x\n\n"]), 8)
            .collect()
            .await;
        let err = over
            .iter()
            .find_map(|r| r.as_ref().err())
            .unwrap_or_else(|| panic!("no error in {over:?}"));
        assert!(err.to_string().contains("exceeds 8 bytes"), "{err}");
    }
}
