//! The `takt` binary.

fn main() -> std::process::ExitCode {
    takt_host::cli::main()
}
