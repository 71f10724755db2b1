//! Accounts over their whole life through the admin API: deletion (every relation ends with its event, then
//! the rows are erased), suspension and restore, a move, and a user's streamed export.

use std::time::Duration;

use futures::future::join_all;
use serde_json::{json, Value};
use sqlx::Row;
use strand::db::Database;
use strand::graph::{change, Act, RelationCommand, TenantId, UserId};
use strand_test_support::{
    on_every_backend, rows_holding, token, wait_until, ApiClient, Backend, TestServer, TEST_SECRET,
};

use super::pair_row;

on_every_backend!(
    deleting_an_account_ends_every_relation_with_its_event_then_erases_it,
    suspending_hides_every_follow_and_restoring_brings_back_exactly_what_is_still_hidden,
    moving_an_account_moves_its_followers_under_the_destinations_blocks_and_privacy,
    a_users_export_streams_every_entry_as_csv_and_json,
    a_long_job_takes_turns_with_another_tenants_job,
    a_restore_brings_back_only_edges_whose_other_end_is_active,
    jobs_on_one_account_or_a_moves_destination_never_run_at_once,
);

fn user(id: i64) -> UserId {
    id.to_string().parse().unwrap()
}

/// `act` by `actor` on `subject` straight through the write path (faster than HTTP for seeding).
async fn act(db: &Database, tenant: &TenantId, actor: i64, act: Act, subject: i64) {
    change(db, RelationCommand::new(tenant, user(actor), act, user(subject))).await.expect("a seeding write");
}

/// `followers` each follow `account`, a few at a time.
async fn followed_by(db: &Database, tenant: &TenantId, account: i64, followers: std::ops::RangeInclusive<i64>) {
    let followers: Vec<i64> = followers.collect();
    for chunk in followers.chunks(16) {
        join_all(chunk.iter().map(|f| act(db, tenant, *f, Act::Follow, account))).await;
    }
}

/// Starts a job on `account` and waits for its end; returns the finished job.
pub(super) async fn run_job(admin: &ApiClient, tenant: &str, account: i64, body: Value) -> Value {
    let started = admin
        .send_json(reqwest::Method::POST, &format!("/admin/v1/tenants/{tenant}/accounts/{account}/jobs"), &body)
        .await;
    assert_eq!(started.status, 202, "{started:?}");
    let id = started.body["id"].as_i64().unwrap();
    let path = format!("/admin/v1/tenants/{tenant}/jobs/{id}");
    wait_until("the job ends", Duration::from_secs(60), || async { admin.get(&path).await.body["state"] != "running" })
        .await;
    let job = admin.get(&path).await.body;
    assert_eq!(job["state"], "done", "{job}");
    job
}

/// The outbox events naming `user` on either side: (type, from, to, version).
async fn events_of(db: &Database, tenant: &str, user: i64) -> Vec<(String, i64, i64, i64)> {
    sqlx::query("SELECT payload FROM outbox WHERE tenant_id = ? ORDER BY id")
        .bind(tenant)
        .fetch_all(db.reader())
        .await
        .unwrap()
        .iter()
        .map(|row| serde_json::from_str::<Value>(&row.get::<String, _>(0)).unwrap())
        .filter(|e| e["from"] == user || e["to"] == user)
        .map(|e| {
            (
                e["type"].as_str().unwrap().to_owned(),
                e["from"].as_i64().unwrap(),
                e["to"].as_i64().unwrap(),
                e["version"].as_i64().unwrap(),
            )
        })
        .collect()
}

async fn counts(client: &ApiClient, user: i64) -> (i64, i64) {
    let reply = client.get(&format!("/v1/users/{user}/counts")).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    (reply.body["followings"].as_i64().unwrap(), reply.body["followers"].as_i64().unwrap())
}

