//! A graph imported through the admin API: merged into the truth (an edge that holds is kept, so a second run
//! changes nothing), under blocks, privacy and account states; the follower table kept, the projector spaces
//! built again from the truth; a bad line named.

use std::time::Duration;

use serde_json::{json, Value};
use std::collections::HashMap;
use strand::config::RelayMode;
use strand::db::Database;

use sqlx::Row;
use strand::graph::{
    change, follow_by_host, update_settings, AccountState, Act, PairState, RelStatus, RelationCommand, Settings,
    TenantId, UserId, WriteError,
};
use strand_test_support::{on_every_backend, wait_until, ApiClient, Backend, Random, Redis, TestServer};

use super::accounts::run_job;
use super::pair_row;

on_every_backend!(
    importing_a_graph_twice_changes_nothing_the_second_time_under_blocks_privacy_and_account_states,
    an_import_that_stops_half_way_leaves_served_reads_equal_to_the_truth,
    a_pair_met_twice_in_one_batch_is_decided_as_two_live_follows_would_be,
    every_line_of_random_batches_is_decided_as_the_rule_table_decides_it,
);

/// Followers of user 1 in the graph: two batches' worth.
const FOLLOWERS: i64 = 6000;

fn user(id: i64) -> UserId {
    id.to_string().parse().unwrap()
}

async fn act(db: &Database, tenant: &TenantId, actor: i64, act: Act, subject: i64) {
    change(db, RelationCommand::new(tenant, user(actor), act, user(subject))).await.expect("a seeding write");
}

/// Posts `body` to the tenant's import route; the status and the answer.
async fn import(server: &TestServer, tenant: &str, query: &str, body: String) -> (u16, Value) {
    let reply = server
        .admin()
        .send_ndjson(reqwest::Method::POST, &format!("/admin/v1/tenants/{tenant}/import{query}"), body)
        .await;
    (reply.status, reply.body)
}

async fn counts(client: &ApiClient, user: i64) -> (i64, i64) {
    let reply = client.get(&format!("/v1/users/{user}/counts")).await;
    (reply.body["followings"].as_i64().unwrap(), reply.body["followers"].as_i64().unwrap())
}

async fn events(db: &Database) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM outbox").fetch_one(db.reader()).await.unwrap()
}

/// A pending request, then the same pair as a follow, with the public target: as two live follows (or the
/// two lines in batches of their own), the second is the follow — the batch decides each line on what the
/// lines before it left.
async fn a_pair_met_twice_in_one_batch_is_decided_as_two_live_follows_would_be(backend: Backend) {
    let server = TestServer::start(backend).await;
    let name = format!("twice{}{}", std::process::id(), backend == Backend::Sqlite);
    let graph = "{\"relation\":\"follow\",\"from\":2,\"to\":3,\"requested\":true}\n\
                 {\"relation\":\"follow\",\"from\":2,\"to\":3}\n\
                 {\"relation\":\"follow\",\"from\":2,\"to\":3}\n";
    let (status, report) = import(&server, &name, "", graph.to_owned()).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!((&report["requested"], &report["followed"], &report["kept"]), (&json!(1), &json!(1), &json!(1)));
    assert_eq!(pair_row(server.database(), &name, 2, 3).await, Some((1, 2)), "a follow, at its second version");
    assert_eq!(counts(&server.client(&name, 2), 3).await, (0, 1), "counted once");
}

