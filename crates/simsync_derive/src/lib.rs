//! `simsync_derive`: `#[derive(SimHash)]`, which makes a type part of checksums of simulation
//! state. Use it through `simsync_deterministic::SimHash` (or `simsync::prelude::SimHash`); the
//! trait and the derive share the name, as `serde`'s do.
//!
//! The generated `sim_hash` feeds every field, in declaration order, to the field's own
//! `SimHash` (so `f32` and `f64` are hashed by their bits, as `StateHasher` requires):
//!
//! - a struct with named or tuple fields hashes each field; a unit struct hashes nothing (the
//!   component's presence is already part of the checksum);
//! - an enum hashes the variant's position in the declaration (a `u32`: 0 for the first
//!   variant, whatever explicit discriminants say), then that variant's fields in order;
//! - a field marked `#[sim_hash(skip)]` is left out (caches, handles, values that are not
//!   simulation state);
//! - each type parameter `T` gets a `T: SimHash` bound;
//! - unions are refused with a compile error.
//!
//! The generated code names the trait through the crate that depends on it:
//! `::simsync_deterministic` when that crate is a dependency, else `::simsync::deterministic`;
//! `#[sim_hash(crate = some::path)]` on the type overrides it.
#![warn(missing_docs)]

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{format_ident, quote};
use syn::{
    Attribute, Data, DataEnum, DeriveInput, Fields, Ident, Index, Member, Path, parse_macro_input,
    parse_quote, spanned::Spanned,
};

/// Derives `SimHash`: every field in declaration order, enum variants by position first; see
/// the crate documentation for the rules and the `#[sim_hash(skip)]` and
/// `#[sim_hash(crate = path)]` attributes.
#[proc_macro_derive(SimHash, attributes(sim_hash))]
pub fn derive_sim_hash(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

fn expand(input: &DeriveInput) -> syn::Result<TokenStream2> {
    let krate = match container_crate(&input.attrs)? {
        Some(path) => path,
        None => default_crate_path(),
    };
    let body = match &input.data {
        Data::Struct(data) => struct_body(&data.fields, &krate)?,
        Data::Enum(data) => enum_body(data, &krate)?,
        Data::Union(data) => {
            return Err(syn::Error::new(
                data.union_token.span(),
                "SimHash cannot be derived for a union: which field is live is not known; \
                 implement SimHash by hand",
            ));
        }
    };
    let mut generics = input.generics.clone();
    for param in generics.type_params_mut() {
        param.bounds.push(parse_quote!(#krate::SimHash));
    }
    let (impl_generics, type_generics, where_clause) = generics.split_for_impl();
    let name = &input.ident;
    Ok(quote! {
        #[automatically_derived]
        impl #impl_generics #krate::SimHash for #name #type_generics #where_clause {
            fn sim_hash(&self, hasher: &mut #krate::StateHasher) {
                let _ = &hasher;
                #body
            }
        }
    })
}

/// The path of `simsync_deterministic` as the crate being compiled sees it.
fn default_crate_path() -> Path {
    use proc_macro_crate::{FoundCrate, crate_name};
    match crate_name("simsync_deterministic") {
        // Inside simsync_deterministic itself, which declares `extern crate self as
        // simsync_deterministic`.
        Ok(FoundCrate::Itself) => parse_quote!(::simsync_deterministic),
        Ok(FoundCrate::Name(name)) => {
            let ident = Ident::new(&name, Span::call_site());
            parse_quote!(::#ident)
        }
        Err(_) => match crate_name("simsync") {
            Ok(FoundCrate::Name(name)) => {
                let ident = Ident::new(&name, Span::call_site());
                parse_quote!(::#ident::deterministic)
            }
            _ => parse_quote!(::simsync::deterministic),
        },
    }
}

/// `#[sim_hash(crate = path)]` on the type, if given.
fn container_crate(attrs: &[Attribute]) -> syn::Result<Option<Path>> {
    let mut krate = None;
    for attr in attrs.iter().filter(|a| a.path().is_ident("sim_hash")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("crate") {
                krate = Some(meta.value()?.parse::<Path>()?);
                Ok(())
            } else {
                Err(meta.error("unknown `sim_hash` attribute on a type: expected `crate = path`"))
            }
        })?;
    }
    Ok(krate)
}

/// Whether a field carries `#[sim_hash(skip)]`.
fn is_skipped(attrs: &[Attribute]) -> syn::Result<bool> {
    let mut skip = false;
    for attr in attrs.iter().filter(|a| a.path().is_ident("sim_hash")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("skip") {
                skip = true;
                Ok(())
            } else {
                Err(meta.error("unknown `sim_hash` attribute on a field: expected `skip`"))
            }
        })?;
    }
    Ok(skip)
}

