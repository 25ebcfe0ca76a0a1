//! `gan fit|validate|test`: the GAN example's command line.

fn main() -> std::process::ExitCode {
    ember::run::<gan::Gan>()
}