async fn deleting_an_account_ends_every_relation_with_its_event_then_erases_it(backend: Backend) {
    // Batches of 100: the 1 300 followers take several.
    let server = TestServer::start_with(backend, |c| c.account_job_batch = 100).await;
    let (db, tenant) = (server.database(), "acme".parse::<TenantId>().unwrap());
    followed_by(db, &tenant, 1, 10..=1309).await;
    for other in [10, 11, 12] {
        act(db, &tenant, 1, Act::Follow, other).await; // mutual follows
    }
    act(db, &tenant, 1, Act::Block, 5).await;
    act(db, &tenant, 6, Act::Block, 1).await;
    act(db, &tenant, 1, Act::Mute { expires_at_ms: None, notifications: true }, 7).await;
    act(db, &tenant, 8, Act::Mute { expires_at_ms: None, notifications: false }, 1).await;
    let private = server.client("acme", 9);
    private.send_json(reqwest::Method::PUT, "/v1/me/settings", &json!({"private": true})).await;
    act(db, &tenant, 1, Act::Follow, 9).await; // a pending request of the account's
    let before = events_of(db, "acme", 1).await.len();
    let (followings_of_10, _) = counts(&server.client("acme", 10), 10).await;

    let job = run_job(&server.admin(), "acme", 1, json!({"kind": "delete"})).await;
    assert_eq!(job["total"], 1300 + 3 + 1 + 2 + 2, "{job}");
    assert_eq!(job["done"], job["total"], "{job}");

    assert_eq!(rows_holding(db, "acme", 1).await, 0, "the truth holds none of the account's rows");
    let after = events_of(db, "acme", 1).await;
    let ended = &after[before..];
    assert_eq!(ended.len(), 1308, "one event per relation: {:?}", &ended[..5]);
    assert!(ended.contains(&("unfollow".to_owned(), 10, 1, 2)), "a follower's follow ends at its next version");
    assert!(ended.contains(&("unfollow".to_owned(), 1, 10, 2)));
    assert!(ended.contains(&("follow_request_withdrawn".to_owned(), 1, 9, 2)));
    assert!(ended.contains(&("unblock".to_owned(), 1, 5, 2)) && ended.contains(&("unblock".to_owned(), 6, 1, 2)));
    assert!(ended.contains(&("unmute".to_owned(), 1, 7, 2)) && ended.contains(&("unmute".to_owned(), 8, 1, 2)));
    let follower = server.client("acme", 10);
    assert_eq!(counts(&follower, 10).await.0, followings_of_10 - 1, "the counterpart's count follows the truth");

    // No relation with the account begins again, either way.
    let refused = follower.put("/v1/me/following/1").await;
    assert_eq!((refused.status, refused.code()), (410, "account_deleted"), "{refused:?}");
    let by_it = server.client("acme", 1).put("/v1/me/following/10").await;
    assert_eq!((by_it.status, by_it.code()), (410, "account_deleted"), "{by_it:?}");
    assert_eq!(follower.put("/v1/me/blocks/1").await.code(), "account_deleted");
    assert_eq!(rows_holding(db, "acme", 1).await, 0, "a refused write leaves no row behind");
    // Deleting again is allowed and finds nothing left; the account reads as deleted.
    let again = run_job(&server.admin(), "acme", 1, json!({"kind": "delete"})).await;
    assert_eq!(again["total"], 0, "{again}");
    let account = server.admin().get("/admin/v1/tenants/acme/accounts/1").await;
    assert_eq!(account.body["state"], "deleted", "{account:?}");
    // The start is in the audit log.
    let audit = server.admin().get("/admin/v1/audit?tenant=acme").await;
    assert!(audit.body.to_string().contains("start_account_job"), "{audit:?}");
}

