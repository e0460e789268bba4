//! The `svcflow` command.

mod cli;
mod config;
mod daemon;
mod dump;
mod get;
mod node_setup;
mod ofp;
mod plan;
mod store;
mod tls;
mod trace;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

/// mimalloc: the daemon allocates and frees millions of small objects on a bulk load (JSON
/// values, model entries, flows); glibc's allocator spent a third of such a load in its own
/// bookkeeping and kept the freed memory fragmented.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's settings for the daemon. It reads them from the environment once, at the
/// process's first allocation (before `main`), and fixes an arena's commit mode when it
/// reserves it, so they cannot be set from Rust: `svcflow run` starts itself again with them
/// when they are unset (a value the user set is kept).
/// - `ARENA_EAGER_COMMIT=0`: commit arena memory as it is used. An eagerly committed arena
///   gives freed pages back with `MADV_FREE`, which the kernel still counts in the resident
///   set until it needs the memory, so the daemon looked (and was limited as) 30–40 MiB
///   bigger after a bulk load (issue 19).
/// - `PURGE_DELAY=100`: give freed pages back 100 ms after they are freed, not the 1 s
///   mimalloc waits by default (which kept 20–30 MiB more resident after a bulk load). At 0
///   the pages a load frees and takes again within moments were given back and faulted in
///   again: at 30,000 services the kernel's time in the daemon during a full load was
///   0.36–0.42 s against 0.20–0.27 s at 100 ms (× 10 endpoints: 1.01 against 0.56 s), for
///   8–10 MiB more resident (`docs/performance.md`).
const ALLOCATOR_ENV: [(&str, &str); 2] = [
    ("MIMALLOC_ARENA_EAGER_COMMIT", "0"),
    ("MIMALLOC_PURGE_DELAY", "100"),
];

/// Starts this program again with [`ALLOCATOR_ENV`] if any of it is unset; returns only if
/// that is not needed or fails (the daemon then runs with mimalloc's defaults).
fn with_allocator_settings() {
    use std::os::unix::process::CommandExt;
    if ALLOCATOR_ENV
        .iter()
        .all(|(k, _)| std::env::var_os(k).is_some())
    {
        return;
    }
    let mut args = std::env::args_os();
    // The binary's own path, not `/proc/self/exe`, so that the process keeps its name
    // (`ps`, `pgrep svcflow` and the kernel's `comm` would say `exe`); that link only if the
    // path cannot be read (the binary was replaced meanwhile).
    let program = std::env::current_exe()
        .ok()
        .filter(|p| p.is_file())
        .unwrap_or_else(|| "/proc/self/exe".into());
    let mut command = std::process::Command::new(program);
    if let Some(arg0) = args.next() {
        command.arg0(arg0);
    }
    command.args(args);
    for (k, v) in ALLOCATOR_ENV {
        if std::env::var_os(k).is_none() {
            command.env(k, v);
        }
    }
    let e = command.exec();
    eprintln!("svcflow run: starting again with the allocator's settings: {e}; going on without");
}

/// Whether `-o FORMAT` asks for JSON (`json`) or the command's own `text` form; anything
/// else is a usage error (exit 2).
fn output(command: &str, format: &str, text: &str) -> Result<bool, ExitCode> {
    match format {
        "json" => Ok(true),
        f if f == text => Ok(false),
        other => {
            eprintln!("svcflow {command}: -o {other}: expected {text} or json");
            Err(ExitCode::from(2))
        }
    }
}

