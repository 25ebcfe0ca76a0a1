//! `transformer fit|validate|test|predict`: the transformer example's command line.

fn main() -> std::process::ExitCode {
    ember::run::<transformer::CharLmApp>()
}