async fn suspending_hides_every_follow_and_restoring_brings_back_exactly_what_is_still_hidden(backend: Backend) {
    let server = TestServer::start_with(backend, |c| c.account_job_batch = 2).await;
    let (db, tenant) = (server.database(), "acme".parse::<TenantId>().unwrap());
    followed_by(db, &tenant, 1, 2..=6).await;
    act(db, &tenant, 1, Act::Follow, 2).await;
    act(db, &tenant, 1, Act::Follow, 7).await;
    let account = server.client("acme", 1);
    let listed_before = account.get("/v1/users/1/followers").await.body;
    assert_eq!(counts(&account, 1).await, (2, 5));

    run_job(&server.admin(), "acme", 1, json!({"kind": "suspend"})).await;
    assert_eq!(counts(&account, 1).await, (0, 0), "a suspended account's follows stop counting");
    assert_eq!(counts(&account, 2).await, (0, 0), "both ways");
    assert_eq!(account.get("/v1/users/1/followers").await.body["items"], json!([]));
    let status = server.client("acme", 2).get("/v1/me/relationships?user_ids=1").await;
    assert_eq!(
        (&status.body["relationships"][0]["following"], &status.body["relationships"][0]["followed_by"]),
        (&json!(false), &json!(false))
    );
    // While suspended: no follow begins; a follow ended meanwhile stays ended.
    let refused = server.client("acme", 8).put("/v1/me/following/1").await;
    assert_eq!((refused.status, refused.code()), (403, "account_suspended"), "{refused:?}");
    assert_eq!(server.client("acme", 3).unfollow(1).await["changed"], false, "nothing visible changes");
    assert_eq!(server.client("acme", 4).put("/v1/me/blocks/1").await.status, 200, "blocking it still works");

    run_job(&server.admin(), "acme", 1, json!({"kind": "restore"})).await;
    assert_eq!(counts(&account, 1).await, (2, 3), "every follow back but the two ended meanwhile");
    let listed_after = account.get("/v1/users/1/followers").await.body;
    let without = |body: &Value| -> Vec<Value> {
        body["items"].as_array().unwrap().iter().filter(|i| i["user_id"] != 3 && i["user_id"] != 4).cloned().collect()
    };
    assert_eq!(without(&listed_after), without(&listed_before), "restored follows keep their place and time");
    assert_eq!(pair_row(db, "acme", 2, 1).await, Some((1, 3)), "follow, hide, restore: three changes");
    let status = server.client("acme", 2).get("/v1/me/relationships?user_ids=1").await;
    assert_eq!(status.body["relationships"][0]["followed_by"], true, "the mutual follow is back");
    assert_eq!(server.client("acme", 8).put("/v1/me/following/1").await.status, 200, "active again");
    let conflict = server
        .admin()
        .send_json(reqwest::Method::POST, "/admin/v1/tenants/acme/accounts/1/jobs", &json!({"kind": "restore"}))
        .await;
    assert_eq!((conflict.status, conflict.code()), (409, "account_state"), "{conflict:?}");
}

async fn moving_an_account_moves_its_followers_under_the_destinations_blocks_and_privacy(backend: Backend) {
    let server = TestServer::start(backend).await;
    let (db, tenant) = (server.database(), "acme".parse::<TenantId>().unwrap());
    followed_by(db, &tenant, 1, 10..=15).await;
    act(db, &tenant, 2, Act::Block, 11).await; // the destination blocks one follower
    act(db, &tenant, 12, Act::Follow, 2).await; // one follows both already
    act(db, &tenant, 1, Act::Follow, 20).await;
    act(db, &tenant, 2, Act::Follow, 1).await; // the destination follows the account itself

    let job = run_job(&server.admin(), "acme", 1, json!({"kind": "move", "to": "2", "with_followings": true})).await;
    assert_eq!(job["total"], 8, "seven followers (the destination one of them) and one following: {job}");
    let account = server.client("acme", 1);
    assert_eq!(counts(&account, 1).await, (0, 0), "nobody follows the old account, nor it anyone");
    let followers: Vec<i64> = account.get("/v1/users/2/followers").await.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["user_id"].as_i64().unwrap())
        .collect();
    assert_eq!(
        followers.iter().copied().collect::<std::collections::BTreeSet<_>>(),
        [10, 12, 13, 14, 15].into(),
        "not the blocked one, not itself"
    );
    assert_eq!(pair_row(db, "acme", 12, 2).await, Some((1, 1)), "an existing follow is kept as it was");
    assert_eq!(pair_row(db, "acme", 2, 20).await, Some((1, 1)), "the followings moved too");
    assert_eq!(pair_row(db, "acme", 11, 1).await, Some((0, 2)), "the blocked follower's old follow ends");

    // To a private destination, follows are requests.
    let private = server.client("acme", 3);
    private.send_json(reqwest::Method::PUT, "/v1/me/settings", &json!({"private": true})).await;
    run_job(&server.admin(), "acme", 2, json!({"kind": "move", "to": "3"})).await;
    assert_eq!(pair_row(db, "acme", 10, 3).await, Some((2, 1)), "a request where the destination is private");
    let missing = server
        .admin()
        .send_json(reqwest::Method::POST, "/admin/v1/tenants/acme/accounts/3/jobs", &json!({"kind": "move"}))
        .await;
    assert_eq!((missing.status, missing.code()), (409, "account_state"), "{missing:?}");
}

