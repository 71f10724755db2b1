//! An account's state over its life — active, suspended, deleted — kept beside its settings
//! (`account_settings.state`). The relation write reads both accounts' states under a shared lock, and the
//! account jobs (`crate::accounts`) change a state under the exclusive lock before they touch its edges.

use serde::Serialize;
use sqlx::Row;
use utoipa::ToSchema;

use super::{TenantId, UserId};
use crate::db::Database;

/// Where an account is in its life; a user who never had a row is active.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AccountState {
    #[default]
    Active,
    /// Its follows and requests are hidden (ended, restorable); no follow with it begins.
    Suspended,
    /// Erased (or being erased): no relation with it begins again. The row stays as a tombstone.
    Deleted,
}

impl AccountState {
    /// The state as `account_settings.state` holds it (an unknown value reads as deleted: refusing is safe).
    pub fn from_stored(value: i64) -> Self {
        match value {
            0 => AccountState::Active,
            1 => AccountState::Suspended,
            _ => AccountState::Deleted,
        }
    }

    pub fn stored(self) -> i64 {
        match self {
            AccountState::Active => 0,
            AccountState::Suspended => 1,
            AccountState::Deleted => 2,
        }
    }
}

/// `user`'s state.
pub async fn account_state(db: &Database, tenant: &TenantId, user: UserId) -> Result<AccountState, sqlx::Error> {
    let row = sqlx::query("SELECT state FROM account_settings WHERE tenant_id = ? AND user_id = ?")
        .bind(tenant.as_str())
        .bind(user.get())
        .fetch_optional(db.reader())
        .await?;
    Ok(row.map(|r| r.try_get::<i64, _>(0)).transpose()?.map(AccountState::from_stored).unwrap_or_default())
}
