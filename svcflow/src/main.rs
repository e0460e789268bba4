//! The `svcflow` command.

mod cli;
mod config;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match cli.command {
        cli::Command::Run(args) => match args.resolve() {
            Ok(config) if args.check => {
                // A closed pipe (`| head`) is not an error worth a panic.
                let _ = writeln!(std::io::stdout(), "{config:#?}");
                ExitCode::SUCCESS
            }
            Ok(_) => {
                eprintln!(
                    "svcflow run: the configuration is valid, but the daemon is not built yet \
                     (use --check to print the effective configuration)"
                );
                ExitCode::from(2)
            }
            Err(e) => {
                eprintln!("svcflow run: {e}");
                ExitCode::from(2)
            }
        },
    }
}
