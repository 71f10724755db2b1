//! A user's own settings (today: whether their account is private), read by every follow of them.
//!
//! Turning an account public authorizes its pending follow requests, as Mastodon does: a request only ever
//! waited for an approval the account no longer requires. Each is its own change with its `follow` event; if
//! the process stops half-way, the account is public already, and the next follow attempt of a requester
//! whose request is still pending is the follow (see `write/decide.rs`), as is saving the settings again.

use sqlx::Row;

use super::read::{list, Direction, Listing, PageRequest, Position};
use super::write::{change, Act, RelationCommand, WriteError};
use super::{TenantId, UserId};
use crate::db::Database;
use crate::util::time::now_ms;

/// Pending requests authorized per page when an account turns public.
const AUTHORIZE_PAGE: u32 = 500;

/// A user's settings; a user who never saved any has the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Settings {
    /// Follows of the user are requests until the user authorizes them.
    pub private: bool,
}

/// `user`'s settings.
pub async fn settings(db: &Database, tenant: &TenantId, user: UserId) -> Result<Settings, sqlx::Error> {
    let row = sqlx::query("SELECT private FROM account_settings WHERE tenant_id = ? AND user_id = ?")
        .bind(tenant.as_str())
        .bind(user.get())
        .fetch_optional(db.reader())
        .await?;
    Ok(Settings { private: row.map(|r| r.try_get::<i64, _>(0)).transpose()? == Some(1) })
}

/// Saves `user`'s settings; returns how many pending requests an account turned public authorized.
pub async fn update_settings(db: &Database, tenant: &TenantId, user: UserId, new: Settings) -> Result<u64, WriteError> {
    let upsert = db.kind().upsert(
        "account_settings",
        &["tenant_id", "user_id", "private", "updated_at"],
        &["tenant_id", "user_id"],
    );
    sqlx::query(&upsert)
        .bind(tenant.as_str())
        .bind(user.get())
        .bind(i64::from(new.private))
        .bind(now_ms())
        .execute(db.writer())
        .await?;
    if new.private {
        return Ok(0);
    }
    let mut authorized = 0;
    loop {
        let first = PageRequest { position: Position::Start, limit: AUTHORIZE_PAGE };
        let pending = list(db, tenant, user, Listing::Requests(Direction::Followers), first).await?;
        for requester in &pending.items {
            let requester = UserId::try_from(requester.user_id).map_err(|e| sqlx::Error::Decode(e.into()))?;
            authorized +=
                u64::from(change(db, RelationCommand::new(tenant, user, Act::Authorize, requester)).await?.changed);
        }
        if !pending.has_more {
            return Ok(authorized);
        }
    }
}
