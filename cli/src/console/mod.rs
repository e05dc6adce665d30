//! `tutti console` (SPEC §13): a local web page for connectors, tools, sessions and activity.
//!
//! A foreground client of the kernel like every other command: it listens on 127.0.0.1 only,
//! prints a one-time login URL (and opens it through [`crate::browser`], never on an argv),
//! and serves server-rendered HTML (maud) plus one small script and one stylesheet from the
//! binary. Every request passes [`access`]: the loopback Host/Origin rule of SPEC §5, then the
//! `HttpOnly`, `SameSite=Strict` cookie the login set; every change carries a per-page CSRF
//! token and the installed release the page saw (the kernel refuses a stale one). It ends on
//! Ctrl-C, and shortly after the kernel is gone (the page says "the runtime is not running"
//! meanwhile).

mod access;
mod actions;
mod activity;
mod link;
mod live;
mod market;
mod pages;
mod views;

use std::future::IntoFuture;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};

use crate::args::ConsoleArgs;
use crate::error::CliError;

/// How long the page keeps saying "the runtime is not running" after the kernel is gone,
/// before the console ends.
const GONE_GRACE: Duration = Duration::from_secs(15);

use access::{Console, Shared};

/// Runs the console until Ctrl-C, or until the kernel is gone.
pub(crate) async fn run(state_dir: &Path, args: ConsoleArgs) -> Result<ExitCode, CliError> {
    // Fails at once, with the usual line, when no kernel runs.
    let kernel = crate::kernel::Kernel::connect(state_dir).await?;
    drop(kernel);
    let listener =
        tokio::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, args.port)))
            .await
            .map_err(|source| CliError::ConsoleBind {
                port: args.port,
                source,
            })?;
    let port = listener
        .local_addr()
        .map_err(|source| CliError::ConsoleServe { source })?
        .port();
    let console: Shared = Arc::new(Console {
        state_dir: state_dir.to_path_buf(),
        access: access::Access::default(),
        page: std::sync::Mutex::new(None),
    });
    let login = console
        .access
        .new_login()
        .map_err(|source| CliError::ConsoleServe { source })?;
    let url = format!("http://127.0.0.1:{port}/login?token={login}");
    println!("Console: {url}");
    println!("(a one-time login link; Ctrl-C stops the console)");
    if !args.no_open {
        // The browser gets the path of a private page that leads to the URL, never the URL.
        match crate::browser::open(state_dir, &url) {
            Ok(page) => console.keep_page(page),
            Err(reason) => crate::output::note(&format!(
                "tutti: cannot open a browser ({reason}); open the URL above yourself"
            )),
        }
    }
    let gone = tokio::spawn(link::watch_kernel(state_dir.to_path_buf()));
    let app = router(console);
    let shown_dir = state_dir.display().to_string();
    let stop = async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => false,
            _ = gone => {
                crate::output::note(&format!(
                    "tutti: the runtime stopped (state dir {shown_dir}); the console ends in {} s",
                    GONE_GRACE.as_secs()
                ));
                tokio::time::sleep(GONE_GRACE).await;
                true
            }
        }
    };
    let (tx, rx) = tokio::sync::oneshot::channel::<bool>();
    let kernel_gone = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let gone_flag = kernel_gone.clone();
    let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
        let gone = stop.await;
        gone_flag.store(gone, std::sync::atomic::Ordering::SeqCst);
        let _ = tx.send(gone);
    });
    // Open event streams (activity) would hold a graceful shutdown open: stop soon after.
    let serve = async move {
        let mut serve = std::pin::pin!(serve.into_future());
        tokio::select! {
            r = &mut serve => r,
            _ = after_stop(rx) => Ok(()),
        }
    };
    serve
        .await
        .map_err(|source| CliError::ConsoleServe { source })?;
    if kernel_gone.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(CliError::ConsoleKernelGone {
            state_dir: state_dir.to_path_buf(),
            up: crate::kernel::up_command(state_dir),
        });
    }
    Ok(ExitCode::SUCCESS)
}

async fn after_stop(rx: tokio::sync::oneshot::Receiver<bool>) {
    let _ = rx.await;
    tokio::time::sleep(Duration::from_millis(500)).await;
}

fn router(console: Shared) -> Router {
    Router::new()
        .route("/login", get(access::login))
        .route("/", get(pages::connectors))
        .route("/fragment/connectors", get(pages::connector_cards))
        .route("/fragment/connectors/events", get(live::events))
        .route("/connectors/{key}", get(pages::detail))
        .route("/connectors/{key}/probe", post(actions::probe))
        .route(
            "/connectors/{key}/connect",
            get(pages::connect).post(actions::connect),
        )
        .route(
            "/connectors/{key}/approve",
            get(pages::confirm_approve).post(actions::approve),
        )
        .route(
            "/connectors/{key}/disconnect",
            get(pages::confirm_disconnect).post(actions::disconnect),
        )
        .route(
            "/connectors/{key}/uninstall",
            get(pages::confirm_uninstall).post(actions::uninstall),
        )
        .route("/install", get(market::view).post(actions::install))
        .route("/install/plan", post(actions::plan))
        .route("/install/stage", post(market::stage))
        .route("/install/discard", post(market::cancel))
        .route("/sessions", get(pages::sessions))
        .route("/sessions/revoke", post(actions::revoke))
        .route("/sessions/revoke-all", post(actions::revoke_all))
        .route("/confirmations", get(pages::confirmations))
        .route("/fragment/confirmations", get(pages::confirmation_rows))
        .route("/confirmations/answer", post(actions::answer_confirmation))
        .route("/activity", get(pages::activity))
        .route("/activity/events", get(activity::events))
        .route("/static/console.js", get(pages::script))
        .route("/static/console.css", get(pages::stylesheet))
        .layer(axum::middleware::from_fn_with_state(
            console.clone(),
            access::guard,
        ))
        .layer(axum::middleware::from_fn(access::security_headers))
        .with_state(console)
}
