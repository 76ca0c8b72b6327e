//! `takt service install|uninstall|start|stop`: `takt run` as a Windows service, through the
//! `windows-service` crate (the service entry point, the control handler, the service control
//! manager's API). On every other system the command says it is Windows-only and where the
//! Linux way is (`packaging/systemd/takt.service`).
//!
//! * **Paths**: a service starts in `C:\Windows\System32` as another account, with none of
//!   the installing prompt's environment. `install` therefore records absolute paths in the
//!   service's command line (`takt.exe service run --name N --config C:\…\takt.toml
//!   --log-file C:\…\takt-service.log`), checks that the config loads, and the service
//!   changes into the config file's directory before it starts the host: the config's
//!   relative paths (`database`, `plugin_dir`, …) already resolve against the file's
//!   directory, and `exe::run` programs without a `cwd` start there too rather than in
//!   System32.
//! * **Stop**: the SCM's Stop, Shutdown and Preshutdown controls are [`Stopper`] requests,
//!   exactly what SIGTERM is to `takt run`: claim nothing more, drain for `grace`, cancel and
//!   record the rest. The service reports `StopPending` with a wait hint of grace + 15 s
//!   while it drains; `install` sets the preshutdown timeout to the same, so that a system
//!   shutdown waits for the drain instead of cutting it at the default.
//! * **Logs**: a service has no console. The run lines and the logs go to a file (the log
//!   file, appended to): what an operator can read with any editor or `Get-Content -Wait`,
//!   and what the Windows event log cannot hold without a registered message DLL (its
//!   entries would say "the description cannot be found"). The file is not rotated.
//!
//! [`Stopper`]: super::signals::Stopper

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Subcommand};

/// `takt service …`.
#[derive(Debug, Subcommand)]
pub(super) enum ServiceCmd {
    /// Register `takt run` as a Windows service (an elevated prompt is needed).
    Install(InstallArgs),
    /// Stop the service if it runs and remove it.
    Uninstall(NameArgs),
    /// Start the service and wait until it schedules.
    Start(NameArgs),
    /// Stop the service (the graceful drain) and wait until it has stopped.
    Stop(NameArgs),
    /// The service itself, as the service control manager starts it (not for a prompt).
    #[command(hide = true)]
    Run(ServiceRunArgs),
}

/// Options of `takt service install`.
#[derive(Debug, Args)]
#[cfg_attr(not(windows), allow(dead_code))]
pub(super) struct InstallArgs {
    /// The config file the service runs [default: takt.toml in the working directory];
    /// recorded as an absolute path.
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// The service's name (sc.exe's and services.msc's key).
    #[arg(long, default_value = "takt")]
    name: String,
    /// The name services.msc shows [default: "takt job scheduler (NAME)"].
    #[arg(long, value_name = "TEXT")]
    display_name: Option<String>,
    /// Where the service writes its run lines and logs [default: takt-service.log beside the
    /// config file]; recorded as an absolute path.
    #[arg(long, value_name = "PATH")]
    log_file: Option<PathBuf>,
    /// The account the service runs as (`NT AUTHORITY\LocalService`, `.\takt`, a domain
    /// account) [default: LocalSystem]. It needs write access to the database's directory.
    #[arg(long, value_name = "NAME")]
    account: Option<String>,
    /// The environment variable holding the account's password (never on the command line).
    #[arg(long, value_name = "VAR", requires = "account")]
    password_env: Option<String>,
    /// Start only when asked (`takt service start`) instead of at boot.
    #[arg(long)]
    manual: bool,
}

/// The service to act on.
#[derive(Debug, Args)]
#[cfg_attr(not(windows), allow(dead_code))]
pub(super) struct NameArgs {
    /// The service's name.
    #[arg(long, default_value = "takt")]
    name: String,
}

/// The command line `install` records.
#[derive(Debug, Args)]
#[cfg_attr(not(windows), allow(dead_code))]
pub(super) struct ServiceRunArgs {
    /// The service's name, as installed.
    #[arg(long)]
    name: String,
    /// The config file, absolute.
    #[arg(long, value_name = "PATH")]
    config: PathBuf,
    /// The log file, absolute.
    #[arg(long, value_name = "PATH")]
    log_file: PathBuf,
}

/// Runs a `takt service` command.
pub(super) fn run(cmd: ServiceCmd) -> Result<()> {
    imp::run(cmd)
}

#[cfg(not(windows))]
mod imp {
    use anyhow::{Result, bail};

    use super::ServiceCmd;

