//! A stored plugin version as the admin API lists it, and where it stands: active, canary, shadow or
//! inactive; how a candidate runs beside the active version.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::ActivePlugin;
use crate::plugins::runtime::PluginLimits;
use crate::plugins::{PluginKind, Readable};

/// A stored version, as the admin API lists it.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PluginVersion {
    pub tenant: String,
    pub kind: PluginKind,
    pub name: String,
    pub version: i64,
    pub sha256: String,
    pub size_bytes: i64,
    pub state: VersionState,
    pub created_at: String,
    pub limits: VersionLimits,
    pub canary_percent: Option<u8>,
    /// The spaces `GET /v1/projections/{plugin}/{space}/{ids}` serves (a projector's).
    pub readable: Vec<Readable>,
    /// Its spaces depend on history: never built from the truth (a projector's; see `Declared::history`).
    pub history: bool,
}

crate::str_enum! {
    /// Where a stored version stands, as the `plugins` table's `state` and the admin API name it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum VersionState("plugin state") {
        /// Serves the slot.
        Active = "active",
        /// Beside the active one, for `canary_percent` of the traffic.
        Canary = "canary",
        /// A projector fed every event into a space of its own beside the active one, serving no reads.
        Shadow = "shadow",
        /// Kept for a rollback.
        Inactive = "inactive",
    }
}

/// The limits a version was deployed with, as listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct VersionLimits {
    pub deadline_ms: u64,
    pub memory_bytes: u64,
    /// `null`: no fuel metering.
    pub fuel: Option<u64>,
}

impl From<PluginLimits> for VersionLimits {
    fn from(limits: PluginLimits) -> Self {
        Self {
            deadline_ms: u64::try_from(limits.deadline.as_millis()).unwrap_or(u64::MAX),
            memory_bytes: limits.memory_bytes as u64,
            fuel: limits.fuel,
        }
    }
}

/// How a new version runs beside the active one until it is promoted or aborted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RolloutStage {
    /// A rate limiter or router taking this percent (0-99) of the traffic: by user for policies, by message
    /// key for routers.
    Canary(u8),
    /// A projector building and feeding a space of its own from every event, read by nobody until promoted.
    Shadow,
}

impl RolloutStage {
    /// The state of such a version.
    pub fn state(self) -> VersionState {
        match self {
            RolloutStage::Canary(_) => VersionState::Canary,
            RolloutStage::Shadow => VersionState::Shadow,
        }
    }

    /// A canary's share of the traffic.
    pub fn percent(self) -> Option<u8> {
        match self {
            RolloutStage::Canary(percent) => Some(percent),
            RolloutStage::Shadow => None,
        }
    }
}

/// A version running beside its slot's active one.
#[derive(Clone)]
pub struct Candidate {
    pub plugin: Arc<ActivePlugin>,
    pub staged: RolloutStage,
}

/// The version that serves one share of a slot's traffic, and whether it is the slot's canary.
pub struct Chosen {
    pub plugin: Arc<ActivePlugin>,
    /// The canary's version while a rollout runs (also when the stable version was chosen), for health.
    pub rollout: Option<i64>,
    pub by_canary: bool,
}