async fn importing_a_graph_twice_changes_nothing_the_second_time_under_blocks_privacy_and_account_states(
    backend: Backend,
) {
    // Workers build the projector spaces in Redis (kept over the restart below, so the unfollow there is
    // projected live, not rebuilt); the relay stays off until the outbox has been checked.
    let name = format!("import{}{}", std::process::id(), backend == Backend::Sqlite);
    let server = TestServer::start_with(backend, |c| {
        c.workers = true;
        c.refresh_ms = 100;
        c.redis_url = Some(Redis::shared().unwrap().url());
    })
    .await;
    let (db, tenant) = (server.database(), name.parse::<TenantId>().unwrap());
    act(db, &tenant, 1, Act::Follow, 2).await; // already in the truth: kept
    act(db, &tenant, 6, Act::Block, 7).await;
    let private = server.client(&name, 5);
    assert_eq!(private.send_json(reqwest::Method::PUT, "/v1/me/settings", &json!({"private": true})).await.status, 200);
    let suspended = server
        .admin()
        .send_json(
            reqwest::Method::POST,
            &format!("/admin/v1/tenants/{name}/accounts/8/jobs"),
            &json!({"kind": "suspend"}),
        )
        .await;
    assert_eq!(suspended.status, 202, "{suspended:?}");

    let mut graph = String::new();
    for follower in 10..10 + FOLLOWERS {
        graph.push_str(&format!("{{\"from\":{follower},\"to\":1,\"at_ms\":{}}}\n", 1_600_000_000_000 + follower));
    }
    for (from, to) in [(1, 2), (1, 3), (1, 5), (7, 6), (3, 8)] {
        graph.push_str(&format!("{{\"relation\":\"follow\",\"from\":{from},\"to\":{to}}}\n"));
    }
    graph.push_str("\n{\"relation\":\"block\",\"from\":4,\"to\":3,\"at_ms\":5}\n");
    graph.push_str("{\"relation\":\"mute\",\"from\":4,\"to\":9}\n");
    let outbox_before = events(db).await;

    let (status, first) = import(&server, &name, "", graph.clone()).await;
    assert_eq!(status, 200, "{first}");
    let expected = json!({"lines": FOLLOWERS + 7, "followed": FOLLOWERS + 1, "requested": 1, "kept": 1, "blocked": 1,
        "inactive": 1, "blocks": 1, "mutes": 1});
    assert_eq!(first, expected, "1→2 kept, 1→5 a request (private), 7→6 blocked, 3→8 suspended");
    assert_eq!(events(db).await - outbox_before, 2, "the block and the mute have events, the follows none");
    assert_eq!(pair_row(db, &name, 10, 1).await, Some((1, 1)), "an imported follow is the pair's first version");
    assert_eq!(pair_row(db, &name, 1, 5).await, Some((2, 1)));
    assert_eq!(pair_row(db, &name, 7, 6).await.map_or(0, |row| row.0), 0, "no follow across a block");
    let followed_at: i64 = sqlx::query_scalar(
        "SELECT created_at FROM follower WHERE tenant_id = ? AND to_user_id = 1 AND from_user_id = 10",
    )
    .bind(&name)
    .fetch_one(db.reader())
    .await
    .unwrap();
    assert_eq!(followed_at, 1_600_000_000_010, "the follower table has the import's followed_at");

    // The projector spaces are built again from the truth, then serve the imported counts.
    let admin = server.admin();
    wait_until("follow-counts is built again with the import", Duration::from_secs(60), || async {
        let backfills = admin.get("/admin/v1/projections").await.body["backfills"].clone();
        backfills.as_array().into_iter().flatten().any(|b| {
            b["tenant"] == name.as_str()
                && b["projection"].as_str().is_some_and(|p| p.contains("follow-counts"))
                && b["state"] == "complete"
                && b["done"].as_i64().unwrap_or(0) >= FOLLOWERS
        })
    })
    .await;
    let reader = server.client(&name, 1);
    assert_eq!(counts(&reader, 1).await, (2, FOLLOWERS), "1 follows 2 and 3; the 1→5 request does not count");
    let page = reader.get("/v1/users/1/followers?limit=1").await;
    assert_eq!(page.body["items"][0]["user_id"], 10 + FOLLOWERS - 1, "newest first by the imported times: {page:?}");

    // The same graph again: everything is kept, nothing is written.
    let outbox_before = events(db).await;
    let (status, second) = import(&server, &name, "", graph).await;
    assert_eq!(status, 200, "{second}");
    let expected = json!({"lines": FOLLOWERS + 7, "followed": 0, "requested": 0, "kept": FOLLOWERS + 5, "blocked": 1,
        "inactive": 1, "blocks": 0, "mutes": 0});
    assert_eq!(second, expected);
    assert_eq!(events(db).await, outbox_before, "a second import writes no event");
    assert_eq!(pair_row(db, &name, 10, 1).await, Some((1, 1)), "nor a version");

    // A live unfollow after the import, relayed, moves the counts by one: versions and projections agree.
    let server = server
        .restart_with(|c| {
            c.relay = RelayMode::Poll;
            c.relay_idle_ms = 10;
        })
        .await;
    let (db, admin, reader) = (server.database(), server.admin(), server.client(&name, 1));
    assert!(server.client(&name, 10).delete("/v1/me/following/1").await.status < 300);
    assert_eq!(pair_row(db, &name, 10, 1).await, Some((0, 2)), "the unfollow is the pair's second version");
    wait_until("the unfollow is projected", Duration::from_secs(30), || async {
        counts(&reader, 1).await == (2, FOLLOWERS - 1)
    })
    .await;

    // CSV of follows, with a header; a bad line is named and what came before it stays.
    let (status, csv) = import(&server, &name, "?format=csv", "from,to,at_ms\n20000,1,5\n20001,1\n".to_owned()).await;
    assert_eq!((status, csv["followed"].as_i64()), (200, Some(2)), "{csv}");
    let (status, bad) = import(&server, &name, "", "{\"from\":30000,\"to\":1}\n{\"from\":1}\n".to_owned()).await;
    assert_eq!((status, bad["code"].as_str()), (400, Some("invalid_import")), "{bad}");
    assert!(bad["detail"].as_str().unwrap().starts_with("line 2:"), "{bad}");
    assert_eq!(pair_row(db, &name, 30000, 1).await, Some((1, 1)), "the lines before the bad one are in");
    let audit = admin.get(&format!("/admin/v1/audit?tenant={name}")).await;
    assert!(audit.body.to_string().contains("\"import\""), "{audit:?}");
}