    pub(super) fn run(cmd: ServiceCmd) -> Result<()> {
        let what = match cmd {
            ServiceCmd::Install(_) => "install",
            ServiceCmd::Uninstall(_) => "uninstall",
            ServiceCmd::Start(_) => "start",
            ServiceCmd::Stop(_) => "stop",
            ServiceCmd::Run(_) => "run",
        };
        bail!(
            "takt service {what}: Windows only (it registers takt run with the Windows service \
             control manager); on Linux run takt as a systemd service with the unit \
             packaging/systemd/takt.service (README: \"Running as a service on Linux\")"
        )
    }
}

#[cfg(windows)]
mod imp {
    use std::ffi::{OsStr, OsString};
    use std::path::{Path, PathBuf};
    use std::sync::{Arc, Mutex, OnceLock, PoisonError};
    use std::time::{Duration, Instant};

    use anyhow::{Context, Result, anyhow, bail};
    use windows_service::service::{
        ServiceAccess, ServiceControl, ServiceControlAccept, ServiceErrorControl, ServiceExitCode,
        ServiceInfo, ServiceStartType, ServiceState, ServiceStatus, ServiceType,
    };
    use windows_service::service_control_handler::{self, ServiceControlHandlerResult};
    use windows_service::service_manager::{ServiceManager, ServiceManagerAccess};
    use windows_service::{define_windows_service, service_dispatcher};

    use super::{InstallArgs, NameArgs, ServiceCmd, ServiceRunArgs};
    use crate::cli::notify::{Notifier, Phase};
    use crate::cli::run::{RunArgs, run_as};
    use crate::config::{Config, DEFAULT_FILE};

    /// Time to record the cancelled runs after the grace (the executor's grace and the
    /// store's writes), in every wait hint and timeout below.
    const AFTER_GRACE: Duration = Duration::from_secs(15);

    pub(super) fn run(cmd: ServiceCmd) -> Result<()> {
        match cmd {
            ServiceCmd::Install(args) => install(args),
            ServiceCmd::Uninstall(args) => uninstall(&args),
            ServiceCmd::Start(args) => start(&args),
            ServiceCmd::Stop(args) => stop(&args),
            ServiceCmd::Run(args) => serve(args),
        }
    }

    fn manager(access: ServiceManagerAccess) -> Result<ServiceManager> {
        ServiceManager::local_computer(None::<&str>, access).map_err(|e| {
            anyhow!(
                "cannot open the service control manager ({e}); run this from an elevated \
                 prompt (Run as administrator)"
            )
        })
    }

    fn install(args: InstallArgs) -> Result<()> {
        let file = args.config.unwrap_or_else(|| PathBuf::from(DEFAULT_FILE));
        let file = std::fs::canonicalize(&file).with_context(|| {
            format!(
                "cannot find the config file {} (write one with `takt init`, or pass --config)",
                file.display()
            )
        })?;
        let file = strip_verbatim(file);
        // The service reads the file as it is; a broken one is better found now.
        let config = Config::load(&file)?;
        let dir = file.parent().unwrap_or(Path::new(".")).to_path_buf();
        let log_file = match args.log_file {
            Some(p) => std::path::absolute(&p)
                .with_context(|| format!("cannot resolve the log file {}", p.display()))?,
            None => dir.join("takt-service.log"),
        };
        let password = match &args.password_env {
            Some(var) => Some(std::env::var_os(var).ok_or_else(|| {
                anyhow!("--password-env {var}: the variable is not set in this prompt")
            })?),
            None => None,
        };
        let exe = std::env::current_exe().context("cannot find takt.exe's own path")?;
        let info = ServiceInfo {
            name: OsString::from(&args.name),
            display_name: OsString::from(
                args.display_name
                    .clone()
                    .unwrap_or_else(|| format!("takt job scheduler ({})", args.name)),
            ),
            service_type: ServiceType::OWN_PROCESS,
            start_type: if args.manual {
                ServiceStartType::OnDemand
            } else {
                ServiceStartType::AutoStart
            },
            error_control: ServiceErrorControl::Normal,
            executable_path: exe.clone(),
            launch_arguments: vec![
                "service".into(),
                "run".into(),
                "--name".into(),
                OsString::from(&args.name),
                "--config".into(),
                file.clone().into_os_string(),
                "--log-file".into(),
                log_file.clone().into_os_string(),
            ],
            dependencies: vec![],
            account_name: args.account.as_ref().map(OsString::from),
            account_password: password,
        };
        let manager =
            manager(ServiceManagerAccess::CONNECT | ServiceManagerAccess::CREATE_SERVICE)?;
        let service = manager
            .create_service(&info, ServiceAccess::CHANGE_CONFIG)
            .map_err(|e| anyhow!("cannot create the service {} ({e}); is it installed already (`takt service uninstall --name {0}`)?", args.name))?;
        service
            .set_description("takt: runs the scheduled jobs of its takt.toml")
            .context("cannot set the service's description")?;
        service
            .set_preshutdown_timeout(config.grace + AFTER_GRACE)
            .context("cannot set the service's preshutdown timeout")?;
        outln!("installed service {} ({})", args.name, exe.display())?;
        outln!("  config:   {}", file.display())?;
        outln!("  database: {}", config.database)?;
        outln!("  plugins:  {}", config.plugin_dir.display())?;
        outln!("  log file: {}", log_file.display())?;
        outln!(
            "  account:  {}",
            args.account.as_deref().unwrap_or("LocalSystem")
        )?;
        let inherited: Vec<String> = std::env::vars_os()
            .filter_map(|(k, _)| k.into_string().ok())
            .filter(|k| k.starts_with("TAKT_"))
            .collect();
        if !inherited.is_empty() {
            outln!(
                "note: the service does not see {} set in this prompt; set them machine-wide \
                 (System Properties > Environment Variables, or setx /M) or in the config file",
                inherited.join(", ")
            )?;
        }
        outln!("start it: takt service start --name {}", args.name)?;
        Ok(())
    }

