//! The `svcflow` command.

fn main() {
    eprintln!("svcflow: the controller daemon is not built yet; see README.md");
    std::process::exit(2);
}