async fn a_users_export_streams_every_entry_as_csv_and_json(backend: Backend) {
    let server = TestServer::start(backend).await;
    let (db, tenant) = (server.database(), "acme".parse::<TenantId>().unwrap());
    // More than two pages of 1 000.
    followed_by(db, &tenant, 1, 2..=2501).await;
    act(db, &tenant, 1, Act::Mute { expires_at_ms: None, notifications: true }, 3).await;
    let http = reqwest::Client::new();
    let bearer = token(TEST_SECRET, "1", "acme", 3600);
    let get = |path: String| {
        let (http, bearer) = (http.clone(), bearer.clone());
        async move { http.get(path).bearer_auth(bearer).send().await.unwrap() }
    };
    let csv = get(server.url("/v1/me/export/followers")).await;
    assert_eq!(csv.status(), 200);
    assert!(csv.headers()["content-type"].to_str().unwrap().starts_with("text/csv"));
    let text = csv.text().await.unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "user_id,since");
    assert_eq!(lines.len(), 2501, "a header and every follower");
    let ids: std::collections::BTreeSet<&str> = lines[1..].iter().map(|l| l.split(',').next().unwrap()).collect();
    assert_eq!(ids.len(), 2500, "each once");
    let json: Value = get(server.url("/v1/me/export/followers?format=json")).await.json().await.unwrap();
    assert_eq!(json.as_array().unwrap().len(), 2500);
    let mutes = get(server.url("/v1/me/export/mutes")).await.text().await.unwrap();
    assert!(mutes.starts_with("user_id,since,expires_at\n3,"), "{mutes}");
    let bad = get(server.url("/v1/me/export/everything")).await;
    assert_eq!(bad.status(), 400);
    // The tenant's whole graph as NDJSON, for the admin.
    let ndjson = http
        .get(server.url("/admin/v1/tenants/acme/export"))
        .bearer_auth(strand_test_support::ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let edges: Vec<Value> = ndjson.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(edges.len(), 2501, "every follow and the mute");
    assert_eq!(edges.iter().filter(|e| e["relation"] == "mute").count(), 1);
}

async fn a_long_job_takes_turns_with_another_tenants_job(backend: Backend) {
    // One edge per batch: tenant big's deletion takes many seconds on one node.
    let server = TestServer::start_with(backend, |c| c.account_job_batch = 1).await;
    let db = server.database();
    let (big, small) = ("big".parse::<TenantId>().unwrap(), "small".parse::<TenantId>().unwrap());
    followed_by(db, &big, 1, 2..=2001).await;
    followed_by(db, &small, 1, 2..=4).await;
    let admin = server.admin();
    let started = admin
        .send_json(reqwest::Method::POST, "/admin/v1/tenants/big/accounts/1/jobs", &json!({"kind": "delete"}))
        .await;
    let long = format!("/admin/v1/tenants/big/jobs/{}", started.body["id"]);
    wait_until("the long job makes progress", Duration::from_secs(30), || async {
        admin.get(&long).await.body["done"].as_i64().unwrap_or(0) > 0
    })
    .await;
    run_job(&admin, "small", 1, json!({"kind": "delete"})).await;
    let job = admin.get(&long).await.body;
    assert_eq!(job["state"], "running", "the other tenant's job ended first: {job}");
    wait_until("the long job ends", Duration::from_secs(120), || async {
        admin.get(&long).await.body["state"] == "done"
    })
    .await;
}

/// The follow edges of `tenant` that hold: (from, to).
async fn follows(db: &Database, tenant: &str) -> Vec<(i64, i64)> {
    sqlx::query_as(
        "SELECT from_user_id, to_user_id FROM following WHERE tenant_id = ? AND rel_status = 1 ORDER BY 1, 2",
    )
    .bind(tenant)
    .fetch_all(db.reader())
    .await
    .unwrap()
}

