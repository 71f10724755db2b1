//! The model-based test: from a seed, a random interleaving of every write and job — follow, unfollow,
//! requests authorized and rejected, blocks, mutes, removed followers, private on and off, suspend, restore,
//! delete, move, a small import, a relation policy deployed as a plugin — from several concurrent clients,
//! each answer checked against a reference model of the README's semantics (`model.rs`); after quiescence the
//! truth, the follower table, the follow counts (truth and served), the lists and the pipeline's reconcile
//! must all equal the model, and no job may be left running.
//!
//! Concurrent ops within a round touch disjoint users, so they commute and the model applies them in any
//! order; jobs and imports run alone. Now and then the node is crashed as a SIGKILL would end its process
//! (`TestServer::crash_and_restart`: nothing drained, the in-process cache lost) — between rounds, with the
//! relay's, the workers' and the jobs' batches in flight, or right after a job started — and restarted on the
//! same database. It runs on SQLite and MariaDB with the embedded bus and cache, and on a production-shaped
//! node (MariaDB's binlog relay, Redis, the Kafka-protocol broker). The seed is printed with every failure; `STRAND_MODEL_SEED=<n>` replays
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
/// The share of rounds (in percent) after which the node is crashed as a SIGKILL would.
const CRASH_PERCENT: u32 = 3;

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
        let started = start_job(server, user, &body).await;
        if let Some(id) = started.1 {
            job_done(server, id).await;
        }
        started.0
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
        Op::Suspend(..) | Op::Restore(..) | Op::Delete(..) | Op::Move(..) => {
            let (user, body) = job_of(op).expect("a job");
            job(user, body).await
        }
        Op::Import(follows) => {
            let body: String = follows.iter().map(|(from, to)| format!("{{\"from\":{from},\"to\":{to}}}\n")).collect();
            let reply =
                server.admin().send_ndjson(Method::POST, &format!("/admin/v1/tenants/{TENANT}/import"), body).await;
            Answer { status: reply.status, changed: None }
        }
    }
}

/// The job an op starts, with its body: `None` for an op that is not a job.
fn job_of(op: &Op) -> Option<(i64, Value)> {
    match op {
        Op::Suspend(a) => Some((*a, json!({"kind": "suspend"}))),
        Op::Restore(a) => Some((*a, json!({"kind": "restore"}))),
        Op::Delete(a) => Some((*a, json!({"kind": "delete"}))),
        Op::Move(a, b) => Some((*a, json!({"kind": "move", "to": b.to_string()}))),
        _ => None,
    }
}

/// Starts a job on `user`'s account: its answer, and the job's id when it started.
async fn start_job(server: &TestServer, user: i64, body: &Value) -> (Answer, Option<i64>) {
    let path = format!("/admin/v1/tenants/{TENANT}/accounts/{user}/jobs");
    let started = server.admin().send_json(Method::POST, &path, body).await;
    (Answer { status: started.status, changed: None }, started.body["id"].as_i64().filter(|_| started.status == 202))
}

/// Waits for job `id` to end, done.
async fn job_done(server: &TestServer, id: i64) {
    let (admin, path) = (server.admin(), format!("/admin/v1/tenants/{TENANT}/jobs/{id}"));
    wait_until("the job ends", Duration::from_secs(60), || async { admin.get(&path).await.body["state"] != "running" })
        .await;
    let job = admin.get(&path).await.body;
    assert_eq!(job["state"], "done", "{job}");
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
    let server = TestServer::start_with(backend, |c| {
        c.relay = RelayMode::Poll;
        c.relay_idle_ms = 10;
        c.workers = true;
        c.refresh_ms = 100;
        c.account_job_batch = 3;
    })
    .await;
    run(server).await;
}

/// The same on a production-shaped node: MariaDB's binlog relay, Redis, the Kafka-protocol broker.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_a_production_node() {
    // A stable worker name (static group membership, as the README recommends): a restarted node takes its
    // partitions back at once instead of waiting out its dead predecessor's session.
    let node = TestServer::start_node(|c| {
        c.account_job_batch = 3;
        c.worker_id = Some(format!("model-{}", std::process::id()));
    });
    run(node.await).await;
}

/// Plays the seed's rounds on `server`, crashing it (as a SIGKILL would) now and then — between rounds, and
/// right after a job started —, then checks the end state.
async fn run(mut server: TestServer) {
    let seed = seed();
    // Follows decided by the tenant's own relation policy: the bundled rule, but as a plugin (asked before
    // the transaction, its answer checked against what the transaction finds).
    let policy = BUNDLED.iter().find(|b| b.kind.as_str() == "relation-policy").expect("the bundled relation policy");
    let slot = format!("/admin/v1/tenants/{TENANT}/plugins/relation-policy/default");
    let deployed = server.admin().upload(Method::PUT, &slot, policy.wasm.to_vec()).await;
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
        let crash = rng.random_range(0..100) < CRASH_PERCENT;
        let a_job = matches!(round.as_slice(), [op] if job_of(op).is_some());
        let answers = match (round.as_slice(), crash && a_job) {
            ([op], true) => {
                let (user, body) = job_of(op).expect("a job");
                let (answer, started) = start_job(&server, user, &body).await;
                eprintln!("round {number}: crashed with the job just started");
                server = server.crash_and_restart().await;
                if let Some(id) = started {
                    job_done(&server, id).await;
                }
                vec![answer]
            }
            _ => join_all(round.iter().map(|op| perform(&server, op))).await,
        };
        for (op, answer) in round.iter().zip(answers) {
            // Shown with a failure: the history that led to it.
            eprintln!("round {number}: {op:?} -> {answer:?}");
            let expected = model.apply(op);
            assert_eq!(
                answer, expected,
                "seed {seed}, round {number}: {op:?} answered {answer:?}, the model {expected:?}"
            );
        }
        if crash && !a_job {
            eprintln!("round {number}: crashed after it");
            server = server.crash_and_restart().await;
        }
    }
    check_quiescent(&server, &model, seed).await;
}

/// Waits, up to a minute, until `differences` finds none; else fails with the last ones it found (what
/// `wait_until` cannot say).
async fn until_none<F: std::future::Future<Output = Vec<String>>>(what: &str, differences: impl Fn() -> F) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let found = differences().await;
        if found.is_empty() {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: still {found:?} after 60 s");
        // Polled, not slept on: the condition is checked again until the deadline.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
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
    until_none(&format!("seed {seed}: served reads equal the model"), served_differences).await;
    let reconciled = || async { strand::projection::reconcile(db, None, 0).await.expect("reconcile runs").differences };
    until_none(&format!("seed {seed}: reconcile is clean"), reconciled).await;
    for user in model.users().into_iter().filter(|u| model.state(*u) == State::Deleted) {
        assert_eq!(rows_holding(db, TENANT, user).await, 0, "seed {seed}: deleted account {user} is erased");
    }
}
