//! `conv fit|validate|test|predict`: the conv example's command line.

fn main() -> std::process::ExitCode {
    ember::run::<convnet::Conv>()
}
