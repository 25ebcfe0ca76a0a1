//! ember's derive macros.

use proc_macro::TokenStream;
use quote::quote;
use syn::{DeriveInput, parse_macro_input};

/// `Default` for a struct with burn's `#[derive(Config)]` whose every field has a
/// `#[config(default = …)]` (or is an `Option`): the default is `Self::new()`, so the defaults
/// are written once, in the attributes. ember reads a config section's defaults from
/// `Default` (`App::ModelConfig`, `App::Data`):
///
/// ```ignore
/// #[derive(Config, Debug, ConfigDefault)]
/// pub struct ModelConfig {
///     #[config(default = 32)]
///     hidden: usize,
/// }
/// ```
///
/// A field without a default makes `new` take an argument, and the derive then fails to
/// compile at `Self::new()`.
#[proc_macro_derive(ConfigDefault)]
pub fn derive_config_default(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    let name = &input.ident;
    let (impl_generics, type_generics, where_clause) = input.generics.split_for_impl();
    quote! {
        impl #impl_generics ::core::default::Default for #name #type_generics #where_clause {
            fn default() -> Self {
                Self::new()
            }
        }
    }
    .into()
}