    /// `\\?\C:\dir` (what canonicalize returns) as `C:\dir`: the SCM's command line and the
    /// output read better, and every API takes both.
    fn strip_verbatim(p: PathBuf) -> PathBuf {
        match p.to_str().and_then(|s| s.strip_prefix(r"\\?\")) {
            Some(rest) if !rest.starts_with("UNC\\") => PathBuf::from(rest),
            _ => p,
        }
    }

    fn uninstall(args: &NameArgs) -> Result<()> {
        let manager = manager(ServiceManagerAccess::CONNECT)?;
        let service = manager
            .open_service(
                &args.name,
                ServiceAccess::QUERY_STATUS | ServiceAccess::STOP | ServiceAccess::DELETE,
            )
            .map_err(|e| anyhow!("cannot open the service {} ({e})", args.name))?;
        if service.query_status()?.current_state != ServiceState::Stopped {
            outln!("stopping service {} (the graceful drain) …", args.name)?;
            service.stop().context("cannot stop the service")?;
            wait_for(&service, ServiceState::Stopped, Duration::from_secs(600))?;
        }
        service.delete().context("cannot remove the service")?;
        outln!(
            "removed service {} (its database and log file are kept)",
            args.name
        )?;
        Ok(())
    }

    fn start(args: &NameArgs) -> Result<()> {
        let manager = manager(ServiceManagerAccess::CONNECT)?;
        let service = manager
            .open_service(
                &args.name,
                ServiceAccess::START | ServiceAccess::QUERY_STATUS,
            )
            .map_err(|e| anyhow!("cannot open the service {} ({e})", args.name))?;
        service
            .start::<&OsStr>(&[])
            .map_err(|e| anyhow!("cannot start the service {} ({e})", args.name))?;
        match wait_for(&service, ServiceState::Running, Duration::from_secs(300))? {
            ServiceState::Running => outln!("service {} is running", args.name)?,
            other => bail!(
                "service {} did not start (it is {other:?}); its log file says why",
                args.name
            ),
        }
        Ok(())
    }

    fn stop(args: &NameArgs) -> Result<()> {
        let manager = manager(ServiceManagerAccess::CONNECT)?;
        let service = manager
            .open_service(
                &args.name,
                ServiceAccess::STOP | ServiceAccess::QUERY_STATUS,
            )
            .map_err(|e| anyhow!("cannot open the service {} ({e})", args.name))?;
        service
            .stop()
            .map_err(|e| anyhow!("cannot stop the service {} ({e})", args.name))?;
        outln!("stopping service {} (the graceful drain) …", args.name)?;
        wait_for(&service, ServiceState::Stopped, Duration::from_secs(600))?;
        outln!("service {} has stopped", args.name)?;
        Ok(())
    }

    /// Polls until the service is in `want`, or has settled in the other steady state (a
    /// start that failed ends `Stopped`); returns the state it is in.
    fn wait_for(
        service: &windows_service::service::Service,
        want: ServiceState,
        limit: Duration,
    ) -> Result<ServiceState> {
        let start = Instant::now();
        loop {
            let state = service.query_status()?.current_state;
            // The SCM may not have moved to the pending state yet right after the call.
            let settled = matches!(state, ServiceState::Stopped | ServiceState::Running)
                && start.elapsed() > Duration::from_secs(2);
            if state == want || settled {
                return Ok(state);
            }
            if start.elapsed() > limit {
                bail!("the service is still {state:?} after {}s", limit.as_secs());
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The command line of the running service (the SCM passes its own arguments to the
    /// service's main, not the process's).
    static ARGS: OnceLock<ServiceRunArgs> = OnceLock::new();

    define_windows_service!(ffi_service_main, service_main);

    /// Hands the process to the service control manager: returns when the service stopped.
    fn serve(args: ServiceRunArgs) -> Result<()> {
        let name = args.name.clone();
        let _ = ARGS.set(args);
        service_dispatcher::start(&name, ffi_service_main).map_err(|e| {
            anyhow!(
                "cannot connect to the service control manager ({e}): `takt service run` is \
                 what the SCM starts; from a prompt use `takt service start --name {name}` or \
                 `takt run`"
            )
        })
    }

    fn service_main(_: Vec<OsString>) {
        let Some(args) = ARGS.get() else { return };
        // Before anything can print: the service has no console.
        let logged = log_to_file(&args.log_file);
        let (stopper, requests) = crate::cli::signals::channel();
        let handler = move |control| match control {
            ServiceControl::Stop => {
                stopper.request("the service control manager asked to stop");
                ServiceControlHandlerResult::NoError
            }
            ServiceControl::Shutdown | ServiceControl::Preshutdown => {
                stopper.request("the system is shutting down");
                ServiceControlHandlerResult::NoError
            }
            ServiceControl::Interrogate => ServiceControlHandlerResult::NoError,
            _ => ServiceControlHandlerResult::NotImplemented,
        };
        let Ok(status) = service_control_handler::register(&args.name, handler) else {
            return;
        };
        let status = Arc::new(Mutex::new(status));
        let report = {
            let status = status.clone();
            move |state: ServiceState, accept: ServiceControlAccept, wait: Duration, code: u32| {
                let s = ServiceStatus {
                    service_type: ServiceType::OWN_PROCESS,
                    current_state: state,
                    controls_accepted: accept,
                    exit_code: if code == 0 {
                        ServiceExitCode::Win32(0)
                    } else {
                        ServiceExitCode::ServiceSpecific(code)
                    },
                    checkpoint: if wait.is_zero() { 0 } else { 1 },
                    wait_hint: wait,
                    process_id: None,
                };
                let _ = status
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .set_service_status(s);
            }
        };
        // Opening the database may wait for it: the SCM is told to expect a slow start.
        report(
            ServiceState::StartPending,
            ServiceControlAccept::empty(),
            Duration::from_secs(120),
            0,
        );
        let result = logged.and_then(|()| {
            let dir = args.config.parent().unwrap_or(Path::new("."));
            std::env::set_current_dir(dir).with_context(|| {
                format!(
                    "cannot change into the config's directory {}",
                    dir.display()
                )
            })?;
            let phase_report = report.clone();
            // The SCM has no status text: the summaries go to the log file.
            let notifier = Notifier::callback(Arc::new(move |phase: Phase<'_>| match phase {
                Phase::Ready(status) => {
                    tracing::info!("service running: {status}");
                    phase_report(
                        ServiceState::Running,
                        ServiceControlAccept::STOP
                            | ServiceControlAccept::SHUTDOWN
                            | ServiceControlAccept::PRESHUTDOWN,
                        Duration::ZERO,
                        0,
                    )
                }
                Phase::Status(status) => tracing::debug!("service status: {status}"),
                Phase::Stopping { status, wait } => {
                    tracing::info!("service {status}");
                    phase_report(
                        ServiceState::StopPending,
                        ServiceControlAccept::empty(),
                        wait,
                        0,
                    )
                }
            }));
            run_as(
                RunArgs::service(args.config.clone()),
                notifier,
                Some(requests),
            )
        });
        let code = match result {
            Ok(()) => 0,
            Err(e) => {
                errln!("error: {e:#}");
                1
            }
        };
        report(
            ServiceState::Stopped,
            ServiceControlAccept::empty(),
            Duration::ZERO,
            code,
        );
    }

    /// Points the process's stdout and stderr at `file` (appended to), where the run lines
    /// and the logs of `takt run` go. std looks the standard handles up on every write, so
    /// setting them is enough.
    fn log_to_file(file: &Path) -> Result<()> {
        use std::os::windows::io::IntoRawHandle;
        use windows_sys::Win32::System::Console::{
            STD_ERROR_HANDLE, STD_OUTPUT_HANDLE, SetStdHandle,
        };
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let open = || {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(file)
                .with_context(|| format!("cannot open the log file {}", file.display()))
        };
        let out = open()?.into_raw_handle();
        let err = open()?.into_raw_handle();
        // SAFETY: the handles are open files this process owns from here on (never closed:
        // they are the process's standard handles until it ends).
        unsafe {
            SetStdHandle(STD_OUTPUT_HANDLE, out as _);
            SetStdHandle(STD_ERROR_HANDLE, err as _);
        }
        Ok(())
    }
}
