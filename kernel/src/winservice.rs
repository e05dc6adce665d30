//! `tutti-kernel --service`: the kernel as a Windows service under the Service Control
//! Manager. Stop and Shutdown from the SCM run the same graceful shutdown as SIGTERM on Unix
//! (revoke tokens, drain, stop every child), then the service reports Stopped with exit code 0.

use std::ffi::OsString;
use std::sync::Mutex;
use std::time::Duration;

use windows_service::service::{
    ServiceControl, ServiceControlAccept, ServiceExitCode, ServiceState, ServiceStatus, ServiceType,
};
use windows_service::service_control_handler::{
    self, ServiceControlHandlerResult, ServiceStatusHandle,
};
use windows_service::{define_windows_service, service_dispatcher};

use crate::error::KernelError;
use crate::run::Config;

/// The service name the kernel registers under (and `tutti service install` creates).
pub const SERVICE_NAME: &str = "tutti-kernel";

const SERVICE_TYPE: ServiceType = ServiceType::OWN_PROCESS;
/// What the SCM is told to expect for the graceful shutdown (longer than the kernel's own
/// bound, `timing::KERNEL_STOP_BOUND`).
const STOP_WAIT_HINT: Duration = tutti_rules::timing::SERVICE_MANAGER_STOP;
/// Exit code reported when the kernel itself failed (details are in `logs/kernel.log`).
const FAILED_EXIT_CODE: u32 = 1;

/// Hands the configuration to the service thread the SCM starts (its entry point takes no
/// context), and the kernel's error back.
static CONFIG: Mutex<Option<Config>> = Mutex::new(None);
static FAILURE: Mutex<Option<String>> = Mutex::new(None);

define_windows_service!(ffi_service_main, service_main);

/// Connects to the SCM and runs the kernel as the service `tutti-kernel` until the SCM stops
/// it. Blocks the calling thread; must not be called from inside a tokio runtime.
pub fn run_service(config: Config) -> Result<(), KernelError> {
    *crate::state::lock(&CONFIG) = Some(config);
    service_dispatcher::start(SERVICE_NAME, ffi_service_main).map_err(|e| KernelError::Io {
        context: "connecting to the Service Control Manager (--service only works when the \
                  SCM starts tutti-kernel as a service)"
            .into(),
        source: std::io::Error::other(e),
    })?;
    match crate::state::lock(&FAILURE).take() {
        None => Ok(()),
        Some(detail) => Err(KernelError::Io {
            context: "running as a Windows service".into(),
            source: std::io::Error::other(detail),
        }),
    }
}

/// Entry point on the SCM's service thread.
fn service_main(_arguments: Vec<OsString>) {
    let Some(config) = crate::state::lock(&CONFIG).take() else {
        return;
    };
    if let Err(detail) = serve(config) {
        tracing::error!("windows service: {detail}");
        *crate::state::lock(&FAILURE) = Some(detail);
    }
}

fn status(
    state: ServiceState,
    controls_accepted: ServiceControlAccept,
    exit_code: ServiceExitCode,
    wait_hint: Duration,
) -> ServiceStatus {
    ServiceStatus {
        service_type: SERVICE_TYPE,
        current_state: state,
        controls_accepted,
        exit_code,
        checkpoint: 0,
        wait_hint,
        process_id: None,
    }
}

fn report_stopped(handle: ServiceStatusHandle, exit_code: ServiceExitCode) {
    if let Err(e) = handle.set_service_status(status(
        ServiceState::Stopped,
        ServiceControlAccept::empty(),
        exit_code,
        Duration::ZERO,
    )) {
        tracing::error!("cannot report Stopped to the SCM: {e}");
    }
}

fn serve(config: Config) -> Result<(), String> {
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let handler = move |control| match control {
        ServiceControl::Stop | ServiceControl::Shutdown => {
            let _ = stop_tx.send(true);
            ServiceControlHandlerResult::NoError
        }
        ServiceControl::Interrogate => ServiceControlHandlerResult::NoError,
        _ => ServiceControlHandlerResult::NotImplemented,
    };
    let handle = service_control_handler::register(SERVICE_NAME, handler)
        .map_err(|e| format!("cannot register the service control handler: {e}"))?;

    // One thread, like the frontend and the workers: the kernel's per-request work is small
    // (session checks, audit records, route events), and blocking file work (hashing and
    // copying releases) runs on the blocking pool. Fewer threads, fewer malloc arenas, no
    // cross-thread wake-ups. Children are spawned from runtime tasks, i.e. from this thread,
    // which lives as long as the kernel (PR_SET_PDEATHSIG follows the spawning thread).
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            report_stopped(handle, ServiceExitCode::ServiceSpecific(FAILED_EXIT_CODE));
            return Err(format!("cannot start the async runtime: {e}"));
        }
    };
    if let Err(e) = handle.set_service_status(status(
        ServiceState::Running,
        ServiceControlAccept::STOP | ServiceControlAccept::SHUTDOWN,
        ServiceExitCode::Win32(0),
        Duration::ZERO,
    )) {
        tracing::warn!("cannot report Running to the SCM: {e}");
    }
    tracing::info!("running as the Windows service {SERVICE_NAME}");

    let stop = async move {
        // A dropped sender (handler gone) also ends the kernel.
        let _ = stop_rx.wait_for(|stop| *stop).await;
        tracing::info!("service stop requested");
        if let Err(e) = handle.set_service_status(status(
            ServiceState::StopPending,
            ServiceControlAccept::empty(),
            ServiceExitCode::Win32(0),
            STOP_WAIT_HINT,
        )) {
            tracing::warn!("cannot report StopPending to the SCM: {e}");
        }
    };
    let result = rt.block_on(crate::run::run_until(config, stop));
    rt.shutdown_timeout(Duration::from_secs(2));
    match result {
        Ok(()) => {
            report_stopped(handle, ServiceExitCode::Win32(0));
            Ok(())
        }
        Err(e) => {
            report_stopped(handle, ServiceExitCode::ServiceSpecific(FAILED_EXIT_CODE));
            Err(e.to_string())
        }
    }
}