/// Two suspended accounts' follow comes back with the second restore, not the first; a block between them
/// meanwhile ends it for good.
async fn a_restore_brings_back_only_edges_whose_other_end_is_active(backend: Backend) {
    let server = TestServer::start(backend).await;
    let (db, tenant, admin) = (server.database(), "acme".parse::<TenantId>().unwrap(), server.admin());
    act(db, &tenant, 1, Act::Follow, 2).await;
    act(db, &tenant, 3, Act::Follow, 4).await;
    for account in [1, 2, 3, 4] {
        run_job(&admin, "acme", account, json!({"kind": "suspend"})).await;
    }
    run_job(&admin, "acme", 2, json!({"kind": "restore"})).await;
    assert_eq!(follows(db, "acme").await, [], "1 is still suspended: 1→2 stays hidden");
    assert_eq!(counts(&server.client("acme", 9), 2).await, (0, 0));
    run_job(&admin, "acme", 1, json!({"kind": "restore"})).await;
    assert_eq!(follows(db, "acme").await, [(1, 2)], "both ends active again");
    assert_eq!(counts(&server.client("acme", 9), 2).await, (0, 1));

    // 4 blocks 3 while both are suspended: the hidden follow ends for good.
    assert_eq!(server.client("acme", 4).put("/v1/me/blocks/3").await.status, 200);
    run_job(&admin, "acme", 3, json!({"kind": "restore"})).await;
    run_job(&admin, "acme", 4, json!({"kind": "restore"})).await;
    assert_eq!(follows(db, "acme").await, [(1, 2)], "no follow across a block");

    // Two suspended accounts that follow each other restored at once: neither restore waits for the other.
    act(db, &tenant, 5, Act::Follow, 6).await;
    act(db, &tenant, 6, Act::Follow, 5).await;
    for account in [5, 6] {
        run_job(&admin, "acme", account, json!({"kind": "suspend"})).await;
    }
    let started: Vec<i64> = join_all([5, 6].map(|account| {
        let admin = &admin;
        async move {
            let path = format!("/admin/v1/tenants/acme/accounts/{account}/jobs");
            let reply = admin.send_json(reqwest::Method::POST, &path, &json!({"kind": "restore"})).await;
            assert_eq!(reply.status, 202, "{reply:?}");
            reply.body["id"].as_i64().unwrap()
        }
    }))
    .await;
    for id in started {
        let path = format!("/admin/v1/tenants/acme/jobs/{id}");
        wait_until("the restore ends", Duration::from_secs(60), || async {
            admin.get(&path).await.body["state"] == "done"
        })
        .await;
    }
    assert_eq!(follows(db, "acme").await, [(1, 2), (5, 6), (6, 5)], "both follows back");
}

/// A running job (its node holding the lease, say) on an account or as a move's destination refuses another
/// job on either; a move onto itself is refused; a tenant runs at most `account_jobs_per_tenant` jobs.
async fn jobs_on_one_account_or_a_moves_destination_never_run_at_once(backend: Backend) {
    let server = TestServer::start_with(backend, |c| c.account_jobs_per_tenant = 3).await;
    let (db, admin) = (server.database(), server.admin());
    let held_move = |user: i64, to: i64| {
        sqlx::query(
            "INSERT INTO account_jobs (tenant_id, user_id, kind, target_user_id, with_followings, state, phase, \
             done, total, requested_by, error, lease_owner, lease_until, created_at, updated_at) \
             VALUES ('acme', ?, 'move', ?, 0, 'running', 0, 0, 0, 'admin', NULL, 'elsewhere', ?, 0, 0)",
        )
        .bind(user)
        .bind(to)
        .bind(i64::MAX / 2)
        .execute(db.writer())
    };
    held_move(1, 2).await.unwrap();
    let start = |account: i64, body: Value| {
        let admin = &admin;
        async move {
            let path = format!("/admin/v1/tenants/acme/accounts/{account}/jobs");
            admin.send_json(reqwest::Method::POST, &path, &body).await
        }
    };
    for (account, body) in [
        (2, json!({"kind": "suspend"})),
        (2, json!({"kind": "delete"})),
        (2, json!({"kind": "move", "to": "1"})),
        (1, json!({"kind": "suspend"})),
        (5, json!({"kind": "move", "to": "2"})),
    ] {
        let refused = start(account, body.clone()).await;
        assert_eq!((refused.status, refused.code()), (409, "job_running"), "{account} {body}: {refused:?}");
    }
    let onto_itself = start(5, json!({"kind": "move", "to": "5"})).await;
    assert_eq!((onto_itself.status, onto_itself.code()), (409, "account_state"), "{onto_itself:?}");
    let state: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(state), 0) FROM account_settings WHERE user_id = 2")
        .fetch_one(db.reader())
        .await
        .unwrap();
    assert_eq!(state, 0, "a refused start changes no account");

    held_move(6, 7).await.unwrap();
    held_move(8, 9).await.unwrap();
    let too_many = start(10, json!({"kind": "suspend"})).await;
    assert_eq!((too_many.status, too_many.code()), (429, "too_many_jobs"), "{too_many:?}");
    let other_tenant = admin
        .send_json(reqwest::Method::POST, "/admin/v1/tenants/other/accounts/10/jobs", &json!({"kind": "suspend"}))
        .await;
    assert_eq!(other_tenant.status, 202, "the bound is per tenant: {other_tenant:?}");
}
