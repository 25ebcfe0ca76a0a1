//! `wide_adam fit`: a wide MLP trained with Adam on synthetic data (see `ember_acceptance::wide`).

fn main() -> std::process::ExitCode {
    ember::run::<ember_acceptance::wide::WideAdam>()
}
