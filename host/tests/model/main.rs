//! The model-based test: from a seed, a random interleaving of every write and job — follow, unfollow,
//! requests authorized and rejected, blocks, mutes, removed followers, private on and off, suspend, restore,
//! delete, move, a small import, a relation policy deployed as a plugin — from several concurrent clients,
//! each answer checked against a reference model of the README's semantics (`model.rs`); after quiescence the
//! truth, the follower table, the follow counts (truth and served), the lists and the pipeline's reconcile
//! must all equal the model, and no job may be left running.
//!
//! Concurrent ops within a round touch disjoint users, so they commute and the model applies them in any
//! order; jobs and imports run alone. The seed is printed with every failure; `STRAND_MODEL_SEED=<n>` replays
//! it, `STRAND_MODEL_STEPS=<n>` runs longer (CI runs a bounded number on SQLite and on MariaDB).

mod model;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::future::join_all;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use reqwest::Method;
use serde_json::{json, Value};
use strand::config::RelayMode;
use strand::plugins::BUNDLED;
use strand_test_support::{on_every_backend, outbox_rows, rows_holding, wait_until, Backend, TestServer};

use self::model::{Answer, Edge, Model, Op, State};

on_every_backend!(every_write_and_job_keeps_the_models_semantics);

const TENANT: &str = "model";
const USERS: i64 = 10;
/// Concurrent clients per round.
const CLIENTS: usize = 4;

fn seed() -> u64 {
    std::env::var("STRAND_MODEL_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(7, |d| d.as_nanos() as u64)
    })
}

fn steps() -> usize {
    std::env::var("STRAND_MODEL_STEPS").ok().and_then(|s| s.parse().ok()).unwrap_or(150)
}

/// One op, weighted towards the relation writes.
fn generate(rng: &mut StdRng) -> Op {
    let user = |rng: &mut StdRng| rng.random_range(1..=USERS);
    let (a, mut b) = (user(rng), user(rng));
    if b == a && rng.random_range(0..10) > 0 {
        b = a % USERS + 1;
    }
    match rng.random_range(0..100) {
        0..30 => Op::Follow(a, b),
        30..38 => Op::Unfollow(a, b),
        38..44 => Op::Authorize(a, b),
        44..48 => Op::Reject(a, b),
        48..52 => Op::RemoveFollower(a, b),
        52..58 => Op::Block(a, b),
        58..64 => Op::Unblock(a, b),
        64..68 => Op::Mute(a, b),
        68..71 => Op::Unmute(a, b),
        71..79 => Op::Private(a, rng.random_bool(0.5)),
        79..84 => Op::Suspend(a),
        84..90 => Op::Restore(a),
        90..92 => Op::Delete(a),
        92..96 => Op::Move(a, b),
        _ => Op::Import((0..3).map(|_| (user(rng), user(rng))).filter(|(from, to)| from != to).collect()),
    }
}

