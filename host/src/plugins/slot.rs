//! Where a plugin version is deployed: a tenant's rate limiter, router, or one named projector — and which
//! names a tenant may use.

use super::{PluginKind, BUNDLED};
use crate::graph::TenantId;

/// The one name of a tenant's rate limiter and router (projectors are named freely).
pub const SINGLETON_NAME: &str = "default";

/// A slot a tenant's plugin versions are deployed to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PluginSlot {
    pub tenant: TenantId,
    pub kind: PluginKind,
    pub name: String,
}

/// Why a name cannot be a slot's.
#[derive(Debug, thiserror::Error)]
pub enum SlotError {
    #[error("invalid plugin name: {0}")]
    InvalidName(String),
    /// A bundled projector's name: its worker and consumer group serve every tenant (and the API reads the
    /// counts and lists of two of them), so no tenant's version may take it over.
    #[error("the projector name {0:?} is reserved for the host's bundled projector; deploy yours under another name")]
    ReservedName(String),
}

impl PluginSlot {
    pub fn new(tenant: TenantId, kind: PluginKind, name: &str) -> Result<Self, SlotError> {
        let valid_name = (1..=64).contains(&name.len())
            && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !valid_name {
            return Err(SlotError::InvalidName(format!("{name:?} is not 1 to 64 characters of a-z, 0-9, -")));
        }
        if kind == PluginKind::Projector && BUNDLED.iter().any(|b| b.kind == kind && b.name == name) {
            return Err(SlotError::ReservedName(name.to_owned()));
        }
        if kind.is_singleton() && name != SINGLETON_NAME {
            return Err(SlotError::InvalidName(format!(
                "a tenant has one {kind}; its name is {SINGLETON_NAME:?}, not {name:?}"
            )));
        }
        Ok(Self { tenant, kind, name: name.to_owned() })
    }
}
