//! The `takt` binary.

fn main() -> std::process::ExitCode {
    // A worker process serves its plugin and never returns from here.
    takt_host::worker::serve_if_worker();
    takt_host::cli::main()
}
