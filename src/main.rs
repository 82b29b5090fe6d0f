//! `infer-stream`: the command-line edge. Library errors become messages and exit codes here.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