/// A bad third line stops an import after its first two follows are in: the served counts (from a space that
/// was complete) come back to the truth. A running import's mark refuses a second import; a mark whose lease
/// ran out (its process was killed) is ended by the node, with its spaces built again and an audit entry.
async fn an_import_that_stops_half_way_leaves_served_reads_equal_to_the_truth(backend: Backend) {
    let name = format!("halfway{}{}", std::process::id(), backend == Backend::Sqlite);
    let server = TestServer::start_with(backend, |c| {
        c.workers = true;
        c.refresh_ms = 100;
    })
    .await;
    let reader = server.client(&name, 1);
    assert_eq!(server.client(&name, 9).follow(2).await["following"], true);
    wait_until("the live follow is served from the counts", Duration::from_secs(60), || async {
        counts(&reader, 2).await == (0, 1)
    })
    .await;

    let graph = "{\"from\":3,\"to\":2}\n{\"from\":4,\"to\":2}\n{\"from\":5,\"to\n".to_owned();
    let (status, bad) = import(&server, &name, "", graph).await;
    assert_eq!((status, bad["code"].as_str()), (400, Some("invalid_import")), "{bad}");
    wait_until("the served count is the truth's again", Duration::from_secs(60), || async {
        counts(&reader, 2).await == (0, 3)
    })
    .await;
    let audit = server.admin().get(&format!("/admin/v1/audit?tenant={name}")).await.body.to_string();
    assert!(audit.contains("started") && audit.contains("imported before it stopped"), "{audit}");

    // An import running elsewhere (its mark, live): a second one is refused and writes nothing.
    let db = server.database();
    sqlx::query("INSERT INTO tenant_imports (tenant_id, started_at, lease_until) VALUES (?, 0, ?)")
        .bind(&name)
        .bind(i64::MAX / 2)
        .execute(db.writer())
        .await
        .unwrap();
    let (status, running) = import(&server, &name, "", "{\"from\":6,\"to\":2}\n".to_owned()).await;
    assert_eq!((status, running["code"].as_str()), (409, Some("import_running")), "{running}");
    assert_eq!(pair_row(db, &name, 6, 2).await, None);

    // Its process killed: the lease runs out and the node ends it.
    sqlx::query("UPDATE tenant_imports SET lease_until = 0 WHERE tenant_id = ?")
        .bind(&name)
        .execute(db.writer())
        .await
        .unwrap();
    wait_until("the abandoned import is ended", Duration::from_secs(60), || async {
        let marks: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tenant_imports WHERE tenant_id = ?")
            .bind(&name)
            .fetch_one(db.reader())
            .await
            .unwrap();
        marks == 0
    })
    .await;
    let audit = server.admin().get(&format!("/admin/v1/audit?tenant={name}")).await.body.to_string();
    assert!(audit.contains("abandoned"), "{audit}");
    let (status, _) = import(&server, &name, "", "{\"from\":6,\"to\":2}\n".to_owned()).await;
    assert_eq!(status, 200, "imports again");
    wait_until("and serves the truth", Duration::from_secs(60), || async { counts(&reader, 2).await == (0, 4) }).await;
}

/// The users of the rule-table rounds: few, so that batches meet pairs again, reverse pairs and blocks.
const USERS: i64 = 8;

