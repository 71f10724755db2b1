//! The admin API (`/admin/v1/…`) for platform teams: deploy, list, roll back and remove tenants' plugins,
//! follow projector backfills, and set tenant settings; issue tenant keys; page the audit log. Its credentials
//! are the platform admin's token (`admin_token`) and the tenant keys it issues ([`Operator`]), never a
//! user JWT; every change is recorded in the audit log.

mod accounts;
mod audited;
mod jwt_keys;
mod keys;
mod operator;
mod pipeline;
mod plugins;
mod relations;
mod tenants;
mod transfer;

pub use accounts::*;
pub use jwt_keys::*;
pub use keys::*;
pub use operator::*;
pub use pipeline::*;
pub use plugins::*;
pub use relations::*;
pub use tenants::*;
pub use transfer::*;

pub use transfer::import_routes;

use std::str::FromStr;

use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;

use self::audited::{audited, Change};

use super::problem::ApiError;
use super::AppState;
use crate::graph::TenantId;
use crate::plugins::{PluginKind, PluginSlot, RegistryError};

/// Every admin resource's routes but the import's ([`import_routes`]).
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(plugins::routes())
        .merge(tenants::routes())
        .merge(pipeline::routes())
        .merge(keys::routes())
        .merge(jwt_keys::routes())
        .merge(accounts::routes())
        .merge(relations::routes())
        .merge(transfer::routes())
}

#[derive(Deserialize)]
pub struct TenantPath {
    tenant: String,
}

#[derive(Deserialize)]
pub struct SlotPath {
    tenant: String,
    kind: String,
    name: String,
}

fn tenant(raw: &str) -> Result<TenantId, ApiError> {
    Ok(raw.parse()?)
}

impl SlotPath {
    /// The slot, if `operator` reaches its tenant.
    fn slot(&self, operator: &Operator) -> Result<PluginSlot, ApiError> {
        let tenant = operator.reach(&self.tenant)?;
        let kind = PluginKind::from_str(&self.kind).map_err(ApiError::InvalidPluginKind)?;
        Ok(PluginSlot::new(tenant, kind, &self.name).map_err(RegistryError::from)?)
    }
}
