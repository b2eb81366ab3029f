//! Request bodies and queries parsed with errors that name the field, as JSON.
//!
//! Bodies are read as JSON Schema (and so openapi.json) reads JSON: a number with a zero
//! fraction (`34967.0`, `1e3`) is an integer wherever an integer is expected, and an object
//! type is written as an object only (serde would also take `[a, b]` for `{"a": .., "b": ..}`).

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::error::ApiError;

/// The largest request body accepted.
pub const MAX_BODY: usize = 1 << 20;

/// A JSON body; unknown fields, wrong types and bad amounts are 400s naming the field.
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "too_large",
                    format!("the body is larger than {MAX_BODY} bytes"),
                )
            } else {
                ApiError::bad_request(format!("unreadable body: {e}"))
            }
        })?;
        let mut de = serde_json::Deserializer::from_slice(&bytes);
        let value =
            serde_path_to_error::deserialize(strict::Strict(&mut de)).map_err(invalid_body)?;
        de.end().map_err(|e| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_body",
                format!("body: {e}"),
            )
        })?;
        Ok(Body(value))
    }
}

/// A body already read as JSON (a merged patch), read as `T` exactly as [`Body`] reads it.
pub fn from_value<T: DeserializeOwned>(value: &Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(strict::Strict(value)).map_err(invalid_body)
}

/// A 400 naming the field that did not read (`policy.min_nodes`; `body` for the whole).
fn invalid_body(e: serde_path_to_error::Error<serde_json::Error>) -> ApiError {
    let path = e.path().to_string();
    let inner = e.into_inner();
    let field = if path == "." || path == "?" {
        "body".to_string()
    } else {
        path
    };
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "invalid_body",
        format!("{field}: {inner}"),
    )
    .with_details(json!({"field": field}))
}

/// Query parameters; a bad one is a 400 naming it.
pub struct Query<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let query = parts.uri.query().unwrap_or_default();
        serde_urlencoded::from_str(query).map(Query).map_err(|e| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_query",
                format!("query: {e}"),
            )
        })
    }
}

/// A deserializer adapter: integral floats reach visitors as integers, and structs are read
/// from JSON objects only. Everything else passes through unchanged, at every depth.
mod strict {
    use std::fmt;

    use serde::de::{
        self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess,
        Visitor,
    };

    pub struct Strict<D>(pub D);

    /// The visitor a [`Strict`] deserializer hands on: wraps what it is given in turn.
    struct V<T>(T);

    struct Seed<S>(S);

    impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Seed<S> {
        type Value = S::Value;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
            self.0.deserialize(Strict(d))
        }
    }

    macro_rules! forward {
        ($($method:ident),*) => {
            $(
                fn $method<W: Visitor<'de>>(self, visitor: W) -> Result<W::Value, Self::Error> {
                    self.0.$method(V(visitor))
                }
            )*
        };
    }

    impl<'de, D: Deserializer<'de>> Deserializer<'de> for Strict<D> {
        type Error = D::Error;

        forward!(
            deserialize_any,
            deserialize_bool,
            deserialize_i8,
            deserialize_i16,
            deserialize_i32,
            deserialize_i64,
            deserialize_i128,
            deserialize_u8,
            deserialize_u16,
            deserialize_u32,
            deserialize_u64,
            deserialize_u128,
            deserialize_f32,
            deserialize_f64,
            deserialize_char,
            deserialize_str,
            deserialize_string,
            deserialize_bytes,
            deserialize_byte_buf,
            deserialize_option,
            deserialize_unit,
            deserialize_seq,
            deserialize_map,
            deserialize_identifier,
            deserialize_ignored_any
        );

        fn deserialize_unit_struct<W: Visitor<'de>>(
            self,
            name: &'static str,
            visitor: W,
        ) -> Result<W::Value, D::Error> {
            self.0.deserialize_unit_struct(name, V(visitor))
        }

        fn deserialize_newtype_struct<W: Visitor<'de>>(
            self,
            name: &'static str,
            visitor: W,
        ) -> Result<W::Value, D::Error> {
            self.0.deserialize_newtype_struct(name, V(visitor))
        }

        fn deserialize_tuple<W: Visitor<'de>>(
            self,
            len: usize,
            visitor: W,
        ) -> Result<W::Value, D::Error> {
            self.0.deserialize_tuple(len, V(visitor))
        }

        fn deserialize_tuple_struct<W: Visitor<'de>>(
            self,
            name: &'static str,
            len: usize,
            visitor: W,
        ) -> Result<W::Value, D::Error> {
            self.0.deserialize_tuple_struct(name, len, V(visitor))
        }

        /// A struct is a JSON object: read as a map, an array is the wrong type.
        fn deserialize_struct<W: Visitor<'de>>(
            self,
            _name: &'static str,
            _fields: &'static [&'static str],
            visitor: W,
        ) -> Result<W::Value, D::Error> {
            self.0.deserialize_map(V(visitor))
        }

        fn deserialize_enum<W: Visitor<'de>>(
            self,
            name: &'static str,
            variants: &'static [&'static str],
            visitor: W,
        ) -> Result<W::Value, D::Error> {
            self.0.deserialize_enum(name, variants, V(visitor))
        }

        fn is_human_readable(&self) -> bool {
            self.0.is_human_readable()
        }
    }

    macro_rules! pass {
        ($($method:ident: $ty:ty),*) => {
            $(
                fn $method<E: de::Error>(self, v: $ty) -> Result<T::Value, E> {
                    self.0.$method(v)
                }
            )*
        };
    }

    impl<'de, T: Visitor<'de>> Visitor<'de> for V<T> {
        type Value = T::Value;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            self.0.expecting(f)
        }

        pass!(
            visit_bool: bool, visit_i8: i8, visit_i16: i16, visit_i32: i32, visit_i64: i64,
            visit_i128: i128, visit_u8: u8, visit_u16: u16, visit_u32: u32, visit_u64: u64,
            visit_u128: u128, visit_f32: f32, visit_char: char, visit_str: &str,
            visit_string: String, visit_bytes: &[u8], visit_byte_buf: Vec<u8>
        );

        /// `34967.0` is the integer 34967, as JSON Schema says: visitors that take integers
        /// get one (those that want a float take integers too).
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<T::Value, E> {
            const TWO_63: f64 = 9_223_372_036_854_775_808.0;
            if v.fract() == 0.0 && (0.0..2.0 * TWO_63).contains(&v) {
                self.0.visit_u64(v as u64)
            } else if v.fract() == 0.0 && (-TWO_63..0.0).contains(&v) {
                self.0.visit_i64(v as i64)
            } else {
                self.0.visit_f64(v)
            }
        }

        fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<T::Value, E> {
            self.0.visit_borrowed_str(v)
        }

        fn visit_borrowed_bytes<E: de::Error>(self, v: &'de [u8]) -> Result<T::Value, E> {
            self.0.visit_borrowed_bytes(v)
        }

        fn visit_none<E: de::Error>(self) -> Result<T::Value, E> {
            self.0.visit_none()
        }

        fn visit_unit<E: de::Error>(self) -> Result<T::Value, E> {
            self.0.visit_unit()
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<T::Value, D::Error> {
            self.0.visit_some(Strict(d))
        }

        fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<T::Value, D::Error> {
            self.0.visit_newtype_struct(Strict(d))
        }

        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<T::Value, A::Error> {
            self.0.visit_seq(V(seq))
        }

        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T::Value, A::Error> {
            self.0.visit_map(V(map))
        }

        fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<T::Value, A::Error> {
            self.0.visit_enum(V(data))
        }
    }

    impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for V<A> {
        type Error = A::Error;

        fn next_element_seed<S: DeserializeSeed<'de>>(
            &mut self,
            seed: S,
        ) -> Result<Option<S::Value>, A::Error> {
            self.0.next_element_seed(Seed(seed))
        }

        fn size_hint(&self) -> Option<usize> {
            self.0.size_hint()
        }
    }

    impl<'de, A: MapAccess<'de>> MapAccess<'de> for V<A> {
        type Error = A::Error;

        fn next_key_seed<K: DeserializeSeed<'de>>(
            &mut self,
            seed: K,
        ) -> Result<Option<K::Value>, A::Error> {
            self.0.next_key_seed(Seed(seed))
        }

        fn next_value_seed<S: DeserializeSeed<'de>>(
            &mut self,
            seed: S,
        ) -> Result<S::Value, A::Error> {
            self.0.next_value_seed(Seed(seed))
        }

        fn size_hint(&self) -> Option<usize> {
            self.0.size_hint()
        }
    }

    impl<'de, A: EnumAccess<'de>> EnumAccess<'de> for V<A> {
        type Error = A::Error;
        type Variant = V<A::Variant>;

        fn variant_seed<S: DeserializeSeed<'de>>(
            self,
            seed: S,
        ) -> Result<(S::Value, Self::Variant), A::Error> {
            self.0
                .variant_seed(Seed(seed))
                .map(|(value, variant)| (value, V(variant)))
        }
    }

    impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for V<A> {
        type Error = A::Error;

        fn unit_variant(self) -> Result<(), A::Error> {
            self.0.unit_variant()
        }

        fn newtype_variant_seed<S: DeserializeSeed<'de>>(
            self,
            seed: S,
        ) -> Result<S::Value, A::Error> {
            self.0.newtype_variant_seed(Seed(seed))
        }

        fn tuple_variant<W: Visitor<'de>>(
            self,
            len: usize,
            visitor: W,
        ) -> Result<W::Value, A::Error> {
            self.0.tuple_variant(len, V(visitor))
        }

        fn struct_variant<W: Visitor<'de>>(
            self,
            fields: &'static [&'static str],
            visitor: W,
        ) -> Result<W::Value, A::Error> {
            self.0.struct_variant(fields, V(visitor))
        }
    }

    #[cfg(test)]
    mod tests {
        use serde::Deserialize;

        use super::Strict;

        #[derive(Debug, PartialEq, Deserialize)]
        struct Inner {
            n: u32,
            #[serde(default)]
            price: f64,
        }

        #[derive(Debug, PartialEq, Deserialize)]
        struct Outer {
            inner: Inner,
            #[serde(default)]
            list: Vec<Inner>,
            #[serde(default)]
            opt: Option<Inner>,
            #[serde(default)]
            delta: i64,
        }

        fn read<T: for<'de> Deserialize<'de>>(text: &str) -> Result<T, String> {
            let mut de = serde_json::Deserializer::from_str(text);
            T::deserialize(Strict(&mut de)).map_err(|e| e.to_string())
        }

        #[test]
        fn integral_floats_are_integers_at_any_depth() {
            let o: Outer = read(
                r#"{"inner": {"n": 34967.0, "price": 2.0}, "list": [{"n": 1e3}],
                    "opt": {"n": 7.0, "price": 0.5}, "delta": -3.0}"#,
            )
            .unwrap();
            assert_eq!(
                o.inner,
                Inner {
                    n: 34967,
                    price: 2.0
                }
            );
            assert_eq!(
                o.list,
                [Inner {
                    n: 1000,
                    price: 0.0
                }]
            );
            assert_eq!(o.opt, Some(Inner { n: 7, price: 0.5 }));
            assert_eq!(o.delta, -3);
            let e = read::<Inner>(r#"{"n": 1.5}"#).unwrap_err();
            assert!(e.contains("floating point `1.5`"), "{e}");
            let e = read::<Inner>(r#"{"n": 4294967296.0}"#).unwrap_err();
            assert!(e.contains("4294967296"), "{e}");
        }

        #[test]
        fn structs_are_objects_only() {
            let e = read::<Inner>(r#"[1, 2.0]"#).unwrap_err();
            assert!(e.contains("invalid type: sequence"), "{e}");
            let e = read::<Outer>(r#"{"inner": [1]}"#).unwrap_err();
            assert!(e.contains("invalid type: sequence"), "{e}");
            let e = read::<Outer>(r#"{"inner": {"n": 1}, "list": [[1]]}"#).unwrap_err();
            assert!(e.contains("invalid type: sequence"), "{e}");
            // Sequences of structs, and maps, are still what they were.
            assert_eq!(read::<Vec<Inner>>(r#"[{"n": 1}]"#).unwrap().len(), 1);
            let map: std::collections::BTreeMap<String, u8> = read(r#"{"a": 1.0}"#).unwrap();
            assert_eq!(map["a"], 1);
        }
    }
}
