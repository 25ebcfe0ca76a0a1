//! `wide_sgd fit`: a wide MLP trained with SGD and momentum on synthetic data (see
//! `ember_acceptance::wide`).

fn main() -> std::process::ExitCode {
    ember::run::<ember_acceptance::wide::WideSgd>()
}