/// Carries `op` out through the API; what it answered.
async fn perform(server: &TestServer, op: &Op) -> Answer {
    let write = |user: i64, method: Method, path: String| async move {
        let reply = server.client(TENANT, user).send_json(method, &path, &json!({})).await;
        let changed = reply.body["changed"].as_bool().filter(|_| reply.status == 200);
        Answer { status: reply.status, changed }
    };
    let job = |user: i64, body: Value| async move {
        let admin = server.admin();
        let path = format!("/admin/v1/tenants/{TENANT}/accounts/{user}/jobs");
        let started = admin.send_json(Method::POST, &path, &body).await;
        if started.status == 202 {
            let id = started.body["id"].as_i64().unwrap();
            let path = format!("/admin/v1/tenants/{TENANT}/jobs/{id}");
            wait_until("the job ends", Duration::from_secs(60), || async {
                admin.get(&path).await.body["state"] != "running"
            })
            .await;
            let job = admin.get(&path).await.body;
            assert_eq!(job["state"], "done", "{job}");
        }
        Answer { status: started.status, changed: None }
    };
    match op {
        Op::Follow(a, b) => write(*a, Method::PUT, format!("/v1/me/following/{b}")).await,
        Op::Unfollow(a, b) => write(*a, Method::DELETE, format!("/v1/me/following/{b}")).await,
        Op::Authorize(a, b) => write(*a, Method::POST, format!("/v1/me/follow_requests/{b}/authorize")).await,
        Op::Reject(a, b) => write(*a, Method::POST, format!("/v1/me/follow_requests/{b}/reject")).await,
        Op::RemoveFollower(a, b) => write(*a, Method::DELETE, format!("/v1/me/followers/{b}")).await,
        Op::Block(a, b) => write(*a, Method::PUT, format!("/v1/me/blocks/{b}")).await,
        Op::Unblock(a, b) => write(*a, Method::DELETE, format!("/v1/me/blocks/{b}")).await,
        Op::Mute(a, b) => write(*a, Method::PUT, format!("/v1/me/mutes/{b}")).await,
        Op::Unmute(a, b) => write(*a, Method::DELETE, format!("/v1/me/mutes/{b}")).await,
        Op::Private(a, private) => {
            let reply =
                server.client(TENANT, *a).send_json(Method::PUT, "/v1/me/settings", &json!({"private": private})).await;
            Answer { status: reply.status, changed: None }
        }
        Op::Suspend(a) => job(*a, json!({"kind": "suspend"})).await,
        Op::Restore(a) => job(*a, json!({"kind": "restore"})).await,
        Op::Delete(a) => job(*a, json!({"kind": "delete"})).await,
        Op::Move(a, b) => job(*a, json!({"kind": "move", "to": b.to_string()})).await,
        Op::Import(follows) => {
            let body: String = follows.iter().map(|(from, to)| format!("{{\"from\":{from},\"to\":{to}}}\n")).collect();
            let reply =
                server.admin().send_ndjson(Method::POST, &format!("/admin/v1/tenants/{TENANT}/import"), body).await;
            Answer { status: reply.status, changed: None }
        }
    }
}

/// The rounds: up to [`CLIENTS`] ops on disjoint users at once, jobs and imports alone.
fn rounds(rng: &mut StdRng, steps: usize) -> Vec<Vec<Op>> {
    let mut rounds: Vec<Vec<Op>> = Vec::new();
    let mut made = 0;
    while made < steps {
        let first = generate(rng);
        made += 1;
        if first.alone() {
            rounds.push(vec![first]);
            continue;
        }
        let mut round = vec![first];
        for _ in 1..CLIENTS {
            let next = generate(rng);
            made += 1;
            if next.alone() {
                rounds.push(vec![next]);
            } else {
                round.push(next);
            }
        }
        rounds.push(round);
    }
    rounds
}

async fn every_write_and_job_keeps_the_models_semantics(backend: Backend) {
    let seed = seed();
    let server = TestServer::start_with(backend, |c| {
        c.relay = RelayMode::Poll;
        c.relay_idle_ms = 10;
        c.workers = true;
        c.refresh_ms = 100;
        c.account_job_batch = 3;
    })
    .await;
    // Follows decided by the tenant's own relation policy: the bundled rule, but as a plugin (asked before
    // the transaction, its answer checked against what the transaction finds).
    let policy = BUNDLED.iter().find(|b| b.kind.as_str() == "relation-policy").expect("the bundled relation policy");
    let deployed = server
        .admin()
        .upload(
            Method::PUT,
            &format!("/admin/v1/tenants/{TENANT}/plugins/relation-policy/default"),
            policy.wasm.to_vec(),
        )
        .await;
    assert_eq!(deployed.status, 200, "seed {seed}: {deployed:?}");

    let mut rng = StdRng::seed_from_u64(seed);
    let mut model = Model::new(USERS);
    for (number, round) in rounds(&mut rng, steps()).into_iter().enumerate() {
        let mut users = BTreeSet::new();
        let round: Vec<Op> = round
            .into_iter()
            .filter(|op| {
                let footprint = op.footprint(&model);
                let disjoint = users.is_disjoint(&footprint);
                users.extend(footprint);
                disjoint
            })
            .collect();
        let answers = join_all(round.iter().map(|op| perform(&server, op))).await;
        for (op, answer) in round.iter().zip(answers) {
            // Shown with a failure: the history that led to it.
            eprintln!("round {number}: {op:?} -> {answer:?}");
            let expected = model.apply(op);
            assert_eq!(
                answer, expected,
                "seed {seed}, round {number}: {op:?} answered {answer:?}, the model {expected:?}"
            );
        }
    }
    check_quiescent(&server, &model, seed).await;
}