/// Random states (follows, requests, ended follows, blocks, private, suspended and deleted accounts) and a
/// random batch over them, imported: every line's outcome, every pair's row and the counts are what
/// `graph::follow_by_host` — the rule table of a single follow — gives line by line, whichever way the
/// import wrote the line (its set-based statement or its per-pair decisions).
async fn every_line_of_random_batches_is_decided_as_the_rule_table_decides_it(backend: Backend) {
    let server = TestServer::start(backend).await;
    let (db, admin) = (server.database(), server.admin());
    let mut random = Random::seeded("STRAND_TEST_IMPORT_SEED");
    for round in 0..10 {
        let name = format!("rules{round}x{}{}", std::process::id(), backend == Backend::Sqlite);
        let tenant = name.parse::<TenantId>().unwrap();
        for _ in 0..14 {
            let (from, to) = pair(&mut random);
            let acts: &[Act] = match pick(&mut random, 5) {
                0 => &[Act::Block],
                1 => &[Act::Follow, Act::Unfollow],
                _ => &[Act::Follow],
            };
            for &a in acts {
                match change(db, RelationCommand::new(&tenant, user(from), a, user(to))).await {
                    Ok(_) | Err(WriteError::Blocked) => {}
                    Err(other) => panic!("a seeding write: {other}"),
                }
            }
        }
        let mut accounts: HashMap<i64, (bool, AccountState)> = HashMap::new();
        for account in 1..=USERS {
            let state = match pick(&mut random, 8) {
                0 => Some(AccountState::Suspended),
                1 => Some(AccountState::Deleted),
                2 => {
                    update_settings(db, &tenant, user(account), Settings { private: true }).await.expect("private");
                    accounts.insert(account, (true, AccountState::Active));
                    None
                }
                _ => None,
            };
            if let Some(state) = state {
                let kind = if state == AccountState::Deleted { "delete" } else { "suspend" };
                run_job(&admin, &name, account, json!({"kind": kind})).await;
                accounts.insert(account, (false, state));
            }
        }
        let mut pairs = truth_pairs(db, &name).await;
        let before = pairs.clone();

        let lines: Vec<(i64, i64, bool)> = (0..60)
            .map(|_| {
                let (from, to) = pair(&mut random);
                (from, to, pick(&mut random, 4) == 0)
            })
            .collect();
        let mut expected: HashMap<&str, i64> = HashMap::new();
        for &(from, to, requested) in &lines {
            let account = |u: i64| accounts.get(&u).copied().unwrap_or((false, AccountState::Active));
            let row = pairs.get(&(from, to)).copied().unwrap_or_default();
            let blocked_back = pairs.get(&(to, from)).is_some_and(|back| back.blocked);
            let state = PairState { blocked_back, ..row };
            let approval = requested || account(to).0;
            let decided =
                follow_by_host(&tenant, (user(from), user(to)), state, [account(from).1, account(to).1], approval);
            let outcome = match decided {
                Ok(Some(status)) => {
                    pairs.insert((from, to), PairState { status, version: row.version + 1, ..row });
                    if status == RelStatus::Active {
                        "followed"
                    } else {
                        "requested"
                    }
                }
                Ok(None) => "kept",
                Err(WriteError::Blocked) => "blocked",
                Err(other) => {
                    assert!(matches!(other, WriteError::AccountDeleted | WriteError::AccountSuspended), "{other}");
                    "inactive"
                }
            };
            *expected.entry(outcome).or_default() += 1;
        }
        let body: String = lines
            .iter()
            .map(|(from, to, requested)| format!("{{\"from\":{from},\"to\":{to},\"requested\":{requested}}}\n"))
            .collect();
        let (status, report) = import(&server, &name, "", body).await;
        assert_eq!(status, 200, "{report}");
        for outcome in ["followed", "requested", "kept", "blocked", "inactive"] {
            let want = expected.get(outcome).copied().unwrap_or(0);
            assert_eq!(
                report[outcome].as_i64(),
                Some(want),
                "{outcome} in round {round}: {report}; before: {before:?}"
            );
        }
        assert_eq!(truth_pairs(db, &name).await, pairs, "round {round}'s rows; before: {before:?}, lines: {lines:?}");
        let recounted = sqlx::query(
            "SELECT COUNT(*) FROM follow_counts c WHERE c.tenant_id = ? AND (c.followings <> (SELECT COUNT(*) FROM \
             following f WHERE f.tenant_id = c.tenant_id AND f.from_user_id = c.user_id AND f.rel_status = 1) OR \
             c.followers <> (SELECT COUNT(*) FROM following f WHERE f.tenant_id = c.tenant_id AND f.to_user_id = \
             c.user_id AND f.rel_status = 1))",
        )
        .bind(&name)
        .fetch_one(db.reader())
        .await
        .unwrap()
        .get::<i64, _>(0);
        assert_eq!(recounted, 0, "round {round}: every count is its follows'");
    }
}

fn pick(random: &mut Random, n: i64) -> i64 {
    random.below(n as u64) as i64
}

/// Two different users of the rounds.
fn pair(random: &mut Random) -> (i64, i64) {
    let from = 1 + pick(random, USERS);
    (from, 1 + (from + pick(random, USERS - 1)) % USERS)
}

/// Every follow row of `tenant` as the rule table reads it (the reverse pair's block is its own row's).
async fn truth_pairs(db: &Database, tenant: &str) -> HashMap<(i64, i64), PairState> {
    sqlx::query("SELECT from_user_id, to_user_id, rel_status, version, blocked FROM following WHERE tenant_id = ?")
        .bind(tenant)
        .fetch_all(db.reader())
        .await
        .unwrap()
        .iter()
        .map(|row| {
            let state = PairState {
                status: RelStatus::from_stored(row.get(2)).unwrap(),
                version: row.get(3),
                blocked: row.get::<i64, _>(4) != 0,
                blocked_back: false,
            };
            ((row.get(0), row.get(1)), state)
        })
        .collect()
}
