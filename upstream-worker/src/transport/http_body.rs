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

    /// Events (lines of `data: …`, `\r\n` or `\n` line ends), cut into chunks anywhere.
    fn event_stream() -> impl proptest::strategy::Strategy<Value = (Vec<Vec<String>>, bool)> {
        use proptest::prelude::*;
        let line = "[a-z:{} ]{0,12}".prop_map(|l| format!("data: {l}"));
        (
            prop::collection::vec(prop::collection::vec(line, 1..4), 0..5),
            any::<bool>(),
        )
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config { cases: 512, ..Default::default() })]

        /// The stream ends with an error exactly when one event (its bytes but line ends)
        /// is over the bound, wherever the chunks are cut, and every byte before passes.
        #[test]
        fn the_bound_holds_per_event_wherever_chunks_are_cut(
            (events, crlf) in event_stream(),
            cuts in proptest::collection::vec(proptest::prelude::any::<proptest::sample::Index>(), 0..6),
            max in 8usize..48,
        ) {
            let end = if crlf { "\r\n" } else { "\n" };
            let text: String = events
                .iter()
                .map(|lines| format!("{}{end}", lines.iter().map(|l| format!("{l}{end}")).collect::<String>()))
                .collect();
            let over = events.iter().any(|lines| lines.iter().map(String::len).sum::<usize>() > max);
            let bytes = text.into_bytes();
            let mut at: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
            at.extend([0, bytes.len()]);
            at.sort_unstable();
            let pieces: Vec<_> = at
                .windows(2)
                .map(|w| Ok::<_, reqwest::Error>(bytes[w[0]..w[1]].to_vec()))
                .collect();
            let out: Vec<_> = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap_or_else(|e| panic!("{e}"))
                .block_on(bounded(futures_util::stream::iter(pieces), max).collect());
            let failed = out.iter().any(Result::is_err);
            proptest::prop_assert_eq!(failed, over);
            let passed: Vec<u8> = out.into_iter().map_while(Result::ok).flatten().collect();
            proptest::prop_assert!(bytes.starts_with(&passed));
        }
    }
}
