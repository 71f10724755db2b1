//! Enums whose variants are names: in tables, URLs, headers, metrics and JSON. [`str_enum!`] spells each
//! name once, and the name table, `Display`, `FromStr`, serde and the OpenAPI schema all come from it, so
//! no two of them can disagree.

/// A name that is none of an enum's variants.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {name:?}: use one of {expected}")]
pub struct UnknownName {
    pub what: &'static str,
    pub name: String,
    pub expected: String,
}

/// A stored name no variant has is a row that cannot be decoded.
impl From<UnknownName> for sqlx::Error {
    fn from(unknown: UnknownName) -> Self {
        sqlx::Error::Decode(Box::new(unknown))
    }
}

/// Declares a fieldless enum with one name per variant:
/// ```ignore
/// str_enum! {
///     /// Where a backfill stands.
///     #[derive(Debug, Clone, Copy, PartialEq, Eq)]
///     pub enum BackfillState("backfill state") {
///         Backfilling = "backfilling",
///         Complete = "complete",
///     }
/// }
/// ```
/// gives `BackfillState::ALL`, `as_str`, `Display`, `FromStr` (refusing any other name with
/// [`UnknownName`]), `Serialize`/`Deserialize` as the name, and a `utoipa` schema listing the names.
#[macro_export]
macro_rules! str_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident ($what:literal) {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis enum $name { $( $(#[$vmeta])* $variant ),+ }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// Its one name.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::util::str_enum::UnknownName;

            fn from_str(name: &str) -> Result<Self, Self::Err> {
                Self::ALL.iter().copied().find(|v| v.as_str() == name).ok_or_else(|| {
                    $crate::util::str_enum::UnknownName {
                        what: $what,
                        name: name.to_owned(),
                        expected: [$($text),+].join(", "),
                    }
                })
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let name = <String as ::serde::Deserialize>::deserialize(deserializer)?;
                name.parse().map_err(|_| <D::Error as ::serde::de::Error>::unknown_variant(&name, &[$($text),+]))
            }
        }

        impl ::utoipa::PartialSchema for $name {
            fn schema() -> ::utoipa::openapi::RefOr<::utoipa::openapi::schema::Schema> {
                ::utoipa::openapi::schema::ObjectBuilder::new()
                    .schema_type(::utoipa::openapi::schema::Type::String)
                    .enum_values(Some([$($text),+]))
                    .into()
            }
        }

        impl ::utoipa::ToSchema for $name {}
    };
}

#[cfg(test)]
mod tests {
    crate::str_enum! {
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        enum Colour("colour") {
            Red = "red",
            DarkBlue = "dark-blue",
        }
    }

    #[test]
    fn every_form_uses_the_one_name() {
        assert_eq!(Colour::DarkBlue.as_str(), "dark-blue");
        assert_eq!(Colour::DarkBlue.to_string(), "dark-blue");
        assert_eq!("dark-blue".parse(), Ok(Colour::DarkBlue));
        assert_eq!(serde_json::to_string(&Colour::Red).unwrap(), "\"red\"");
        assert_eq!(serde_json::from_str::<Colour>("\"dark-blue\"").unwrap(), Colour::DarkBlue);
        assert_eq!(Colour::ALL, [Colour::Red, Colour::DarkBlue]);
    }

    #[test]
    fn any_other_name_is_refused() {
        let refused = "DarkBlue".parse::<Colour>().unwrap_err();
        assert_eq!(refused.to_string(), "unknown colour \"DarkBlue\": use one of red, dark-blue");
        assert!(serde_json::from_str::<Colour>("\"blue\"").is_err());
    }
}
