//! The `kraken` binary: parse arguments, start telemetry, run the chosen subcommand.

/// mimalloc instead of the system allocator: codegen and the value codec build many small
/// short-lived trees, and glibc's malloc/free were ~45% of `kraken codegen`'s time on the AWS
/// schema (see docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let mut cli = kraken_bridge::cli::Cli::from_env();
    // The operator is a long-running service: it logs what it does unless told otherwise.
    let operator = matches!(
        cli.command,
        kraken_bridge::cli::Command::Operator(_) | kraken_bridge::cli::Command::RbacManager(_)
    );
    kraken_bridge::cli::init_tracing(if operator {
        cli.verbose.max(1)
    } else {
        cli.verbose
    });
    if let Err(err) = cli.prepare() {
        eprintln!("error: {err:#}");
        return std::process::ExitCode::FAILURE;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("error: failed to start the async runtime: {err}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(cli.run()) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