fn struct_body(fields: &Fields, krate: &Path) -> syn::Result<TokenStream2> {
    let mut calls = Vec::new();
    for (index, field) in fields.iter().enumerate() {
        if is_skipped(&field.attrs)? {
            continue;
        }
        let member = match &field.ident {
            Some(ident) => Member::Named(ident.clone()),
            None => Member::Unnamed(Index {
                index: index as u32,
                span: field.span(),
            }),
        };
        calls.push(quote! { #krate::SimHash::sim_hash(&self.#member, hasher); });
    }
    Ok(quote! { #(#calls)* })
}

fn enum_body(data: &DataEnum, krate: &Path) -> syn::Result<TokenStream2> {
    if data.variants.is_empty() {
        return Ok(quote! { match *self {} });
    }
    let mut arms = Vec::new();
    for (position, variant) in data.variants.iter().enumerate() {
        let ident = &variant.ident;
        let position = position as u32;
        let mut bindings = Vec::new();
        let mut calls = Vec::new();
        for (index, field) in variant.fields.iter().enumerate() {
            let binding = format_ident!("__sim_hash_field_{}", index);
            let skipped = is_skipped(&field.attrs)?;
            let pattern = if skipped {
                quote!(_)
            } else {
                calls.push(quote! { #krate::SimHash::sim_hash(#binding, hasher); });
                quote!(#binding)
            };
            bindings.push(match &field.ident {
                Some(name) => quote!(#name: #pattern),
                None => pattern,
            });
        }
        let pattern = match &variant.fields {
            Fields::Named(_) => quote!(Self::#ident { #(#bindings),* }),
            Fields::Unnamed(_) => quote!(Self::#ident ( #(#bindings),* )),
            Fields::Unit => quote!(Self::#ident),
        };
        arms.push(quote! {
            #pattern => {
                ::core::hash::Hasher::write_u32(hasher, #position);
                #(#calls)*
            }
        });
    }
    Ok(quote! {
        match self {
            #(#arms)*
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand_str(source: &str) -> Result<String, String> {
        let input: DeriveInput = syn::parse_str(source).expect("valid item");
        expand(&input)
            .map(|tokens| tokens.to_string())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn fields_are_hashed_in_order_and_skipped_ones_left_out() {
        let code = expand_str(
            "#[sim_hash(crate = my::path)] struct S { a: u32, #[sim_hash(skip)] b: Vec<u8>, c: f32 }",
        )
        .expect("expands");
        let a = code.find("self . a").expect("a hashed");
        let c = code.find("self . c").expect("c hashed");
        assert!(a < c);
        assert!(!code.contains("self . b"));
        assert!(code.contains("impl my :: path :: SimHash for S"));
    }

    #[test]
    fn enum_variants_are_hashed_by_position_and_type_parameters_get_a_bound() {
        let code = expand_str(
            "#[sim_hash(crate = k)] enum E<T> { A = 7, B(T, #[sim_hash(skip)] u8), C { x: T } }",
        )
        .expect("expands");
        assert!(code.contains("write_u32 (hasher , 0u32)"), "{code}");
        assert!(code.contains("write_u32 (hasher , 1u32)"), "{code}");
        assert!(code.contains("write_u32 (hasher , 2u32)"), "{code}");
        assert!(code.contains("T : k :: SimHash"), "{code}");
        assert!(
            code.contains("Self :: B (__sim_hash_field_0 , _)"),
            "{code}"
        );
    }

    #[test]
    fn unions_and_unknown_attributes_are_compile_errors() {
        let union = expand_str("union U { a: u32, b: f32 }").expect_err("refused");
        assert!(union.contains("union"), "{union}");
        let field = expand_str("struct S { #[sim_hash(ignore)] a: u32 }").expect_err("refused");
        assert!(field.contains("expected `skip`"), "{field}");
        let container = expand_str("#[sim_hash(skip)] struct S(u32);").expect_err("refused");
        assert!(container.contains("expected `crate = path`"), "{container}");
    }

    #[test]
    fn the_default_path_goes_through_the_facade_when_the_crate_is_not_a_dependency() {
        // This crate depends on neither simsync_deterministic nor simsync.
        let code = expand_str("struct S(u8);").expect("expands");
        assert!(
            code.contains(":: simsync :: deterministic :: SimHash"),
            "{code}"
        );
    }
}
