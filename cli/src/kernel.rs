//! The connection to the kernel's control plane and the mapping of its failures to
//! user-facing errors.

use std::error::Error as _;
use std::io;
use std::path::{Path, PathBuf};

use tutti_proto::kernel::admin_client::AdminClient;
use tutti_proto::kernel::market_client::MarketClient;
use tutti_proto::kernel::routes_client::RoutesClient;
use tutti_proto::tonic::transport::Channel;
use tutti_proto::transport::{self, TransportError};

use crate::error::CliError;

/// A connected kernel client, plus the state dir for error messages.
pub(crate) struct Kernel {
    pub(crate) client: AdminClient<Channel>,
    pub(crate) routes: RoutesClient<Channel>,
    channel: Channel,
    state_dir: PathBuf,
}

impl Kernel {
    /// The kernel's `Market` service (SPEC §17), on the same connection.
    pub(crate) fn market(&self) -> MarketClient<Channel> {
        MarketClient::new(self.channel.clone())
            .max_decoding_message_size(tutti_proto::limits::MAX_KERNEL_REPLY_BYTES)
    }
}

impl Kernel {
    /// Connects to the kernel of `state_dir`. A missing or stale socket means no kernel runs.
    pub(crate) async fn connect(state_dir: &Path) -> Result<Self, CliError> {
        let endpoint = transport::kernel_endpoint(state_dir);
        match transport::connect(&endpoint).await {
            Ok(channel) => Ok(Self {
                // Replies grow with the connectors installed (`available`, `status`).
                client: AdminClient::new(channel.clone())
                    .max_decoding_message_size(tutti_proto::limits::MAX_KERNEL_REPLY_BYTES),
                routes: RoutesClient::new(channel.clone())
                    .max_decoding_message_size(tutti_proto::limits::MAX_KERNEL_REPLY_BYTES),
                channel,
                state_dir: state_dir.to_path_buf(),
            }),
            Err(err) => Err(connect_error(state_dir, &endpoint.to_string(), &err)),
        }
    }

    /// Maps a failed RPC: the kernel's own statuses are user-facing and printed as is; a
    /// broken connection says so.
    pub(crate) fn error(&self, status: tonic::Status) -> CliError {
        status_error(&self.state_dir, status)
    }
}

/// Masks text shown from the runtime's logs with every secret value the running kernel knows
/// now (`RedactText`; the values never leave the kernel). Without a kernel, or once it stops
/// answering, text is shown as the runtime wrote it (each process masks what it logs).
pub(crate) struct LogMask(Option<AdminClient<Channel>>);

impl LogMask {
    pub(crate) async fn connect(state_dir: &Path) -> Self {
        Self(Kernel::connect(state_dir).await.ok().map(|k| k.client))
    }

    pub(crate) async fn apply(&mut self, text: String) -> String {
        let Some(client) = self.0.as_mut().filter(|_| !text.is_empty()) else {
            return text;
        };
        let request = tutti_proto::kernel::RedactTextRequest { text };
        match client.redact_text(request.clone()).await {
            Ok(reply) => reply.into_inner().text,
            Err(status) => {
                tracing::warn!(error = %status.message(), "the kernel did not mask the log text");
                self.0 = None;
                request.text
            }
        }
    }
}

/// The `tutti up` that serves `state_dir`: plain when it is the dir `tutti up` picks by
/// itself (`TUTTI_STATE_DIR` or the platform default), else with `--state-dir`.
pub(crate) fn up_command(state_dir: &Path) -> String {
    let default = tutti_rules::state_dir::from_env().and_then(|d| std::path::absolute(d).ok());
    if default.as_deref() == Some(state_dir) {
        "tutti up".to_owned()
    } else {
        format!(
            "tutti up --state-dir {}",
            crate::output::shell_join(&[state_dir.display().to_string()])
        )
    }
}

fn connect_error(state_dir: &Path, endpoint: &str, err: &TransportError) -> CliError {
    match io_kind(err) {
        Some(io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused) => CliError::NoKernel {
            state_dir: state_dir.to_path_buf(),
            up: up_command(state_dir),
        },
        _ => CliError::KernelUnreachable {
            endpoint: endpoint.to_owned(),
            reason: innermost_message(err),
            state_dir: state_dir.to_path_buf(),
        },
    }
}

/// The kind of the first `io::Error` in an error's source chain.
fn io_kind(err: &(dyn std::error::Error + 'static)) -> Option<io::ErrorKind> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            return Some(io.kind());
        }
        cur = e.source();
    }
    None
}

fn innermost_message(err: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = err;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

pub(crate) fn status_error(state_dir: &Path, status: tonic::Status) -> CliError {
    // Statuses made locally by tonic from a transport failure carry their cause as source;
    // statuses sent by the kernel never do.
    let transport_failure = status.source().is_some()
        || (status.code() == tonic::Code::Unavailable
            && (status.message().is_empty()
                || status.message().contains("transport error")
                || status.message().contains("error trying to connect")));
    if transport_failure {
        let reason = if status.message().is_empty() {
            format!("{:?}", status.code())
        } else {
            status.message().to_owned()
        };
        return CliError::KernelLost {
            state_dir: state_dir.to_path_buf(),
            reason,
        };
    }
    let message = if status.message().trim().is_empty() {
        format!(
            "the kernel refused the request ({}); see {} for details",
            status.code().description(),
            tutti_rules::state_dir::layout::kernel_log(state_dir).display()
        )
    } else {
        status.message().to_owned()
    };
    CliError::Kernel {
        code: status.code(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_status_message_is_printed_as_is() {
        let err = status_error(
            Path::new("/s"),
            tonic::Status::not_found("connector gh is not installed; see `tutti status`"),
        );
        assert_eq!(
            err.to_string(),
            "connector gh is not installed; see `tutti status`"
        );
    }

    #[test]
    fn empty_kernel_status_gets_a_message() {
        let err = status_error(Path::new("/s"), tonic::Status::internal(""));
        assert!(err.to_string().contains("kernel.log"), "{err}");
    }

    #[test]
    fn transport_unavailable_means_lost_kernel() {
        let err = status_error(
            Path::new("/s"),
            tonic::Status::unavailable("transport error"),
        );
        assert!(matches!(err, CliError::KernelLost { .. }), "{err}");
    }

    #[tokio::test]
    async fn missing_socket_means_no_kernel() {
        let dir = crate::test_util::TempDir::new("nokernel");
        let err = Kernel::connect(dir.path()).await.err();
        let msg = err.map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(
            msg,
            format!(
                "no kernel is running for state dir {dir}; start it with `tutti up --state-dir {dir}`",
                dir = dir.path().display()
            )
        );
    }
}
