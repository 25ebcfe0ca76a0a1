//! `digits fit|validate|test|predict`: the digits example's command line.

fn main() -> std::process::ExitCode {
    ember::run::<digits::Digits>()
}