/// After the last op: everything the host keeps or serves equals the model.
async fn check_quiescent(server: &TestServer, model: &Model, seed: u64) {
    let db = server.database();
    let truth: BTreeMap<(i64, i64), Edge> = sqlx::query_as::<_, (i64, i64, i64)>(
        "SELECT from_user_id, to_user_id, rel_status FROM following WHERE tenant_id = ? AND rel_status > 0",
    )
    .bind(TENANT)
    .fetch_all(db.reader())
    .await
    .unwrap()
    .into_iter()
    .map(|(from, to, status)| ((from, to), if status == 1 { Edge::Follow } else { Edge::Request }))
    .collect();
    assert_eq!(truth, model.follows, "seed {seed}: the truth's follows and requests");
    let held = |table: &'static str| async move {
        let sql = format!("SELECT from_user_id, to_user_id FROM {table} WHERE tenant_id = ? AND rel_status = 1");
        sqlx::query_as::<_, (i64, i64)>(&sql).bind(TENANT).fetch_all(db.reader()).await.unwrap()
    };
    assert_eq!(held("blocks").await.into_iter().collect::<BTreeSet<_>>(), model.blocks, "seed {seed}: blocks");
    assert_eq!(held("mutes").await.into_iter().collect::<BTreeSet<_>>(), model.mutes, "seed {seed}: mutes");
    let counted: BTreeMap<i64, (i64, i64)> = sqlx::query_as::<_, (i64, i64, i64)>(
        "SELECT user_id, followings, followers FROM follow_counts WHERE tenant_id = ? AND (followings <> 0 OR followers <> 0)",
    )
    .bind(TENANT)
    .fetch_all(db.reader())
    .await
    .unwrap()
    .into_iter()
    .map(|(user, followings, followers)| (user, (followings, followers)))
    .collect();
    let expected: BTreeMap<i64, (i64, i64)> =
        model.users().into_iter().map(|u| (u, model.counts(u))).filter(|(_, c)| *c != (0, 0)).collect();
    assert_eq!(counted, expected, "seed {seed}: follow_counts");
    let jobs: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM account_jobs WHERE state = 'running'")
        .fetch_one(db.reader())
        .await
        .unwrap();
    assert_eq!(jobs, 0, "seed {seed}: no job left running");

    // The pipeline catches up: the follower table, the served counts and lists equal the truth.
    wait_until("the outbox is published", Duration::from_secs(60), || async {
        outbox_rows(db).await.is_ok_and(|rows| rows == 0)
    })
    .await;
    let reader = server.client(TENANT, 1);
    let served_differences = || async {
        let mut differences = Vec::new();
        for user in model.users() {
            let counts = reader.get(&format!("/v1/users/{user}/counts")).await.body;
            let served = (counts["followings"].as_i64().unwrap_or(-1), counts["followers"].as_i64().unwrap_or(-1));
            if served != model.counts(user) {
                differences.push(format!("{user}'s counts: served {served:?}, the model {:?}", model.counts(user)));
            }
            let listed = reader.get(&format!("/v1/users/{user}/followers?limit=100")).await.body;
            let listed: BTreeSet<i64> =
                listed["items"].as_array().into_iter().flatten().filter_map(|i| i["user_id"].as_i64()).collect();
            let followers: BTreeSet<i64> =
                model.edges_to(user).filter(|(_, edge)| *edge == Edge::Follow).map(|(from, _)| from).collect();
            if listed != followers {
                differences.push(format!("{user}'s followers: served {listed:?}, the model {followers:?}"));
            }
        }
        differences
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let differences = served_differences().await;
        if differences.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "seed {seed}: served reads never equal the model: {differences:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let report = strand::projection::reconcile(db, None, 0).await.expect("reconcile runs");
        if report.differences.is_empty() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "seed {seed}: reconcile: {:?}", report.differences);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for user in model.users().into_iter().filter(|u| model.state(*u) == State::Deleted) {
        assert_eq!(rows_holding(db, TENANT, user).await, 0, "seed {seed}: deleted account {user} is erased");
    }
}