/// Prints `result`'s text, or its error after `svcflow COMMAND:` (exit 1).
fn print_or_fail(command: &str, result: Result<String, String>) -> ExitCode {
    match result {
        Ok(text) => {
            let _ = write!(std::io::stdout(), "{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("svcflow {command}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match cli.command {
        cli::Command::Run(args) => match args.resolve() {
            Ok(config) if args.check => {
                // A closed pipe (`| head`) is not an error worth a panic.
                let _ = writeln!(std::io::stdout(), "{config:#?}");
                ExitCode::SUCCESS
            }
            Ok(config) => {
                with_allocator_settings();
                daemon::run(config)
            }
            Err(e) => {
                eprintln!("svcflow run: {e}");
                ExitCode::from(2)
            }
        },
        cli::Command::Ofp(cli::OfpCommand::Print(args)) => {
            match ofp::run(
                &args.hex,
                args.reencode,
                &mut std::io::stdin().lock(),
                &mut std::io::stdout().lock(),
            ) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("svcflow ofp print: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        cli::Command::Ofp(cli::OfpCommand::DumpFlows(args)) => {
            print_from_switch("dump-flows", dump::dump_flows(&args))
        }
        cli::Command::Ofp(cli::OfpCommand::DumpGroups(args)) => {
            print_from_switch("dump-groups", dump::dump_groups(&args))
        }
        cli::Command::Store(command) => print_or_fail("store", store::run(&command)),
        cli::Command::Get(command) => {
            let (args, what): (_, get::Getter) = match command {
                cli::GetCommand::Services(args) => (args, get::services),
                cli::GetCommand::Nodes(args) => (args, get::nodes),
            };
            if let Err(code) = trust(&args.daemon) {
                return code;
            }
            let json = match output("get", &args.output, "table") {
                Ok(json) => json,
                Err(code) => return code,
            };
            print_or_fail(
                "get",
                what(
                    &args.daemon.rest,
                    args.daemon.auth.as_deref(),
                    args.name.as_deref(),
                    json,
                ),
            )
        }
        cli::Command::Plan(args) => {
            if let Err(code) = trust(&args.daemon) {
                return code;
            }
            let json = match output("plan", &args.output, "text") {
                Ok(json) => json,
                Err(code) => return code,
            };
            print_or_fail(
                "plan",
                plan::plan(
                    &args.daemon.rest,
                    args.daemon.auth.as_deref(),
                    args.node.as_deref(),
                    json,
                ),
            )
        }
        cli::Command::Trace(args) => {
            if let Err(code) = trust(&args.daemon) {
                return code;
            }
            let json = match output("trace", &args.output, "text") {
                Ok(json) => json,
                Err(code) => return code,
            };
            let protocol = match trace::proto(&args.proto) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("svcflow trace: {e}");
                    return ExitCode::from(2);
                }
            };
            let request = netvirt::trace::TraceRequest {
                node: args.node,
                from: args.from,
                to: args.to,
                protocol,
            };
            print_or_fail(
                "trace",
                trace::trace(
                    &args.daemon.rest,
                    args.daemon.auth.as_deref(),
                    request,
                    json,
                ),
            )
        }
        cli::Command::Render(args) => {
            let text = match std::fs::read_to_string(&args.file) {
                Ok(text) => text,
                Err(e) => {
                    eprintln!("svcflow render: {}: {e}", args.file.display());
                    return ExitCode::FAILURE;
                }
            };
            let scenario = match netvirt::scenario::Scenario::parse(&text) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("svcflow render: {}: {e}", args.file.display());
                    return ExitCode::FAILURE;
                }
            };
            let out = scenario.render();
            for conflict in &out.conflicts {
                eprintln!("svcflow render: {conflict}");
            }
            let mut stdout = std::io::stdout().lock();
            if !args.groups {
                let _ = stdout.write_all(out.flows.as_bytes());
            }
            if !args.flows {
                let _ = stdout.write_all(out.groups.as_bytes());
            }
            ExitCode::SUCCESS
        }
        cli::Command::NodeSetup(args) => match node_setup::script(&args) {
            Ok(text) => {
                let _ = write!(std::io::stdout(), "{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("svcflow node-setup: {e}");
                ExitCode::from(2)
            }
        },
    }
}

/// Runs one switch query on a small runtime and prints its text.
fn print_from_switch(
    what: &str,
    query: impl std::future::Future<Output = Result<String, String>>,
) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("svcflow ofp {what}: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(query) {
        Ok(text) => {
            let _ = std::io::stdout().write_all(text.as_bytes());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("svcflow ofp {what}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Loads `--ca-cert`, if given, for the REST client's `https://` URLs.
fn trust(daemon: &cli::DaemonRest) -> Result<(), ExitCode> {
    let Some(ca) = &daemon.ca_cert else {
        return Ok(());
    };
    match tls::ca_client(ca) {
        Ok(config) => {
            get::trust(config);
            Ok(())
        }
        Err(e) => {
            eprintln!("svcflow: --ca-cert: {e}");
            Err(ExitCode::FAILURE)
        }
    }
}
